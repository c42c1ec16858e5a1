// axle-run (tools/axle-run): the variables each child gets, the "[rank N] " prefix, DDP
// through axle-run giving launch()'s losses, and torchrun's fail-fast semantics: a child
// that exits non-zero or is killed ends all, named; SIGTERM to axle-run is forwarded;
// SIGKILL to axle-run leaves no orphan (PR_SET_PDEATHSIG); a child ignoring SIGTERM gets
// SIGKILL after the grace period. Children that must be stopped are `sleep 60` (a direct
// child, so PR_SET_PDEATHSIG reaches it), and axle-run runs under `timeout`, so a
// supervisor bug fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using axle::test::Result;
using axle::test::slurp;
using axle::test::TempDir;

const std::string kRun = std::string("'") + AXLE_RUN_BIN + "' ";

Result run(const std::string& args) { return axle::test::run_captured("timeout 120 " + kRun + args); }

// True while `pid` exists and is not a zombie.
bool alive(int pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// The pids the children wrote to d/pid.<rank>.
std::vector<int> pids(const TempDir& d, int n) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    const std::string s = slurp(d / ("pid." + std::to_string(r)));
    out.push_back(s.empty() ? -1 : std::stoi(s));
  }
  return out;
}

// Waits (at most 10 s) until none of `ps` is alive; true if so.
bool all_gone(const std::vector<int>& ps) {
  for (int i = 0; i < 200; ++i) {
    bool any = false;
    for (int p : ps) any = any || (p > 0 && alive(p));
    if (!any) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A child script: writes its pid to d/pid.$RANK, then `rest`. Single-quoted for sh.
std::string child(const TempDir& d, const std::string& rest) {
  return "sh -c 'echo $$ >" + (d / "pid.$RANK") + "; " + rest + "'";
}

// "wait until every rank wrote its pid" in a child script.
std::string wait_for_pids(const TempDir& d, int n) {
  std::string s;
  for (int r = 0; r < n; ++r) s += "while [ ! -s " + (d / ("pid." + std::to_string(r))) + " ]; do sleep 0.05; done; ";
  return s;
}

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

}  // namespace

TEST(AxleRun, ChildrenGetTorchrunVariablesAndPrefixedOutput) {
  const Result r = run("--nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr h0 --master-port 1234 sh -c "
                       "'echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT; "
                       "echo to-stderr >&2'");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 2] 2 0 4 2 1 h0 1234\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 3] 3 1 4 2 1 h0 1234\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[rank 2] to-stderr\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 3] to-stderr\n"), std::string::npos) << r.err;

  // One node: the master is this host, the port torchrun's default; MASTER_* of the
  // environment are the defaults of the flags.
  const Result one = axle::test::run_captured("env -u MASTER_ADDR -u MASTER_PORT timeout 60 " + kRun +
                                              "--nproc-per-node 1 --no-prefix sh -c 'echo $MASTER_ADDR:$MASTER_PORT'");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(one.out, "127.0.0.1:29500\n");
  const Result env = axle::test::run_captured("MASTER_ADDR=h9 MASTER_PORT=77 timeout 60 " + kRun +
                                              "--no-prefix sh -c 'echo $MASTER_ADDR:$MASTER_PORT'");
  EXPECT_EQ(env.out, "h9:77\n") << env.err;
}

TEST(AxleRun, BadUsageIsNamed) {
  Result r = run("--nproc-per-node 2 --nnodes 2 --node-rank 0 true");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--nnodes 2 needs --master-addr"), std::string::npos) << r.err;
  r = run("--nnodes 2 --node-rank 2 --master-addr h true");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("expected 0 <= --node-rank < --nnodes, got --node-rank 2 with --nnodes 2"), std::string::npos)
      << r.err;
  r = run("--nproc-per-node 2 no-such-program-axle");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot run 'no-such-program-axle': no executable of that name in PATH"), std::string::npos)
      << r.err;
  r = run("--nproc-per-node 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("expected PROGRAM"), std::string::npos) << r.err;
}

TEST(AxleRun, AChildThatExitsNonZeroStopsTheOthersAndIsNamed) {
  TempDir d;
  const Result r = run("--nproc-per-node 3 " + child(d, "if [ $RANK = 1 ]; then " + wait_for_pids(d, 3) +
                                                            "exit 3; fi; exec sleep 60"));
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("axle-run: error: rank 1 (local rank 1, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", sh) exited with status 3; stopped the other 2 ranks"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone(pids(d, 3))) << "a rank outlived axle-run";
}

TEST(AxleRun, AKilledChildStopsTheOthersAndIsNamed) {
  TempDir d;
  const Result r = run("--nproc-per-node 2 " + child(d, "if [ $RANK = 0 ]; then " + wait_for_pids(d, 2) +
                                                            "kill -9 $$; fi; exec sleep 60"));
  EXPECT_EQ(r.status, 128 + 9) << r.err;
  EXPECT_NE(r.err.find("rank 0 (local rank 0, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone(pids(d, 2))) << "a rank outlived axle-run";
}

TEST(AxleRun, AChildIgnoringSigtermGetsSigkillAfterTheGracePeriod) {
  TempDir d;
  const Result r = run("--nproc-per-node 2 --grace-period 0.5 " +
                       child(d, "if [ $RANK = 0 ]; then " + wait_for_pids(d, 2) +
                                    "exit 5; fi; trap \"\" TERM; exec sleep 60"));
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_NE(r.err.find("rank 0 (local rank 0, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with status 5; stopped the other 1 rank"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone(pids(d, 2))) << "the rank ignoring SIGTERM outlived axle-run";
}

TEST(AxleRun, SigtermIsForwardedAndSigkillLeavesNoOrphans) {
  for (const char* sig : {"TERM", "KILL"}) {
    TempDir d;
    // axle-run in the background; once both ranks run, it gets the signal.
    const std::string script = kRun + "--nproc-per-node 2 " + child(d, "exec sleep 60") + " 2>" +
                               (d / "err") + " & p=$!; " + wait_for_pids(d, 2) + "kill -" + sig +
                               " $p; wait $p; echo $? >" + (d / "status");
    std::ofstream(d / "run.sh") << script;
    ASSERT_EQ(axle::test::sh("timeout 60 sh '" + (d / "run.sh") + "'"), 0);
    const std::string status = slurp(d / "status");
    EXPECT_EQ(status, std::string(sig) == "TERM" ? "143\n" : "137\n") << slurp(d / "err");
    if (std::string(sig) == "TERM") {
      EXPECT_NE(slurp(d / "err").find("got signal 15 (Terminated): forwarded it to 2 ranks still running"),
                std::string::npos)
          << slurp(d / "err");
    }
    EXPECT_TRUE(all_gone(pids(d, 2))) << "a rank outlived axle-run killed with SIG" << sig;
  }
}

TEST(AxleRun, DdpThroughAxleRunGivesLaunchLosses) {
  TempDir d;
  axle::test::write_gz(d / "train-images-idx3-ubyte.gz", axle::test::idx_bytes({512, 28, 28}, 512 * 28 * 28, 1, false));
  axle::test::write_gz(d / "train-labels-idx1-ubyte.gz", axle::test::idx_bytes({512}, 512, 2, true));
  axle::test::write_gz(d / "t10k-images-idx3-ubyte.gz", axle::test::idx_bytes({64, 28, 28}, 64 * 28 * 28, 3, false));
  axle::test::write_gz(d / "t10k-labels-idx1-ubyte.gz", axle::test::idx_bytes({64}, 64, 4, true));
  const std::string common = "--pattern ddp --model mlp --batch-size 64 --max-steps 4 --threads 1 --seed 3 --data '" +
                             d.path.string() + "' --timeout 60 ";
  const Result r = run("--nproc-per-node 2 --master-port " + std::to_string(free_port()) + " '" + AXLE_TRAIN_BIN +
                       "' " + common + "--json '" + (d / "run.json") + "'");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] "), std::string::npos) << r.out;
  const Result one = axle::test::run_captured("env -u RANK -u WORLD_SIZE -u LOCAL_RANK timeout 120 '" +
                                              std::string(AXLE_TRAIN_BIN) + "' " + common + "--devices 2 --json '" +
                                              (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.out << one.err;
  const auto a = nlohmann::json::parse(slurp(d / "run.json")), b = nlohmann::json::parse(slurp(d / "one.json"));
  EXPECT_EQ(a.at("world_size"), 2);
  const auto la = a.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, b.at("losses").get<std::vector<double>>());
}
