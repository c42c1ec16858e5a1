// SPMD across two "hosts" (two network namespaces joined by a veth pair, two_hosts.h): one
// process per host (multihost_spmd_worker), each with AXLE_CPU_DEVICES=2, started
// torchrun-style; the mesh spans all 4 devices. Compared with one process driving 4 devices.
// Needs root and iproute2's `ip`; skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "two_hosts.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using axle::test::sh;
using axle::test::slurp;
using axle::test::TempDir;
using axle::test::TwoHosts;

// Launcher variables the workers must not inherit from this test's environment.
const char* const kClean =
    "env -u GLOO_SOCKET_IFNAME -u AXLE_RENDEZVOUS_DIR -u AXLE_LAUNCH_RANK -u RANK -u WORLD_SIZE -u LOCAL_RANK "
    "-u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE "
    "-u SLURM_PROCID -u SLURM_NTASKS -u AXLE_CPU_DEVICES -u CPU_NUM_DEVICES -u XLA_FLAGS -u AXLE_USE_SPMD ";

struct Proc {
  int status = -1;
  std::string err;
};

class MultiHostSpmd : public testing::Test {
 protected:
  void SetUp() override {
    const std::string ip = axle::test::find_ip();
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root to create network namespaces (running as uid " << ::geteuid() << ")";
    if (ip.empty()) GTEST_SKIP() << "needs iproute2's ip (apt-get install iproute2)";
    hosts.emplace(ip);
    if (!hosts->why_not().empty()) GTEST_SKIP() << "cannot create two network namespaces: " << hosts->why_not();
  }

  // The shell line that starts host r's worker (rank r of 2, master on host A) in the
  // background, its pid in d/pid<r>, its exit status in d/st<r>, stderr in d/err<r>.
  std::string start(int r, const std::string& args, const std::string& env = "") const {
    const std::string id = "RANK=" + std::to_string(r) +
                           " WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=198.18.0.1 MASTER_PORT=29517 AXLE_CPU_DEVICES=2 ";
    const std::string rs = std::to_string(r);
    return "( " + hosts->on(r == 0 ? 'a' : 'b') + kClean + id + env + " '" + AXLE_MH_WORKER_BIN + "' " + args +
           " 2>'" + (d / ("err" + rs)) + "' & echo $! >'" + (d / ("pid" + rs)) + "'; wait $!; echo $? >'" +
           (d / ("st" + rs)) + "' ) &\n";
  }
  Proc result(int r) const {
    const std::string rs = std::to_string(r), st = slurp(d / ("st" + rs));
    return {st.empty() ? -1 : std::stoi(st), slurp(d / ("err" + rs))};
  }
  // Both hosts run `args`; returns when both ended.
  std::vector<Proc> run_two(const std::string& args, const std::string& env = "") const {
    std::ofstream(d / "run.sh") << start(0, args, env) + start(1, args, env) + "wait\n";
    sh("timeout 600 sh '" + (d / "run.sh") + "'");
    return {result(0), result(1)};
  }
  // One process with `devices` devices runs `args`.
  void run_one(int devices, const std::string& args) const {
    const int st = sh(std::string(kClean) + "AXLE_CPU_DEVICES=" + std::to_string(devices) + " timeout 600 '" +
                      AXLE_MH_WORKER_BIN + "' " + args + " >'" + (d / "one.err") + "' 2>&1");
    ASSERT_EQ(st, 0) << slurp(d / "one.err");
  }
  json read(const std::string& name) const { return json::parse(slurp(d / name)); }

  TempDir d;
  std::optional<TwoHosts> hosts;
};

void expect_close(const json& ref, const json& got, double loss_tol, double param_tol, const std::string& what) {
  const auto lr = ref.at("losses").get<std::vector<double>>(), lg = got.at("losses").get<std::vector<double>>();
  ASSERT_EQ(lr.size(), lg.size()) << what;
  for (size_t i = 0; i < lr.size(); ++i) EXPECT_NEAR(lg[i], lr[i], loss_tol * std::abs(lr[i])) << what << " step " << i;
  for (const auto& [name, v] : ref.at("state").items()) {
    const auto a = v.get<std::vector<float>>(), b = got.at("state").at(name).get<std::vector<float>>();
    ASSERT_EQ(a.size(), b.size()) << what << " " << name;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(b[i], a[i], param_tol * (1 + std::abs(a[i]))) << what << " " << name << " element " << i;
  }
}

}  // namespace

// The bound: 2 hosts x 2 devices give the losses of 1 host x 4 devices within 1e-5
// for 20 steps (the gradients' sums differ only in order: hosts' partial sums, then Gloo).
TEST_F(MultiHostSpmd, CnnOnTwoHostsOfTwoDevicesMatchesOneHostOfFour) {
  run_one(4, "cnn 20 '" + (d / "one.json") + "'");
  const std::vector<Proc> p = run_two("cnn 20 '" + (d / "two.json") + "'");
  for (int r = 0; r < 2; ++r) ASSERT_EQ(p[size_t(r)].status, 0) << "host " << r << ": " << p[size_t(r)].err;
  const json one = read("one.json"), two = read("two.json");
  EXPECT_EQ(one.at("hosts"), 1);
  EXPECT_EQ(two.at("hosts"), 2);
  EXPECT_EQ(two.at("devices"), 4) << "global_runtime_device_count counts every host's devices";
  EXPECT_EQ(two.at("addressable"), 2);
  EXPECT_GT(two.at("counters").at("SpmdAllReduce").get<int64_t>(), 0);
  expect_close(one, two, 1e-5, 1e-4, "2 hosts x 2 devices");
}

// FSDP v2 (parameters split over all 4 devices, gathered and reduce-scattered across hosts).
TEST_F(MultiHostSpmd, FsdpV2AcrossHostsMatchesOneHost) {
  run_one(4, "fsdp 10 '" + (d / "one.json") + "'");
  const std::vector<Proc> p = run_two("fsdp 10 '" + (d / "two.json") + "'");
  for (int r = 0; r < 2; ++r) ASSERT_EQ(p[size_t(r)].status, 0) << "host " << r << ": " << p[size_t(r)].err;
  const json one = read("one.json"), two = read("two.json");
  EXPECT_GT(two.at("counters").at("SpmdAllGather").get<int64_t>(), 0) << "the weights are gathered";
  expect_close(one, two, 1e-5, 1e-4, "FSDP v2 on 2 hosts x 2 devices");
}

// One file per host; restored on one host (1 device, and 4 devices) bit for bit: the
// data-parallel cnn (replicated parameters: host 0 writes them) and FSDP v2 (parameters
// split over all 4 devices: each host writes its own devices' chunks).
TEST_F(MultiHostSpmd, CheckpointOfTwoHostsRestoresOnOneHostBitIdentically) {
  for (const std::string model : {"", "-fsdp"}) {
    const std::string ckpt = d / ("ckpt" + model);
    const std::vector<Proc> p = run_two("save" + model + " 3 '" + (d / "saved.json") + "' '" + ckpt + "'");
    for (int r = 0; r < 2; ++r) ASSERT_EQ(p[size_t(r)].status, 0) << "host " << r << ": " << p[size_t(r)].err;
    EXPECT_TRUE(fs::exists(fs::path(ckpt) / "shard-0.safetensors"));
    EXPECT_TRUE(fs::exists(fs::path(ckpt) / "shard-1.safetensors"));
    const json meta = json::parse(slurp(ckpt + "/metadata.json"));
    EXPECT_EQ(meta.at("hosts"), 2);
    int in_host1 = 0;
    for (const auto& [name, e] : meta.at("tensors").items())
      for (const json& c : e.at("chunks")) in_host1 += c.at("file") == "shard-1.safetensors";
    if (model == "-fsdp") EXPECT_GT(in_host1, 0) << "host 1 wrote its devices' chunks";
    else EXPECT_EQ(in_host1, 0) << "replicated values are written once, by host 0";
    const json saved = read("saved.json");
    for (int devices : {1, 4}) {
      const std::string out = "loaded" + std::to_string(devices) + ".json";
      run_one(devices, "load" + model + " 0 '" + (d / out) + "' '" + ckpt + "'");
      EXPECT_EQ(read(out).at("state"), saved.at("state")) << model << " restored on 1 host x " << devices << " devices";
    }
  }
}

// kill -9 of one host's process while the job trains: the other ends within the collective
// timeout (AXLE_SPMD_TIMEOUT=10), naming the host and rank it lost; no process is left.
TEST_F(MultiHostSpmd, AHostKilledMidStepEndsEveryProcessNamingIt) {
  const std::string out = d / "k.json";
  std::ofstream(d / "run.sh") << start(0, "cnn 100000 '" + out + "'", "AXLE_SPMD_TIMEOUT=10") +
                                     start(1, "cnn 100000 '" + out + "'", "AXLE_SPMD_TIMEOUT=10") + "wait\n";
  const int runner = ::fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    ::execl("/bin/sh", "sh", (d / "run.sh").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Both hosts finished a step (they are past the rendezvous, in the training loop).
  const auto t0 = std::chrono::steady_clock::now();
  while (!(fs::exists(out + ".ready.0") && fs::exists(out + ".ready.1")) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(240))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string pid1 = slurp(d / "pid1");
  ASSERT_FALSE(pid1.empty());
  ASSERT_TRUE(fs::exists(out + ".ready.1")) << slurp(d / "err0") << slurp(d / "err1");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // well inside later steps
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(std::stoi(pid1), SIGKILL), 0);
  int st = 0;
  ::waitpid(runner, &st, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(took, 10 + 15) << "host 0 did not end within the collective timeout";
  const Proc a = result(0);
  EXPECT_EQ(a.status, 2) << a.err;
  EXPECT_NE(a.err.find("host 1 (rank 1, devices 2-3)"), std::string::npos) << a.err;
  EXPECT_EQ(result(1).status, 128 + SIGKILL);
  // No orphans: no process runs the worker on this test's files any more.
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string cmd = slurp(e.path() / "cmdline");
    EXPECT_EQ(cmd.find(out), std::string::npos) << "process " << e.path().filename() << " is left";
  }
}

// A host that never arrives: host 0 waits for the rendezvous timeout, then names it.
TEST_F(MultiHostSpmd, AHostThatNeverArrivesIsNamed) {
  std::ofstream(d / "run.sh") << start(0, "cnn 2 '" + (d / "x.json") + "'", "AXLE_MH_RDZV_TIMEOUT=4") + "wait\n";
  const auto t0 = std::chrono::steady_clock::now();
  sh("timeout 120 sh '" + (d / "run.sh") + "'");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Proc a = result(0);
  EXPECT_EQ(a.status, 2) << a.err;
  EXPECT_LT(took, 4 + 30);
  EXPECT_NE(a.err.find("rank 1 of 2 did not join within the 4 s timeout"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("rendezvous of the 2 hosts (one SPMD process per host: host h is rank h) failed on host 0"),
            std::string::npos)
      << a.err;
}
