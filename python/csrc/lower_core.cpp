// Lowered aten ops, part 1: factories, transfers, copies, views and their scatters, scalar
// reads and random fills. Views are functional here: PyTorch's functionalization (which
// wraps every xla tensor) turns views and in-place ops into these value ops, so a view is a
// new lazy value (free in the graph) and a write through a view comes back as a *_scatter.
#include <ATen/core/Generator.h>
#include <torch/library.h>

#include "axle/generator.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "bridge.h"

namespace axle_py {
namespace {

using at::Tensor;
using c10::IntArrayRef;
using std::optional;

axle::DType dtype_or(optional<at::ScalarType> t, at::ScalarType dflt, const char* op) {
  return to_axle_dtype(t.value_or(dflt), op);
}

/// A lazy constant of `shape` (an expanded 0-d scalar: nothing crosses from the host per step
/// beyond the scalar).
axle::Tensor filled(const axle::Shape& shape, double v, axle::DType t) {
  axle::Tensor s = scalar(v, t);
  return shape.empty() ? s : axle::expand(s, shape);
}

void check_xla_device(optional<at::Device> d, const char* op) {
  TORCH_CHECK(!d || d->type() == c10::DeviceType::XLA, "[", op, "] expected the xla device, got ", *d);
}

Tensor empty_memory_format(IntArrayRef size, optional<at::ScalarType> dtype, optional<at::Layout>,
                           optional<at::Device> device, optional<bool>, optional<at::MemoryFormat>) {
  check_xla_device(device, "empty");
  auto t = dtype_or(dtype, at::get_default_dtype_as_scalartype(), "empty");
  return wrap(filled(vec(size), 0, t));
}

Tensor empty_strided(IntArrayRef size, IntArrayRef, optional<at::ScalarType> dtype, optional<at::Layout>,
                     optional<at::Device> device, optional<bool>) {
  check_xla_device(device, "empty_strided");
  auto t = dtype_or(dtype, at::get_default_dtype_as_scalartype(), "empty_strided");
  return wrap(filled(vec(size), 0, t));
}

Tensor to_copy(const Tensor& self, optional<at::ScalarType> dtype, optional<at::Layout>, optional<at::Device> device,
               optional<bool>, bool, optional<at::MemoryFormat>) {
  at::ScalarType st = dtype.value_or(self.scalar_type());
  if (device && device->type() != c10::DeviceType::XLA) {
    TORCH_CHECK(device->is_cpu(), "[to] the xla device copies to cpu only, got ", *device);
    Tensor c = axle_to_cpu(impl_of(self, "to")->value);
    return c.scalar_type() == st ? c : c.to(st);
  }
  if (self.device().is_cpu()) {  // cpu -> xla
    Tensor c = self.scalar_type() == st ? self : self.to(st);
    return wrap(cpu_to_axle(c, "to"));
  }
  return wrap(cast_to(impl_of(self, "to")->value, st));
}

/// The value `src` has as a copy into a tensor of `like`'s shape and dtype.
axle::Tensor copy_value(const Tensor& src, const axle::Tensor& like, const char* op) {
  axle::Tensor v = is_xla(src) ? impl_of(src, op)->value : cpu_to_axle(src, op);
  v = cast_to(v, like.dtype());
  if (v.shape() != like.shape()) v = axle::expand(v, like.shape());
  return v;
}

Tensor copy_from(const Tensor& self, const Tensor& dst, bool) {
  if (is_xla(dst)) {
    AxleTensorImpl* d = impl_of(dst, "copy_");
    d->set_value(copy_value(self, d->value, "copy_"));
    return dst;
  }
  TORCH_CHECK(dst.device().is_cpu(), "[copy_] the xla device copies to cpu only, got ", dst.device());
  const_cast<Tensor&>(dst).copy_(axle_to_cpu(impl_of(self, "copy_")->value));
  return dst;
}

Tensor copy_from_and_resize(const Tensor& self, const Tensor& dst) {
  if (is_xla(dst)) {
    AxleTensorImpl* d = impl_of(dst, "copy_");
    TORCH_CHECK(d->value.numel() == 0 || d->value.shape() == vec(self.sizes()),
                "[_copy_from_and_resize] expected an empty destination or one of the source's shape");
    axle::Tensor v = is_xla(self) ? impl_of(self, "copy_")->value : cpu_to_axle(self, "copy_");
    d->reset(cast_to(v, d->value.dtype()));
    return dst;
  }
  const_cast<Tensor&>(dst).resize_(self.sizes()).copy_(axle_to_cpu(impl_of(self, "copy_")->value));
  return dst;
}

Tensor copy(const Tensor& self, const Tensor& src, bool) {
  return wrap(copy_value(src, ax(self, "copy"), "copy"));
}

Tensor clone(const Tensor& self, optional<at::MemoryFormat>) { return wrap(ax(self, "clone")); }

at::Scalar local_scalar_dense(const Tensor& self) {
  const axle::Tensor& v = impl_of(self, "item")->value;
  TORCH_CHECK(v.numel() == 1, "a Tensor with ", v.numel(), " elements cannot be converted to Scalar");
  double d = v.item();
  switch (v.dtype()) {
    case axle::DType::Float32:
    case axle::DType::BFloat16:
    case axle::DType::Float16: return at::Scalar(d);
    case axle::DType::Bool: return at::Scalar(d != 0);
    default: return at::Scalar(int64_t(d));
  }
}

Tensor fill_scalar(const Tensor& self, const at::Scalar& v) {
  axle::Tensor x = ax(self, "fill");
  return wrap(filled(x.shape(), v.toDouble(), x.dtype()));
}
Tensor& fill_scalar_(Tensor& self, const at::Scalar& v) {
  AxleTensorImpl* d = impl_of(self, "fill_");
  d->set_value(filled(d->value.shape(), v.toDouble(), d->value.dtype()));
  return self;
}
Tensor fill_tensor(const Tensor& self, const Tensor& v) {
  axle::Tensor x = ax(self, "fill"), s = cast_to(ax(v, "fill"), x.dtype());
  TORCH_CHECK(s.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", s.dim(), " dimensions.");
  return wrap(x.shape().empty() ? s : axle::expand(s, x.shape()));
}
Tensor zero(const Tensor& self) { return fill_scalar(self, 0); }
Tensor& zero_(Tensor& self) { return fill_scalar_(self, 0); }

// ---- random fills: axle's generator, seeded by torch.manual_seed (torch_xla/__init__.py) ----
Tensor uniform(const Tensor& self, double from, double to, optional<at::Generator>) {
  axle::Tensor x = ax(self, "uniform_");
  TORCH_CHECK(x.dtype() == axle::kFloat32, "[uniform_] expected a float32 tensor, got ", axle::dtype_name(x.dtype()));
  return wrap(axle::uniform(x.shape(), from, to, {.device = axle::device()}));
}
Tensor& uniform_(Tensor& self, double from, double to, optional<at::Generator> g) {
  impl_of(self, "uniform_")->set_value(ax(axle_py::uniform(self, from, to, g)));
  return self;
}
Tensor normal(const Tensor& self, double mean, double std, optional<at::Generator>) {
  axle::Tensor x = ax(self, "normal_");
  TORCH_CHECK(x.dtype() == axle::kFloat32, "[normal_] expected a float32 tensor, got ", axle::dtype_name(x.dtype()));
  axle::Tensor r = axle::randn(x.shape(), {.device = axle::device()});
  if (std != 1) r = axle::mul(r, std);
  if (mean != 0) r = axle::add(r, mean);
  return wrap(r);
}
Tensor& normal_(Tensor& self, double mean, double std, optional<at::Generator> g) {
  impl_of(self, "normal_")->set_value(ax(axle_py::normal(self, mean, std, g)));
  return self;
}
Tensor bernoulli_p(const Tensor& self, double p, optional<at::Generator>) {
  axle::Tensor x = ax(self, "bernoulli");
  axle::Tensor u = axle::rand(x.shape(), {.device = axle::device()});
  return wrap(cast_to(axle::lt(u, p), x.dtype()));
}

// ---- views, as values ----
axle::Shape infer_size(IntArrayRef size, int64_t numel, const char* op) {
  axle::Shape s = vec(size);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TORCH_CHECK(infer < 0, "[", op, "] only one dimension can be inferred");
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    TORCH_CHECK(known != 0 && numel % known == 0, "shape '", size, "' is invalid for input of size ", numel);
    s[size_t(infer)] = numel / known;
  } else {
    TORCH_CHECK(known == numel, "shape '", size, "' is invalid for input of size ", numel);
  }
  return s;
}

Tensor view(const Tensor& self, IntArrayRef size) {
  axle::Tensor x = ax(self, "view");
  return wrap(axle::reshape(x, infer_size(size, x.numel(), "view")));
}
Tensor reshape_alias(const Tensor& self, IntArrayRef size, IntArrayRef) { return view(self, size); }

/// as_strided over the row-major elements of x: a reshape where it is one, else a gather of
/// the flat elements at the strided offsets (a constant index).
axle::Tensor as_strided_value(const axle::Tensor& x, IntArrayRef size, IntArrayRef stride, int64_t offset) {
  axle::Shape s = vec(size);
  int64_t numel = 1;
  for (int64_t v : s) numel *= v;
  bool contiguous = true;
  int64_t expect = 1;
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    if (s[size_t(d)] != 1 && stride[size_t(d)] != expect) contiguous = false;
    expect *= s[size_t(d)];
  }
  axle::Tensor flat = axle::reshape(x, {x.numel()});
  if (contiguous) {
    TORCH_CHECK(offset + numel <= x.numel(), "[as_strided] size ", size, " at offset ", offset,
                " reads past the ", x.numel(), " elements of its input");
    return axle::reshape(axle::slice(flat, 0, offset, offset + numel), s);
  }
  Tensor idx = at::full({}, offset, at::kLong);
  for (size_t d = 0; d < s.size(); ++d) {
    std::vector<int64_t> shp(s.size(), 1);
    shp[d] = s[d];
    idx = idx + at::arange(s[d], at::kLong).mul(stride[d]).view(shp);
  }
  idx = idx.reshape({-1});
  TORCH_CHECK(numel == 0 || idx.max().item<int64_t>() < x.numel(), "[as_strided] strides ", stride,
              " read past the ", x.numel(), " elements of its input");
  return axle::reshape(axle::index_select(flat, 0, cpu_to_axle(idx, "as_strided")), s);
}

Tensor as_strided(const Tensor& self, IntArrayRef size, IntArrayRef stride, optional<int64_t> offset) {
  return wrap(as_strided_value(ax(self, "as_strided"), size, stride, offset.value_or(0)));
}

Tensor as_strided_scatter(const Tensor& self, const Tensor& src, IntArrayRef size, IntArrayRef stride,
                          optional<int64_t> offset) {
  axle::Tensor x = ax(self, "as_strided_scatter");
  Tensor idx = at::full({}, offset.value_or(0), at::kLong);
  for (size_t d = 0; d < size.size(); ++d) {
    std::vector<int64_t> shp(size.size(), 1);
    shp[d] = size[d];
    idx = idx + at::arange(size[d], at::kLong).mul(stride[d]).view(shp);
  }
  idx = idx.expand(size).reshape({-1}).contiguous();
  axle::Tensor flat = axle::reshape(x, {x.numel()});
  axle::Tensor v = axle::reshape(cast_to(ax(src, "as_strided_scatter"), x.dtype()), {idx.numel()});
  return wrap(axle::reshape(axle::scatter(flat, 0, cpu_to_axle(idx, "as_strided_scatter"), v), x.shape()));
}

/// The transpose of a 2-D tensor, remembering its source (bridge.h: transposed_of).
Tensor transpose_2d(const axle::Tensor& x) {
  Tensor r = wrap(axle::transpose(x, 0, 1));
  impl_of(r, "t")->transposed_of = x;
  return r;
}
Tensor t(const Tensor& self) {
  axle::Tensor x = ax(self, "t");
  TORCH_CHECK(x.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", x.dim(), "D");
  return x.dim() < 2 ? wrap(x) : transpose_2d(x);
}
Tensor transpose(const Tensor& self, int64_t d0, int64_t d1) {
  axle::Tensor x = ax(self, "transpose");
  if (x.dim() == 0) return wrap(x);
  if (x.dim() == 2 && c10::maybe_wrap_dim(d0, 2) != c10::maybe_wrap_dim(d1, 2)) return transpose_2d(x);
  return wrap(axle::transpose(x, d0, d1));
}
Tensor permute(const Tensor& self, IntArrayRef dims) { return wrap(axle::permute(ax(self, "permute"), vec(dims))); }
Tensor expand(const Tensor& self, IntArrayRef size, bool) {
  axle::Tensor x = ax(self, "expand");
  axle::Shape s = vec(size);
  TORCH_CHECK(s.size() >= size_t(x.dim()), "expand: the number of sizes provided (", s.size(),
              ") must be greater or equal to the number of dimensions in the tensor (", x.dim(), ")");
  size_t lead = s.size() - size_t(x.dim());
  for (size_t i = lead; i < s.size(); ++i)
    if (s[i] == -1) s[i] = x.shape()[i - lead];
  return wrap(s == x.shape() ? x : axle::expand(x, s));
}
Tensor select(const Tensor& self, int64_t dim, int64_t index) {
  axle::Tensor x = ax(self, "select");
  TORCH_CHECK(x.dim() > 0, "select() cannot be applied to a 0-dim tensor.");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  int64_t n = x.size(dim);
  TORCH_CHECK_INDEX(index >= -n && index < n, "select(): index ", index, " out of range for tensor of size ",
                    self.sizes(), " at dimension ", dim);
  if (index < 0) index += n;
  return wrap(axle::squeeze(axle::slice(x, dim, index, index + 1), dim));
}
void clamp_slice(int64_t n, optional<int64_t>& start, optional<int64_t>& end, int64_t& s, int64_t& e) {
  s = start.value_or(0);
  e = end.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
}
Tensor slice(const Tensor& self, int64_t dim, optional<int64_t> start, optional<int64_t> end, int64_t step) {
  axle::Tensor x = ax(self, "slice");
  TORCH_CHECK(step > 0, "slice step must be positive");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  int64_t s, e;
  clamp_slice(x.size(dim), start, end, s, e);
  if (s == 0 && e == x.size(dim) && step == 1) return wrap(x);
  return wrap(axle::slice(x, dim, s, e, step));
}
Tensor unsqueeze(const Tensor& self, int64_t dim) { return wrap(axle::unsqueeze(ax(self, "unsqueeze"), dim)); }
Tensor squeeze(const Tensor& self) { return wrap(axle::squeeze(ax(self, "squeeze"))); }
Tensor squeeze_dim(const Tensor& self, int64_t dim) {
  axle::Tensor x = ax(self, "squeeze");
  if (x.dim() == 0) return wrap(x);
  dim = c10::maybe_wrap_dim(dim, x.dim());
  return wrap(x.size(dim) == 1 ? axle::squeeze(x, dim) : x);
}
Tensor squeeze_dims(const Tensor& self, IntArrayRef dims) {
  axle::Tensor x = ax(self, "squeeze");
  if (x.dim() == 0) return wrap(x);
  std::vector<int64_t> ds;
  for (int64_t d : dims) ds.push_back(c10::maybe_wrap_dim(d, x.dim()));
  std::sort(ds.rbegin(), ds.rend());
  for (int64_t d : ds)
    if (x.size(d) == 1) x = axle::squeeze(x, d);
  return wrap(x);
}
Tensor alias(const Tensor& self) { return wrap(ax(self, "alias")); }
std::vector<Tensor> split_with_sizes(const Tensor& self, IntArrayRef sizes, int64_t dim) {
  axle::Tensor x = ax(self, "split");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  TORCH_CHECK(total == x.size(dim), "split_with_sizes expects split_sizes to sum exactly to ", x.size(dim),
              " (input tensor's size at dimension ", dim, "), but got split_sizes=", sizes);
  std::vector<axle::Tensor> r;
  int64_t at = 0;
  for (int64_t s : sizes) {
    r.push_back(axle::slice(x, dim, at, at + s));
    at += s;
  }
  return wrap(r);
}
std::vector<Tensor> split(const Tensor& self, int64_t size, int64_t dim) {
  axle::Tensor x = ax(self, "split");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  TORCH_CHECK(size > 0 || x.size(dim) == 0, "split expects split_size be non-negative, but got split_size=", size);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < x.size(dim); at += size) sizes.push_back(std::min(size, x.size(dim) - at));
  if (sizes.empty()) sizes.push_back(0);
  return axle_py::split_with_sizes(self, sizes, dim);
}
std::vector<Tensor> unbind(const Tensor& self, int64_t dim) {
  axle::Tensor x = ax(self, "unbind");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  std::vector<axle::Tensor> r;
  for (int64_t i = 0; i < x.size(dim); ++i) r.push_back(axle::squeeze(axle::slice(x, dim, i, i + 1), dim));
  return wrap(r);
}

// ---- writes through views (functionalization's *_scatter) ----
Tensor slice_scatter(const Tensor& self, const Tensor& src, int64_t dim, optional<int64_t> start, optional<int64_t> end,
                     int64_t step) {
  axle::Tensor x = ax(self, "slice_scatter"), v = cast_to(ax(src, "slice_scatter"), ax(self).dtype());
  dim = c10::maybe_wrap_dim(dim, x.dim());
  int64_t s, e;
  clamp_slice(x.size(dim), start, end, s, e);
  if (step == 1) {
    std::vector<axle::Tensor> parts;
    if (s > 0) parts.push_back(axle::slice(x, dim, 0, s));
    parts.push_back(v);
    if (e < x.size(dim)) parts.push_back(axle::slice(x, dim, e, x.size(dim)));
    return wrap(parts.size() == 1 ? v : axle::cat(parts, dim));
  }
  // A strided slice: scatter along dim at s, s + step, ...
  axle::Shape ishape = v.shape();
  Tensor idx = at::arange(s, e, step, at::kLong);
  std::vector<int64_t> shp(size_t(x.dim()), 1);
  shp[size_t(dim)] = idx.numel();
  idx = idx.view(shp).expand(ishape).contiguous();
  return wrap(axle::scatter(x, dim, cpu_to_axle(idx, "slice_scatter"), v));
}
Tensor select_scatter(const Tensor& self, const Tensor& src, int64_t dim, int64_t index) {
  axle::Tensor x = ax(self, "select_scatter");
  dim = c10::maybe_wrap_dim(dim, x.dim());
  if (index < 0) index += x.size(dim);
  Tensor u = wrap(axle::unsqueeze(ax(src, "select_scatter"), dim));
  return axle_py::slice_scatter(self, u, dim, index, index + 1, 1);
}

Tensor lift_fresh_copy(const Tensor& self) { return wrap(ax(self, "lift_fresh_copy")); }

// ---- arange into an xla tensor (GPT position ids: torch.arange(T, device=...)) ----
Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, Tensor& out) {
  Tensor c = at::arange(start, end, step, at::TensorOptions().dtype(out.scalar_type()));
  AxleTensorImpl* d = impl_of(out, "arange");
  d->reset(cpu_to_axle(c, "arange"));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, XLA, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_to_copy", TORCH_FN(to_copy));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("copy", TORCH_FN(copy));
  m.impl("clone", TORCH_FN(clone));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("fill.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar_));
  m.impl("fill.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero", TORCH_FN(zero));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("uniform", TORCH_FN(uniform));
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("normal_functional", TORCH_FN(normal));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("bernoulli.p", TORCH_FN(bernoulli_p));
  m.impl("view", TORCH_FN(view));
  m.impl("view_copy", TORCH_FN(view));
  m.impl("_unsafe_view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("_reshape_alias_copy", TORCH_FN(reshape_alias));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("as_strided_copy", TORCH_FN(as_strided));
  m.impl("as_strided_scatter", TORCH_FN(as_strided_scatter));
  m.impl("t", TORCH_FN(t));
  m.impl("t_copy", TORCH_FN(t));
  m.impl("transpose.int", TORCH_FN(transpose));
  m.impl("transpose_copy.int", TORCH_FN(transpose));
  m.impl("permute", TORCH_FN(permute));
  m.impl("permute_copy", TORCH_FN(permute));
  m.impl("expand", TORCH_FN(expand));
  m.impl("expand_copy", TORCH_FN(expand));
  m.impl("select.int", TORCH_FN(select));
  m.impl("select_copy.int", TORCH_FN(select));
  m.impl("slice.Tensor", TORCH_FN(slice));
  m.impl("slice_copy.Tensor", TORCH_FN(slice));
  m.impl("unsqueeze", TORCH_FN(unsqueeze));
  m.impl("unsqueeze_copy", TORCH_FN(unsqueeze));
  m.impl("squeeze", TORCH_FN(squeeze));
  m.impl("squeeze_copy", TORCH_FN(squeeze));
  m.impl("squeeze.dim", TORCH_FN(squeeze_dim));
  m.impl("squeeze_copy.dim", TORCH_FN(squeeze_dim));
  m.impl("squeeze.dims", TORCH_FN(squeeze_dims));
  m.impl("squeeze_copy.dims", TORCH_FN(squeeze_dims));
  m.impl("alias", TORCH_FN(alias));
  m.impl("alias_copy", TORCH_FN(alias));
  m.impl("detach_copy", TORCH_FN(alias));
  m.impl("split_with_sizes_copy", TORCH_FN(split_with_sizes));
  m.impl("split_with_sizes", TORCH_FN(split_with_sizes));
  m.impl("split_copy.Tensor", TORCH_FN(split));
  m.impl("split.Tensor", TORCH_FN(split));
  m.impl("unbind_copy.int", TORCH_FN(unbind));
  m.impl("unbind.int", TORCH_FN(unbind));
  m.impl("slice_scatter", TORCH_FN(slice_scatter));
  m.impl("select_scatter", TORCH_FN(select_scatter));
  m.impl("lift_fresh_copy", TORCH_FN(lift_fresh_copy));
  m.impl("arange.start_out", TORCH_FN(arange_out));
}

}  // namespace axle_py
