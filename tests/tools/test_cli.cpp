// axle-train end to end: flag errors, data errors and a short training run,
// through the real binary (AXLE_TRAIN_BIN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using namespace axle::test;

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// One line "axle-train: error: ..." containing `needle`, exit status 2.
void expect_usage_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err.rfind("axle-train: error: ", 0), 0u) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

// Seed of the fake IDX files' pseudo-random bytes.
constexpr uint32_t kSeed = 12345;

}  // namespace

TEST(Cli, Help) {
  Result r = run_train("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--max-steps"), std::string::npos) << r.out;
}

TEST(Cli, BadFlags) {
  expect_usage_error(run_train("--bogus"), "--bogus");
  expect_usage_error(run_train("--model resnet"), "resnet");
  expect_usage_error(run_train("--epochs abc"), "--epochs");
  expect_usage_error(run_train("--batch-size 0"), "--batch-size");
  expect_usage_error(run_train("--lr -1"), "--lr");
  expect_usage_error(run_train("--optimizer lbfgs"), "lbfgs");
  expect_usage_error(run_train("--epochs"), "--epochs");
}

TEST(Cli, PatternAndDeviceMismatch) {
  expect_usage_error(run_train("--pattern compiled --device cpu"), "use --device xla");
  expect_usage_error(run_train("--pattern ddp --device cpu"), "use --device xla");
  expect_usage_error(run_train("--devices 4"),
                     "--devices 4 needs --pattern multiprocess, ddp, loader, fsdp, spmd or fsdp-spmd");
}

TEST(Cli, MissingDataDirectory) {
  TempDir d;
  const Result r = run_train("--data '" + (d / "no-such-dir") + "' --max-steps 1");
  expect_usage_error(r, d / "no-such-dir");
  EXPECT_NE(r.err.find("does not exist"), std::string::npos);
}

TEST(Cli, MissingJsonDirectory) {
  TempDir d;
  expect_usage_error(run_train("--max-steps 1 --json '" + (d / "nope/r.json") + "'"), d / "nope");
}

TEST(Cli, TruncatedIdxFile) {
  TempDir d;
  write_gz(d / "train-labels-idx1-ubyte.gz", idx_bytes({64}, 64, kSeed, true));
  write_gz(d / "t10k-images-idx3-ubyte.gz", idx_bytes({16, 28, 28}, 16 * 784, kSeed, false));
  write_gz(d / "t10k-labels-idx1-ubyte.gz", idx_bytes({16}, 16, kSeed, true));
  // header claims 64 images, the file holds 40
  write_gz(d / "train-images-idx3-ubyte.gz", idx_bytes({64, 28, 28}, 40 * 784, kSeed, false));
  Result r = run_train("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, d / "train-images-idx3-ubyte.gz");
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  // a gzip stream cut short
  write_gz(d / "train-images-idx3-ubyte.gz", idx_bytes({64, 28, 28}, 64 * 784, kSeed, false));
  fs::resize_file(d / "train-images-idx3-ubyte.gz", fs::file_size(d / "train-images-idx3-ubyte.gz") / 2);
  r = run_train("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, d / "train-images-idx3-ubyte.gz");
  // a corrupt (non-IDX) file
  {
    std::ofstream f(d / "train-images-idx3-ubyte.gz", std::ios::trunc);
    f << "<html>not a data set</html>\n";
  }
  r = run_train("--data '" + d.path.string() + "' --max-steps 1");
  expect_usage_error(r, "bad magic number");
}

TEST(Cli, ShortMlpRunWritesJson) {
  if (!have_real_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir d;
  const std::string json = d / "r.json";
  const Result r = run_train("--model mlp --max-steps 30 --threads 1 --json '" + json + "'");
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
  ASSERT_EQ(run_train("--model mlp --max-steps 30 --threads 1 --json '" + json2 + "'").status, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(json2)).at("losses").get<std::vector<double>>(), losses);
  ASSERT_EQ(run_train("--model mlp --max-steps 5 --threads 1 --seed 1 --json '" + json3 + "'").status, 0);
  EXPECT_NE(nlohmann::json::parse(slurp(json3)).at("losses").get<std::vector<double>>()[0], losses[0]);
}

// What --threads changes (README, axle-train): a run repeated with the same thread count is
// bit-identical; at another thread count only the rounding differs. axle's own kernels give
// the same bits at any thread count (Reduce.SumDoesNotDependOnTheThreadCount), but oneDNN's
// GEMM and convolution kernels divide their work by the thread count, and with it the order of
// some additions (the mlp's 256->10 layer at 1 vs 2 threads). Measured here: losses at 1, 2, 3
// and 4 threads agree within 1.1e-7 relative over 30 mlp steps and 10 cnn steps; the bound
// below leaves a factor 100 for other CPUs and oneDNN code paths. The cnn trains on the
// 64-image set of tests/data (10 epochs of one batch), which keeps its evaluation short.
TEST(Cli, ThreadCountChangesOnlyTheRounding) {
  TempDir d;
  const std::string cnn = "--model cnn --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 64 --epochs 10";
  const std::string mlp = "--model mlp --max-steps 30";
  for (const std::string& config : have_real_data() ? std::vector{cnn, mlp} : std::vector{cnn}) {
    SCOPED_TRACE(config);
    std::vector<std::vector<double>> losses;
    for (int threads : {1, 2, 2}) {
      const std::string json = d / ("r" + std::to_string(losses.size()) + ".json");
      const Result r = run_train(config + " --threads " + std::to_string(threads) + " --json '" + json + "'");
      ASSERT_EQ(r.status, 0) << r.err;
      losses.push_back(nlohmann::json::parse(slurp(json)).at("losses").get<std::vector<double>>());
      ASSERT_EQ(losses.back().size(), losses.front().size());
    }
    ASSERT_GE(losses[0].size(), 10u);
    EXPECT_EQ(losses[2], losses[1]) << "two runs at --threads 2";
    for (size_t s = 0; s < losses[0].size(); ++s)
      EXPECT_NEAR(losses[1][s], losses[0][s], 1e-5 * std::fabs(losses[0][s]))
          << "step " << s + 1 << ", --threads 2 vs 1";
  }
}

#include "axle/serialize.h"

// Killed with SIGKILL 0-499 ms after its first checkpoint, then resumed: the final parameters
// are bit-identical to an uninterrupted run's (on the lazy device). The delay comes from
// GoogleTest's random seed (time-based; --gtest_random_seed=N repeats a run's delay) and is
// printed with every failure.
TEST(Cli, KilledRunResumesToTheSameParameters) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kFashionMnistDir;
  const int seed = testing::UnitTest::GetInstance()->random_seed();
  const int delay_ms = static_cast<int>(std::mt19937(static_cast<unsigned>(seed))() % 500);
  SCOPED_TRACE("killed " + std::to_string(delay_ms) + " ms after the first checkpoint (--gtest_random_seed=" +
               std::to_string(seed) + ")");
  TempDir d;
  const std::string common = " --model mlp --epochs 3 --max-steps 1000 --save-every 20 --threads 1 ";
  const Result full = run_train(common + "--save '" + (d / "full") + "'");
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string bin = std::string("'") + AXLE_TRAIN_BIN + "'";
  const std::string killed = (d / "killed");
  const std::string script =
      bin + common + "--save '" + killed + "' >/dev/null 2>&1 & pid=$!; "
      "while [ ! -f '" + killed + "/checkpoint.safetensors' ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done; "
      "sleep " + std::to_string(delay_ms / 1000.0) + "; kill -9 $pid 2>/dev/null; wait $pid; exit 0";
  std::ofstream(d / "kill.sh") << script << "\n";
  ASSERT_EQ(std::system(("bash '" + (d / "kill.sh") + "'").c_str()), 0);
  ASSERT_TRUE(fs::exists(killed + "/checkpoint.safetensors"));
  const Result resumed = run_train(common + "--save '" + killed + "' --resume '" + killed + "'");
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
    EXPECT_EQ(t.to_vector<float>(), b.at(name).to_vector<float>()) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 4);
}

TEST(Cli, InitFromPyTorchWeightsAndBadResume) {
  // Weights written by PyTorch (tests/golden/gen_torch_safetensors.py) start the cnn. On a
  // 64-image set read as one batch, the first loss and the loss after one SGD step are the
  // ones PyTorch computes from the same weights (tests/golden/gen_cli_init.py).
  TempDir d;
  const auto golden = nlohmann::json::parse(slurp(AXLE_TEST_DATA + "/cli_init_golden.json"));
  const auto expected = golden.at("losses").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), 2u);
  const Result r = run_train("--model cnn --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 64 --epochs 2 "
                             "--threads 1 --init '" + AXLE_TEST_DATA + "/torch_cnn.safetensors' --json '" +
                             (d / "r.json") + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto losses = nlohmann::json::parse(slurp(d / "r.json")).at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 2u);
  // float32 both sides, summed in other orders (PyTorch's conv and GEMM kernels, the batch in
  // axle's shuffled order): they agree to a few float32 ulps of the loss (measured below
  // 1e-6); a cnn started from any other weights (axle's own seeded init) is off by more than 1e-2.
  EXPECT_NEAR(losses[0], expected[0], 1e-5) << "first-step loss";
  EXPECT_NEAR(losses[1], expected[1], 1e-5) << "loss after one SGD step";
  // A missing checkpoint is a one-line error, exit status 2.
  expect_usage_error(run_train("--max-steps 1 --resume '" + (d / "nothing") + "'"), "checkpoint.safetensors");
  expect_usage_error(run_train("--max-steps 1 --save-every 5"), "--save-every needs --save");
}

// Pattern 2: two processes with batch 64 each, gradients all-reduced (mean), shard the
// same shuffled order a single process reads with batch 128: the same arithmetic up to the
// order of the additions.
TEST(Cli, MultiprocessMatchesSingleProcessOnTheConcatenatedBatch) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kFashionMnistDir;
  TempDir d;
  const std::string common = "--model mlp --max-steps 40 --threads 1 ";
  const Result one =
      run_train(common + "--batch-size 128 --save '" + (d / "one") + "' --json '" + (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const Result two = run_train("--pattern multiprocess --devices 2 " + common + "--batch-size 64 --save '" +
                               (d / "two") + "' --json '" + (d / "two.json") + "'");
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_NE(two.out.find("[rank 0] "), std::string::npos) << two.out;
  const auto a = nlohmann::json::parse(slurp(d / "one.json")), b = nlohmann::json::parse(slurp(d / "two.json"));
  EXPECT_EQ(b.at("world_size"), 2);
  EXPECT_EQ(b.at("counters").at("CollectiveAllReduce").get<int64_t>(), 40);  // one per step (gradients bucketed)
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 40u);
  ASSERT_EQ(lb.size(), 40u);
  // Rank 0's loss is the mean over its half of the batch, so the losses differ; the parameters
  // must not. One process sums the 128 per-sample gradients in one GEMM, two processes sum 64
  // each and average them over the all-reduce: float32 sums in another order, so the parameters
  // after 40 steps differ by rounding only: measured max |diff| / max |param| 2.8e-7 (a few
  // float32 ulps); the bound leaves a factor 35. A wrong gradient average (sum, or one rank's)
  // is off by far more.
  const auto pa = axle::load((d / "one") + "/checkpoint.safetensors");
  const auto pb = axle::load((d / "two") + "/checkpoint.safetensors");
  int compared = 0;
  for (const auto& [name, t] : pa.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    const auto x = t.to_vector<float>(), y = pb.at(name).to_vector<float>();
    ASSERT_EQ(x.size(), y.size()) << name;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, std::fabs(double(x[i]) - double(y[i])));
      scale = std::max(scale, std::fabs(double(x[i])));
    }
    EXPECT_LE(diff, 1e-5 * scale) << name << ": max |diff| " << diff << ", max |param| " << scale;
    ++compared;
  }
  EXPECT_EQ(compared, 4);
  // And so the predictions: at most 2 of the 10000 test images may change class.
  EXPECT_NEAR(a.at("test_accuracy").get<double>(), b.at("test_accuracy").get<double>(), 2e-4);
  // Patterns 3 (DDP) and 5 (MpDeviceLoader + optimizer_step) do the same arithmetic as 2.
  for (const std::string pattern : {"ddp", "loader"}) {
    const std::string json = d / (pattern + ".json");
    const Result r =
        run_train("--pattern " + pattern + " --devices 2 " + common + "--batch-size 64 --json '" + json + "'");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto c = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(c.at("pattern"), pattern);
    EXPECT_EQ(c.at("world_size"), 2);
    EXPECT_EQ(c.at("losses").get<std::vector<double>>(), lb) << pattern;
    EXPECT_EQ(c.at("test_accuracy"), b.at("test_accuracy")) << pattern;
  }
}

// ---------------------------------------------------------------- FSDP (issue 14)

namespace {

std::vector<int64_t> ints(const nlohmann::json& j, const char* key) { return j.at(key).get<std::vector<int64_t>>(); }

// The memory keys every report has, one entry per device: peaks > 0, and the training state
// (parameters + gradients + optimizer state) the sum of its parts. SGD with momentum and a
// gradient for every parameter: gradients and momentum are each as large as the parameters.
void expect_memory_keys(const nlohmann::json& j, size_t devices) {
  EXPECT_EQ(j.at("devices"), devices);
  const auto peak = ints(j, "peak_bytes_per_device"), param = ints(j, "parameter_bytes_per_device"),
             grad = ints(j, "gradient_bytes_per_device"), opt = ints(j, "optimizer_bytes_per_device"),
             state = ints(j, "training_state_bytes_per_device");
  ASSERT_EQ(peak.size(), devices);
  ASSERT_EQ(param.size(), devices);
  ASSERT_EQ(grad.size(), devices);
  ASSERT_EQ(opt.size(), devices);
  ASSERT_EQ(state.size(), devices);
  for (size_t k = 0; k < devices; ++k) {
    EXPECT_GT(peak[k], 0) << "device " << k;
    EXPECT_GT(param[k], 0) << "device " << k;
    EXPECT_EQ(grad[k], param[k]) << "device " << k;
    EXPECT_EQ(opt[k], param[k]) << "device " << k;
    EXPECT_EQ(state[k], param[k] + grad[k] + opt[k]) << "device " << k;
  }
}

// The mlp's parameters: 784*256 + 256 + 256*10 + 10 floats, in 4 tensors.
constexpr int64_t kMlpParameters = 784 * 256 + 256 + 256 * 10 + 10, kMlpTensors = 4;

// axle-train without this program's AXLE_CPU_DEVICES (the SPMD patterns' --devices sets it).
Result run_spmd_train(const std::string& args) {
  return run_captured(std::string("env -u AXLE_CPU_DEVICES '") + AXLE_TRAIN_BIN + "' " + args);
}

}  // namespace

TEST(Cli, FsdpBadCombinations) {
  TempDir d;
  expect_usage_error(run_train("--pattern fsdp --device cpu"), "use --device xla");
  expect_usage_error(run_train("--pattern fsdp-spmd --device cpu"), "use --device xla");
  expect_usage_error(run_train("--pattern fsdp-spmd --devices 2 --mesh data=2"), "fsdp-spmd's mesh is always fsdp=");
  // --resume DIR without a checkpoint there (fsdp's is a pointer to the ranks' files).
  expect_usage_error(run_train("--pattern fsdp --devices 2 --resume '" + (d / "x") + "'"), "checkpoint.json");
  expect_usage_error(run_train("--pattern fsdp2"), "fsdp2");
}

// FSDP v1 (2 processes) against DDP (2 processes), the same data and batches: the same losses
// up to rounding (FSDP's gradients are reduce-scattered, DDP's all-reduced: the same sums),
// and per device half of DDP's parameter, gradient and optimizer bytes, plus at most one
// padding element per parameter tensor. --devices 1 is a world of one: everything on it.
TEST(Cli, FsdpHalvesDdpsTrainingStatePerDevice) {
  TempDir d;
  const std::string common = "--model mlp --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 16 --epochs 1 "
                             "--threads 1 --json '";
  const Result ddp = run_train("--pattern ddp --devices 2 " + common + (d / "ddp.json") + "'");
  ASSERT_EQ(ddp.status, 0) << ddp.err;
  const Result fsdp = run_train("--pattern fsdp --devices 2 " + common + (d / "fsdp.json") + "'");
  ASSERT_EQ(fsdp.status, 0) << fsdp.err;
  const auto a = nlohmann::json::parse(slurp(d / "ddp.json")), b = nlohmann::json::parse(slurp(d / "fsdp.json"));
  EXPECT_EQ(b.at("pattern"), "fsdp");
  EXPECT_EQ(b.at("world_size"), 2);
  EXPECT_EQ(b.at("parameters"), kMlpParameters);  // the model's, not the shards'
  expect_memory_keys(a, 2);
  expect_memory_keys(b, 2);
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 2u);  // 64 images, 32 per rank, batches of 16
  ASSERT_EQ(lb.size(), la.size());
  for (size_t s = 0; s < la.size(); ++s) EXPECT_NEAR(lb[s], la[s], 1e-5 * std::fabs(la[s])) << "step " << s + 1;
  const auto pa = ints(a, "parameter_bytes_per_device"), pb = ints(b, "parameter_bytes_per_device");
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(pa[k], 4 * kMlpParameters) << "ddp: every rank holds all parameters";
    EXPECT_GE(pb[k], 4 * kMlpParameters / 2) << "fsdp, rank " << k;
    EXPECT_LE(pb[k], 4 * (kMlpParameters / 2 + kMlpTensors)) << "fsdp, rank " << k;
    const double ratio = double(ints(b, "training_state_bytes_per_device")[k]) /
                         double(ints(a, "training_state_bytes_per_device")[k]);
    EXPECT_NEAR(ratio, 0.5, 0.005) << "fsdp / ddp parameter + gradient + optimizer bytes, rank " << k;
  }
  // One process: FSDP over a world of one holds everything, like one device.
  const Result one = run_train("--pattern fsdp --devices 1 --max-steps 2 " + common + (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto c = nlohmann::json::parse(slurp(d / "one.json"));
  EXPECT_EQ(c.at("world_size"), 1);
  expect_memory_keys(c, 1);
  EXPECT_EQ(ints(c, "parameter_bytes_per_device")[0], 4 * kMlpParameters);
}

// FSDP v2 (one process, 2 devices, mesh fsdp=2) against SPMD data parallelism on the same 2
// devices, the same global batch: the same losses up to rounding; every parameter sharded on
// its largest dim (fc1.weight [256,784] on dim 1), so each device holds about half the bytes.
TEST(Cli, FsdpSpmdShardsEveryParameter) {
  TempDir d;
  const std::string common = "--model mlp --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 32 --epochs 1 "
                             "--threads 2 --devices 2 --json '";
  const Result dp = run_spmd_train("--pattern spmd " + common + (d / "dp.json") + "'");
  ASSERT_EQ(dp.status, 0) << dp.err;
  const Result fs = run_spmd_train("--pattern fsdp-spmd " + common + (d / "fs.json") + "'");
  ASSERT_EQ(fs.status, 0) << fs.err;
  const auto a = nlohmann::json::parse(slurp(d / "dp.json")), b = nlohmann::json::parse(slurp(d / "fs.json"));
  EXPECT_EQ(b.at("pattern"), "fsdp-spmd");
  EXPECT_EQ(b.at("mesh"), nlohmann::json({{"fsdp", 2}}));
  EXPECT_EQ(b.at("world_size"), 1);
  expect_memory_keys(a, 2);
  expect_memory_keys(b, 2);
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 2u);
  ASSERT_EQ(lb.size(), la.size());
  for (size_t s = 0; s < la.size(); ++s) EXPECT_NEAR(lb[s], la[s], 1e-5 * std::fabs(la[s])) << "step " << s + 1;
  // Sharded on the largest dim: [256,784] and [10,256] on dim 1, the biases on dim 0.
  std::vector<std::string> shardings;
  for (const auto& [name, spec] : b.at("parameter_shardings").items()) shardings.push_back(spec.get<std::string>());
  std::sort(shardings.begin(), shardings.end());
  EXPECT_EQ(shardings, (std::vector<std::string>{"{devices=[1,2]0,1}", "{devices=[1,2]0,1}", "{devices=[2]0,1}",
                                                 "{devices=[2]0,1}"}));
  const auto pa = ints(a, "parameter_bytes_per_device"), pb = ints(b, "parameter_bytes_per_device");
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(pa[k], 4 * kMlpParameters) << "data parallel: every device holds all parameters";
    EXPECT_EQ(pb[k], 4 * kMlpParameters / 2) << "fsdp-spmd, device " << k << " (every dim splits evenly)";
  }
}

// ---------------------------------------------------------------------------------------
// --model gpt: a tiny GPT (1 layer, 32 wide, context 16, batch 4) on a small text file the
// test writes, a few steps per pattern; the patterns that must agree are compared step by
// step.

namespace {

// About 12 KB of English-like text from a fixed word list and a linear congruential sequence
// (the same bytes on every machine).
std::string gpt_corpus_text() {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to",
                                "tree", "in", "park", "by", "old", "house", "with", "red", "door", "we"};
  std::string s;
  uint32_t x = 7;
  while (s.size() < 12000) {
    const int n = 4 + static_cast<int>((x >> 24) % 6);
    for (int k = 0; k < n; ++k) {
      x = x * 1664525u + 1013904223u;
      s += words[(x >> 16) % 20];
      s += k + 1 < n ? " " : ".\n";
    }
  }
  return s;
}

struct GptData {
  TempDir dir;
  std::string file = dir / "corpus.txt";
  GptData() {
    std::ofstream f(file);
    f << gpt_corpus_text();
  }
};

// The tiny model and run every gpt test shares (dropout 0: the patterns' randomness differs).
std::string gpt_args(const GptData& d, int steps = 6, int batch = 4) {
  return "--model gpt --n-layer 1 --n-embd 32 --block-size 16 --batch-size " + std::to_string(batch) +
         " --dropout 0 --threads 1 "
         "--warmup-steps 2 --eval-iters 2 --lr 1e-2 --min-lr 1e-3 --max-steps " +
         std::to_string(steps) + " --data '" + d.file + "' ";
}

nlohmann::json gpt_run(const GptData& d, const std::string& extra, const std::string& json_name, int steps = 6,
                       int batch = 4) {
  const std::string json = d.dir / json_name;
  const Result r = run_train(gpt_args(d, steps, batch) + extra + " --json '" + json + "'");
  EXPECT_EQ(r.status, 0) << extra << "\n" << r.err << r.out;
  if (r.status != 0) return nlohmann::json::object();
  return nlohmann::json::parse(slurp(json));
}

std::vector<double> vec(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? j.at(key).get<std::vector<double>>() : std::vector<double>{};
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(a[i]))) << what << " step " << i;
}

}  // namespace

TEST(CliGpt, BadFlags) {
  GptData d;
  const std::string base = "--model gpt --data '" + d.file + "' ";
  expect_usage_error(run_train(base + "--max-steps 2 --n-embd 30 --n-head 4"), "--n-embd 30 is not a multiple of --n-head 4");
  expect_usage_error(run_train("--model mlp --n-layer 2 --max-steps 1"), "--n-layer applies to --model gpt only");
  expect_usage_error(run_train("--model cnn --sample 5 --max-steps 1"), "--sample applies to --model gpt only");
  expect_usage_error(run_train(base), "--model gpt needs --max-steps N or --epochs N");
  expect_usage_error(run_train(base + "--max-steps 2 --prompt hi"), "--prompt needs --sample");
  expect_usage_error(run_train(base + "--max-steps 2 --min-lr 0.1"), "--min-lr 0.1 is above --lr");
  expect_usage_error(run_train(base + "--max-steps 2 --warmup-steps 5"), "--warmup-steps 5 is more than --max-steps 2");
  expect_usage_error(run_train(base + "--max-steps 2 --dropout 1"), "--dropout");
  expect_usage_error(run_train(base + "--max-steps 2 --accum-steps 0"), "--accum-steps");
  expect_usage_error(run_train(base + "--max-steps 2 --optimizer sgd --weight-decay 0.2"), "--weight-decay needs --optimizer adamw");
  expect_usage_error(run_train(base + "--max-steps 2 --pattern fsdp --devices 2 --sample 4"),
                     "--sample is not available with --pattern fsdp");
  expect_usage_error(run_train(base + "--max-steps 2 --pattern spmd --devices 2 --batch-size 3 --accum-steps 2"),
                     "--batch-size 3 is not divisible by the 2 devices");
  expect_usage_error(run_train(base + "--max-steps 1 --n-layer 1 --n-embd 32 --block-size 16 --sample 3 --prompt '€'"),
                     "--prompt");
  expect_usage_error(run_train(base + "--max-steps 1 --n-layer 1 --n-embd 32 --block-size 16 --top-k 1000"),
                     "--top-k 1000 is more than the corpus's");
  expect_usage_error(run_train(base + "--max-steps 1 --n-layer 1 --n-embd 32 --n-head 1 --block-size 16 "
                                      "--pattern spmd --devices 2 --mesh model=2"),
                     "--n-head 1 is not divisible by the model axis");
  expect_usage_error(run_train("--model gpt --max-steps 1 --data '" + (d.dir / "none.txt") + "'"), "none.txt");
}

// single, compiled and eager trace or run the same arithmetic: the same losses, learning
// rates and gradient norms within 1e-5; the loss goes down; the JSON has gpt's figures.
TEST(CliGpt, SingleCompiledEagerAgreeAndLearn) {
  GptData d;
  const auto single = gpt_run(d, "--eval-every 3 --sample 20 --prompt 'the ' --top-k 5 --seed 3", "single.json");
  const auto compiled = gpt_run(d, "--pattern compiled --seed 3", "compiled.json");
  const auto eager = gpt_run(d, "--pattern eager --seed 3", "eager.json");
  const auto ls = vec(single, "losses");
  ASSERT_EQ(ls.size(), 6u);
  expect_close(vec(compiled, "losses"), ls, 1e-5, "compiled losses");
  expect_close(vec(eager, "losses"), ls, 1e-5, "eager losses");
  expect_close(vec(compiled, "grad_norms"), vec(single, "grad_norms"), 1e-5, "compiled grad norms");
  expect_close(vec(eager, "grad_norms"), vec(single, "grad_norms"), 1e-5, "eager grad norms");
  // An untrained model's loss is near ln(vocabulary); six AdamW steps lower it.
  const double vocab = single.at("gpt").at("vocab_size").get<double>();
  EXPECT_NEAR(ls.front(), std::log(vocab), 0.3);
  EXPECT_LT(ls.back(), ls.front() - 0.1);
  EXPECT_LT(*std::min_element(ls.begin() + 3, ls.end()), ls.front() - 0.15);
  // Warmup over 2 steps (lr / 2, lr), then cosine from 1e-2 (step 2) down toward 1e-3 at step 6.
  const auto lrs = vec(single, "learning_rates");
  ASSERT_EQ(lrs.size(), 6u);
  EXPECT_NEAR(lrs[0], 5e-3, 1e-12);
  EXPECT_NEAR(lrs[1], 1e-2, 1e-12);
  EXPECT_NEAR(lrs[2], 1e-2, 1e-12);
  for (size_t i = 3; i < lrs.size(); ++i) EXPECT_LT(lrs[i], lrs[i - 1]);
  EXPECT_GT(lrs.back(), 1e-3);
  for (double g : vec(single, "grad_norms")) EXPECT_GT(g, 0);
  // Validation at step 3 and at the end.
  EXPECT_EQ(single.at("val_steps"), nlohmann::json::parse("[3, 6]"));
  EXPECT_EQ(vec(single, "val_losses").size(), 2u);
  EXPECT_DOUBLE_EQ(single.at("val_loss").get<double>(), vec(single, "val_losses").back());
  EXPECT_TRUE(single.at("test_accuracy").is_null());
  EXPECT_GT(single.at("tokens_per_second").get<double>(), 0);
  const std::string sample = single.at("sample");
  EXPECT_EQ(sample.rfind("the ", 0), 0u) << sample;
  EXPECT_EQ(sample.size(), 24u) << sample;  // ASCII: 4 + 20 characters
}

// The sample is printed, and the same seed gives the same text.
TEST(CliGpt, SampleIsReproducible) {
  GptData d;
  const std::string args = gpt_args(d, 2) + "--sample 30 --prompt 'the cat' --temperature 0.8 --seed 5";
  const Result a = run_train(args), b = run_train(args);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  // Each run's own sample: the lines before it (progress, step times) differ in length.
  auto sample_of = [](const std::string& out) {
    const size_t at = out.find("sample (30 characters");
    return at == std::string::npos ? std::string() : out.substr(at, out.find("result:", at) - at);
  };
  const std::string sa = sample_of(a.out);
  ASSERT_FALSE(sa.empty()) << a.out;
  EXPECT_NE(sa.find("the cat"), std::string::npos) << a.out;
  EXPECT_EQ(sa, sample_of(b.out)) << b.out;
}

// Two micro-batches of 4 accumulated into one step are the step of one batch of 8 (the same
// windows: the sampler's j-th index does not depend on the batch size).
TEST(CliGpt, AccumulationEqualsTheBigBatch) {
  GptData d;
  const auto accum = gpt_run(d, "--accum-steps 2", "accum.json", 4);
  const auto big = gpt_run(d, "", "big.json", 4, /*batch=*/8);
  expect_close(vec(accum, "losses"), vec(big, "losses"), 1e-5, "losses");
  expect_close(vec(accum, "grad_norms"), vec(big, "grad_norms"), 1e-5, "grad norms");
}

// The multi-process patterns on 2 ranks: ddp (gradients averaged in backward), multiprocess
// (averaged by the step) and fsdp (reduce-scattered into shards) take the same steps; the
// loader pattern on one process equals single.
TEST(CliGpt, MultiProcessPatternsAgree) {
  GptData d;
  const auto ddp = gpt_run(d, "--pattern ddp --devices 2", "ddp.json", 4);
  const auto mp = gpt_run(d, "--pattern multiprocess --devices 2", "mp.json", 4);
  const auto fsdp = gpt_run(d, "--pattern fsdp --devices 2", "fsdp.json", 4);
  EXPECT_EQ(ddp.value("world_size", 0), 2);
  expect_close(vec(mp, "losses"), vec(ddp, "losses"), 1e-5, "multiprocess vs ddp");
  expect_close(vec(fsdp, "losses"), vec(ddp, "losses"), 1e-5, "fsdp vs ddp");
  expect_close(vec(fsdp, "grad_norms"), vec(ddp, "grad_norms"), 1e-5, "fsdp vs ddp grad norms");
  const auto loader = gpt_run(d, "--pattern loader", "loader.json", 4);
  const auto single = gpt_run(d, "", "single.json", 4);
  expect_close(vec(loader, "losses"), vec(single, "losses"), 1e-5, "loader vs single");
}

// SPMD on 2 devices (one process, the same batches as single): data parallel, tensor
// parallel (model=2) and fsdp-spmd take single's steps.
TEST(CliGpt, SpmdPatternsAgreeWithSingle) {
  GptData d;
  const auto single = gpt_run(d, "", "single.json", 4);
  const auto dp = gpt_run(d, "--pattern spmd --devices 2", "dp.json", 4);
  const auto tp = gpt_run(d, "--pattern spmd --devices 2 --mesh model=2", "tp.json", 4);
  const auto fs2 = gpt_run(d, "--pattern fsdp-spmd --devices 2", "fsdp2.json", 4);
  expect_close(vec(dp, "losses"), vec(single, "losses"), 1e-5, "spmd data=2");
  expect_close(vec(tp, "losses"), vec(single, "losses"), 1e-5, "spmd model=2");
  expect_close(vec(fs2, "losses"), vec(single, "losses"), 1e-5, "fsdp-spmd");
  // Megatron's split: qkv column-parallel (rows), proj row-parallel (columns), embeddings replicated.
  ASSERT_TRUE(tp.contains("parameter_shardings"));
  const auto& sh = tp.at("parameter_shardings");
  EXPECT_EQ(sh.at("blocks.0.qkv.weight"), "{devices=[2,1]0,1}") << sh.dump();
  EXPECT_EQ(sh.at("blocks.0.proj.weight"), "{devices=[1,2]0,1}") << sh.dump();
  EXPECT_EQ(sh.at("tok.weight"), "{replicated}") << sh.dump();
  EXPECT_GT(tp.at("collectives").at("per_step").at("all_reduce").get<double>(), 0) << tp.at("collectives").dump();
}
