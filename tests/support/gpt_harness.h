// Shared by the GPT parallel tests (test_gpt_parallel: SPMD; test_gpt_fsdp: FSDP v1 over
// processes): the small GPT, its deterministic batches, and the parity check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "axle/models/gpt.h"
#include "axle/tensor.h"
#include "spmd/partition.h"
#include "spmd_fixture.h"

namespace axle::gpt_test {

constexpr int64_t kBatch = 8, kBlock = 16, kVocab = 24;
inline models::GPTConfig small() {
  return {.vocab_size = kVocab, .block_size = kBlock, .n_layer = 2, .n_head = 4, .n_embd = 32, .dropout = 0.0};
}

using axle::test::iota;  // spmd_fixture.h

struct Batch {
  Tensor x, y;  // int64 [kBatch, kBlock] on the cpu
};
// Step s's batch: a token stream with some structure (so the loss falls), y = x shifted.
inline Batch batch_of(int s) {
  std::vector<int64_t> x, y;
  uint64_t state = 0x9e3779b97f4a7c15ull * uint64_t(s + 1);
  for (int64_t b = 0; b < kBatch; ++b) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    int64_t t0 = int64_t(state >> 40) % kVocab;
    std::vector<int64_t> seq;
    for (int64_t t = 0; t <= kBlock; ++t) seq.push_back((t0 + 3 * t + (t % 4 == 0)) % kVocab);
    x.insert(x.end(), seq.begin(), seq.end() - 1);
    y.insert(y.end(), seq.begin() + 1, seq.end());
  }
  return {from_vector(x, {kBatch, kBlock}), from_vector(y, {kBatch, kBlock})};
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // clip_grad_norm_'s total norm per step (before clipping)
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::string> shardings;      // parameter -> get_sharding_spec
  std::vector<spmd::CollectiveNote> collectives;     // the last step's graph
  std::string table;                                 // its xs::explain table
};

inline void expect_same(const TrainRun& got, const TrainRun& want, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], tol * std::abs(want.losses[i])) << what << ": loss at step " << i;
  // The gradient norms catch a gradient off by a factor, which AdamW's update would hide.
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size());
  for (size_t i = 0; i < want.grad_norms.size(); ++i)
    EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], tol * std::abs(want.grad_norms[i])) << what << ": gradient norm at step " << i;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (const auto& [name, w] : want.params) {
    ASSERT_TRUE(got.params.count(name)) << what << ": " << name;
    const auto& g = got.params.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(double(g[i]) - w[i]) / (1 + std::abs(w[i])));
    // 4x the loss tolerance: AdamW divides by sqrt(v), so a parameter whose gradient is near 0
    // (a bias late in training) moves by about lr whatever the gradient's rounding, and the
    // float32 summation order differs between layouts (measured: 1.26e-5 for blocks.1.qkv.bias
    // on data=2,model=2 in the -O1 sanitizer build; under 1e-5 in the Release build).
    EXPECT_LT(worst, 4 * tol) << what << ": parameter " << name;
  }
}

}  // namespace axle::gpt_test
