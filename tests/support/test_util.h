// Helpers shared by the test programs that run subprocesses or write files: scratch
// directories, reading a file whole, running a shell command with its output captured,
// fake IDX data sets, and main() for test binaries whose tests call launch().
// Header-only: each test is its own executable.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/dist.h"
#include "axle/error.h"
#include "test_paths.h"

namespace axle::test {

/// "axle_<this test program's file name>_" ("axle_test_cli_" in test_cli): the default
/// prefix of scratch directories, so that one left behind names its program.
inline std::string default_temp_prefix() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return "axle_" + (ec ? std::string("test") : exe.filename().string()) + "_";
}

/// A fresh directory /tmp/<prefix>XXXXXX, removed with its contents at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = default_temp_prefix()) {
    std::string tmpl = "/tmp/" + prefix + "XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// The path of `name` inside this directory.
  std::string operator/(const std::string& name) const { return (path / name).string(); }

  std::filesystem::path path;
};

/// What `f` threw as an axle::Error, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const axle::Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The whole content of the file at `path` ("" if it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A process's exit code from a wait status (std::system's result): 128 + the signal
/// for a process killed by one.
inline int exit_status(int ws) { return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0); }

/// Runs `cmd` through /bin/sh and returns its exit status (see exit_status).
inline int sh(const std::string& cmd) { return exit_status(std::system(cmd.c_str())); }

/// What a command did: its exit status and its output.
struct Result {
  int status = -1;
  std::string out, err;
};

/// Where a captured command's stderr goes.
enum class Stderr { kSeparate, kIntoStdout };

/// Runs `cmd` through /bin/sh with stdout and stderr captured (in files of a TempDir).
/// kIntoStdout: both in `out`, in the order they were written (2>&1); `err` stays empty.
inline Result run_captured(const std::string& cmd, Stderr stderr_to = Stderr::kSeparate) {
  const TempDir d;
  const std::string redirect = stderr_to == Stderr::kSeparate ? " 2>'" + (d / "err") + "'" : " 2>&1";
  Result r;
  r.status = sh(cmd + " >'" + (d / "out") + "'" + redirect);
  r.out = slurp(d / "out");
  r.err = slurp(d / "err");
  return r;
}

/// Where Debian's Fashion-MNIST package installs the real data set.
inline const std::string kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// True where that package is installed.
inline bool have_real_data() { return std::filesystem::exists(kFashionMnistDir + "/train-images-idx3-ubyte.gz"); }

/// Runs the axle-train binary with command-line `args` (shell syntax), stdout and stderr
/// captured separately.
inline Result run_train(const std::string& args) {
  return run_captured(std::string("'") + AXLE_TRAIN_BIN + "' " + args);
}

/// Bytes of an IDX file of unsigned bytes with dimensions `dims` and `payload` bytes of
/// pseudo-random data (a linear congruential sequence from `seed`); `labels`: each byte
/// is a class 0..9. `payload` may differ from the product of `dims` (a broken file).
inline std::vector<unsigned char> idx_bytes(const std::vector<uint32_t>& dims, size_t payload, uint32_t seed,
                                            bool labels) {
  std::vector<unsigned char> b{0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back((d >> s) & 255);
  uint32_t x = seed;
  for (size_t i = 0; i < payload; ++i) {
    x = x * 1664525u + 1013904223u;
    b.push_back(static_cast<unsigned char>(labels ? (x >> 24) % 10 : x >> 24));
  }
  return b;
}

/// Writes `bytes` to `path` compressed by the system's gzip (an independent writer of the
/// format axle reads); fails the test if gzip fails.
inline void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  {
    std::ofstream f(path + ".raw", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ASSERT_EQ(sh("gzip -n -c '" + path + ".raw' > '" + path + "'"), 0);
  std::filesystem::remove(path + ".raw");
}

// ---- test binaries whose tests call launch() (which re-executes the binary) ----

/// True in a process that launch() started.
inline bool in_launched_child() { return std::getenv("AXLE_LAUNCH_RANK") != nullptr; }

/// "Suite.Name" of the running test.
inline std::string current_test() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

/// The number of launch() calls the running test has made (reset as each test starts,
/// also when --gtest_repeat runs the same test twice in a row).
inline int& launch_seq() {
  static int seq = 0;
  return seq;
}

/// Call before each launch() of a test: its children run only this test, and their n-th
/// launch() is this test's n-th (launch_test_main hands both on).
inline void prepare_launch() {
  ::setenv("AXLE_TEST_LAUNCH_FILTER", current_test().c_str(), 1);
  ::setenv("AXLE_TEST_LAUNCH_SEQ", std::to_string(launch_seq()++).c_str(), 1);
}

/// Runs fn(rank) on `world` processes (axle::launch); a failed expectation inside a child
/// fails that rank. timeout_s: the collectives' and rendezvous' timeout.
inline void run_ranks(int world, const std::function<void(int)>& fn, double timeout_s = 120) {
  prepare_launch();
  launch(
      [&](int rank) {
        fn(rank);
        if (testing::Test::HasFailure()) throw std::runtime_error("a test expectation failed on rank " + std::to_string(rank));
      },
      {.world_size = world, .timeout_s = timeout_s});
}

/// main() of such a binary: a launched child runs only the test that launched it (set by
/// prepare_launch), with brief output.
inline int launch_test_main(int argc, char** argv) {
  if (in_launched_child()) GTEST_FLAG_SET(brief, true);
  testing::InitGoogleTest(&argc, argv);
  struct ResetSeq : testing::EmptyTestEventListener {
    void OnTestStart(const testing::TestInfo&) override { launch_seq() = 0; }
  };
  testing::UnitTest::GetInstance()->listeners().Append(new ResetSeq);
  if (in_launched_child()) {
    if (const char* f = std::getenv("AXLE_TEST_LAUNCH_FILTER")) GTEST_FLAG_SET(filter, f);
    if (const char* n = std::getenv("AXLE_TEST_LAUNCH_SEQ")) ::setenv("AXLE_LAUNCH_SEQ", n, 1);
  }
  return RUN_ALL_TESTS();
}

}  // namespace axle::test
