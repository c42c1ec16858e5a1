// layer_norm as one op (forward and backward): the shape rules and the vjp here, the cpu
// kernels in src/backend/cpu/kernels/norm.cpp. The public layer_norm() (nn_functional.cpp)
// calls it for float32 inputs with weight and bias; see ops.def for what it computes.
#include "ops/norm.h"

#include "axle/ops.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

constexpr const char* kFwd = "layer_norm";
constexpr const char* kBwd = "layer_norm_backward";

/// Checks x [..., normalized] with `dims` normalized dims against a [normalized] parameter.
void check_param(const Tensor& x, const Tensor& p, int64_t dims, const char* op, const char* arg) {
  check_defined(p, op, arg);
  AXLE_CHECK(is_float_kernel_dtype(p.dtype()), "[", op, "] expected a float32 or bfloat16 ", arg, ", got ", p.dtype());
  const Shape tail(x.shape().end() - dims, x.shape().end());
  AXLE_CHECK(p.shape() == tail, "[", op, "] expected ", arg, " of shape ", shape_str(tail), " (the input's last ",
             dims, " dims), got ", shape_str(p.shape()));
}

void check_x(const Tensor& x, int64_t dims, const char* op) {
  check_defined(x, op, "input");
  AXLE_CHECK(is_float_kernel_dtype(x.dtype()), "[", op, "] expected a float32 or bfloat16 input, got ", x.dtype());
  AXLE_CHECK(dims >= 1 && dims <= x.dim(), "[", op, "] expected 1..", x.dim(), " normalized dims, got ", dims);
}

std::vector<Meta> fwd_infer(const Tensors& in, const Attrs& a) {
  const attr::LayerNorm at = attr::LayerNorm::of(a);
  check_x(in[0], at.dims, kFwd);
  check_param(in[0], in[1], at.dims, kFwd, "weight");
  check_param(in[0], in[2], at.dims, kFwd, "bias");
  AXLE_CHECK(at.eps >= 0, "[", kFwd, "] expected eps >= 0, got ", at.eps);
  AXLE_CHECK(in.size() == (at.residual ? 4u : 3u), "[", kFwd, "] expected ", at.residual ? 4 : 3,
             " inputs (x, weight, bias", at.residual ? ", residual)" : ")", ", got ", in.size());
  const Shape stat = layer_norm_stat_shape(in[0].shape(), at.dims);
  const DType xt = in[0].dtype();  // the statistics stay float32 for a bfloat16 input
  AXLE_CHECK(!at.bf16_y || xt == kFloat32, "[", kFwd, "] with bf16_y expects a float32 input, got ", xt);
  const DType yt = at.bf16_y ? kBFloat16 : xt;
  if (!at.residual) return {{in[0].shape(), yt}, {stat, kFloat32}, {stat, kFloat32}};
  check_defined(in[3], kFwd, "residual");
  // (a bf16 residual added to a float32 input is widened: an autocast product on the stream)
  AXLE_CHECK(in[3].shape() == in[0].shape() && (in[3].dtype() == xt || (xt == kFloat32 && in[3].dtype() == kBFloat16)),
             "[", kFwd, "] expected a residual of shape ", shape_str(in[0].shape()), " and the input's dtype (or bfloat16 ",
             "with a float32 input), got ", shape_str(in[3].shape()), " ", in[3].dtype());
  return {{in[0].shape(), yt}, {stat, kFloat32}, {stat, kFloat32}, {in[0].shape(), xt}};
}

Tensors fwd_vjp(const VjpArgs& v) {
  AXLE_CHECK(!v.grad[1].defined() && !v.grad[2].defined(), "[", kFwd,
             "] the mean and rstd outputs are internal: no gradient may flow into them");
  const attr::LayerNorm at = attr::LayerNorm::of(v.attrs);
  AXLE_CHECK(!at.residual && !at.bf16_y, "[", kFwd,
             "] with a fused residual or bf16_y is made by the compiler after autograd: it has no gradient");
  if (!v.grad[0].defined()) return Tensors(v.in.size());
  const int64_t dims = at.dims;
  return call(OpKind::LayerNormBackward, {v.grad[0], v.in[0], v.in[1], v.out[1], v.out[2]},
              attr::LayerNormBackward{.dims = dims}.pack());
}

std::vector<Meta> bwd_infer(const Tensors& in, const Attrs& a) {
  const attr::LayerNormBackward at = attr::LayerNormBackward::of(a);
  const int64_t dims = at.dims;
  AXLE_CHECK(in.size() == (at.residual ? 6u : 5u), "[", kBwd, "] expected ", at.residual ? 6 : 5,
             " inputs (grad, x, weight, mean, rstd", at.residual ? ", residual)" : ")", ", got ", in.size());
  check_x(in[1], dims, kBwd);
  check_param(in[1], in[2], dims, kBwd, "weight");
  check_defined(in[0], kBwd, "grad");
  AXLE_CHECK(in[0].shape() == in[1].shape() &&
                 (in[0].dtype() == in[1].dtype() || (in[1].dtype() == kFloat32 && in[0].dtype() == kBFloat16)),
             "[", kBwd, "] expected a grad of shape ", shape_str(in[1].shape()),
             " and the input's dtype (or bfloat16 with a float32 input), got ", shape_str(in[0].shape()), " ",
             in[0].dtype());
  const Shape stat = layer_norm_stat_shape(in[1].shape(), dims);
  for (int k : {3, 4}) {
    check_defined(in[size_t(k)], kBwd, k == 3 ? "mean" : "rstd");
    AXLE_CHECK(in[size_t(k)].shape() == stat && in[size_t(k)].dtype() == kFloat32, "[", kBwd, "] expected a float32 ",
               k == 3 ? "mean" : "rstd", " of shape ", shape_str(stat), ", got ", shape_str(in[size_t(k)].shape()),
               " ", in[size_t(k)].dtype());
  }
  if (at.residual) {
    check_defined(in[5], kBwd, "residual");
    AXLE_CHECK(in[5].shape() == in[1].shape() && in[5].dtype() == in[1].dtype(), "[", kBwd,
               "] expected a residual gradient of the input's dtype of shape ", shape_str(in[1].shape()), ", got ",
               shape_str(in[5].shape()), " ", in[5].dtype());
  }
  return {{in[1].shape(), in[1].dtype()}, {in[2].shape(), in[2].dtype()}, {in[2].shape(), in[2].dtype()}};
}

}  // namespace

Shape layer_norm_stat_shape(const Shape& x, int64_t dims) {
  Shape s = x;
  for (size_t d = s.size() - size_t(dims); d < s.size(); ++d) s[d] = 1;
  return s;
}

void register_norm_ops() {
  register_op(OpKind::LayerNorm, {.infer = fwd_infer, .vjp = fwd_vjp});
  register_op(OpKind::LayerNormBackward, {.infer = bwd_infer});
}

}  // namespace axle::ops
