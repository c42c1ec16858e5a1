// axle-train --resume through the real binary (AXLE_TRAIN_BIN): resuming a run that had
// finished reports that run's figures (losses from the checkpoint, test accuracy of the
// restored model), and a run resumed half-way reports the whole run's losses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
