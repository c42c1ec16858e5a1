// The bridge between PyTorch's tensors and axle's: the `xla` TensorImpl that holds an axle
// lazy tensor, conversions of dtypes and values, and the helpers every lowering file uses.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include <string>
#include <vector>

#include "axle/tensor.h"

namespace axle_py {

/// The TensorImpl of an `xla` tensor: no host storage, its value is an axle lazy tensor
/// (pending IR or device data). Sizes are contiguous; views and in-place ops reach it only
/// as functional ops (PyTorch's functionalization wraps every xla tensor).
struct AxleTensorImpl final : c10::TensorImpl {
  explicit AxleTensorImpl(axle::Tensor v);
  axle::Tensor value;
  /// When this tensor is the transpose of a 2-D tensor (t(), transpose(0, 1)): that tensor, so a
  /// product with it lowers to axle::linear (oneDNN reads the weight transposed, bias fused).
  axle::Tensor transposed_of;

  /// Replaces the value (same shape: _copy_from into this tensor).
  void set_value(axle::Tensor v);
  /// Replaces the value and its shape (a resize: out= ops).
  void reset(axle::Tensor v);

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;
  const char* tensorimpl_type_name() const override { return "AxleTensorImpl"; }

 private:
  void refresh_sizes();
};

/// The device of every xla tensor of this process: xla:0.
c10::Device xla_device();

axle::DType to_axle_dtype(at::ScalarType t, const char* op);
at::ScalarType to_torch_dtype(axle::DType t);

/// True for an xla tensor (functional wrapper or not).
bool is_xla(const at::Tensor& t);

/// The axle value of an operand of op `op`: an xla tensor's value; a 0-d cpu tensor (a
/// Python scalar, Adam's step) becomes an xla scalar; any other cpu tensor raises PyTorch's
/// device-mismatch error. Undefined stays undefined.
axle::Tensor ax(const at::Tensor& t, const char* op = "op");
std::vector<axle::Tensor> ax(at::ITensorListRef ts, const char* op = "op");

/// A new xla tensor holding `v`. Wrapped for functionalization when called from outside it
/// (factories, transfers); bare when called below it (every lowered op).
at::Tensor wrap(axle::Tensor v);
std::vector<at::Tensor> wrap(const std::vector<axle::Tensor>& vs);

/// The AxleTensorImpl under an xla tensor (unwrapping functionalization); throws otherwise.
AxleTensorImpl* impl_of(const at::Tensor& t, const char* op);

/// Copies a cpu at::Tensor into a new axle xla tensor (dtype kept).
axle::Tensor cpu_to_axle(const at::Tensor& t, const char* op);
/// Reads an axle tensor into a new contiguous cpu at::Tensor (runs what it needs).
at::Tensor axle_to_cpu(const axle::Tensor& v);

/// A scalar (0-d) xla tensor of dtype t: a graph input unless 0 or +-1.
axle::Tensor scalar(double v, axle::DType t);
/// `x` cast to dtype t (itself when already t).
axle::Tensor cast_to(const axle::Tensor& x, axle::DType t);
/// `x` cast to PyTorch's result dtype `t`.
axle::Tensor cast_to(const axle::Tensor& x, at::ScalarType t);

std::vector<int64_t> vec(c10::IntArrayRef r);

/// Counts a CPU fallback of `op` (aten::<name>) and names it once under AXLE_DEBUG /
/// PT_XLA_DEBUG.
void note_fallback(const std::string& op);

}  // namespace axle_py
