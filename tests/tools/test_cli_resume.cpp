// axle-train --resume through the real binary (AXLE_TRAIN_BIN): resuming a run that had
// finished reports that run's figures (losses from the checkpoint, test accuracy of the
// restored model), a run resumed half-way reports the whole run's losses, and the sharded
// patterns (fsdp, spmd, fsdp-spmd) killed with SIGKILL resume bit-identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/serialize.h"
#include "test_util.h"

namespace {

using namespace axle::test;

// The "result: ..." line of stdout.
std::string result_line(const std::string& out) {
  const size_t at = out.find("result: ");
  if (at == std::string::npos) return "";
  return out.substr(at, out.find('\n', at) - at);
}

// "test accuracy 0.7234" out of a result line.
std::string accuracy_field(const std::string& line) {
  const size_t at = line.find("test accuracy ");
  return at == std::string::npos ? "" : line.substr(at, line.find(',', at) - at);
}

const std::string kCommon = " --model mlp --threads 1 --batch-size 64 ";

}  // namespace

TEST(CliResume, FinishedRunReportsItsFigures) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kFashionMnistDir;
  TempDir d;
  const Result first = run_train(kCommon + "--max-steps 25 --save '" + (d / "ck") + "' --json '" + (d / "a.json") + "'");
  ASSERT_EQ(first.status, 0) << first.err;
  const Result again = run_train(kCommon + "--max-steps 25 --resume '" + (d / "ck") + "' --json '" + (d / "b.json") + "'");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("nothing left to train"), std::string::npos) << again.out;

  const auto a = nlohmann::json::parse(slurp(d / "a.json")), b = nlohmann::json::parse(slurp(d / "b.json"));
  const auto la = a.at("losses").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 25u);
  EXPECT_EQ(b.at("losses").get<std::vector<double>>(), la);
  EXPECT_EQ(b.at("restored_losses"), 25);
  EXPECT_EQ(a.at("restored_losses"), 0);
  EXPECT_EQ(b.at("final_loss").get<double>(), a.at("final_loss").get<double>());
  EXPECT_EQ(b.at("final_loss").get<double>(), la.back());
  EXPECT_EQ(b.at("steps"), a.at("steps"));
  // Evaluated again on the restored model: the same parameters, the same accuracy.
  EXPECT_GT(a.at("test_accuracy").get<double>(), 0.3);
  EXPECT_EQ(b.at("test_accuracy").get<double>(), a.at("test_accuracy").get<double>());
  EXPECT_EQ(accuracy_field(result_line(again.out)), accuracy_field(result_line(first.out))) << again.out;
}

// Stopped after 15 steps, resumed to 25: the JSON lists every step's loss, as the
// uninterrupted run does (training after the checkpoint is bit-identical).
TEST(CliResume, ResumedRunListsTheWholeRunsLosses) {
  if (!have_real_data()) GTEST_SKIP() << "needs " << kFashionMnistDir;
  TempDir d;
  const Result full = run_train(kCommon + "--max-steps 25 --json '" + (d / "full.json") + "'");
  ASSERT_EQ(full.status, 0) << full.err;
  const Result part = run_train(kCommon + "--max-steps 15 --save '" + (d / "ck") + "'");
  ASSERT_EQ(part.status, 0) << part.err;
  const Result rest =
      run_train(kCommon + "--max-steps 25 --resume '" + (d / "ck") + "' --json '" + (d / "rest.json") + "'");
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_EQ(rest.out.find("nothing left to train"), std::string::npos) << rest.out;
  const auto f = nlohmann::json::parse(slurp(d / "full.json")), r = nlohmann::json::parse(slurp(d / "rest.json"));
  EXPECT_EQ(r.at("restored_losses"), 15);
  EXPECT_EQ(r.at("losses").get<std::vector<double>>(), f.at("losses").get<std::vector<double>>());
  EXPECT_EQ(r.at("test_accuracy").get<double>(), f.at("test_accuracy").get<double>());
}

// --model gpt stopped after 4 of 8 steps and resumed: the scheduler (warmup + cosine to
// --lr-decay-steps) and the sampler continue where they were, dropout's generator too, so
// the resumed run's losses, learning rates and gradient norms are bit-identical to the
// uninterrupted run's.
TEST(CliResume, GptResumeIsBitIdentical) {
  TempDir d;
  {
    std::ofstream f(d / "corpus.txt");
    for (int i = 0; i < 300; ++i) f << "line " << i % 17 << ": the quick brown fox jumps over the lazy dog.\n";
  }
  const std::string gpt = " --model gpt --n-layer 1 --n-embd 32 --block-size 16 --batch-size 4 --threads 1 "
                          "--warmup-steps 3 --lr-decay-steps 8 --eval-every 3 --eval-iters 2 --data '" +
                          (d / "corpus.txt") + "' ";
  const Result full = run_train(gpt + "--max-steps 8 --json '" + (d / "full.json") + "'");
  ASSERT_EQ(full.status, 0) << full.err;
  const Result part = run_train(gpt + "--max-steps 4 --save '" + (d / "ck") + "'");
  ASSERT_EQ(part.status, 0) << part.err;
  const Result rest = run_train(gpt + "--max-steps 8 --resume '" + (d / "ck") + "' --json '" + (d / "rest.json") + "'");
  ASSERT_EQ(rest.status, 0) << rest.err;
  const auto f = nlohmann::json::parse(slurp(d / "full.json")), r = nlohmann::json::parse(slurp(d / "rest.json"));
  EXPECT_EQ(r.at("restored_losses"), 4);
  ASSERT_EQ(f.at("losses").size(), 8u);
  EXPECT_EQ(r.at("losses").get<std::vector<double>>(), f.at("losses").get<std::vector<double>>());
  EXPECT_EQ(r.at("learning_rates").get<std::vector<double>>(), f.at("learning_rates").get<std::vector<double>>());
  EXPECT_EQ(r.at("grad_norms").get<std::vector<double>>(), f.at("grad_norms").get<std::vector<double>>());
  EXPECT_EQ(r.at("val_loss").get<double>(), f.at("val_loss").get<double>());
}

namespace {

namespace fs = std::filesystem;

// The files of `dir` whose names start with `stem` (sorted), as `dir`-relative names.
std::vector<std::string> entries(const std::string& dir, const std::string& stem) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every tensor of the safetensors files in `a` equals the same-named one in `b`, bit for bit
// (as float32 words); returns how many were compared.
int expect_same_tensors(const std::string& a, const std::string& b, const std::vector<std::string>& files) {
  int compared = 0;
  for (const std::string& f : files) {
    const auto x = axle::load(a + "/" + f), y = axle::load(b + "/" + f);
    EXPECT_EQ(x.tensors.size(), y.tensors.size()) << f;
    for (const auto& [name, t] : x.tensors) {
      if (t.dtype() != axle::kFloat32) continue;
      EXPECT_EQ(t.to_vector<float>(), y.at(name).to_vector<float>()) << f << ": " << name;
      ++compared;
    }
  }
  return compared;
}

// Trains `args` (with --save-every) uninterrupted, then again killed with SIGKILL (the whole
// process group: the launched ranks too) 0-299 ms after its first checkpoint and resumed into
// the same directory: the resumed run must have been cut short, and it ends with the
// uninterrupted run's losses and the same checkpoint files (`stem`*) bit for bit.
void killed_run_resumes(const std::string& args, const std::string& pointer, const std::string& stem) {
  const int seed = testing::UnitTest::GetInstance()->random_seed();
  const int delay_ms = static_cast<int>(std::mt19937(static_cast<unsigned>(seed))() % 300);
  SCOPED_TRACE("killed " + std::to_string(delay_ms) + " ms after the first checkpoint (--gtest_random_seed=" +
               std::to_string(seed) + ")");
  TempDir d;
  const std::string bin = std::string("env -u AXLE_CPU_DEVICES '") + AXLE_TRAIN_BIN + "' ";
  const Result full = run_captured(bin + args + " --save '" + (d / "full") + "' --json '" + (d / "full.json") + "'");
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string killed = d / "killed";
  const std::string script =
      "set -m; " + bin + args + " --save '" + killed + "' >/dev/null 2>&1 & pid=$!; "
      "while [ ! -f '" + killed + "/" + pointer + "' ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done; "
      "sleep " + std::to_string(delay_ms / 1000.0) + "; kill -9 -- -$pid 2>/dev/null; wait $pid; "
      "while kill -0 -- -$pid 2>/dev/null; do sleep 0.01; done; exit 0";
  std::ofstream(d / "kill.sh") << script << "\n";
  ASSERT_EQ(std::system(("bash '" + (d / "kill.sh") + "' 2>/dev/null").c_str()), 0);  // no "Killed" notice
  ASSERT_TRUE(fs::exists(killed + "/" + pointer));
  const Result resumed = run_captured(bin + args + " --save '" + killed + "' --resume '" + killed + "' --json '" +
                                      (d / "resumed.json") + "'");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const auto f = nlohmann::json::parse(slurp(d / "full.json")), r = nlohmann::json::parse(slurp(d / "resumed.json"));
  EXPECT_GT(r.at("restored_losses").get<int>(), 0) << resumed.out;
  EXPECT_LT(r.at("restored_losses").get<size_t>(), f.at("losses").size()) << "not cut short: " << resumed.out;
  EXPECT_EQ(r.at("losses").get<std::vector<double>>(), f.at("losses").get<std::vector<double>>());
  EXPECT_EQ(r.at("test_accuracy").get<double>(), f.at("test_accuracy").get<double>());
  const std::vector<std::string> files = entries(d / "full", stem);
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(entries(killed, stem), files);  // older checkpoints removed, the same last one
  std::vector<std::string> tensor_files;
  for (const std::string& e : files) {
    if (fs::is_directory(d / "full" + "/" + e)) {
      for (const std::string& g : entries(d / "full" + "/" + e, "shard-")) tensor_files.push_back(e + "/" + g);
    } else {
      tensor_files.push_back(e);
    }
  }
  EXPECT_GT(expect_same_tensors(d / "full", killed, tensor_files), 0);
}

const std::string kTiny = " --model mlp --threads 1 --batch-size 4 --save-every 10 --data '" + AXLE_TEST_DATA +
                          "/tiny_fmnist' ";

}  // namespace

// FSDP v1: each rank's shards in its own file, a pointer to the complete set.
TEST(CliResume, KilledFsdpRunResumesBitIdentically) {
  killed_run_resumes(kTiny + "--pattern fsdp --devices 2 --epochs 15 --optimizer adamw", "checkpoint.json", "step-");
}

// SPMD (data and tensor parallel): each device's shards through the distributed checkpoint.
TEST(CliResume, KilledSpmdRunResumesBitIdentically) {
  killed_run_resumes(kTiny + "--pattern spmd --devices 4 --mesh data=2,model=2 --epochs 15",
                     "checkpoint.safetensors", "state-");
}

// FSDP v2: parameters sharded on the mesh, through the distributed checkpoint.
TEST(CliResume, KilledFsdpSpmdRunResumesBitIdentically) {
  killed_run_resumes(kTiny + "--pattern fsdp-spmd --devices 2 --epochs 15 --optimizer adamw",
                     "checkpoint.safetensors", "state-");
}
