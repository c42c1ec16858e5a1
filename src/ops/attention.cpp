// scaled_dot_product_attention: one fused op (online softmax over key tiles, never an L x S
// buffer) with its own backward (FlashAttention-2 style: the scores are recomputed tile by tile
// from q, k and the saved per-row log-sum-exp). Shape rules, vjp and the public function here;
// the cpu kernels in src/backend/cpu/kernels/attention.cpp. Calls with an attn_mask run the
// decomposed form (matmul, mask, softmax, dropout, matmul), which materialises the scores.
#include <cmath>
#include <limits>

#include "axle/generator.h"
#include "axle/ops.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

constexpr const char* kFwd = "scaled_dot_product_attention";
constexpr const char* kBwd = "scaled_dot_product_attention_backward";

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

/// Checks (q, k, v[, rng, base]) for the op `op`.
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* rng, const Tensor* base,
               double dropout_p, const char* op) {
  check_defined(q, op, "query");
  check_defined(k, op, "key");
  check_defined(v, op, "value");
  AXLE_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(), "[", op,
             "] expected query, key and value of one rank >= 2, got ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), " and ", shape_str(v.shape()));
  AXLE_CHECK((q.dtype() == kFloat32 || q.dtype() == kBFloat16) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "[", op, "] expected float32 or bfloat16 query, key and value of one dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  AXLE_CHECK(batch_of(q.shape()) == batch_of(k.shape()) && batch_of(q.shape()) == batch_of(v.shape()), "[", op,
             "] expected one batch shape for query, key and value, got ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), " and ", shape_str(v.shape()));
  AXLE_CHECK(q.shape().back() == k.shape().back(), "[", op, "] expected key's last dim E = ", q.shape().back(),
             " (query's), got ", shape_str(k.shape()));
  AXLE_CHECK(k.shape()[size_t(k.dim() - 2)] == v.shape()[size_t(v.dim() - 2)], "[", op,
             "] expected value's sequence length S = ", k.shape()[size_t(k.dim() - 2)], " (key's), got ",
             shape_str(v.shape()));
  AXLE_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "[", op, "] expected dropout_p in [0, 1), got ", dropout_p);
  if (dropout_p > 0.0) {
    AXLE_CHECK(rng && rng->defined() && rng->dtype() == kInt64 && rng->shape() == Shape{2}, "[", op,
               "] with dropout expects an int64 [2] (seed, offset) operand, got ",
               rng && rng->defined() ? shape_str(rng->shape()) : std::string("none"));
    AXLE_CHECK(base && base->defined() && base->dtype() == kInt64 && base->shape() == batch_of(q.shape()), "[", op,
               "] with dropout expects an int64 ", shape_str(batch_of(q.shape())),
               " operand of weight index bases, got ",
               base && base->defined() ? shape_str(base->shape()) + " " + dtype_name(base->dtype()) : std::string("none"));
  } else {
    AXLE_CHECK((!rng || !rng->defined()) && (!base || !base->defined()), "[", op,
               "] expected no rng and base operands without dropout");
  }
}

std::vector<Meta> fwd_infer(const Tensors& in, const Attrs& a) {
  const attr::ScaledDotProductAttention at = attr::ScaledDotProductAttention::of(a);
  check_qkv(in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr, in.size() > 4 ? &in[4] : nullptr, at.dropout_p,
            kFwd);
  Shape out = in[0].shape(), lse = in[0].shape();
  out.back() = in[2].shape().back();
  lse.back() = 1;
  return {{out, in[0].dtype()}, {lse, kFloat32}};
}

Tensors fwd_vjp(const VjpArgs& v) {
  AXLE_CHECK(!v.grad[1].defined(), "[", kFwd,
             "] the log-sum-exp output is internal: no gradient may flow into it");
  if (!v.grad[0].defined()) return Tensors(v.in.size());
  Tensors in = {v.grad[0], v.in[0], v.in[1], v.in[2], v.out[0], v.out[1]};
  for (size_t i = 3; i < v.in.size(); ++i) in.push_back(v.in[i]);  // rng, base
  Tensors g = call(OpKind::ScaledDotProductAttentionBackward, in, v.attrs);
  g.resize(v.in.size());  // the rng and base operands (if any) have no gradient
  return g;
}

std::vector<Meta> bwd_infer(const Tensors& in, const Attrs& a) {
  const attr::ScaledDotProductAttentionBackward at = attr::ScaledDotProductAttentionBackward::of(a);
  check_qkv(in[1], in[2], in[3], in.size() > 6 ? &in[6] : nullptr, in.size() > 7 ? &in[7] : nullptr, at.dropout_p,
            kBwd);
  Shape out = in[1].shape(), lse = in[1].shape();
  out.back() = in[3].shape().back();
  lse.back() = 1;
  check_defined(in[0], kBwd, "grad");
  check_defined(in[4], kBwd, "out");
  check_defined(in[5], kBwd, "lse");
  const DType dt = in[1].dtype();
  AXLE_CHECK(in[0].shape() == out && in[0].dtype() == dt, "[", kBwd, "] expected a ", dt, " grad of shape ",
             shape_str(out), ", got ", shape_str(in[0].shape()), " ", in[0].dtype());
  AXLE_CHECK(in[4].shape() == out && in[4].dtype() == dt, "[", kBwd, "] expected a ", dt, " out of shape ",
             shape_str(out), ", got ", shape_str(in[4].shape()), " ", in[4].dtype());
  AXLE_CHECK(in[5].shape() == lse && in[5].dtype() == kFloat32, "[", kBwd, "] expected a float32 lse of shape ",
             shape_str(lse), ", got ", shape_str(in[5].shape()), " ", in[5].dtype());
  return {{in[1].shape(), dt}, {in[2].shape(), dt}, {in[3].shape(), dt}};
}

}  // namespace

void register_attention_ops() {
  register_op(OpKind::ScaledDotProductAttention, {.infer = fwd_infer, .vjp = fwd_vjp});
  register_op(OpKind::ScaledDotProductAttentionBackward, {.infer = bwd_infer});
}

}  // namespace axle::ops

namespace axle {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The decomposed form (runs calls with an attn_mask; the tests' reference too).
Tensor decomposed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, double scale) {
  Tensor s = mul(matmul(q, transpose(k, -2, -1)), scale);
  const int64_t L = s.shape()[size_t(s.dim() - 2)], S = s.shape().back();
  if (o.is_causal) {
    Tensor i = reshape(arange(L, {.dtype = kInt64, .device = q.device()}), {L, 1});
    Tensor j = reshape(arange(S, {.dtype = kInt64, .device = q.device()}), {1, S});
    s = masked_fill(s, gt(j, i), -std::numeric_limits<double>::infinity());
  } else if (o.attn_mask.defined()) {
    s = o.attn_mask.dtype() == kBool ? masked_fill(s, eq(o.attn_mask, 0.0), -std::numeric_limits<double>::infinity())
                                     : add(s, o.attn_mask);
  }
  // A query row whose every key is masked (all scores -inf) attends to nothing: zeros out,
  // zero gradients, as PyTorch 2.x (not softmax's nan). Its scores are replaced by 0 first,
  // so that the softmax and its backward stay finite there.
  const Tensor none = eq(amax(s, {-1}, true), -std::numeric_limits<double>::infinity());
  const Tensor zero = zeros({}, {.device = q.device()});
  Tensor p = where(none, zero, softmax(where(none, zero, s), -1));
  if (o.dropout_p > 0) p = dropout(p, o.dropout_p, true, o.generator);
  return matmul(p, v);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  ops::check_defined(q, kOp, "query");
  ops::check_defined(k, kOp, "key");
  ops::check_defined(v, kOp, "value");
  AXLE_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "[", kOp,
             "] expected query, key and value of at least 2 dims, got ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), " and ", shape_str(v.shape()));
  AXLE_CHECK(!(o.is_causal && o.attn_mask.defined()), "[", kOp, "] expected is_causal or attn_mask, got both");
  AXLE_CHECK(is_floating(q.dtype()) && is_floating(k.dtype()) && is_floating(v.dtype()), "[", kOp,
             "] expected floating query, key and value, got ", q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  AXLE_CHECK(q.device() == k.device() && q.device() == v.device(), "[", kOp,
             "] expected query, key and value on one device, got ", q.device(), ", ", k.device(), " and ",
             v.device());
  AXLE_CHECK(q.shape().back() == k.shape().back(), "[", kOp, "] expected key's last dim E = ", q.shape().back(),
             " (query's), got ", shape_str(k.shape()));
  AXLE_CHECK(k.shape()[size_t(k.dim() - 2)] == v.shape()[size_t(v.dim() - 2)], "[", kOp,
             "] expected value's sequence length S = ", k.shape()[size_t(k.dim() - 2)], " (key's), got ",
             shape_str(v.shape()));
  AXLE_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, "[", kOp, "] expected dropout_p in [0, 1], got ",
             o.dropout_p);
  if (o.attn_mask.defined())
    AXLE_CHECK(o.attn_mask.device() == q.device(), "[", kOp, "] expected attn_mask on ", q.device(), ", got ",
               o.attn_mask.device());
  const int64_t E = q.shape().back();
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(E));
  if (o.attn_mask.defined()) return decomposed(q, k, v, o, scale);
  if (o.dropout_p >= 1.0) {  // every weight dropped: zeros, with a zero gradient
    AttentionOptions o0 = o;
    o0.dropout_p = 0.0;
    return mul(scaled_dot_product_attention(q, k, v, o0), 0.0);
  }
  // One batch shape (PyTorch's broadcasting of the batch dims), one dtype: bf16 where all three
  // are, else float32.
  Shape batch = ops::broadcast_shape(Shape(q.shape().begin(), q.shape().end() - 2),
                                     Shape(k.shape().begin(), k.shape().end() - 2), kOp);
  batch = ops::broadcast_shape(batch, Shape(v.shape().begin(), v.shape().end() - 2), kOp);
  const DType dt = q.dtype() == kBFloat16 && k.dtype() == kBFloat16 && v.dtype() == kBFloat16 ? kBFloat16 : kFloat32;
  auto prep = [&](const Tensor& t) {
    Tensor r = t.dtype() == dt ? t : cast(t, dt);
    Shape s = batch;
    s.push_back(t.shape()[size_t(t.dim() - 2)]);
    s.push_back(t.shape().back());
    return r.shape() == s ? r : expand(r, s);
  };
  ops::Tensors in = {prep(q), prep(k), prep(v)};
  const int64_t L = q.shape()[size_t(q.dim() - 2)], S = k.shape()[size_t(k.dim() - 2)];
  if (o.dropout_p > 0.0) {
    // The keep mask is a pure function of (seed, offset) and each weight's index, so the
    // backward regenerates it: one Philox block gives 4 weights' uniforms.
    Generator& g = o.generator ? *o.generator : default_generator();
    int64_t n = L * S;
    for (int64_t b : batch) n *= b;
    const uint64_t offset = g.reserve(uint64_t((n + 3) / 4));
    in.push_back(from_vector(std::vector<int64_t>{int64_t(g.seed()), int64_t(offset)}, {2},
                             {.dtype = kInt64, .device = q.device()}));
    // Batch entry b's weights are indices b * L * S + i * S + j of the mask stream.
    std::vector<int64_t> base(size_t(shape_numel(batch)));
    for (size_t b = 0; b < base.size(); ++b) base[b] = int64_t(b) * L * S;
    in.push_back(from_vector(base, batch, {.dtype = kInt64, .device = q.device()}));
  }
  const ops::Attrs a =
      ops::attr::ScaledDotProductAttention{.is_causal = o.is_causal, .scale = scale, .dropout_p = o.dropout_p}.pack();
  Tensor out = ops::call(ops::OpKind::ScaledDotProductAttention, in, a)[0];
  return q.dtype() == dt ? out : cast(out, q.dtype());
}

}  // namespace axle
