// 2-D pooling: max (with a workspace for backward), average, adaptive average: shape rules,
// vjps and the public functions. The kernels (axle's own and oneDNN's) are in
// src/backend/cpu/kernels/pool.cpp.
#include <algorithm>
#include <cmath>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/pool.h"

namespace axle::ops {

namespace {
// PyTorch's output size along one dim: floor (or ceil) of the window count, where with ceil
// a last window starting at or past the input's end plus its left padding is dropped.
int64_t out_size(int64_t in, int64_t k_ext, int64_t s, int64_t p, bool ceil) {
  const int64_t num = in + 2 * p - k_ext + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;  // PyTorch's div_rtn: floor
  if (o <= 0) return 0;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}
}  // namespace

PoolGeom pool_geom(const Shape& x, const PoolWindow& c, const char* op) {
  AXLE_CHECK(c.kh > 0 && c.kw > 0, "[", op, "] expected a positive kernel size, got ", c.kh, "x", c.kw);
  AXLE_CHECK(c.sh > 0 && c.sw > 0, "[", op, "] expected positive strides, got ", c.sh, ", ", c.sw);
  AXLE_CHECK(c.dh > 0 && c.dw > 0, "[", op, "] expected positive dilation, got ", c.dh, ", ", c.dw);
  AXLE_CHECK(c.ph >= 0 && c.pw >= 0 && 2 * c.ph <= c.kh && 2 * c.pw <= c.kw, "[", op,
             "] expected padding between 0 and half the kernel size, got ", c.ph, ", ", c.pw, " for kernel ", c.kh,
             "x", c.kw);
  AXLE_CHECK(x.size() == 4, "[", op, "] expected a 4-D input [N, C, H, W], got ", shape_str(x));
  PoolGeom g{x[0], x[1], x[2], x[3], 0, 0};
  AXLE_CHECK(g.H > 0 && g.W > 0, "[", op, "] expected a non-empty spatial size, got input ", shape_str(x));
  g.OH = out_size(g.H, c.eh(), c.sh, c.ph, c.ceil);
  g.OW = out_size(g.W, c.ew(), c.sw, c.pw, c.ceil);
  AXLE_CHECK(g.OH > 0 && g.OW > 0, "[", op, "] input ", shape_str(x), " (padded by ", c.ph, ", ", c.pw,
             ") is smaller than the ", c.dh > 1 || c.dw > 1 ? "dilated " : "", "kernel ", c.eh(), "x", c.ew());
  return g;
}

namespace {

PoolWindow max_window(const Attrs& a) {
  const attr::MaxPool2d m = attr::MaxPool2d::of(a);
  return {m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, m.dilation_h, m.dilation_w, m.ceil_mode};
}
// max_pool2d_backward's attributes: max_pool2d's and the relu flag.
PoolWindow max_bwd_window(const Attrs& a) {
  const attr::MaxPool2dBackward m = attr::MaxPool2dBackward::of(a);
  return {m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, m.dilation_h, m.dilation_w, m.ceil_mode};
}
PoolWindow avg_window(const Attrs& a) {
  const attr::AvgPool2d m = attr::AvgPool2d::of(a);
  return {m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, 1, 1, m.ceil_mode};
}
PoolWindow avg_bwd_window(const Attrs& a) {
  const attr::AvgPool2dBackward m = attr::AvgPool2dBackward::of(a);
  return {m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, 1, 1, m.ceil_mode};
}

void check_input(const Tensor& x, const char* op) {
  check_defined(x, op, "input");
  AXLE_CHECK(x.dim() == 4, "[", op, "] expected a 4-D input [N, C, H, W], got ", shape_str(x.shape()));
  AXLE_CHECK(is_float_kernel_dtype(x.dtype()), "[", op, "] expected a float32 or bfloat16 input, got ", x.dtype());
}

// ------------------------------------------------------------------ max
std::vector<Meta> max_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "max_pool2d");
  AXLE_CHECK(a.ints.size() == 9, "[max_pool2d] expected 9 int attributes, got ", a.ints.size());
  PoolWindow c = max_window(a);
  PoolGeom g = pool_geom(in[0].shape(), c, "max_pool2d");
  Shape s{g.N, g.C, g.OH, g.OW};
  return {{s, in[0].dtype()}, {s, ws_dtype(c)}};
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
  PoolWindow c = max_bwd_window(a);
  PoolGeom g = pool_geom(in[1].shape(), c, "max_pool2d_backward");
  Shape s{g.N, g.C, g.OH, g.OW};
  AXLE_CHECK(in[2].shape() == s && in[2].dtype() == ws_dtype(c), "[max_pool2d_backward] expected a workspace ",
             shape_str(s), " ", ws_dtype(c), " from max_pool2d, got ", shape_str(in[2].shape()), " ", in[2].dtype());
  AXLE_CHECK(in[0].dtype() == in[1].dtype(), "[max_pool2d_backward] expected a ", in[1].dtype(), " grad (the input's dtype), got ", in[0].dtype());
  if (relu) {
    AXLE_CHECK(in.size() == 4 && in[3].defined() && in[3].shape() == s && in[3].dtype() == in[1].dtype(),
               "[max_pool2d_backward] a fused relu backward expects max_pool2d's output ", shape_str(s),
               " float32 as 4th input");
  }
  return {{in[1].shape(), in[1].dtype()}};
}

// ------------------------------------------------------------------ avg
std::vector<Meta> avg_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "avg_pool2d");
  AXLE_CHECK(a.ints.size() == 8, "[avg_pool2d] expected 8 int attributes, got ", a.ints.size());
  PoolGeom g = pool_geom(in[0].shape(), avg_window(a), "avg_pool2d");
  return {{{g.N, g.C, g.OH, g.OW}, in[0].dtype()}};
}
Tensors avg_vjp(const VjpArgs& v) {
  Attrs b = v.attrs;
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::AvgPool2dBackward, {v.grad[0]}, b)};
}
std::vector<Meta> avg_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "avg_pool2d_backward", "grad");
  AXLE_CHECK(a.ints.size() == 12, "[avg_pool2d_backward] expected 12 int attributes, got ", a.ints.size());
  AXLE_CHECK(in[0].dim() == 4 && is_float_kernel_dtype(in[0].dtype()), "[avg_pool2d_backward] expected a 4-D float32 or bfloat16 grad, got ",
             shape_str(in[0].shape()), " ", in[0].dtype());
  const attr::AvgPool2dBackward b = attr::AvgPool2dBackward::of(a);
  const Shape xs{b.n, b.c, b.h, b.w};
  PoolGeom g = pool_geom(xs, avg_bwd_window(a), "avg_pool2d_backward");
  AXLE_CHECK(in[0].shape() == (Shape{g.N, g.C, g.OH, g.OW}), "[avg_pool2d_backward] expected grad of shape ",
             shape_str({g.N, g.C, g.OH, g.OW}), " for input ", shape_str(xs), ", got ", shape_str(in[0].shape()));
  return {{xs, in[0].dtype()}};
}

std::vector<Meta> adaptive_infer(const Tensors& in, const Attrs& a) {
  check_input(in[0], "adaptive_avg_pool2d");
  AXLE_CHECK(a.ints.size() == 2 && a.ints[0] > 0 && a.ints[1] > 0,
             "[adaptive_avg_pool2d] expected a positive output size (oh, ow), got ", shape_str(a.ints));
  const Shape& s = in[0].shape();
  AXLE_CHECK(s[2] > 0 && s[3] > 0, "[adaptive_avg_pool2d] expected a non-empty spatial size, got ", shape_str(s));
  return {{{s[0], s[1], a.ints[0], a.ints[1]}, in[0].dtype()}};
}

Tensors adaptive_vjp(const VjpArgs& v) {
  const Shape& s = v.in[0].shape();
  return {call1(OpKind::AdaptiveAvgPool2dBackward, {v.grad[0]}, {.ints = {s[2], s[3]}, .floats = {}})};
}

std::vector<Meta> adaptive_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "adaptive_avg_pool2d_backward", "grad");
  AXLE_CHECK(a.ints.size() == 2 && a.ints[0] > 0 && a.ints[1] > 0,
             "[adaptive_avg_pool2d_backward] expected the input size (H, W), got ", shape_str(a.ints));
  AXLE_CHECK(in[0].dim() == 4 && is_float_kernel_dtype(in[0].dtype()),
             "[adaptive_avg_pool2d_backward] expected a 4-D float32 or bfloat16 grad, got ", shape_str(in[0].shape()), " ",
             in[0].dtype());
  const Shape& s = in[0].shape();
  return {{{s[0], s[1], a.ints[0], a.ints[1]}, in[0].dtype()}};
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
// kernel, stride, padding (and dilation) from the options, checked.
std::vector<int64_t> pool_ints(const Pool2dOptions& o, const char* op, bool with_dilation) {
  std::vector<int64_t> s = o.stride.empty() ? o.kernel : o.stride;
  AXLE_CHECK(o.kernel.size() == 2 && s.size() == 2 && o.padding.size() == 2 && o.dilation.size() == 2, "[", op,
             "] expected 2 values each for kernel, stride, padding and dilation, got ", o.kernel.size(), ", ", s.size(),
             ", ", o.padding.size(), ", ", o.dilation.size());
  std::vector<int64_t> r{o.kernel[0], o.kernel[1], s[0], s[1], o.padding[0], o.padding[1]};
  if (with_dilation) {
    r.push_back(o.dilation[0]);
    r.push_back(o.dilation[1]);
  } else {
    AXLE_CHECK(o.dilation == std::vector<int64_t>({1, 1}), "[", op, "] expected no dilation (1, 1), got (",
               o.dilation[0], ", ", o.dilation[1], "): only max_pool2d dilates its window");
  }
  return r;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  auto ints = pool_ints(o, "max_pool2d", true);
  ints.push_back(o.ceil_mode ? 1 : 0);
  return batched(x, "max_pool2d", [&](const Tensor& t) { return ops::call(ops::OpKind::MaxPool2d, {t}, {.ints = ints, .floats = {}})[0]; });
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& o) {
  auto ints = pool_ints(o, "max_pool2d", true);
  ints.push_back(o.ceil_mode ? 1 : 0);
  ops::check_defined(x, "max_pool2d", "input");
  AXLE_CHECK(x.dim() == 3 || x.dim() == 4, "[max_pool2d] expected a 3-D or 4-D input, got ", shape_str(x.shape()));
  const Tensor x4 = x.dim() == 3 ? unsqueeze(x, 0) : x;
  const ops::Tensors yw = ops::call(ops::OpKind::MaxPool2d, {x4}, {.ints = ints, .floats = {}});
  // The workspace holds the argmax's place k = a * kw + b in its window; PyTorch's index is the
  // flat h * W + w of the input plane, h = oh * sh - ph + a * dh, w = ow * sw - pw + b * dw: a
  // table lookup of k's offset plus the window's origin (host constants; the same graph on xla).
  const int64_t kh = ints[0], kw = ints[1], sh = ints[2], sw = ints[3], ph = ints[4], pw = ints[5], dh = ints[6],
                dw = ints[7];
  const Shape& ys = yw[0].shape();
  const int64_t W = x4.shape()[3], OH = ys[2], OW = ys[3];
  std::vector<int64_t> offset(size_t(kh * kw)), origin(size_t(OH * OW));
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b) offset[size_t(a * kw + b)] = a * dh * W + b * dw;
  for (int64_t i = 0; i < OH; ++i)
    for (int64_t j = 0; j < OW; ++j) origin[size_t(i * OW + j)] = (i * sh - ph) * W + (j * sw - pw);
  const Device dev = x.device();
  const Tensor k = reshape(cast(yw[1], kInt64), {yw[1].numel()});
  const Tensor at = reshape(index_select(from_vector(offset, {kh * kw}).to(dev), 0, k), ys);
  Tensor idx = add(at, from_vector(origin, {OH, OW}).to(dev));
  Tensor y = yw[0];
  if (x.dim() == 3) y = squeeze(y, 0), idx = squeeze(idx, 0);
  return {y, idx};
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Pool2dOptions& o,
                    const std::vector<int64_t>& output_size) {
  const auto ints = pool_ints(o, "max_unpool2d", false);
  AXLE_CHECK(!o.ceil_mode, "[max_unpool2d] takes no ceil_mode (the output size is given by output_size)");
  ops::check_defined(x, "max_unpool2d", "input");
  ops::check_defined(indices, "max_unpool2d", "indices");
  AXLE_CHECK(x.dim() == 3 || x.dim() == 4, "[max_unpool2d] expected a 3-D or 4-D input, got ", shape_str(x.shape()));
  AXLE_CHECK(indices.dtype() == kInt64, "[max_unpool2d] expected int64 indices, got ", indices.dtype());
  AXLE_CHECK(indices.shape() == x.shape(), "[max_unpool2d] expected indices of the input's shape ",
             shape_str(x.shape()), ", got ", shape_str(indices.shape()));
  const int64_t nd = x.dim(), H = x.shape()[size_t(nd - 2)], W = x.shape()[size_t(nd - 1)];
  // PyTorch's _unpool_output_size: the default, or a given size within a stride of it.
  int64_t out[2] = {(H - 1) * ints[2] - 2 * ints[4] + ints[0], (W - 1) * ints[3] - 2 * ints[5] + ints[1]};
  if (!output_size.empty()) {
    AXLE_CHECK(output_size.size() == 2 || int64_t(output_size.size()) == nd,
               "[max_unpool2d] expected output_size of 2 or ", nd, " values, got ", output_size.size());
    for (size_t d = 0; d < 2; ++d) {
      const int64_t want = output_size[output_size.size() - 2 + d], s = ints[2 + d];
      AXLE_CHECK(want > out[d] - s && want < out[d] + s, "[max_unpool2d] expected output_size's dim ", d,
                 " between ", out[d] - s, " and ", out[d] + s, " (exclusive), got ", want);
      out[d] = want;
    }
  }
  AXLE_CHECK(out[0] > 0 && out[1] > 0, "[max_unpool2d] expected a positive output size, got ", out[0], "x", out[1]);
  const Tensor x4 = nd == 3 ? unsqueeze(x, 0) : x, i4 = nd == 3 ? unsqueeze(indices, 0) : indices;
  const int64_t N = x4.shape()[0], C = x4.shape()[1];
  // Each input written at its flat index of a zero plane (scatter checks the range).
  const Tensor plane = zeros({N, C, out[0] * out[1]}, {.dtype = x.dtype(), .device = x.device()});
  Tensor y = scatter(plane, 2, reshape(i4, {N, C, H * W}), reshape(x4, {N, C, H * W}));
  y = reshape(y, {N, C, out[0], out[1]});
  return nd == 3 ? squeeze(y, 0) : y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) {
  auto ints = pool_ints(o, "avg_pool2d", false);
  ints.push_back(o.count_include_pad ? 1 : 0);
  ints.push_back(o.ceil_mode ? 1 : 0);
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
