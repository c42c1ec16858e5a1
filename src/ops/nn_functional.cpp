// Composite nn functions built from public ops (autograd and lazy tracing come for free):
// batch_norm, layer_norm, group_norm, dropout, cross_entropy, mse_loss, embedding, masked_fill, tril, triu.
#include <cmath>
#include <string>

#include "axle/autograd.h"
#include "axle/generator.h"
#include "axle/ops.h"
#include "dist/spmd_mode.h"
#include "ops/autocast.h"
#include "ops/op.h"

namespace axle {
namespace {

/// Shape [1, C, 1, ...] that broadcasts a per-channel vector against an [N, C, ...] input.
Shape channel_shape(const Tensor& x) {
  Shape s(size_t(x.dim()), 1);
  s[1] = x.shape()[1];
  return s;
}

/// Runs f, re-labelling an axle::Error from an inner op with the public op's name.
template <class F>
Tensor as_op(const char* op, F f) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string m = e.what(), tag = std::string("[") + op + "]";
    if (m.rfind(tag, 0) == 0) throw;
    const size_t close = m.find("] ");
    if (m.empty() || m[0] != '[' || close == std::string::npos) throw Error(tag + " " + m);
    throw Error(tag + " " + m.substr(close + 2) + " (in " + m.substr(1, close - 1) + ")");
  }
}

Tensor apply_reduction(const Tensor& per_elem, Reduction r) {
  switch (r) {
    case Reduction::None: return per_elem;
    case Reduction::Sum: return sum(per_elem);
    case Reduction::Mean: return mean(per_elem);
  }
  AXLE_FAIL("[loss] unknown reduction ", int(r));
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  ops::check_defined(x_in, "batch_norm", "input");
  const Tensor x = ops::autocast_fp32(x_in);  // autocast: the statistics in float32
  AXLE_CHECK(x.dim() >= 2, "[batch_norm] expected an input of shape [N, C] or [N, C, ...], got ",
             shape_str(x.shape()));
  AXLE_CHECK(is_floating(x.dtype()), "[batch_norm] expected a floating input, got ", x.dtype());
  const int64_t C = x.shape()[1];
  auto check_vec = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    AXLE_CHECK(t.shape() == Shape{C}, "[batch_norm] expected ", name, " of shape [", C, "], got ",
               shape_str(t.shape()));
  };
  check_vec(weight, "weight");
  check_vec(bias, "bias");
  check_vec(running_mean, "running_mean");
  check_vec(running_var, "running_var");
  AXLE_CHECK(running_mean.defined() == running_var.defined(),
             "[batch_norm] expected running_mean and running_var both defined or both undefined");

  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Shape cs = channel_shape(x);
  Tensor xhat;
  if (training || !running_mean.defined()) {
    const int64_t n = x.numel() / std::max<int64_t>(C, 1);
    AXLE_CHECK(!training || n > 1, "[batch_norm] expected more than 1 value per channel when training, got input ",
               shape_str(x.shape()));
    Tensor mu = mean(x, dims, true);
    Tensor d = sub(x, mu);
    Tensor var_b = mean(mul(d, d), dims, true);  // biased, used to normalize
    xhat = mul(d, rsqrt(add(var_b, eps)));
    if (training && running_mean.defined()) {
      NoGradGuard ng;
      Tensor bm = reshape(mu.detach(), {C});
      Tensor bv = reshape(var_b.detach(), {C});
      const double unbias = double(n) / double(n - 1);
      running_mean.set_data(add(mul(running_mean.detach(), 1.0 - momentum), mul(bm, momentum)));
      running_var.set_data(add(mul(running_var.detach(), 1.0 - momentum), mul(bv, momentum * unbias)));
    }
  } else {
    Tensor rm = reshape(running_mean.detach(), cs), rv = reshape(running_var.detach(), cs);
    xhat = mul(sub(x, rm), rsqrt(add(rv, eps)));
  }
  Tensor y = xhat;
  if (weight.defined()) y = mul(y, reshape(weight, cs));
  if (bias.defined()) y = add(y, reshape(bias, cs));
  return y;
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  ops::check_defined(x_in, "layer_norm", "input");
  // autocast: layer_norm's AC_FP32 (ops.def) for the composite path too, so a bf16 input
  // under autocast takes the fused float32 op.
  const Tensor x = ops::autocast_fp32(x_in), weight = ops::autocast_fp32(weight_in),
               bias = ops::autocast_fp32(bias_in);
  const int64_t k = int64_t(normalized_shape.size());
  AXLE_CHECK(k >= 1 && k <= x.dim(), "[layer_norm] expected 1..", x.dim(), " normalized dims, got ",
             shape_str(normalized_shape));
  Shape tail(x.shape().end() - k, x.shape().end());
  AXLE_CHECK(tail == normalized_shape, "[layer_norm] expected input ending in ", shape_str(normalized_shape),
             ", got ", shape_str(x.shape()));
  if (weight.defined())
    AXLE_CHECK(weight.shape() == normalized_shape, "[layer_norm] expected weight of shape ",
               shape_str(normalized_shape), ", got ", shape_str(weight.shape()));
  if (bias.defined())
    AXLE_CHECK(bias.shape() == normalized_shape, "[layer_norm] expected bias of shape ", shape_str(normalized_shape),
               ", got ", shape_str(bias.shape()));
  // float32 with weight and bias (the transformers' case): one fused op, one pass over each
  // row. Under SPMD the composite below, whose ops all have sharding rules.
  // bfloat16 too (float32 statistics, one rounding of the result, as PyTorch).
  const bool fused = (x.dtype() == kFloat32 || x.dtype() == kBFloat16) && weight.defined() && bias.defined() &&
                     weight.dtype() == x.dtype() && bias.dtype() == x.dtype() && x.numel() > 0 &&
                     !dist::detail::spmd_mode();
  if (fused)
    return ops::call(ops::OpKind::LayerNorm, {x, weight, bias}, ops::attr::LayerNorm{.dims = k, .eps = eps}.pack())[0];
  if (x.dtype() == kBFloat16) {  // the composite in float32 on the widened values, then rounded once
    auto wide = [](const Tensor& t) { return t.defined() && t.dtype() == kBFloat16 ? cast(t, kFloat32) : t; };
    return cast(layer_norm(cast(x, kFloat32), normalized_shape, wide(weight), wide(bias), eps), kBFloat16);
  }
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = mean(x, dims, true);
  Tensor d = sub(x, mu);
  Tensor var_b = mean(mul(d, d), dims, true);
  Tensor y = mul(d, rsqrt(add(var_b, eps)));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  ops::check_defined(x_in, "group_norm", "input");
  const Tensor x = ops::autocast_fp32(x_in);  // autocast: the statistics in float32
  AXLE_CHECK(x.dim() >= 2, "[group_norm] expected an input of shape [N, C, ...], got ", shape_str(x.shape()));
  AXLE_CHECK(is_floating(x.dtype()), "[group_norm] expected a floating input, got ", x.dtype());
  const int64_t N = x.shape()[0], C = x.shape()[1];
  AXLE_CHECK(num_groups > 0 && C % num_groups == 0, "[group_norm] expected a num_groups that divides the ", C,
             " channels of input ", shape_str(x.shape()), ", got ", num_groups);
  auto check_vec = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    AXLE_CHECK(t.shape() == Shape{C}, "[group_norm] expected ", name, " of shape [", C, "], got ",
               shape_str(t.shape()));
  };
  check_vec(weight, "weight");
  check_vec(bias, "bias");
  // Each (sample, group) row: its C/G channels and all spatial positions, normalised with the
  // biased variance, as PyTorch.
  int64_t per_group = C / num_groups;
  for (int64_t d = 2; d < x.dim(); ++d) per_group *= x.shape()[size_t(d)];
  Tensor xg = reshape(x, {N, num_groups, per_group});
  Tensor mu = mean(xg, {2}, true);
  Tensor d = sub(xg, mu);
  Tensor var_b = mean(mul(d, d), {2}, true);
  Tensor y = reshape(mul(d, rsqrt(add(var_b, eps))), x.shape());
  const Shape cs = channel_shape(x);
  if (weight.defined()) y = mul(y, reshape(weight, cs));
  if (bias.defined()) y = add(y, reshape(bias, cs));
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  ops::check_defined(x, "dropout", "input");
  AXLE_CHECK(p >= 0.0 && p <= 1.0, "[dropout] expected a probability p in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  Tensor u = rand(x.shape(), {.dtype = kFloat32, .device = x.device()}, gen);
  Tensor mask = mul(cast(ge(u, p), x.dtype()), 1.0 / (1.0 - p));
  return mul(x, mask);
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const CrossEntropyOptions& o) {
  ops::check_defined(logits_in, "cross_entropy", "input");
  const Tensor logits = ops::autocast_fp32(logits_in);  // PyTorch's autocast: cross_entropy_loss in fp32
  ops::check_defined(target, "cross_entropy", "target");
  const double eps = o.label_smoothing;
  AXLE_CHECK(eps >= 0.0 && eps <= 1.0, "[cross_entropy] expected label_smoothing in [0, 1], got ", eps);
  if (logits.dim() == 1) {  // unbatched: [C] with a 0-d target
    CrossEntropyOptions o1 = o;
    Tensor t = target.dim() == 0 ? reshape(target, {1}) : unsqueeze(target, 0);
    Tensor l = cross_entropy(unsqueeze(logits, 0), t, o1);
    return o.reduction == Reduction::None ? reshape(l, target.shape()) : l;
  }
  AXLE_CHECK(logits.dim() >= 2, "[cross_entropy] expected logits of shape [N, C] or [N, C, d...], got ",
             shape_str(logits.shape()));
  const int64_t C = logits.shape()[1];
  Tensor logp = log_softmax(logits, 1);

  if (is_floating(target.dtype())) {  // class probabilities, same shape as the logits
    AXLE_CHECK(target.shape() == logits.shape(), "[cross_entropy] expected probability targets of shape ",
               shape_str(logits.shape()), ", got ", shape_str(target.shape()));
    Tensor t = eps > 0 ? add(mul(target, 1.0 - eps), eps / double(C)) : target;
    Tensor per = neg(sum(mul(logp, t), {1}));
    return apply_reduction(per, o.reduction);
  }
  AXLE_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32,
             "[cross_entropy] expected an int64 target of class indices, got ", target.dtype());
  Shape ts = logits.shape();
  ts.erase(ts.begin() + 1);
  AXLE_CHECK(target.shape() == ts, "[cross_entropy] expected target of shape ", shape_str(ts), " for logits ",
             shape_str(logits.shape()), ", got ", shape_str(target.shape()));
  Tensor nll = as_op("cross_entropy", [&] { return nll_loss(logp, target, o.reduction, o.ignore_index); });
  if (eps == 0.0) return nll;

  // Label smoothing (as PyTorch): (1 - eps) * nll + eps * mean over classes of -logp,
  // with ignored targets contributing to neither term.
  Tensor keep = ne(target, double(o.ignore_index));
  Tensor smooth = where(keep, div(neg(sum(logp, {1})), double(C)), zeros({}, {.dtype = logp.dtype()}));
  Tensor st;
  switch (o.reduction) {
    case Reduction::None: st = smooth; break;
    case Reduction::Sum: st = sum(smooth); break;
    case Reduction::Mean: st = div(sum(smooth), sum(cast(keep, kFloat32))); break;
  }
  return add(mul(nll, 1.0 - eps), mul(st, eps));
}

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in, Reduction r) {
  ops::check_defined(a_in, "mse_loss", "input");
  ops::check_defined(b_in, "mse_loss", "target");
  const Tensor a = ops::autocast_fp32(a_in), b = ops::autocast_fp32(b_in);  // autocast: mse_loss in fp32
  AXLE_CHECK(a.shape() == b.shape(), "[mse_loss] expected input and target of one shape, got ", shape_str(a.shape()),
             " and ", shape_str(b.shape()));
  Tensor d = sub(a, b);
  return apply_reduction(mul(d, d), r);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  ops::check_defined(weight, "embedding", "weight");
  ops::check_defined(indices, "embedding", "indices");
  AXLE_CHECK(weight.dim() == 2, "[embedding] expected a weight of shape [num, dim], got ", shape_str(weight.shape()));
  AXLE_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32,
             "[embedding] expected int64 or int32 indices, got ", indices.dtype());
  Tensor rows = as_op("embedding", [&] { return index_select(weight, 0, reshape(indices, {-1})); });
  Shape s = indices.shape();
  s.push_back(weight.shape()[1]);
  return reshape(rows, s);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops::check_defined(x, "masked_fill", "input");
  ops::check_defined(mask, "masked_fill", "mask");
  AXLE_CHECK(mask.dtype() == kBool, "[masked_fill] expected a bool mask, got ", mask.dtype());
  Tensor out = as_op("masked_fill", [&] {
    return where(mask, scalar_tensor(value, {.dtype = x.dtype(), .device = x.device()}), x);
  });
  AXLE_CHECK(out.shape() == x.shape(), "[masked_fill] expected a mask broadcastable to ", shape_str(x.shape()),
             ", got ", shape_str(mask.shape()));
  return out;
}

namespace {
/// Keeps element (i, j) of the last two dims where `keep(j - i)`, zeroes the rest.
template <class Keep>
Tensor triangle(const char* op, const Tensor& x, Keep keep) {
  ops::check_defined(x, op, "input");
  AXLE_CHECK(x.dim() >= 2, "[", op, "] expected an input of at least 2 dims, got ", shape_str(x.shape()));
  const int64_t rows = x.shape()[size_t(x.dim() - 2)], cols = x.shape()[size_t(x.dim() - 1)];
  Tensor i = reshape(arange(rows, {.dtype = kInt64, .device = x.device()}), {rows, 1});
  Tensor j = reshape(arange(cols, {.dtype = kInt64, .device = x.device()}), {1, cols});
  return where(keep(sub(j, i)), x, scalar_tensor(0, {.dtype = x.dtype(), .device = x.device()}));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle("tril", x, [&](const Tensor& d) { return le(d, double(diagonal)); });
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle("triu", x, [&](const Tensor& d) { return ge(d, double(diagonal)); });
}

}  // namespace axle
