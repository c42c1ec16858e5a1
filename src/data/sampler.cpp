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

DistributedSampler::DistributedSampler(int64_t n, int num_replicas, int rank, bool shuffle, uint64_t seed)
    : n_(n), replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed) {
  AXLE_CHECK(n >= 0, "[DistributedSampler] expected a non-negative size, got ", n);
  AXLE_CHECK(num_replicas >= 1, "[DistributedSampler] expected num_replicas >= 1, got ", num_replicas);
  AXLE_CHECK(rank >= 0 && rank < num_replicas, "[DistributedSampler] expected a rank in [0, ", num_replicas,
             "), got ", rank);
}

std::vector<int64_t> DistributedSampler::indices() {
  std::vector<int64_t> all;
  if (shuffle_) {
    RandomSampler r(n_, seed_);
    r.set_epoch(epoch_);
    all = r.indices();
  } else {
    all.resize(size_t(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  const int64_t total = size() * replicas_;
  std::vector<int64_t> mine;
  mine.reserve(size_t(size()));
  for (int64_t i = rank_; i < total && n_ > 0; i += replicas_) mine.push_back(all[size_t(i % n_)]);
  return mine;
}

}  // namespace axle::data
