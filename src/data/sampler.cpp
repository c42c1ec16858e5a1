// Sequential and seeded random samplers.
#include "axle/data/sampler.h"

#include <numeric>

#include "axle/error.h"
#include "axle/generator.h"

namespace axle::data {

Sampler::~Sampler() = default;

void Sampler::set_epoch(int64_t e) {
  AXLE_CHECK(e >= 0, "[Sampler::set_epoch] expected an epoch >= 0, got ", e);
  epoch_ = e;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  AXLE_CHECK(n >= 0, "[SequentialSampler] expected a size >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() {
  std::vector<int64_t> v(n_);
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  AXLE_CHECK(n >= 0, "[RandomSampler] expected a size >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices() {
  // Epoch e's stream starts at Philox block e * 2^40: disjoint from every other epoch's
  // (a permutation of n consumes n - 1 blocks) and independent of any global state.
  Generator g;
  g.set_state(seed_, uint64_t(epoch_) << 40);
  std::vector<int64_t> v(n_);
  std::iota(v.begin(), v.end(), int64_t(0));
  for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates
    const int64_t j = static_cast<int64_t>(g.next_u64() % uint64_t(i + 1));
    std::swap(v[i], v[j]);
  }
  return v;
}

}  // namespace axle::data
