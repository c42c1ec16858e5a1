// axle-train end to end: flag errors, data errors and a short training run,
// through the real binary (AXLE_TRAIN_BIN).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <random>

namespace fs = std::filesystem;

namespace {

const std::string kRoot = "/usr/share/datasets/fashion-mnist";
bool have_real_data() { return fs::exists(kRoot + "/train-images-idx3-ubyte.gz"); }

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/axle_test_cli_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs axle-train with `args`; stdout and stderr captured separately.
Result run(const std::string& args) {
  TempDir d;
  const std::string cmd =
      std::string("'") + AXLE_TRAIN_BIN + "' " + args + " >'" + (d / "out") + "' 2>'" + (d / "err") + "'";
  const int ws = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  r.out = slurp(d / "out");
  r.err = slurp(d / "err");
  return r;
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// One line "axle-train: error: ..." containing `needle`, exit status 2.
void expect_usage_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err.rfind("axle-train: error: ", 0), 0u) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

std::vector<unsigned char> idx_bytes(int ndim, const std::vector<uint32_t>& dims, size_t payload) {
  std::vector<unsigned char> b{0, 0, 0x08, static_cast<unsigned char>(ndim)};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back((d >> s) & 255);
  uint32_t x = 12345;
  for (size_t i = 0; i < payload; ++i) {
    x = x * 1664525u + 1013904223u;
    b.push_back(static_cast<unsigned char>(ndim == 1 ? (x >> 24) % 10 : x >> 24));
  }
  return b;
}

void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  {
    std::ofstream f(path + ".raw", std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string cmd = "gzip -n -c '" + path + ".raw' > '" + path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  fs::remove(path + ".raw");
}

}  // namespace

TEST(Cli, Help) {
  Result r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--max-steps"), std::string::npos) << r.out;
}

TEST(Cli, BadFlags) {
  expect_usage_error(run("--bogus"), "--bogus");
  expect_usage_error(run("--model resnet"), "resnet");
  expect_usage_error(run("--epochs abc"), "--epochs");
  expect_usage_error(run("--batch-size 0"), "--batch-size");
  expect_usage_error(run("--lr -1"), "--lr");
  expect_usage_error(run("--optimizer lbfgs"), "lbfgs");
  expect_usage_error(run("--epochs"), "--epochs");
}

TEST(Cli, PatternAndDeviceMismatch) {
  expect_usage_error(run("--pattern compiled --device cpu"), "use --device xla");
  expect_usage_error(run("--pattern ddp --device cpu"), "use --device xla");
  expect_usage_error(run("--devices 4"), "--devices 4 needs --pattern multiprocess, ddp or loader");
}

TEST(Cli, MissingDataDirectory) {
  TempDir d;
  const Result r = run("--data '" + (d / "no-such-dir") + "' --max-steps 1");
  expect_usage_error(r, d / "no-such-dir");
  EXPECT_NE(r.err.find("does not exist"), std::string::npos);
}

TEST(Cli, MissingJsonDirectory) {
  TempDir d;
  expect_usage_error(run("--max-steps 1 --json '" + (d / "nope/r.json") + "'"), d / "nope");
}

TEST(Cli, TruncatedIdxFile) {
  TempDir d;
  write_gz(d / "train-labels-idx1-ubyte.gz", idx_bytes(1, {64}, 64));
  write_gz(d / "t10k-images-idx3-ubyte.gz", idx_bytes(3, {16, 28, 28}, 16 * 784));
  write_gz(d / "t10k-labels-idx1-ubyte.gz", idx_bytes(1, {16}, 16));
  // header claims 64 images, the file holds 40
  write_gz(d / "train-images-idx3-ubyte.gz", idx_bytes(3, {64, 28, 28}, 40 * 784));
  Result r = run("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, d / "train-images-idx3-ubyte.gz");
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  // a gzip stream cut short
  write_gz(d / "train-images-idx3-ubyte.gz", idx_bytes(3, {64, 28, 28}, 64 * 784));
  fs::resize_file(d / "train-images-idx3-ubyte.gz", fs::file_size(d / "train-images-idx3-ubyte.gz") / 2);
  r = run("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, d / "train-images-idx3-ubyte.gz");
  // a corrupt (non-IDX) file
  {
    std::ofstream f(d / "train-images-idx3-ubyte.gz", std::ios::trunc);
    f << "<html>not a data set</html>\n";
  }
  r = run("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, "bad magic number");
}

TEST(Cli, ShortMlpRunWritesJson) {
  if (!have_real_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir d;
  const std::string json = d / "r.json";
  const Result r = run("--model mlp --max-steps 30 --threads 1 --json '" + json + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(json + ".tmp"));
  nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("pattern"), "single");
  EXPECT_EQ(j.at("device"), "xla");  // the default: the lazy device
  // One graph for the 30 training steps, one for evaluation (10 full batches of 1000).
  EXPECT_EQ(j.at("counters").at("UncachedCompile"), 2);
  EXPECT_EQ(j.at("counters").at("MarkStep"), 60);
  EXPECT_EQ(j.at("model"), "mlp");
  EXPECT_EQ(j.at("world_size"), 1);
  EXPECT_EQ(j.at("epochs"), 1);
  EXPECT_EQ(j.at("steps"), 30);
  EXPECT_EQ(j.at("batch_size"), 128);
  const auto losses = j.at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_DOUBLE_EQ(j.at("final_loss").get<double>(), losses.back());
  // untrained 10-class start near ln(10), then a clear downward trend
  EXPECT_NEAR(losses.front(), std::log(10.0), 0.3);
  const double first = std::accumulate(losses.begin(), losses.begin() + 10, 0.0) / 10;
  const double last = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10;
  EXPECT_LT(last, first - 0.5) << "first 10 steps " << first << ", last 10 " << last;
  const double acc = j.at("test_accuracy").get<double>();
  EXPECT_GT(acc, 0.5);
  EXPECT_LE(acc, 1.0);
  EXPECT_GT(j.at("train_seconds").get<double>(), 0.0);
  EXPECT_GT(j.at("median_step_ms").get<double>(), 0.0);
  EXPECT_GT(j.at("samples_per_second").get<double>(), 0.0);
  EXPECT_TRUE(j.at("counters").is_object());
  EXPECT_TRUE(j.at("metrics").is_object());

  // Same seed, same losses (model init and shuffling are seeded); another seed differs.
  const std::string json2 = d / "r2.json", json3 = d / "r3.json";
  ASSERT_EQ(run("--model mlp --max-steps 30 --threads 1 --json '" + json2 + "'").status, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(json2)).at("losses").get<std::vector<double>>(), losses);
  ASSERT_EQ(run("--model mlp --max-steps 5 --threads 1 --seed 1 --json '" + json3 + "'").status, 0);
  EXPECT_NE(nlohmann::json::parse(slurp(json3)).at("losses").get<std::vector<double>>()[0], losses[0]);
}

#include "axle/serialize.h"

// Killed with SIGKILL at a random moment after its first checkpoint, then resumed: the
// final parameters are bit-identical to an uninterrupted run's (on the lazy device).
TEST(Cli, KilledRunResumesToTheSameParameters) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kRoot;
  TempDir d;
  const std::string common = " --model mlp --epochs 3 --max-steps 1000 --save-every 20 --threads 1 ";
  const Result full = run(common + "--save '" + (d / "full") + "'");
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string bin = std::string("'") + AXLE_TRAIN_BIN + "'";
  const int delay_ms = static_cast<int>(std::random_device{}() % 500);
  const std::string killed = (d / "killed");
  const std::string script =
      bin + common + "--save '" + killed + "' >/dev/null 2>&1 & pid=$!; "
      "while [ ! -f '" + killed + "/checkpoint.safetensors' ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done; "
      "sleep " + std::to_string(delay_ms / 1000.0) + "; kill -9 $pid 2>/dev/null; wait $pid; exit 0";
  std::ofstream(d / "kill.sh") << script << "\n";
  ASSERT_EQ(std::system(("bash '" + (d / "kill.sh") + "'").c_str()), 0);
  ASSERT_TRUE(fs::exists(killed + "/checkpoint.safetensors"));
  const Result resumed = run(common + "--save '" + killed + "' --resume '" + killed + "'");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  // It really was cut short: it resumed from a checkpoint before the last step.
  const size_t at = resumed.out.find("resumed from ");
  ASSERT_NE(at, std::string::npos) << resumed.out;
  const size_t st = resumed.out.find(", step ", at);
  ASSERT_NE(st, std::string::npos) << resumed.out;
  EXPECT_LT(std::stoll(resumed.out.substr(st + 7)), 1000) << resumed.out;
  const auto a = axle::load((d / "full") + "/checkpoint.safetensors");
  const auto b = axle::load(killed + "/checkpoint.safetensors");
  int compared = 0;
  for (const auto& [name, t] : a.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    EXPECT_EQ(t.to_vector<float>(), b.at(name).to_vector<float>()) << name << " (killed after " << delay_ms << " ms)";
    ++compared;
  }
  EXPECT_EQ(compared, 4);
}

TEST(Cli, InitFromPyTorchWeightsAndBadResume) {
  // Weights written by PyTorch (tests/golden/gen_torch_safetensors.py) start the cnn.
  const Result r = run("--model cnn --max-steps 2 --init '" AXLE_TEST_DATA "/torch_cnn.safetensors'");
  EXPECT_EQ(r.status, 0) << r.err;
  // A missing checkpoint is a one-line error, exit status 2.
  TempDir d;
  expect_usage_error(run("--max-steps 1 --resume '" + (d / "nothing") + "'"), "checkpoint.safetensors");
  expect_usage_error(run("--max-steps 1 --save-every 5"), "--save-every needs --save");
}

// Pattern 2: two processes with batch 64 each, gradients all-reduced (mean), shard the
// same shuffled order a single process reads with batch 128: the same arithmetic.
TEST(Cli, MultiprocessMatchesSingleProcessOnTheConcatenatedBatch) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kRoot;
  TempDir d;
  const Result one = run("--model mlp --max-steps 40 --batch-size 128 --json '" + (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const Result two =
      run("--pattern multiprocess --devices 2 --model mlp --max-steps 40 --batch-size 64 --json '" + (d / "two.json") + "'");
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_NE(two.out.find("[rank 0] "), std::string::npos) << two.out;
  const auto a = nlohmann::json::parse(slurp(d / "one.json")), b = nlohmann::json::parse(slurp(d / "two.json"));
  EXPECT_EQ(b.at("world_size"), 2);
  EXPECT_GT(b.at("counters").at("CollectiveAllReduce").get<int64_t>(), 0);
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), lb.size());
  // Rank 0's loss is the mean over its half of the batch; the final parameters agree, so the
  // test accuracies do.
  EXPECT_NEAR(a.at("test_accuracy").get<double>(), b.at("test_accuracy").get<double>(), 1e-3);
  // Patterns 3 (DDP) and 5 (MpDeviceLoader + optimizer_step) do the same arithmetic as 2.
  for (const std::string pattern : {"ddp", "loader"}) {
    const std::string json = d / (pattern + ".json");
    const Result r = run("--pattern " + pattern + " --devices 2 --model mlp --max-steps 40 --batch-size 64 --json '" +
                         json + "'");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto c = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(c.at("pattern"), pattern);
    EXPECT_EQ(c.at("world_size"), 2);
    EXPECT_EQ(c.at("losses").get<std::vector<double>>(), lb) << pattern;
    EXPECT_EQ(c.at("test_accuracy"), b.at("test_accuracy")) << pattern;
  }
}
