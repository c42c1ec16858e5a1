// Two "hosts" with default settings: two network namespaces joined by a veth pair, one
// axle-train rank in each, started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), no GLOO_SOCKET_IFNAME. Each namespace resolves this
// machine's host name to a loopback address (as Debian's /etc/hosts does), so a rank
// that advertised what its host name resolves to could not be reached. The same job
// started as Slurm's srun starts it (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// SLURM_NODELIST naming the hosts, which each namespace's own /etc/hosts resolves: `ip
// netns exec` mounts /etc/netns/NAME/hosts) and as mpirun does (Open MPI's and MPICH's
// variables, MASTER_ADDR exported by the user as mpirun -x does, the default port).
//
// Needs root and iproute2's `ip`; skipped with the reason otherwise. The namespaces and
// the veth pair are named after this process's pid and removed in every path (also
// those a killed earlier run left behind); addresses come from 198.18.0.0/15 (RFC 2544,
// for tests) and exist only inside the two namespaces, so no traffic leaves them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "two_hosts.h"

namespace fs = std::filesystem;

namespace {

using axle::test::find_ip;
using axle::test::TwoHosts;
using axle::test::sh;
using axle::test::slurp;

using axle::test::TempDir;

// A small Fashion-MNIST-shaped data set (IDX, gzip): 640 training and 100 test images.
void write_idx_gz(const std::string& path, const std::vector<uint32_t>& dims, uint32_t seed, bool labels) {
  size_t n = 1;
  for (uint32_t d : dims) n *= d;
  axle::test::write_gz(path, axle::test::idx_bytes(dims, n, seed, labels));
}

void write_data(const std::string& dir) {
  write_idx_gz(dir + "/train-images-idx3-ubyte.gz", {640, 28, 28}, 1, false);
  write_idx_gz(dir + "/train-labels-idx1-ubyte.gz", {640}, 2, true);
  write_idx_gz(dir + "/t10k-images-idx3-ubyte.gz", {100, 28, 28}, 3, false);
  write_idx_gz(dir + "/t10k-labels-idx1-ubyte.gz", {100}, 4, true);
}

// A rank's exit status, stdout and stderr.
using Rank = axle::test::Result;

// The variables of every launcher family (src/dist/launch_env.h) and the master's, which
// the ranks must not inherit from this test's environment.
const char* const kUnsetLaunchers =
    "env -u GLOO_SOCKET_IFNAME -u AXLE_GLOO_HOST -u AXLE_RENDEZVOUS_DIR -u AXLE_LAUNCH_RANK -u RANK -u WORLD_SIZE "
    "-u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE "
    "-u OMPI_COMM_WORLD_LOCAL_RANK -u PMI_RANK -u PMI_SIZE -u MPI_LOCALRANKID -u PMI_LOCAL_RANK -u SLURM_PROCID "
    "-u SLURM_NTASKS -u SLURM_LOCALID -u SLURM_NODELIST -u SLURM_STEP_NODELIST -u SLURM_JOB_NODELIST ";

// Starts rank 0 on host A and rank 1 on host B and waits for both. `identity(r)`: the
// variables that make the process rank r (default: torchrun's, the master at host A on
// port 29500, `master_port_of_rank1` for rank 1); `extra[r]`: more environment for rank r.
std::vector<Rank> run_two(const TwoHosts& hosts, const TempDir& d, const std::string& args,
                          const std::vector<std::string>& extra = {"", ""}, int master_port_of_rank1 = 29500,
                          const std::function<std::string(int)>& identity = nullptr) {
  std::string script;
  for (int r = 0; r < 2; ++r) {
    const std::string id = identity ? identity(r)
                                    : "RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=198.18.0.1 "
                                      "MASTER_PORT=" + std::to_string(r == 0 ? 29500 : master_port_of_rank1);
    const std::string env = std::string(kUnsetLaunchers) + id + " " + extra[size_t(r)];
    script += hosts.on(r == 0 ? 'a' : 'b') + env + " timeout 300 '" + AXLE_TRAIN_BIN + "' " + args + " >'" +
              (d / ("out" + std::to_string(r))) + "' 2>'" + (d / ("err" + std::to_string(r))) + "' & p" +
              std::to_string(r) + "=$!\n";
  }
  script += "wait $p0; echo $? >'" + (d / "st0") + "'\nwait $p1; echo $? >'" + (d / "st1") + "'\n";
  std::ofstream(d / "run.sh") << script;
  sh("sh '" + (d / "run.sh") + "'");
  std::vector<Rank> ranks(2);
  for (int r = 0; r < 2; ++r) {
    const std::string st = slurp(d / ("st" + std::to_string(r)));
    ranks[size_t(r)].status = st.empty() ? -1 : std::stoi(st);
    ranks[size_t(r)].out = slurp(d / ("out" + std::to_string(r)));
    ranks[size_t(r)].err = slurp(d / ("err" + std::to_string(r)));
  }
  return ranks;
}

// The "axle-train: error: ..." lines of a rank's stderr.
std::vector<std::string> error_lines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("axle-train: error: ", 0) == 0) lines.push_back(l);
  return lines;
}

// Each test: a scratch directory `d` with a data set in d/data, and the two hosts.
// Skipped, with the reason, where the hosts cannot be made.
class MultiHost : public testing::Test {
 protected:
  void SetUp() override {
    const std::string ip = find_ip();
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root to create network namespaces (running as uid " << ::geteuid() << ")";
    if (ip.empty()) GTEST_SKIP() << "needs iproute2's ip (apt-get install iproute2)";
    fs::create_directories(d / "data");
    write_data(d / "data");
    hosts.emplace(ip);
    // Root without the right to create network namespaces (a container, a chroot): skipped.
    if (!hosts->why_not().empty()) GTEST_SKIP() << "cannot create two network namespaces: " << hosts->why_not();
  }

  TempDir d;
  std::optional<TwoHosts> hosts;
};

}  // namespace

TEST_F(MultiHost, TwoNamespaceHostsTrainLikeOneLaunch) {
  const std::string common = "--pattern ddp --model mlp --batch-size 64 --max-steps 5 --threads 1 --seed 3 --data '" +
                             (d / "data") + "' --timeout 60 ";
  const std::vector<Rank> ranks = run_two(*hosts, d, common + "--json '" + (d / "hosts.json") + "'");
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ranks[size_t(r)].status, 0) << "rank " << r << ":\n" << ranks[size_t(r)].out << ranks[size_t(r)].err;

  // The same job in one launch() on one host: the same global batch, seed and data.
  const int st = sh(std::string("env -u RANK -u WORLD_SIZE -u LOCAL_RANK '") + AXLE_TRAIN_BIN + "' " + common +
                    "--devices 2 --json '" + (d / "one.json") + "' >'" + (d / "one.out") + "' 2>&1");
  ASSERT_EQ(st, 0) << slurp(d / "one.out");

  const auto h = nlohmann::json::parse(slurp(d / "hosts.json")), o = nlohmann::json::parse(slurp(d / "one.json"));
  EXPECT_EQ(h.at("world_size"), 2);
  const auto lh = h.at("losses").get<std::vector<double>>();
  ASSERT_EQ(lh.size(), 5u);
  EXPECT_EQ(lh, o.at("losses").get<std::vector<double>>());
  EXPECT_EQ(h.at("test_accuracy").get<double>(), o.at("test_accuracy").get<double>());
  // Across hosts the gradients went through Gloo's TCP transport, never shared memory.
  EXPECT_GT(h.at("counters").value("CollectiveAllReduce", 0), 0);
  EXPECT_EQ(h.at("counters").value("CollectiveAllReduceShm", 0), 0);

  // Rank 0 reaches its own store over loopback (as when MASTER_ADDR is its host name and
  // /etc/hosts maps that to 127.0.1.1): it advertises the address rank 1 reached it at.
  // Rank 1 names its interface with GLOO_SOCKET_IFNAME, as in PyTorch.
  const std::vector<Rank> again = run_two(*hosts, d, common + "--json '" + (d / "again.json") + "'",
                                          {"MASTER_ADDR=127.0.0.1", "GLOO_SOCKET_IFNAME=" + hosts->b_interface()});
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(again[size_t(r)].status, 0) << "rank " << r << ":\n" << again[size_t(r)].out << again[size_t(r)].err;
  EXPECT_EQ(nlohmann::json::parse(slurp(d / "again.json")).at("losses").get<std::vector<double>>(), lh);

  // The rendezvous through a directory both hosts see (AXLE_RENDEZVOUS_DIR) instead of
  // MASTER_ADDR: with no connection to take an address from, the interfaces are named.
  fs::create_directories(d / "rdzv");
  const std::string dir = "AXLE_RENDEZVOUS_DIR='" + (d / "rdzv") + "' ";
  const std::vector<Rank> shared = run_two(*hosts, d, common + "--json '" + (d / "shared.json") + "'",
                                           {dir + "GLOO_SOCKET_IFNAME=" + hosts->a_interface(),
                                            dir + "GLOO_SOCKET_IFNAME=" + hosts->b_interface()});
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(shared[size_t(r)].status, 0) << "rank " << r << ":\n" << shared[size_t(r)].out << shared[size_t(r)].err;
  EXPECT_EQ(nlohmann::json::parse(slurp(d / "shared.json")).at("losses").get<std::vector<double>>(), lh);
}

// A rank that cannot take part makes both fail at once, with the same one-line message,
// long before the rendezvous timeout.
TEST_F(MultiHost, ARankThatCannotJoinFailsEveryRankWithOneMessage) {
  const std::string common = "--pattern ddp --model mlp --batch-size 64 --max-steps 5 --threads 1 --data '" +
                             (d / "data") + "' ";

  // Rank 1 is told to use its loopback interface: peers on the other host cannot reach it.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Rank> ranks = run_two(*hosts, d, common + "--timeout 120", {"", "GLOO_SOCKET_IFNAME=lo"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(100)) << "a rank waited for the timeout";
  std::vector<std::vector<std::string>> lines;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[size_t(r)].status, 2) << "rank " << r << ": " << ranks[size_t(r)].err;
    lines.push_back(error_lines(ranks[size_t(r)].err));
    ASSERT_EQ(lines.back().size(), 1u) << "rank " << r << ": " << ranks[size_t(r)].err;
  }
  EXPECT_EQ(lines[0][0], lines[1][0]);
  EXPECT_NE(lines[0][0].find("rank 1 cannot take part"), std::string::npos) << lines[0][0];
  EXPECT_NE(lines[0][0].find("loopback"), std::string::npos) << lines[0][0];
  EXPECT_NE(lines[0][0].find("GLOO_SOCKET_IFNAME"), std::string::npos) << lines[0][0];

  // Rank 1 cannot reach the store (a port nobody serves): rank 0 names it when the
  // rendezvous times out; rank 1 says what it could not reach. Both within the timeout.
  ranks = run_two(*hosts, d, common + "--timeout 4", {"", ""}, /*master_port_of_rank1=*/29501);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[size_t(r)].status, 2) << "rank " << r << ": " << ranks[size_t(r)].err;
    ASSERT_EQ(error_lines(ranks[size_t(r)].err).size(), 1u) << "rank " << r << ": " << ranks[size_t(r)].err;
  }
  const std::string e0 = error_lines(ranks[0].err)[0], e1 = error_lines(ranks[1].err)[0];
  EXPECT_NE(e0.find("rank 1 of 2 did not join within the 4 s timeout"), std::string::npos) << e0;
  EXPECT_NE(e1.find("cannot reach the TCP store at 198.18.0.1:29501"), std::string::npos) << e1;
}

// Slurm's and MPI's variables start the same 2-host DDP job as torchrun's: the losses of
// one launch() with 2 processes on one host. Slurm's master is the first host of
// SLURM_NODELIST (a host name, resolved on each host) on the default port; MPI's is the
// MASTER_ADDR the user exports (mpirun -x MASTER_ADDR=...).
TEST_F(MultiHost, SlurmAndMpiEnvironmentsStartTheTwoHostJob) {
  const std::string prefix = "axmhnode" + std::to_string(::getpid()) + "-";
  const std::string why = hosts->name_hosts(prefix);
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string common = "--pattern ddp --model mlp --batch-size 64 --max-steps 5 --threads 1 --seed 3 --data '" +
                             (d / "data") + "' --timeout 60 ";
  const int st = sh(std::string(kUnsetLaunchers) + "'" + AXLE_TRAIN_BIN + "' " + common + "--devices 2 --json '" +
                    (d / "one.json") + "' >'" + (d / "one.out") + "' 2>&1");
  ASSERT_EQ(st, 0) << slurp(d / "one.out");
  const auto one = nlohmann::json::parse(slurp(d / "one.json")).at("losses").get<std::vector<double>>();
  ASSERT_EQ(one.size(), 5u);

  const std::vector<std::pair<std::string, std::function<std::string(int)>>> styles = {
      {"slurm",
       [&](int r) {
         return "SLURM_PROCID=" + std::to_string(r) + " SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODELIST=" + prefix +
                "[1-2]";
       }},
      {"openmpi",
       [](int r) {
         return "OMPI_COMM_WORLD_RANK=" + std::to_string(r) +
                " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 MASTER_ADDR=198.18.0.1";
       }},
      {"mpich",
       [](int r) { return "PMI_RANK=" + std::to_string(r) + " PMI_SIZE=2 MPI_LOCALRANKID=0 MASTER_ADDR=198.18.0.1"; }},
  };
  for (const auto& [style, identity] : styles) {
    const std::string json = d / (style + ".json");
    const std::vector<Rank> ranks = run_two(*hosts, d, common + "--json '" + json + "'", {"", ""}, 29500, identity);
    for (int r = 0; r < 2; ++r)
      ASSERT_EQ(ranks[size_t(r)].status, 0) << style << " rank " << r << ":\n" << ranks[size_t(r)].out
                                            << ranks[size_t(r)].err;
    const auto j = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(j.at("world_size"), 2) << style;
    EXPECT_EQ(j.at("losses").get<std::vector<double>>(), one) << style;
    EXPECT_EQ(j.at("counters").value("CollectiveAllReduceShm", 0), 0) << style << ": the ranks shared memory";
  }
}
