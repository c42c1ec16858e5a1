// Datasets: indexable collections of (data, target) examples.
//
//   auto ds = std::make_shared<axle::data::TensorDataset>(x, y);   // x [N, ...], y [N, ...]
//   axle::data::Example b = ds->get_batch({3, 1, 4});              // x rows 3, 1, 4 and their targets
#pragma once
#include <cstdint>
#include <vector>

#include "axle/tensor.h"

namespace axle::data {

/// One example, or a batch of them (then each tensor has a leading batch dimension).
struct Example {
  Tensor data, target;
};

/// A map-style dataset. Implementations must be safe to call from several threads
/// at once (DataLoader workers call get_batch concurrently).
class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  /// Example i, 0 <= i < size().
  virtual Example get(int64_t i) const = 0;
  /// The examples at `indices` stacked along a new leading dimension.
  /// The default stacks get(i) for each index; subclasses override it with a bulk copy.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

/// Rows of `data` and `targets` (equal leading dimension), on cpu.
/// get_batch gathers a batch with one parallel row copy per tensor.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override;
  /// Views of row i (no copy).
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 protected:
  TensorDataset() = default;
  /// For subclasses that load their tensors in their constructor.
  void reset(Tensor data, Tensor targets);

 private:
  Tensor data_, targets_;
};

/// Rows `indices` of a cpu tensor along dimension 0, as a new contiguous tensor
/// (index_select(x, 0, indices) without autograd; rows copied in parallel).
/// Throws axle::Error naming `who` if an index is out of range.
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& indices, const char* who = "gather_rows");

}  // namespace axle::data
