// Samplers: the order in which a DataLoader visits a dataset.
#pragma once
#include <cstdint>
#include <vector>

namespace axle::data {

class Sampler {
 public:
  virtual ~Sampler();
  /// The indices of one epoch, in visiting order.
  virtual std::vector<int64_t> indices() = 0;
  /// How many indices one epoch yields.
  virtual int64_t size() const = 0;
  /// Selects the epoch whose order indices() returns (shuffling samplers reshuffle per epoch).
  virtual void set_epoch(int64_t e);
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

/// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A random permutation of 0..n-1 that is a pure function of (seed, epoch):
/// epoch e draws from the Philox stream of `seed` starting at block e * 2^40, so
/// every epoch differs and any run with the same seed repeats it exactly.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// One rank's share of the data set (torch.utils.data.DistributedSampler): every epoch the
/// indices (shuffled per epoch from `seed` when `shuffle`) are padded by wrapping around to a
/// multiple of `num_replicas`, and rank r takes positions r, r + num_replicas, ...
/// Across ranks each sample appears once per epoch (plus the padding).
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return (n_ + replicas_ - 1) / replicas_; }

 private:
  int64_t n_;
  int replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace axle::data
