// 2-D convolution: shape rules and vjps of conv2d and its backward ops (input, weight + bias).
// The oneDNN kernels and their layout choices are in src/backend/cpu/kernels/conv.cpp.

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/conv.h"

namespace axle::ops {
namespace {

void check_conv_attrs(const Attrs& a, size_t n, const char* op) {
  AXLE_CHECK(a.ints.size() == n, "[", op, "] expected ", n, " int attributes, got ", a.ints.size());
  const auto& i = a.ints;
  AXLE_CHECK(i[0] > 0 && i[1] > 0, "[", op, "] expected positive strides, got ", i[0], ", ", i[1]);
  AXLE_CHECK(i[2] >= 0 && i[3] >= 0, "[", op, "] expected non-negative padding, got ", i[2], ", ", i[3]);
  AXLE_CHECK(i[4] > 0 && i[5] > 0, "[", op, "] expected positive dilation, got ", i[4], ", ", i[5]);
  AXLE_CHECK(i[6] > 0, "[", op, "] expected positive groups, got ", i[6]);
}

}  // namespace

// Geometry from input [N, C, H, W], weight [O, C/g, kh, kw] shapes and the 7 conv ints.
ConvGeom conv_geom(const Shape& x, const Shape& w, const Attrs& a, const char* op) {
  const auto& i = a.ints;
  ConvGeom q{};
  q.N = x[0]; q.C = x[1]; q.H = x[2]; q.W = x[3];
  q.O = w[0]; q.kh = w[2]; q.kw = w[3];
  q.sh = i[0]; q.sw = i[1]; q.ph = i[2]; q.pw = i[3]; q.dh = i[4]; q.dw = i[5]; q.g = i[6];
  AXLE_CHECK(q.C > 0 && q.O > 0 && q.kh > 0 && q.kw > 0, "[", op, "] expected non-empty channels and kernel, got input ",
             shape_str(x), " and weight ", shape_str(w));
  AXLE_CHECK(q.C % q.g == 0 && q.O % q.g == 0, "[", op, "] expected channels divisible by groups ", q.g,
             ", got in ", q.C, " and out ", q.O);
  AXLE_CHECK(w[1] == q.C / q.g, "[", op, "] expected weight of shape [", q.O, ", ", q.C / q.g, ", kh, kw] for ", q.C,
             " input channels and ", q.g, " groups, got ", shape_str(w));
  const int64_t eh = (q.kh - 1) * q.dh + 1, ew = (q.kw - 1) * q.dw + 1;
  q.OH = (q.H + 2 * q.ph - eh) / q.sh + 1;
  q.OW = (q.W + 2 * q.pw - ew) / q.sw + 1;
  AXLE_CHECK(q.H + 2 * q.ph >= eh && q.W + 2 * q.pw >= ew && q.OH > 0 && q.OW > 0, "[", op, "] input ",
             shape_str(x), " (padded by ", q.ph, ", ", q.pw, ") is smaller than the dilated kernel ", eh, "x", ew);
  return q;
}

ConvGeom conv_transpose_geom(const Shape& x, const Shape& w, const Attrs& a, const char* op) {
  AXLE_CHECK(a.ints.size() == 9, "[", op, "] expected 9 int attributes, got ", a.ints.size());
  check_conv_attrs(a, 9, op);
  const attr::ConvTranspose2d t = attr::ConvTranspose2d::of(a);
  AXLE_CHECK(t.output_padding_h >= 0 && t.output_padding_w >= 0, "[", op,
             "] expected non-negative output_padding, got ", t.output_padding_h, ", ", t.output_padding_w);
  AXLE_CHECK((t.output_padding_h < t.stride_h || t.output_padding_h < t.dilation_h) &&
                 (t.output_padding_w < t.stride_w || t.output_padding_w < t.dilation_w),
             "[", op, "] expected output_padding smaller than either stride or dilation, got output_padding (",
             t.output_padding_h, ", ", t.output_padding_w, ") with stride (", t.stride_h, ", ", t.stride_w,
             ") and dilation (", t.dilation_h, ", ", t.dilation_w, ")");
  ConvGeom q{};
  q.N = x[0]; q.O = x[1]; q.OH = x[2]; q.OW = x[3];
  q.g = t.groups; q.kh = w[2]; q.kw = w[3];
  q.sh = t.stride_h; q.sw = t.stride_w; q.ph = t.pad_h; q.pw = t.pad_w; q.dh = t.dilation_h; q.dw = t.dilation_w;
  q.C = w[1] * q.g;
  AXLE_CHECK(q.O > 0 && w[1] > 0 && q.kh > 0 && q.kw > 0, "[", op,
             "] expected non-empty channels and kernel, got input ", shape_str(x), " and weight ", shape_str(w));
  AXLE_CHECK(q.O % q.g == 0, "[", op, "] expected input channels divisible by groups ", q.g, ", got ", q.O);
  AXLE_CHECK(w[0] == q.O, "[", op, "] expected weight of shape [", q.O, ", out_channels/", q.g,
             ", kh, kw] for input ", shape_str(x), " (weight's dim 0 = the input's channels), got ", shape_str(w));
  AXLE_CHECK(q.OH > 0 && q.OW > 0, "[", op, "] expected a non-empty spatial size, got input ", shape_str(x));
  q.H = (q.OH - 1) * q.sh - 2 * q.ph + q.dh * (q.kh - 1) + t.output_padding_h + 1;
  q.W = (q.OW - 1) * q.sw - 2 * q.pw + q.dw * (q.kw - 1) + t.output_padding_w + 1;
  AXLE_CHECK(q.H > 0 && q.W > 0, "[", op, "] expected a positive output size, got ", q.H, "x", q.W, " for input ",
             shape_str(x), ", weight ", shape_str(w), ", stride (", q.sh, ", ", q.sw, ") and padding (", q.ph, ", ",
             q.pw, ")");
  return q;
}

namespace {

std::vector<Meta> conv_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "conv2d", "input");
  check_defined(in[1], "conv2d", "weight");
  const Tensor &x = in[0], &w = in[1];
  AXLE_CHECK(x.dim() == 4, "[conv2d] expected a 4-D input [N, C, H, W], got ", shape_str(x.shape()));
  AXLE_CHECK(w.dim() == 4, "[conv2d] expected a 4-D weight [O, C/groups, kh, kw], got ", shape_str(w.shape()));
  AXLE_CHECK(same_float(x, w), "[conv2d] expected float32 or bfloat16 input and weight of one dtype, got ",
             x.dtype(), " and ", w.dtype());
  // 7 ints, and the relu field when the compiler fused a relu epilogue (ops.def: FLAG(relu)).
  check_conv_attrs(a, attr::Conv2d::of(a).relu ? 8 : 7, "conv2d");
  ConvGeom q = conv_geom(x.shape(), w.shape(), a, "conv2d");
  if (in.size() > 2 && in[2].defined()) {
    AXLE_CHECK(in[2].dim() == 1 && in[2].shape()[0] == q.O && in[2].dtype() == x.dtype(),
               "[conv2d] expected a ", x.dtype(), " bias of shape [", q.O, "], got ", shape_str(in[2].shape()), " ",
               in[2].dtype());
  }
  return {{q.dst(), x.dtype()}};
}

Tensors conv_vjp(const VjpArgs& v) {
  AXLE_CHECK(!attr::Conv2d::of(v.attrs).relu, "[conv2d] internal: a compiler-fused conv has no gradient of its own");
  const Tensor &x = v.in[0], &w = v.in[1], &g = v.grad[0];
  Tensors r(v.in.size());
  const Attrs& a = v.attrs;
  if (v.needs[0]) {
    Attrs b = a;
    for (int64_t s : x.shape()) b.ints.push_back(s);
    r[0] = call1(OpKind::Conv2dBackwardInput, {g, w}, b);
  }
  const bool need_bias = v.in.size() > 2 && v.in[2].defined() && v.needs[2];
  if (v.needs[1]) {
    Attrs b = a;
    for (int64_t s : w.shape()) b.ints.push_back(s);
    b.ints.push_back(need_bias ? 1 : 0);
    Tensors gw = call(OpKind::Conv2dBackwardWeight, {g, x}, b);
    r[1] = gw[0];
    if (need_bias) r[2] = gw[1];
  } else if (need_bias) {
    r[2] = sum(g, {0, 2, 3});
  }
  return r;
}

std::vector<Meta> conv_bwd_input_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "conv2d_backward_input", "grad");
  check_defined(in[1], "conv2d_backward_input", "weight");
  check_conv_attrs(a, 11, "conv2d_backward_input");
  Shape xs(a.ints.begin() + 7, a.ints.end());
  AXLE_CHECK(in[1].dim() == 4, "[conv2d_backward_input] expected a 4-D weight, got ", shape_str(in[1].shape()));
  ConvGeom q = conv_geom(xs, in[1].shape(), a, "conv2d_backward_input");
  AXLE_CHECK(in[0].shape() == q.dst(), "[conv2d_backward_input] expected grad of shape ", shape_str(q.dst()), ", got ",
             shape_str(in[0].shape()));
  AXLE_CHECK(same_float(in[0], in[1]),
             "[conv2d_backward_input] expected float32 or bfloat16 tensors of one dtype, got ", in[0].dtype(), " and ", in[1].dtype());
  return {{xs, in[0].dtype()}};
}

std::vector<Meta> conv_bwd_weight_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "conv2d_backward_weight", "grad");
  check_defined(in[1], "conv2d_backward_weight", "input");
  check_conv_attrs(a, 12, "conv2d_backward_weight");
  AXLE_CHECK(in[1].dim() == 4, "[conv2d_backward_weight] expected a 4-D input, got ", shape_str(in[1].shape()));
  Shape ws(a.ints.begin() + 7, a.ints.begin() + 11);
  ConvGeom q = conv_geom(in[1].shape(), ws, a, "conv2d_backward_weight");
  AXLE_CHECK(in[0].shape() == q.dst(), "[conv2d_backward_weight] expected grad of shape ", shape_str(q.dst()),
             ", got ", shape_str(in[0].shape()));
  AXLE_CHECK(same_float(in[0], in[1]),
             "[conv2d_backward_weight] expected float32 or bfloat16 tensors of one dtype, got ", in[0].dtype(), " and ", in[1].dtype());
  std::vector<Meta> out{{ws, in[0].dtype()}};
  if (a.ints[11]) out.push_back({{q.O}, in[0].dtype()});
  return out;
}

// ------------------------------------------------------------------ conv_transpose2d
std::vector<Meta> convt_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "conv_transpose2d", "input");
  check_defined(in[1], "conv_transpose2d", "weight");
  const Tensor &x = in[0], &w = in[1];
  AXLE_CHECK(x.dim() == 4, "[conv_transpose2d] expected a 4-D input [N, C, H, W], got ", shape_str(x.shape()));
  AXLE_CHECK(w.dim() == 4, "[conv_transpose2d] expected a 4-D weight [C, O/groups, kh, kw], got ",
             shape_str(w.shape()));
  AXLE_CHECK(same_float(x, w),
             "[conv_transpose2d] expected float32 or bfloat16 input and weight of one dtype, got ", x.dtype(), " and ", w.dtype());
  return {{conv_transpose_geom(x.shape(), w.shape(), a, "conv_transpose2d").src(), x.dtype()}};
}

// y = conv2d's input gradient of x, so <y, g> = <x, conv2d(g, w)>: the gradient of x is conv2d
// of g, that of w conv2d's weight gradient with x as the output gradient and g as the input.
// Where output_padding >= stride (allowed when it is < dilation) g's last rows reach no window of
// x: they are cropped, so that conv2d of the rest has x's size.
Tensors convt_vjp(const VjpArgs& v) {
  const Tensor &x = v.in[0], &w = v.in[1];
  const attr::ConvTranspose2d t = attr::ConvTranspose2d::of(v.attrs);
  const ConvGeom q = conv_transpose_geom(x.shape(), w.shape(), v.attrs, "conv_transpose2d");
  Tensor g = v.grad[0];
  const int64_t crop_h = (t.output_padding_h / q.sh) * q.sh, crop_w = (t.output_padding_w / q.sw) * q.sw;
  if (crop_h > 0) g = slice(g, 2, 0, q.H - crop_h);
  if (crop_w > 0) g = slice(g, 3, 0, q.W - crop_w);
  Attrs c{.ints = {q.sh, q.sw, q.ph, q.pw, q.dh, q.dw, q.g}, .floats = {}};
  Tensors r(2);
  if (v.needs[0]) r[0] = call1(OpKind::Conv2d, {g, w}, c);
  if (v.needs[1]) {
    Attrs b = c;
    for (int64_t s : w.shape()) b.ints.push_back(s);
    b.ints.push_back(0);
    r[1] = call(OpKind::Conv2dBackwardWeight, {x, g}, b)[0];
  }
  return r;
}

}  // namespace

void register_conv_ops() {
  register_op(OpKind::ConvTranspose2d, {.infer = convt_infer, .vjp = convt_vjp});
  register_op(OpKind::Conv2d, {.infer = conv_infer, .vjp = conv_vjp});
  register_op(OpKind::Conv2dBackwardInput, {.infer = conv_bwd_input_infer});
  register_op(OpKind::Conv2dBackwardWeight, {.infer = conv_bwd_weight_infer});
}

}  // namespace axle::ops

namespace axle {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dFuncOptions& o) {
  AXLE_CHECK(o.stride.size() == 2 && o.padding.size() == 2 && o.dilation.size() == 2,
             "[conv2d] expected 2 values each for stride, padding and dilation, got ", o.stride.size(), ", ",
             o.padding.size(), ", ", o.dilation.size());
  ops::Attrs a{.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], o.groups}, .floats = {}};
  ops::check_defined(x, "conv2d", "input");
  if (x.dim() == 3) return squeeze(ops::call1(ops::OpKind::Conv2d, {unsqueeze(x, 0), w, b}, a), 0);  // unbatched
  return ops::call1(ops::OpKind::Conv2d, {x, w, b}, a);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose2dFuncOptions& o) {
  AXLE_CHECK(o.stride.size() == 2 && o.padding.size() == 2 && o.output_padding.size() == 2 && o.dilation.size() == 2,
             "[conv_transpose2d] expected 2 values each for stride, padding, output_padding and dilation, got ",
             o.stride.size(), ", ", o.padding.size(), ", ", o.output_padding.size(), ", ", o.dilation.size());
  ops::check_defined(x, "conv_transpose2d", "input");
  ops::check_defined(w, "conv_transpose2d", "weight");
  AXLE_CHECK(x.dim() == 3 || x.dim() == 4, "[conv_transpose2d] expected a 3-D or 4-D input, got ",
             shape_str(x.shape()));
  if (x.dim() == 3) return squeeze(conv_transpose2d(unsqueeze(x, 0), w, b, o), 0);  // unbatched
  ops::Attrs a{.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], o.groups,
                        o.output_padding[0], o.output_padding[1]},
               .floats = {}};
  Tensor y = ops::call1(ops::OpKind::ConvTranspose2d, {x, w}, a);
  if (!b.defined()) return y;
  const int64_t O = y.shape()[1];
  AXLE_CHECK(b.dim() == 1 && b.shape()[0] == O && b.dtype() == y.dtype(),
             "[conv_transpose2d] expected a ", y.dtype(), " bias of shape [", O, "], got ", shape_str(b.shape()), " ",
             b.dtype());
  return add(y, reshape(b, {1, O, 1, 1}));
}

}  // namespace axle
