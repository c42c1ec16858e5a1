// Shape ops: reshape, permute, expand, slice (views on cpu, no copy: their kernels are in
// src/backend/cpu/kernels/shape.cpp); composites (view, transpose, squeeze, unsqueeze,
// flatten, narrow, stack) are built from them.
#include <numeric>
#include <optional>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/shape.h"

namespace axle::ops {

// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape) {
  Shape st(shape.size());
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(shape);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[size_t(d)];
    if (d == 0 || (old_shape[size_t(d - 1)] != 1 && old_strides[size_t(d - 1)] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[size_t(view_d)] == 1)) {
        st[size_t(view_d)] = view_numel * chunk_base;
        view_numel *= shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = old_strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

namespace {

Shape resolve_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      AXLE_CHECK(infer < 0, "[", op, "] expected at most one -1 in shape ", shape_str(shape));
      infer = int64_t(i);
    } else {
      AXLE_CHECK(out[i] >= 0, "[", op, "] expected non-negative sizes, got ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    AXLE_CHECK(known != 0 && numel % known == 0, "[", op, "] cannot infer -1 in ", shape_str(shape), " for ",
               numel, " elements");
    out[size_t(infer)] = numel / known;
  }
  AXLE_CHECK(shape_numel(out) == numel, "[", op, "] expected a shape with ", numel, " elements, got ",
             shape_str(shape));
  return out;
}

// ---- reshape
std::vector<Meta> reshape_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "reshape", "input");
  AXLE_CHECK(shape_numel(a.ints) == in[0].numel(), "[reshape] expected a shape with ", in[0].numel(),
             " elements, got ", shape_str(a.ints));
  return {{a.ints, in[0].dtype()}};
}
Tensors reshape_vjp(const VjpArgs& v) { return {reshape(v.grad[0], v.in[0].shape())}; }

// ---- permute
std::vector<Meta> permute_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "permute", "input");
  const int64_t n = in[0].dim();
  AXLE_CHECK(int64_t(a.ints.size()) == n, "[permute] expected ", n, " dims, got ", a.ints.size());
  std::vector<bool> seen(size_t(n), false);
  Shape s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = a.ints[size_t(i)];
    AXLE_CHECK(d >= 0 && d < n && !seen[size_t(d)], "[permute] expected a permutation of 0..", n - 1, ", got ",
               shape_str(a.ints));
    seen[size_t(d)] = true;
    s[size_t(i)] = in[0].shape()[size_t(d)];
  }
  return {{s, in[0].dtype()}};
}
Tensors permute_vjp(const VjpArgs& v) {
  Shape inv(v.attrs.ints.size());
  for (size_t i = 0; i < inv.size(); ++i) inv[size_t(v.attrs.ints[i])] = int64_t(i);
  return {permute(v.grad[0], inv)};
}

// ---- expand
std::vector<Meta> expand_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "expand", "input");
  const Shape& xs = in[0].shape();
  const Shape& s = a.ints;
  AXLE_CHECK(s.size() >= xs.size(), "[expand] expected at least ", xs.size(), " dims, got ", shape_str(s));
  const size_t off = s.size() - xs.size();
  for (size_t i = 0; i < xs.size(); ++i)
    AXLE_CHECK(xs[i] == s[i + off] || xs[i] == 1, "[expand] cannot expand ", shape_str(xs), " to ", shape_str(s));
  return {{s, in[0].dtype()}};
}
Tensors expand_vjp(const VjpArgs& v) { return {sum_to(v.grad[0], v.in[0].shape())}; }

}  // namespace

// ---- slice: ints {dim, start, end, step}, already clamped
Shape slice_shape(const Shape& s, const Attrs& a) {
  Shape out = s;
  int64_t len = a.ints[2] - a.ints[1];
  out[size_t(a.ints[0])] = len <= 0 ? 0 : (len + a.ints[3] - 1) / a.ints[3];
  return out;
}

namespace {
std::vector<Meta> slice_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "slice", "input");
  AXLE_CHECK(a.ints.size() == 4 && a.ints[0] >= 0 && a.ints[0] < in[0].dim() && a.ints[3] > 0,
             "[slice] bad attributes");
  return {{slice_shape(in[0].shape(), a), in[0].dtype()}};
}
Tensors slice_vjp(const VjpArgs& v) {
  Attrs b{.ints = v.attrs.ints};
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::SliceBackward, {v.grad[0]}, b)};
}

// ---- slice_backward: zeros(input shape) with grad written into the slice
std::vector<Meta> slice_backward_infer(const Tensors& in, const Attrs& a) {
  return {{Shape(a.ints.begin() + 4, a.ints.end()), in[0].dtype()}};
}

}  // namespace

void register_shape_ops() {
  register_op(OpKind::Reshape, {.infer = reshape_infer, .vjp = reshape_vjp});
  register_op(OpKind::Permute, {.infer = permute_infer, .vjp = permute_vjp});
  register_op(OpKind::Expand, {.infer = expand_infer, .vjp = expand_vjp});
  register_op(OpKind::Slice, {.infer = slice_infer, .vjp = slice_vjp});
  register_op(OpKind::SliceBackward, {.infer = slice_backward_infer});
}

bool can_view(const Tensor& x, const Shape& shape) {
  return view_strides(x.shape(), x.strides(), shape).has_value();
}
Shape resolve(const Shape& shape, int64_t numel, const char* op) { return resolve_shape(shape, numel, op); }

}  // namespace axle::ops

namespace axle {
using ops::call1;
using ops::OpKind;

Tensor reshape(const Tensor& x, const Shape& shape) {
  ops::check_defined(x, "reshape", "input");
  Shape s = ops::resolve(shape, x.numel(), "reshape");
  return call1(OpKind::Reshape, {x}, {.ints = s});
}
Tensor view(const Tensor& x, const Shape& shape) {
  ops::check_defined(x, "view", "input");
  Shape s = ops::resolve(shape, x.numel(), "view");
  AXLE_CHECK(!x.device().is_cpu() || ops::can_view(x, s), "[view] cannot view ", shape_str(x.shape()),
             " with strides ", shape_str(x.strides()), " as ", shape_str(s), " without a copy; use reshape()");
  return call1(OpKind::Reshape, {x}, {.ints = s});
}
Tensor permute(const Tensor& x, const Shape& dims) {
  ops::check_defined(x, "permute", "input");
  Shape d = dims;
  for (auto& v : d) v = wrap_dim(v, x.dim(), "permute");
  return call1(OpKind::Permute, {x}, {.ints = d});
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  ops::check_defined(x, "transpose", "input");
  Shape p(static_cast<size_t>(x.dim()));
  std::iota(p.begin(), p.end(), 0);
  if (x.dim() == 0) return x;
  std::swap(p[size_t(wrap_dim(d0, x.dim(), "transpose"))], p[size_t(wrap_dim(d1, x.dim(), "transpose"))]);
  return call1(OpKind::Permute, {x}, {.ints = p});
}
Tensor expand(const Tensor& x, const Shape& shape) {
  ops::check_defined(x, "expand", "input");
  Shape s = shape;
  const int64_t off = int64_t(s.size()) - x.dim();
  AXLE_CHECK(off >= 0, "[expand] expected at least ", x.dim(), " dims, got ", shape_str(shape));
  for (int64_t i = 0; i < int64_t(s.size()); ++i)
    if (s[size_t(i)] == -1) {
      AXLE_CHECK(i >= off, "[expand] -1 is not allowed in a new leading dimension");
      s[size_t(i)] = x.shape()[size_t(i - off)];
    }
  return call1(OpKind::Expand, {x}, {.ints = s});
}
Tensor squeeze(const Tensor& x, int64_t dim) {
  ops::check_defined(x, "squeeze", "input");
  if (x.dim() == 0) return reshape(x, {});
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[size_t(d)] != 1) return reshape(x, x.shape());
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return reshape(x, s);
}
Tensor squeeze(const Tensor& x) {
  ops::check_defined(x, "squeeze", "input");
  Shape s;
  for (int64_t v : x.shape())
    if (v != 1) s.push_back(v);
  return reshape(x, s);
}
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  ops::check_defined(x, "unsqueeze", "input");
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}
Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  ops::check_defined(x, "flatten", "input");
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s0 = wrap_dim(start, x.dim(), "flatten"), e0 = wrap_dim(end, x.dim(), "flatten");
  AXLE_CHECK(s0 <= e0, "[flatten] expected start <= end, got ", start, " and ", end);
  Shape s(x.shape().begin(), x.shape().begin() + s0);
  int64_t p = 1;
  for (int64_t i = s0; i <= e0; ++i) p *= x.shape()[size_t(i)];
  s.push_back(p);
  s.insert(s.end(), x.shape().begin() + e0 + 1, x.shape().end());
  return reshape(x, s);
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  ops::check_defined(x, "slice", "input");
  AXLE_CHECK(x.dim() > 0, "[slice] expected at least a 1-D tensor, got 0-D");
  AXLE_CHECK(step > 0, "[slice] expected a positive step, got ", step);
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  int64_t n = x.shape()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return call1(OpKind::Slice, {x}, {.ints = {d, start, end, step}});
}
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  ops::check_defined(x, "narrow", "input");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  int64_t n = x.shape()[size_t(d)];
  if (start < 0) start += n;
  AXLE_CHECK(start >= 0 && length >= 0 && start + length <= n, "[narrow] expected start and length within size ",
             n, " of dim ", d, ", got start ", start, " length ", length);
  return call1(OpKind::Slice, {x}, {.ints = {d, start, start + length, 1}});
}
Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  AXLE_CHECK(!xs.empty(), "[stack] expected at least one tensor, got none");
  ops::check_defined(xs[0], "stack", "tensors[0]");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  u.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ops::check_defined(xs[i], "stack", "tensors[i]");
    AXLE_CHECK(xs[i].shape() == xs[0].shape(), "[stack] expected all tensors of shape ", shape_str(xs[0].shape()),
               ", got ", shape_str(xs[i].shape()), " at index ", i);
    u.push_back(unsqueeze(xs[i], d));
  }
  return cat(u, d);
}

}  // namespace axle
