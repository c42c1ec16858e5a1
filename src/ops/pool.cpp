// 2-D pooling: max (with a workspace for backward), average, adaptive average: shape rules,
// vjps and the public functions. The kernels (axle's own and oneDNN's) are in
// src/backend/cpu/kernels/pool.cpp.
#include <algorithm>
#include <cmath>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/pool.h"

namespace axle::ops {

PoolGeom pool_geom(const Shape& x, const PoolWindow& c, const char* op) {
  AXLE_CHECK(c.kh > 0 && c.kw > 0, "[", op, "] expected a positive kernel size, got ", c.kh, "x", c.kw);
  AXLE_CHECK(c.sh > 0 && c.sw > 0, "[", op, "] expected positive strides, got ", c.sh, ", ", c.sw);
  AXLE_CHECK(c.ph >= 0 && c.pw >= 0 && 2 * c.ph <= c.kh && 2 * c.pw <= c.kw, "[", op,
             "] expected padding between 0 and half the kernel size, got ", c.ph, ", ", c.pw, " for kernel ", c.kh,
             "x", c.kw);
  PoolGeom g{x[0], x[1], x[2], x[3], 0, 0};
  AXLE_CHECK(g.H + 2 * c.ph >= c.kh && g.W + 2 * c.pw >= c.kw, "[", op, "] input ", shape_str(x), " (padded by ",
             c.ph, ", ", c.pw, ") is smaller than the kernel ", c.kh, "x", c.kw);
  g.OH = (g.H + 2 * c.ph - c.kh) / c.sh + 1;
  g.OW = (g.W + 2 * c.pw - c.kw) / c.sw + 1;
  return g;
}

namespace {

PoolWindow window_from(const Attrs& a) { return {a.ints[0], a.ints[1], a.ints[2], a.ints[3], a.ints[4], a.ints[5]}; }

void check_input(const Tensor& x, const char* op) {
  check_defined(x, op, "input");
  AXLE_CHECK(x.dim() == 4, "[", op, "] expected a 4-D input [N, C, H, W], got ", shape_str(x.shape()));
  AXLE_CHECK(x.dtype() == kFloat32, "[", op, "] expected a float32 input, got ", x.dtype());
}

// ------------------------------------------------------------------ max
std::vector<Meta> max_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "max_pool2d");
  AXLE_CHECK(a.ints.size() == 6, "[max_pool2d] expected 6 int attributes, got ", a.ints.size());
  PoolWindow c = window_from(a);
  PoolGeom g = pool_geom(in[0].shape(), c, "max_pool2d");
  Shape s{g.N, g.C, g.OH, g.OW};
  return {{s, kFloat32}, {s, ws_dtype(c)}};
}
Tensors max_vjp(const VjpArgs& v) {
  return {call1(OpKind::MaxPool2dBackward, {v.grad[0], v.in[0], v.out[1]}, v.attrs)};
}

std::vector<Meta> max_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "max_pool2d_backward", "grad");
  check_input(in[1], "max_pool2d_backward");
  check_defined(in[2], "max_pool2d_backward", "workspace");
  // The relu field (ops.def: FLAG(relu)) is set when the compiler fused the relu backward that
  // followed (a 4th input: max_pool2d's output y; result: the gradient where x > 0, else 0).
  const bool relu = attr::MaxPool2dBackward::of(a).relu;  // checks the attribute count
  PoolWindow c = window_from(a);
  PoolGeom g = pool_geom(in[1].shape(), c, "max_pool2d_backward");
  Shape s{g.N, g.C, g.OH, g.OW};
  AXLE_CHECK(in[2].shape() == s && in[2].dtype() == ws_dtype(c), "[max_pool2d_backward] expected a workspace ",
             shape_str(s), " ", ws_dtype(c), " from max_pool2d, got ", shape_str(in[2].shape()), " ", in[2].dtype());
  AXLE_CHECK(in[0].dtype() == kFloat32, "[max_pool2d_backward] expected a float32 grad, got ", in[0].dtype());
  if (relu) {
    AXLE_CHECK(in.size() == 4 && in[3].defined() && in[3].shape() == s && in[3].dtype() == kFloat32,
               "[max_pool2d_backward] a fused relu backward expects max_pool2d's output ", shape_str(s),
               " float32 as 4th input");
  }
  return {{in[1].shape(), kFloat32}};
}

// ------------------------------------------------------------------ avg
std::vector<Meta> avg_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "avg_pool2d");
  AXLE_CHECK(a.ints.size() == 7, "[avg_pool2d] expected 7 int attributes, got ", a.ints.size());
  PoolGeom g = pool_geom(in[0].shape(), window_from(a), "avg_pool2d");
  return {{{g.N, g.C, g.OH, g.OW}, kFloat32}};
}
Tensors avg_vjp(const VjpArgs& v) {
  Attrs b = v.attrs;
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::AvgPool2dBackward, {v.grad[0]}, b)};
}
std::vector<Meta> avg_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "avg_pool2d_backward", "grad");
  AXLE_CHECK(a.ints.size() == 11, "[avg_pool2d_backward] expected 11 int attributes, got ", a.ints.size());
  AXLE_CHECK(in[0].dim() == 4 && in[0].dtype() == kFloat32, "[avg_pool2d_backward] expected a 4-D float32 grad, got ",
             shape_str(in[0].shape()), " ", in[0].dtype());
  return {{Shape(a.ints.begin() + 7, a.ints.end()), kFloat32}};
}

std::vector<Meta> adaptive_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "adaptive_avg_pool2d");
  AXLE_CHECK(a.ints.size() == 2 && a.ints[0] > 0 && a.ints[1] > 0,
             "[adaptive_avg_pool2d] expected a positive output size (oh, ow), got ", shape_str(a.ints));
  const Shape& s = in[0].shape();
  AXLE_CHECK(s[2] > 0 && s[3] > 0, "[adaptive_avg_pool2d] expected a non-empty spatial size, got ", shape_str(s));
  return {{{s[0], s[1], a.ints[0], a.ints[1]}, kFloat32}};
}

Tensors adaptive_vjp(const VjpArgs& v) {
  const Shape& s = v.in[0].shape();
  return {call1(OpKind::AdaptiveAvgPool2dBackward, {v.grad[0]}, {.ints = {s[2], s[3]}, .floats = {}})};
}

std::vector<Meta> adaptive_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "adaptive_avg_pool2d_backward", "grad");
  AXLE_CHECK(a.ints.size() == 2 && a.ints[0] > 0 && a.ints[1] > 0,
             "[adaptive_avg_pool2d_backward] expected the input size (H, W), got ", shape_str(a.ints));
  AXLE_CHECK(in[0].dim() == 4 && in[0].dtype() == kFloat32,
             "[adaptive_avg_pool2d_backward] expected a 4-D float32 grad, got ", shape_str(in[0].shape()), " ",
             in[0].dtype());
  const Shape& s = in[0].shape();
  return {{{s[0], s[1], a.ints[0], a.ints[1]}, kFloat32}};
}

}  // namespace

void register_pool_ops() {
  register_op(OpKind::MaxPool2d, {.infer = max_infer, .vjp = max_vjp});
  register_op(OpKind::MaxPool2dBackward, {.infer = max_bwd_infer});
  register_op(OpKind::AvgPool2d, {.infer = avg_infer, .vjp = avg_vjp});
  register_op(OpKind::AvgPool2dBackward, {.infer = avg_bwd_infer});
  register_op(OpKind::AdaptiveAvgPool2d, {.infer = adaptive_infer, .vjp = adaptive_vjp});
  register_op(OpKind::AdaptiveAvgPool2dBackward, {.infer = adaptive_bwd_infer});
}

}  // namespace axle::ops

namespace axle {
namespace {
// Unbatched [C, H, W] inputs run as a batch of one, as in PyTorch.
template <class F>
Tensor batched(const Tensor& x, const char* op, F f) {
  ops::check_defined(x, op, "input");
  AXLE_CHECK(x.dim() == 3 || x.dim() == 4, "[", op, "] expected a 3-D or 4-D input, got ", shape_str(x.shape()));
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  return f(x);
}
std::vector<int64_t> pool_ints(const Pool2dOptions& o, const char* op) {
  std::vector<int64_t> s = o.stride.empty() ? o.kernel : o.stride;
  AXLE_CHECK(o.kernel.size() == 2 && s.size() == 2 && o.padding.size() == 2, "[", op,
             "] expected 2 values each for kernel, stride and padding, got ", o.kernel.size(), ", ", s.size(), ", ",
             o.padding.size());
  AXLE_CHECK(!o.ceil_mode && o.dilation == std::vector<int64_t>({1, 1}), "[", op,
             "] ceil_mode and dilation are not implemented yet");
  return {o.kernel[0], o.kernel[1], s[0], s[1], o.padding[0], o.padding[1]};
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  auto ints = pool_ints(o, "max_pool2d");
  return batched(x, "max_pool2d", [&](const Tensor& t) { return ops::call(ops::OpKind::MaxPool2d, {t}, {.ints = ints, .floats = {}})[0]; });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) {
  auto ints = pool_ints(o, "avg_pool2d");
  ints.push_back(o.count_include_pad ? 1 : 0);
  return batched(x, "avg_pool2d", [&](const Tensor& t) { return ops::call1(ops::OpKind::AvgPool2d, {t}, {.ints = ints, .floats = {}}); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  AXLE_CHECK(output_size.size() == 2, "[adaptive_avg_pool2d] expected an output size of 2 values, got ",
             output_size.size());
  return batched(x, "adaptive_avg_pool2d", [&](const Tensor& t) {
    return ops::call1(ops::OpKind::AdaptiveAvgPool2d, {t}, {.ints = {output_size[0], output_size[1]}, .floats = {}});
  });
}

}  // namespace axle
