// The xla TensorImpl, dtype and value conversions, the device guard (src/LAYERS: python).
#include "bridge.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>

#include "axle/metrics.h"
#include "axle/ops.h"
#include "axle/runtime.h"

namespace axle_py {

namespace {
const c10::DispatchKeySet kXlaKeys{c10::DispatchKey::XLA, c10::DispatchKey::AutogradXLA};
}

c10::Device xla_device() { return c10::Device(c10::DeviceType::XLA, 0); }

AxleTensorImpl::AxleTensorImpl(axle::Tensor v)
    : c10::TensorImpl(kXlaKeys, caffe2::TypeMeta::fromScalarType(to_torch_dtype(v.dtype())), xla_device()),
      value(std::move(v)) {
  set_storage_access_should_throw();
  refresh_sizes();
}

void AxleTensorImpl::refresh_sizes() {
  const auto& s = value.shape();
  sizes_and_strides_.set_sizes(c10::IntArrayRef(s.data(), s.size()));
  int64_t stride = 1;
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    sizes_and_strides_.stride_at_unchecked(d) = stride;
    stride *= std::max<int64_t>(s[d], 1);
  }
  storage_offset_ = 0;
  refresh_numel();
  refresh_contiguous();
}

void AxleTensorImpl::set_value(axle::Tensor v) {
  TORCH_CHECK(v.shape() == value.shape(), "[axle] internal: replacing a value of another shape");
  value = std::move(v);
  data_type_ = caffe2::TypeMeta::fromScalarType(to_torch_dtype(value.dtype()));
}

void AxleTensorImpl::reset(axle::Tensor v) {
  value = std::move(v);
  data_type_ = caffe2::TypeMeta::fromScalarType(to_torch_dtype(value.dtype()));
  refresh_sizes();
}

c10::intrusive_ptr<c10::TensorImpl> AxleTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<AxleTensorImpl>(value);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> AxleTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<AxleTensorImpl>(value);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  return impl;
}

void AxleTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<AxleTensorImpl*>(impl.get());
  TORCH_CHECK(other, "[axle] shallow_copy_from: expected an xla tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  value = other->value;
  refresh_sizes();
}

axle::DType to_axle_dtype(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat: return axle::kFloat32;
    case at::kLong: return axle::kInt64;
    case at::kInt: return axle::kInt32;
    case at::kBool: return axle::kBool;
    case at::kByte: return axle::kUInt8;
    case at::kBFloat16: return axle::kBFloat16;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "[", op, "] dtype ", c10::toString(t),
                   " is not supported on the xla device (axle): expected float32, bfloat16, int64, int32, bool or uint8");
}

at::ScalarType to_torch_dtype(axle::DType t) {
  switch (t) {
    case axle::DType::Float32: return at::kFloat;
    case axle::DType::Int64: return at::kLong;
    case axle::DType::Int32: return at::kInt;
    case axle::DType::Bool: return at::kBool;
    case axle::DType::UInt8: return at::kByte;
    case axle::DType::BFloat16: return at::kBFloat16;
    case axle::DType::Float16: return at::kHalf;
  }
  return at::kFloat;
}

bool is_xla(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::XLA; }

AxleTensorImpl* impl_of(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "[", op, "] expected a tensor, got an undefined one");
  at::Tensor inner = t;
  if (at::functionalization::impl::isFunctionalTensor(t)) {
    at::functionalization::impl::sync(t);
    inner = at::functionalization::impl::from_functional_tensor(t);
  }
  auto* impl = dynamic_cast<AxleTensorImpl*>(inner.unsafeGetTensorImpl());
  TORCH_CHECK(impl, "[", op, "] expected an xla tensor, got one on ", t.device());
  return impl;
}

axle::Tensor scalar(double v, axle::DType t) {
  return axle::full({}, v, {.dtype = t, .device = axle::device()});
}

axle::Tensor ax(const at::Tensor& t, const char* op) {
  if (!t.defined()) return {};
  if (is_xla(t)) return impl_of(t, op)->value;
  TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
              "Expected all tensors to be on the same device, but found at least two devices, xla:0 and ",
              t.device(), "! (in ", op, ")");
  // A 0-d cpu tensor (a Python number, Adam's step count): a scalar on the device.
  return scalar(t.item<double>(), to_axle_dtype(t.scalar_type(), op));
}

std::vector<axle::Tensor> ax(at::ITensorListRef ts, const char* op) {
  std::vector<axle::Tensor> r;
  r.reserve(ts.size());
  for (const at::Tensor& t : ts) r.push_back(ax(t, op));
  return r;
}

at::Tensor wrap(axle::Tensor v) {
  at::Tensor t = at::detail::make_tensor<AxleTensorImpl>(std::move(v));
  // Below functionalization (a lowered op) the result stays bare; a factory or transfer
  // called from outside it hands back a functional wrapper, as torch_xla does.
  if (c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize)) return t;
  return at::functionalization::impl::to_functional_tensor(t);
}

std::vector<at::Tensor> wrap(const std::vector<axle::Tensor>& vs) {
  std::vector<at::Tensor> r;
  r.reserve(vs.size());
  for (const auto& v : vs) r.push_back(wrap(v));
  return r;
}

axle::Tensor cpu_to_axle(const at::Tensor& t, const char* op) {
  at::Tensor c = t.contiguous();
  axle::DType dt = to_axle_dtype(c.scalar_type(), op);
  axle::Shape shape(c.sizes().begin(), c.sizes().end());
  return axle::from_blob(c.data_ptr(), shape, dt, {.dtype = dt}).to(axle::device());
}

at::Tensor axle_to_cpu(const axle::Tensor& v) {
  axle::Tensor c = v.to(axle::kCPU).contiguous();
  at::Tensor r = at::empty(c10::IntArrayRef(c.shape().data(), c.shape().size()),
                           at::TensorOptions().dtype(to_torch_dtype(c.dtype())));
  if (c.numel() > 0) std::memcpy(r.data_ptr(), c.data_ptr(), size_t(c.numel()) * axle::itemsize(c.dtype()));
  return r;
}

axle::Tensor cast_to(const axle::Tensor& x, axle::DType t) { return x.dtype() == t ? x : axle::cast(x, t); }
axle::Tensor cast_to(const axle::Tensor& x, at::ScalarType t) { return cast_to(x, to_axle_dtype(t, "cast")); }

std::vector<int64_t> vec(c10::IntArrayRef r) { return std::vector<int64_t>(r.begin(), r.end()); }

void note_fallback(const std::string& op) {
  axle::metrics::counter_add(op);
  static std::mutex mu;
  static std::set<std::string> seen;
  static const bool debug = [] {
    for (const char* v : {"AXLE_DEBUG", "PT_XLA_DEBUG"}) {
      const char* s = std::getenv(v);
      if (s && *s && std::strcmp(s, "0") != 0) return true;
    }
    return false;
  }();
  if (!debug) return;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(op).second)
    std::cerr << "[axle] CPU fallback: " << op
              << " is not lowered to axle; it runs on the CPU (a graph cut and a host round trip each call)\n";
}

// ---------------------------------------------------------------- the device guard
namespace {
struct XlaGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::XLA; }
  c10::Device exchangeDevice(c10::Device) const override { return xla_device(); }
  c10::Device getDevice() const override { return xla_device(); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void synchronizeDevice(const c10::DeviceIndex) const override { axle::wait_device_ops(); }
};
}  // namespace
C10_REGISTER_GUARD_IMPL(XLA, XlaGuardImpl);

}  // namespace axle_py
