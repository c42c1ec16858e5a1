// axle::launch's options as torch_xla spells them ({.nprocs}, {.debug_single_process}),
// the one-process note, and seed anti-pattern 1: device() before launch().
//
// launch() re-executes this binary; main() narrows a child to the test that launched it
// (as tests/dist/test_dist.cpp does). Cases that must start with a clean process (nothing has
// touched the device yet) run a DISABLED helper test of this binary in a subprocess.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "axle/axle.h"
#include "test_util.h"

using namespace axle;

namespace {

using axle::test::in_launched_child;
using axle::test::prepare_launch;

struct Output {
  int status = -1;
  std::string text;  // stdout and stderr
  std::string err;   // stderr alone
};

// Runs helper test `name` of this binary in a fresh process.
Output run_helper(const std::string& name, const std::string& env = "") {
  const axle::test::Result r = axle::test::run_captured(
      "AXLE_LTEST_HELPER=1 " + env + " timeout 120 /proc/" + std::to_string(::getpid()) +
          "/exe --gtest_also_run_disabled_tests --gtest_filter=LaunchHelper." + name);
  return {r.status, r.out + r.err, r.err};
}

// Helpers DeviceCall, XlaDeviceCall: a two-process launch() that must throw; prints what
// it threw ("rank ran" were a rank started).
void launch_two_printing_the_error() {
  try {
    launch([](int) { std::printf("rank ran\n"); }, {.nprocs = 2});
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    std::printf("caught: %s\n", e.what());
  }
}

}  // namespace

TEST(Launch, DeviceBeforeLaunchIsAnErrorNamingTheAntiPattern) {
  for (const char* helper : {"DISABLED_DeviceCall", "DISABLED_XlaDeviceCall"}) {
    const Output o = run_helper(helper);
    EXPECT_EQ(o.status, 0) << o.text;
    EXPECT_NE(o.text.find("caught: [launch] Don't call device() before launch()"), std::string::npos) << o.text;
    EXPECT_NE(o.text.find("Fix: call axle::device()"), std::string::npos) << o.text;
    EXPECT_EQ(o.text.find("rank ran"), std::string::npos) << "a rank started: " << o.text;
  }
}

TEST(Launch, DeviceInsideTheLaunchedFunctionWorks) {
  // In this process (one process, debug_single_process): device() here is inside fn...
  prepare_launch();
  launch([](int index) {
    EXPECT_EQ(index, 0);
    Tensor x = full({3}, 2.0).to(axle::device());
    EXPECT_EQ(x.device(), axle::device());
    EXPECT_EQ((x * 3.0).cpu().to_vector<float>(), (std::vector<float>{6, 6, 6}));
  }, {.debug_single_process = true});
  // ... so it does not count as "before launch()" for the next one, in two processes.
  prepare_launch();
  launch([](int rank) {
    Tensor x = full({2}, double(rank + 1)).to(axle::device());
    Tensor s = dist::all_reduce(x);
    axle::sync();
    if (s.cpu().to_vector<float>() != std::vector<float>{3, 3}) throw std::runtime_error("bad all_reduce on xla");
  }, {.nprocs = 2, .timeout_s = 60});
}

TEST(Launch, NprocsAndTheOlderSpellings) {
  // This test's own process (a child re-running this body inherits the variable).
  if (!in_launched_child()) ::setenv("AXLE_LTEST_PARENT", std::to_string(::getpid()).c_str(), 1);
  const pid_t me = std::atoi(std::getenv("AXLE_LTEST_PARENT"));
  prepare_launch();
  launch([me](int rank) {
    if (runtime::world_size() != 2 || runtime::global_ordinal() != rank || ::getpid() == me)
      throw std::runtime_error("expected rank " + std::to_string(rank) + " of 2 in a child");
  }, {.nprocs = 2});
  prepare_launch();
  launch([me](int rank) {
    if (runtime::world_size() != 3 || ::getpid() == me) throw std::runtime_error("expected 3 ranks, rank " + std::to_string(rank));
  }, {.world_size = 3, .timeout_s = 60});
  int ran = -1;
  prepare_launch();
  launch([&](int index) {
    EXPECT_EQ(::getpid(), me);  // debug_single_process: here, nothing spawned
    ran = index;
  }, {.nprocs = 4, .debug_single_process = true});
  EXPECT_EQ(ran, 0);
  try {
    launch([](int) {}, {.nprocs = 2, .world_size = 3});
    FAIL() << "launch accepted nprocs 2 and world_size 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nprocs and world_size"), std::string::npos) << e.what();
  }
}

TEST(Launch, OneProcessByDefaultGetsANoteOnMultiCoreMachines) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: no note expected";
  const Output unset = run_helper("DISABLED_NoSetting", "AXLE_NUM_DEVICES= CPU_NUM_DEVICES=");
  EXPECT_EQ(unset.status, 0) << unset.text;
  EXPECT_NE(unset.text.find("index 0 of 1"), std::string::npos) << unset.text;
  const size_t at = unset.err.find("[launch] note: running 1 process");
  ASSERT_NE(at, std::string::npos) << unset.err;
  const std::string note = unset.err.substr(at, unset.err.find('\n', at) - at);
  EXPECT_NE(note.find("{.nprocs = N}"), std::string::npos) << note;
  EXPECT_NE(note.find("AXLE_NUM_DEVICES=N"), std::string::npos) << note;
  EXPECT_EQ(unset.err.find("[launch] note", at + 1), std::string::npos) << "one note per process: " << unset.err;
  // A chosen count, even 1, gets no note.
  const Output one = run_helper("DISABLED_NprocsOne");
  EXPECT_EQ(one.status, 0) << one.text;
  EXPECT_EQ(one.err.find("[launch] note"), std::string::npos) << one.err;
}

// ---- helpers run in subprocesses by the tests above (disabled in normal runs) ----

TEST(LaunchHelper, DISABLED_DeviceCall) {
  if (!std::getenv("AXLE_LTEST_HELPER")) GTEST_SKIP();
  const Device dev = axle::device();  // only asked for, no tensor created on it
  EXPECT_TRUE(dev.is_xla());
  launch_two_printing_the_error();
}

TEST(LaunchHelper, DISABLED_XlaDeviceCall) {
  if (!std::getenv("AXLE_LTEST_HELPER")) GTEST_SKIP();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  (void)xm::xla_device();
#pragma GCC diagnostic pop
  launch_two_printing_the_error();
}

TEST(LaunchHelper, DISABLED_NoSetting) {
  if (!std::getenv("AXLE_LTEST_HELPER")) GTEST_SKIP();
  for (int i = 0; i < 2; ++i)
    launch([](int index) { std::printf("index %d of %d\n", index, runtime::world_size()); });
}

TEST(LaunchHelper, DISABLED_NprocsOne) {
  if (!std::getenv("AXLE_LTEST_HELPER")) GTEST_SKIP();
  launch([](int index) { std::printf("index %d of %d\n", index, runtime::world_size()); }, {.nprocs = 1});
}

int main(int argc, char** argv) { return axle::test::launch_test_main(argc, argv); }
