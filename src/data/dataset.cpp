// Dataset, TensorDataset and the row gather used for fast batching.
#include "axle/data/dataset.h"

#include <omp.h>

#include <cstring>

#include "core/tensor_impl.h"

namespace axle::data {

Dataset::~Dataset() = default;

namespace {

// Below this many bytes a batch is copied on one thread (a 128x784 float batch is 400 KB:
// a single memcpy stream beats waking an OpenMP team).
constexpr int64_t kParallelBytes = int64_t(1) << 20;

Shape with_batch(int64_t b, const Shape& row) {
  Shape s{b};
  s.insert(s.end(), row.begin(), row.end());
  return s;
}

void copy_rows(char* dst, const char* src, const std::vector<int64_t>& idx, int64_t row_bytes) {
  const int64_t b = static_cast<int64_t>(idx.size());
  const bool par = b * row_bytes >= kParallelBytes && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < b; ++i) std::memcpy(dst + i * row_bytes, src + idx[i] * row_bytes, row_bytes);
}

}  // namespace

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  AXLE_CHECK(b > 0, "[Dataset::get_batch] expected at least one index, got none");
  const int64_t n = size();
  Tensor parts[2];
  Tensor out[2];
  for (int64_t i = 0; i < b; ++i) {
    const int64_t k = indices[i];
    AXLE_CHECK(k >= 0 && k < n, "[Dataset::get_batch] index ", k, " out of range for a dataset of size ", n);
    Example e = get(k);
    parts[0] = e.data;
    parts[1] = e.target;
    for (int t = 0; t < 2; ++t) {
      AXLE_CHECK(i == 0 || parts[t].defined() == out[t].defined(), "[Dataset::get_batch] example ", k,
                 (parts[t].defined() ? " has" : " lacks"), " a ", t == 0 ? "data" : "target",
                 " tensor, unlike example ", indices[0]);
      if (!parts[t].defined()) continue;
      AXLE_CHECK(parts[t].device().is_cpu(), "[Dataset::get_batch] expected cpu examples, got ", parts[t].device());
      if (i == 0) {
        out[t] = make_tensor(with_batch(b, parts[t].shape()), parts[t].dtype());
      } else {
        AXLE_CHECK(parts[t].shape() == Shape(out[t].shape().begin() + 1, out[t].shape().end()) &&
                       parts[t].dtype() == out[t].dtype(),
                   "[Dataset::get_batch] expected every example's ", t == 0 ? "data" : "target", " to be ",
                   dtype_name(out[t].dtype()), shape_str(Shape(out[t].shape().begin() + 1, out[t].shape().end())),
                   " like example ", indices[0], ", got ", dtype_name(parts[t].dtype()), shape_str(parts[t].shape()),
                   " at example ", k);
      }
      const Tensor c = parts[t].contiguous();
      const int64_t row_bytes = c.numel() * static_cast<int64_t>(itemsize(c.dtype()));
      std::memcpy(static_cast<char*>(out[t].data_ptr()) + i * row_bytes, c.data_ptr(), row_bytes);
    }
  }
  return {out[0], out[1]};
}

Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& indices, const char* who) {
  AXLE_CHECK(x.defined(), "[", who, "] expected a defined tensor");
  AXLE_CHECK(x.device().is_cpu(), "[", who, "] expected a cpu tensor, got ", x.device());
  AXLE_CHECK(x.dim() >= 1, "[", who, "] expected a tensor with a leading dimension, got a 0-d tensor");
  const int64_t n = x.size(0);
  for (int64_t k : indices)
    AXLE_CHECK(k >= 0 && k < n, "[", who, "] index ", k, " out of range for ", n, " rows");
  const Tensor src = x.is_contiguous() ? x : x.detach().contiguous();
  Shape row(src.shape().begin() + 1, src.shape().end());
  Tensor out = make_tensor(with_batch(static_cast<int64_t>(indices.size()), row), src.dtype());
  const int64_t row_bytes = shape_numel(row) * static_cast<int64_t>(itemsize(src.dtype()));
  if (!indices.empty() && row_bytes > 0)
    copy_rows(static_cast<char*>(out.data_ptr()), static_cast<const char*>(src.data_ptr()), indices, row_bytes);
  return out;
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) { reset(std::move(data), std::move(targets)); }

void TensorDataset::reset(Tensor data, Tensor targets) {
  AXLE_CHECK(data.defined() && targets.defined(), "[TensorDataset] expected defined data and targets tensors");
  AXLE_CHECK(data.dim() >= 1 && targets.dim() >= 1,
             "[TensorDataset] expected data and targets with a leading example dimension, got ",
             shape_str(data.shape()), " and ", shape_str(targets.shape()));
  AXLE_CHECK(data.size(0) == targets.size(0), "[TensorDataset] expected as many targets as examples, got data ",
             shape_str(data.shape()), " and targets ", shape_str(targets.shape()));
  AXLE_CHECK(data.device().is_cpu() && targets.device().is_cpu(), "[TensorDataset] expected cpu tensors, got ",
             data.device(), " and ", targets.device());
  // Contiguous once here, so every batch is a plain row copy.
  data_ = data.is_contiguous() ? data.detach() : data.detach().contiguous();
  targets_ = targets.is_contiguous() ? targets.detach() : targets.detach().contiguous();
}

int64_t TensorDataset::size() const { return data_.defined() ? data_.size(0) : 0; }

namespace {
Tensor row_view(const Tensor& t, int64_t i) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  Shape strides(t.strides().begin() + 1, t.strides().end());
  return make_view(t, shape, strides, t.storage_offset() + i * t.strides()[0]);
}
}  // namespace

Example TensorDataset::get(int64_t i) const {
  const int64_t n = size();
  AXLE_CHECK(i >= 0 && i < n, "[TensorDataset::get] index ", i, " out of range for a dataset of size ", n);
  return {row_view(data_, i), row_view(targets_, i)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  AXLE_CHECK(!indices.empty(), "[TensorDataset::get_batch] expected at least one index, got none");
  return {gather_rows(data_, indices, "TensorDataset::get_batch"),
          gather_rows(targets_, indices, "TensorDataset::get_batch")};
}

}  // namespace axle::data
