// axle::Tensor: a cheap, reference-counted handle to an n-d array.
//
//   auto x = axle::randn({128, 784});             // float32 on cpu
//   auto w = axle::zeros({256, 784}, {.requires_grad = true});
//   auto y = axle::relu(axle::linear(x, w));
//   y.sum().backward();                            // w.grad() is now set
//
// Copying a Tensor copies the handle, not the data. Ops never modify their
// inputs; the only in-place update is `set_data`, used by optimizers.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "axle/device.h"
#include "axle/dtype.h"
#include "axle/error.h"

namespace axle {

using Shape = std::vector<int64_t>;
struct TensorImpl;  // src/core/tensor_impl.h

/// Options for factory functions: `axle::zeros({2, 3}, {.dtype = axle::kInt64})`.
struct TensorOptions {
  DType dtype = kFloat32;
  Device device = kCPU;
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  ///< An undefined tensor (defined() == false).
  explicit Tensor(std::shared_ptr<TensorImpl> impl);

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  Device device() const;
  const Shape& shape() const;
  const Shape& strides() const;  ///< In elements.
  int64_t storage_offset() const;
  int64_t dim() const;
  /// Size of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const;
  int64_t numel() const;
  bool is_contiguous() const;

  /// Pointer to the first element; cpu tensors only. Checks the dtype for typed access.
  void* data_ptr() const;
  template <class T> T* data() const;

  /// The value of a one-element tensor, converted to double (reads the device).
  double item() const;
  template <class T> T item() const { return static_cast<T>(item()); }
  /// Copies the elements (in logical row-major order) into a vector; converts dtype.
  template <class T> std::vector<T> to_vector() const;

  /// Copies between cpu and xla (`t.to("xla")`, `t.to("cpu")`, `t.to(axle::device())`);
  /// this tensor itself if already there.
  Tensor to(Device d) const;
  Tensor to(DType t) const;
  Tensor cpu() const { return to(kCPU); }
  /// This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A copy with its own storage (differentiable).
  Tensor clone() const;
  /// Same data, cut from the autograd graph.
  Tensor detach() const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf tensor as a parameter whose gradient `backward()` accumulates.
  Tensor& set_requires_grad(bool r);
  /// Accumulated gradient (undefined until a backward pass reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  bool is_leaf() const;
  /// Back-propagates from this tensor; a scalar needs no `grad`.
  void backward(const Tensor& grad = {}) const;

  /// Replaces this tensor's values (and storage) with `other`'s, keeping its identity,
  /// autograd flags and grad. Shape and dtype must match. Used by optimizers and load_state_dict.
  void set_data(const Tensor& other) const;

  // ---- method forms of common ops (see ops.h) ----
  Tensor reshape(const Shape& s) const;
  Tensor view(const Shape& s) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  ///< transpose of a 2-D tensor
  Tensor expand(const Shape& s) const;
  Tensor squeeze(int64_t d) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t d, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;

  /// PyTorch-style text: tensor([[1.0000, 2.0000]], dtype=..., device=...).
  std::string str() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True if both handles refer to the same tensor.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// ---- factories ----
Tensor empty(const Shape& shape, const TensorOptions& o = {});
Tensor zeros(const Shape& shape, const TensorOptions& o = {});
Tensor ones(const Shape& shape, const TensorOptions& o = {});
Tensor full(const Shape& shape, double value, const TensorOptions& o = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
/// 0-d tensor holding `value`.
Tensor scalar_tensor(double value, const TensorOptions& o = {});
/// [start, end) with `step`; dtype defaults to int64.
Tensor arange(int64_t start, int64_t end, int64_t step = 1, const TensorOptions& o = {.dtype = kInt64});
Tensor arange(int64_t end, const TensorOptions& o = {.dtype = kInt64});
/// Copies `values` into a new tensor of the given shape (and `o.dtype`, converted).
Tensor from_vector(const std::vector<float>& values, const Shape& shape, const TensorOptions& o = {});
Tensor from_vector(const std::vector<double>& values, const Shape& shape, const TensorOptions& o = {});
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, const TensorOptions& o = {.dtype = kInt64});
Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape, const TensorOptions& o = {.dtype = kInt32});
/// Copies `shape`-many elements of dtype `t` from `data`.
Tensor from_blob(const void* data, const Shape& shape, DType t, const TensorOptions& o = {});

class Generator;
/// Uniform [0, 1) and standard normal samples from `gen` (the default generator if null).
Tensor rand(const Shape& shape, const TensorOptions& o = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& o = {}, Generator* gen = nullptr);
/// Uniform [lo, hi).
Tensor uniform(const Shape& shape, double lo, double hi, const TensorOptions& o = {}, Generator* gen = nullptr);
/// A random permutation of 0..n-1 (int64).
Tensor randperm(int64_t n, Generator* gen = nullptr);

}  // namespace axle
