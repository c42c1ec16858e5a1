// Tensor handle methods, factories, element access and printing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <sstream>

#include "axle/generator.h"
#include "core/hooks.h"
#include "core/parallel.h"
#include "core/rebind.h"
#include "core/tensor_impl.h"

namespace axle {

// ---------------------------------------------------------------- impl helpers
Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void TensorImpl::refresh() {
  numel = shape_numel(shape);
  contiguous = true;
  int64_t expect = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expect) { contiguous = false; break; }
    expect *= shape[i];
  }
}

AutogradMeta& TensorImpl::meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

Tensor make_tensor(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape) AXLE_CHECK(d >= 0, "[tensor] expected non-negative sizes, got shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->device = device;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->numel = shape_numel(shape);
  impl->contiguous = true;
  impl->storage = std::make_shared<Storage>(size_t(impl->numel) * itemsize(dtype), device);
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl* b = base.impl();
  impl->dtype = b->dtype;
  impl->device = b->device;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->storage = b->storage;
  impl->device_state = b->device_state;
  impl->refresh();
  return Tensor(std::move(impl));
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);
  AXLE_CHECK(d >= -n && d < n, "[", op, "] expected a dimension in [", -n, ", ", n - 1, "], got ", d);
  return d < 0 ? d + n : d;
}

// ---------------------------------------------------------------- element access
namespace {
double load(const char* p, DType t) {
  switch (t) {
    case DType::Float32: return *reinterpret_cast<const float*>(p);
    case DType::BFloat16: return float(*reinterpret_cast<const bfloat16*>(p));
    case DType::Int64: return double(*reinterpret_cast<const int64_t*>(p));
    case DType::Int32: return *reinterpret_cast<const int32_t*>(p);
    case DType::Bool: return *reinterpret_cast<const uint8_t*>(p) ? 1.0 : 0.0;
    case DType::UInt8: return *reinterpret_cast<const uint8_t*>(p);
    default: AXLE_FAIL("[tensor] dtype ", t, " is not supported on cpu yet");
  }
}
void store(char* p, DType t, double v) {
  switch (t) {
    case DType::Float32: *reinterpret_cast<float*>(p) = float(v); break;
    case DType::BFloat16: *reinterpret_cast<bfloat16*>(p) = bfloat16(float(v)); break;
    case DType::Int64: *reinterpret_cast<int64_t*>(p) = int64_t(v); break;
    case DType::Int32: *reinterpret_cast<int32_t*>(p) = int32_t(v); break;
    case DType::Bool: *reinterpret_cast<uint8_t*>(p) = v != 0; break;
    case DType::UInt8: *reinterpret_cast<uint8_t*>(p) = uint8_t(v); break;
    default: AXLE_FAIL("[tensor] dtype ", t, " is not supported on cpu yet");
  }
}
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return kFloat32; }
template <> constexpr DType dtype_of<int64_t>() { return kInt64; }
template <> constexpr DType dtype_of<int32_t>() { return kInt32; }
template <> constexpr DType dtype_of<uint8_t>() { return kUInt8; }
template <> constexpr DType dtype_of<bool>() { return kBool; }
template <> constexpr DType dtype_of<bfloat16>() { return kBFloat16; }

// Calls f(element pointer) for each element in logical row-major order.
template <class F>
void for_each_element(const TensorImpl* t, F&& f) {
  const char* base = t->data();
  const int64_t isz = int64_t(itemsize(t->dtype));
  if (t->contiguous) {
    for (int64_t i = 0; i < t->numel; ++i) f(base + i * isz);
    return;
  }
  const int64_t nd = int64_t(t->shape.size());
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < t->numel; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += idx[d] * t->strides[d];
    f(base + off * isz);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

// ---------------------------------------------------------------- Tensor
Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

#define AXLE_DEFINED(op) AXLE_CHECK(impl_ != nullptr, "[" op "] expected a defined tensor, got an undefined one")

DType Tensor::dtype() const { AXLE_DEFINED("dtype"); return impl_->dtype; }
Device Tensor::device() const { AXLE_DEFINED("device"); return impl_->device; }
const Shape& Tensor::shape() const { AXLE_DEFINED("shape"); return impl_->shape; }
const Shape& Tensor::strides() const { AXLE_DEFINED("strides"); return impl_->strides; }
int64_t Tensor::storage_offset() const { AXLE_DEFINED("storage_offset"); return impl_->offset; }
int64_t Tensor::dim() const { AXLE_DEFINED("dim"); return int64_t(impl_->shape.size()); }
int64_t Tensor::size(int64_t d) const { AXLE_DEFINED("size"); return impl_->shape[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::numel() const { AXLE_DEFINED("numel"); return impl_->numel; }
bool Tensor::is_contiguous() const { AXLE_DEFINED("is_contiguous"); return impl_->contiguous; }

void* Tensor::data_ptr() const {
  AXLE_DEFINED("data_ptr");
  AXLE_CHECK(impl_->device.is_cpu(), "[data_ptr] expected a cpu tensor, got one on ", impl_->device,
             "; move it with .cpu() first");
  return impl_->data();
}

template <class T>
T* Tensor::data() const {
  AXLE_DEFINED("data");
  AXLE_CHECK(impl_->dtype == dtype_of<T>(), "[data] expected dtype ", dtype_of<T>(), ", got ", impl_->dtype);
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template int64_t* Tensor::data<int64_t>() const;
template int32_t* Tensor::data<int32_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template bool* Tensor::data<bool>() const;
template bfloat16* Tensor::data<bfloat16>() const;

double Tensor::item() const {
  AXLE_DEFINED("item");
  AXLE_CHECK(impl_->numel == 1, "[item] expected a tensor with one element, got shape ", shape_str(impl_->shape));
  Tensor c = impl_->device.is_cpu() ? *this : device_hooks().to_cpu(*this, "item");
  return load(c.impl()->data(), c.impl()->dtype);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  AXLE_DEFINED("to_vector");
  Tensor c = impl_->device.is_cpu() ? *this : device_hooks().to_cpu(*this, "to_vector");
  std::vector<T> out;
  out.reserve(size_t(c.numel()));
  DType t = c.dtype();
  for_each_element(c.impl(), [&](const char* p) { out.push_back(static_cast<T>(load(p, t))); });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

Tensor Tensor::to(Device d) const {
  AXLE_DEFINED("to");
  if (d == impl_->device) return *this;
  if (impl_->device.is_cpu()) return device_hooks().to_device(*this, d);
  AXLE_CHECK(d.is_cpu(), "[to] expected a move between cpu and ", impl_->device, ", got ", impl_->device, " -> ", d);
  return device_hooks().to_cpu(*this, "to(cpu)");
}

Tensor Tensor::detach() const {
  AXLE_DEFINED("detach");
  return make_view(*this, impl_->shape, impl_->strides, impl_->offset);
}

bool Tensor::requires_grad() const {
  AXLE_DEFINED("requires_grad");
  return impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool r) {
  AXLE_DEFINED("set_requires_grad");
  AXLE_CHECK(!r || is_floating(impl_->dtype), "[requires_grad] expected a floating-point tensor, got ", impl_->dtype);
  AXLE_CHECK(is_leaf(), "[requires_grad] expected a leaf tensor; use .detach() to make one from an op's result");
  impl_->meta().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  AXLE_DEFINED("grad");
  return impl_->autograd ? impl_->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  AXLE_DEFINED("set_grad");
  if (g.defined())
    AXLE_CHECK(g.shape() == shape(), "[set_grad] expected a gradient of shape ", shape_str(shape()), ", got ",
               shape_str(g.shape()));
  impl_->meta().grad = g;
}

bool Tensor::is_leaf() const {
  AXLE_DEFINED("is_leaf");
  return !impl_->autograd || !impl_->autograd->grad_fn;
}

void rebind_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  const TensorImpl* s = src.impl();
  d->dtype = s->dtype;
  d->device = s->device;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->storage = s->storage;
  d->device_state = s->device_state;
  d->refresh();
}

void Tensor::set_data(const Tensor& other) const {
  AXLE_DEFINED("set_data");
  AXLE_CHECK(other.defined(), "[set_data] expected a defined tensor");
  AXLE_CHECK(other.shape() == shape() && other.dtype() == dtype(), "[set_data] expected ", dtype(), " ",
             shape_str(shape()), ", got ", other.dtype(), " ", shape_str(other.shape()));
  AXLE_CHECK(other.device() == device(), "[set_data] expected a tensor on ", device(), ", got ", other.device());
  const TensorImpl* o = other.impl();
  std::shared_ptr<DeviceState> old = std::move(impl_->device_state);
  impl_->device_state = o->device_state;
  impl_->storage = o->storage;
  impl_->strides = o->strides;
  impl_->offset = o->offset;
  impl_->refresh();
  // New values, same tensor: it keeps its name in AXLE_DEBUG explanations ("parameter fc1.weight").
  if (old) device_hooks().keep_label(*this, *old);
}

// ---------------------------------------------------------------- printing
std::string Tensor::str() const {
  if (!impl_) return "tensor(undefined)";
  Tensor c = impl_->device.is_cpu() ? *this : device_hooks().to_cpu(*this, "print");
  std::ostringstream os;
  const TensorImpl* t = c.impl();
  const int64_t nd = int64_t(t->shape.size());
  std::vector<double> vals;
  const bool summarize = t->numel > 1000;
  for_each_element(t, [&](const char* p) { vals.push_back(load(p, t->dtype)); });
  auto fmt_val = [&](double v) {
    std::ostringstream s;
    if (is_floating(t->dtype)) s << std::fixed << std::setprecision(4) << v;
    else if (t->dtype == kBool) s << (v != 0 ? "True" : "False");
    else s << int64_t(v);
    return s.str();
  };
  // Recursive nested-bracket printer; shows the first and last 3 entries per dim when large.
  std::function<void(int64_t, int64_t, int)> rec = [&](int64_t d, int64_t off, int indent) {
    if (d == nd) { os << fmt_val(vals[size_t(off)]); return; }
    int64_t n = t->shape[d], inner = 1;
    for (int64_t k = d + 1; k < nd; ++k) inner *= t->shape[k];
    os << "[";
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 6 && i == 3) { os << "..., "; i = n - 3; }
      rec(d + 1, off + i * inner, indent + 1);
      if (i + 1 < n) os << (d + 1 == nd ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
    }
    os << "]";
  };
  os << "tensor(";
  rec(0, 0, 7);
  if (t->dtype != kFloat32) os << ", dtype=" << t->dtype;
  if (!impl_->device.is_cpu()) os << ", device='" << impl_->device << "'";
  if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---------------------------------------------------------------- factories
namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (!o.device.is_cpu()) t = t.to(o.device);
  if (o.requires_grad) t.set_requires_grad(true);
  return t;
}
template <class T>
void fill_typed(char* p, int64_t n, double v) {
  T x = static_cast<T>(v);
  T* q = reinterpret_cast<T*>(p);
  if (!use_team(n, (1 << 16) + 1)) {  // small fills: every scalar operand
    std::fill(q, q + n, x);
    return;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) q[i] = x;
}
void fill(const Tensor& t, double v) {
  char* p = t.impl()->data();
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float32: fill_typed<float>(p, n, v); break;
    case DType::BFloat16: fill_typed<bfloat16>(p, n, float(v)); break;
    case DType::Int64: fill_typed<int64_t>(p, n, v); break;
    case DType::Int32: fill_typed<int32_t>(p, n, v); break;
    case DType::Bool: fill_typed<uint8_t>(p, n, v != 0); break;
    case DType::UInt8: fill_typed<uint8_t>(p, n, v); break;
    default: AXLE_FAIL("[full] dtype ", t.dtype(), " is not supported on cpu yet");
  }
}
}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& o) { return finish(make_tensor(shape, o.dtype), o); }
Tensor full(const Shape& shape, double value, const TensorOptions& o) {
  Tensor t = make_tensor(shape, o.dtype);
  fill(t, value);
  return finish(t, o);
}
Tensor zeros(const Shape& shape, const TensorOptions& o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, const TensorOptions& o) { return full(shape, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, const TensorOptions& o) { return full({}, value, o); }

Tensor arange(int64_t start, int64_t end, int64_t step, const TensorOptions& o) {
  AXLE_CHECK(step != 0, "[arange] expected a non-zero step, got 0");
  int64_t n = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  Tensor t = make_tensor({n}, o.dtype);
  char* p = t.impl()->data();
  size_t isz = itemsize(o.dtype);
  for (int64_t i = 0; i < n; ++i) store(p + i * isz, o.dtype, double(start + i * step));
  return finish(t, o);
}
Tensor arange(int64_t end, const TensorOptions& o) { return arange(0, end, 1, o); }

namespace {
template <class T>
Tensor from_typed(const std::vector<T>& v, const Shape& shape, const TensorOptions& o) {
  AXLE_CHECK(int64_t(v.size()) == shape_numel(shape), "[from_vector] expected ", shape_numel(shape),
             " values for shape ", shape_str(shape), ", got ", v.size());
  Tensor t = make_tensor(shape, o.dtype);
  char* p = t.impl()->data();
  size_t isz = itemsize(o.dtype);
  if (!v.empty() && o.dtype == dtype_of<T>()) std::memcpy(p, v.data(), v.size() * sizeof(T));
  else for (size_t i = 0; i < v.size(); ++i) store(p + i * isz, o.dtype, double(v[i]));
  return finish(t, o);
}
}  // namespace
Tensor from_vector(const std::vector<float>& v, const Shape& s, const TensorOptions& o) { return from_typed(v, s, o); }
Tensor from_vector(const std::vector<double>& v, const Shape& s, const TensorOptions& o) {
  AXLE_CHECK(int64_t(v.size()) == shape_numel(s), "[from_vector] expected ", shape_numel(s), " values for shape ",
             shape_str(s), ", got ", v.size());
  Tensor t = make_tensor(s, o.dtype);
  char* p = t.impl()->data();
  for (size_t i = 0; i < v.size(); ++i) store(p + i * itemsize(o.dtype), o.dtype, v[i]);
  return finish(t, o);
}
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s, const TensorOptions& o) { return from_typed(v, s, o); }
Tensor from_vector(const std::vector<int32_t>& v, const Shape& s, const TensorOptions& o) { return from_typed(v, s, o); }

Tensor from_blob(const void* data, const Shape& shape, DType t, const TensorOptions& o) {
  Tensor r = make_tensor(shape, t);
  if (r.numel() > 0) std::memcpy(r.impl()->data(), data, size_t(r.numel()) * itemsize(t));
  if (o.dtype != t) {  // converted element by element, as from_vector does
    Tensor c = make_tensor(shape, o.dtype);
    const char* p = r.impl()->data();
    char* q = c.impl()->data();
    const int64_t from = int64_t(itemsize(t)), to = int64_t(itemsize(o.dtype));
    for (int64_t i = 0; i < r.numel(); ++i) store(q + i * to, o.dtype, load(p + i * from, t));
    r = c;
  }
  return finish(r, o);
}

// ---------------------------------------------------------------- random
namespace {
// Each element i takes 32 bits of block (base + i/4); independent of thread count.
template <class F>
void philox_fill(float* out, int64_t n, Generator& g, int per_elem_words, F&& f) {
  const uint64_t blocks = uint64_t((n * per_elem_words + 3) / 4);
  const uint64_t base = g.reserve(blocks);
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t b = 0; b < int64_t(blocks); ++b) {
    uint32_t w[4];
    g.block(base + uint64_t(b), w);
    f(out, b, w, n);
  }
}
inline float u01(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
// Random values are drawn in float32 (the same stream for every dtype), then rounded.
Tensor as_dtype(const Tensor& t, DType dt) {
  if (dt == kFloat32) return t;
  Tensor r = make_tensor(t.shape(), dt);
  const float* p = t.data<float>();
  char* q = r.impl()->data();
  const size_t isz = itemsize(dt);
  for (int64_t i = 0; i < t.numel(); ++i) store(q + size_t(i) * isz, dt, p[i]);
  return r;
}
}  // namespace

Tensor uniform(const Shape& shape, double lo, double hi, const TensorOptions& o, Generator* gen) {
  AXLE_CHECK(is_floating(o.dtype), "[rand] expected a floating dtype, got ", o.dtype);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = make_tensor(shape, kFloat32);
  const float a = float(lo), w = float(hi - lo);
  philox_fill(t.data<float>(), t.numel(), g, 1, [a, w](float* out, int64_t b, const uint32_t* r, int64_t n) {
    for (int k = 0; k < 4; ++k) {
      int64_t i = b * 4 + k;
      if (i < n) out[i] = a + w * u01(r[k]);
    }
  });
  return finish(as_dtype(t, o.dtype), o);
}

Tensor rand(const Shape& shape, const TensorOptions& o, Generator* gen) { return uniform(shape, 0.0, 1.0, o, gen); }

Tensor randn(const Shape& shape, const TensorOptions& o, Generator* gen) {
  AXLE_CHECK(is_floating(o.dtype), "[randn] expected a floating dtype, got ", o.dtype);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = make_tensor(shape, kFloat32);
  // Box-Muller: 2 words give 2 normals.
  philox_fill(t.data<float>(), t.numel(), g, 1, [](float* out, int64_t b, const uint32_t* r, int64_t n) {
    for (int k = 0; k < 4; k += 2) {
      float u1 = (float(r[k] >> 8) + 1.0f) * (1.0f / 16777217.0f), u2 = u01(r[k + 1]);
      float rad = std::sqrt(-2.0f * std::log(u1)), th = 6.2831853071795864f * u2;
      int64_t i = b * 4 + k;
      if (i < n) out[i] = rad * std::cos(th);
      if (i + 1 < n) out[i + 1] = rad * std::sin(th);
    }
  });
  return finish(as_dtype(t, o.dtype), o);
}

Tensor randperm(int64_t n, Generator* gen) {
  AXLE_CHECK(n >= 0, "[randperm] expected n >= 0, got ", n);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = make_tensor({n}, kInt64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = int64_t(g.next_u64() % uint64_t(i + 1));
    std::swap(p[i], p[j]);
  }
  return t;
}

}  // namespace axle
