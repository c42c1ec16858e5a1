// Lowered aten ops, part: what a GPT written in torch.nn reaches beyond elementwise math and
// matrix products: embedding and its dense backward, native_layer_norm and its backward,
// gelu_backward, tril / triu, and scaled dot-product attention as axle's fused op (online
// softmax, no L x S buffer) with its own backward.
//
// Attention: PyTorch's scaled_dot_product_attention (CompositeImplicitAutograd) picks its
// kernel through _fused_sdp_choice_stub, a DispatchStub with slots for cpu, cuda, hip, mps,
// mtia, xpu, hpu and PrivateUse1 only: for the XLA device type it always takes the math path
// (matmul, _safe_softmax, dropout, matmul: the L x S scores materialised, and softmax is not
// ours). So this file registers scaled_dot_product_attention itself at AutogradXLA: where
// _fused_sdp_choice (also registered for XLA here) says "overrideable" it calls
// _scaled_dot_product_fused_attention_overrideable, whose autograd formula (PyTorch's
// derivatives.yaml) calls _scaled_dot_product_fused_attention_overrideable_backward; both are
// lowered below onto ScaledDotProductAttention / ScaledDotProductAttentionBackward. Every
// other call (an attn_mask, grouped-query attention, batch dims that broadcast, a dtype other
// than float32, the backend disabled by torch.nn.attention.sdpa_kernel) runs PyTorch's own
// composite kernel, i.e. the math path.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <cmath>

#include "axle/generator.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "bridge.h"
#include "ops/op.h"

namespace axle_py {
namespace {

using at::Tensor;
using c10::IntArrayRef;
using std::optional;
namespace ops = axle::ops;

/// An empty (0-element) xla tensor of dtype t: the placeholder outputs of the fused attention.
axle::Tensor empty_of(axle::DType t) { return axle::zeros({0}, {.dtype = t, .device = axle::device()}); }

// ------------------------------------------------------------------ embedding
Tensor embedding(const Tensor& weight, const Tensor& indices, c10::SymInt padding_idx, bool scale_grad_by_freq,
                 bool sparse) {
  axle::Tensor w = ax(weight, "embedding"), idx = ax(indices, "embedding");
  TORCH_CHECK(w.dim() == 2, "'weight' must be 2-D");
  TORCH_CHECK(idx.dtype() == axle::kInt64 || idx.dtype() == axle::kInt32,
              "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
              c10::toString(indices.scalar_type()), " instead (while checking arguments for embedding)");
  return wrap(axle::embedding(w, idx));
}

/// The weight's gradient: zeros [num_weights, D] with each grad row added at its index
/// (axle's IndexAdd), rows at padding_idx dropped, and with scale_grad_by_freq each row
/// divided by how often its index occurs in `indices` (PyTorch's rules).
Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices, c10::SymInt num_weights_,
                                c10::SymInt padding_idx_, bool scale_grad_by_freq) {
  const int64_t num_weights = num_weights_.expect_int(), padding_idx = padding_idx_.expect_int();
  axle::Tensor g = ax(grad_output, "embedding_dense_backward");
  axle::Tensor idx = cast_to(ax(indices, "embedding_dense_backward"), axle::kInt64);
  const int64_t n = idx.numel();
  const int64_t D = g.dim() == 0 ? 1 : g.shape().back();
  TORCH_CHECK(g.numel() == n * D, "[embedding_dense_backward] expected a gradient of ", n, " rows of ", D,
              ", got shape ", grad_output.sizes());
  idx = axle::reshape(idx, {n});
  g = axle::reshape(g, {n, D});
  if (padding_idx >= 0) {
    axle::Tensor keep = cast_to(axle::ne(idx, scalar(double(padding_idx), axle::kInt64)), g.dtype());
    g = axle::mul(g, axle::unsqueeze(keep, 1));
  }
  if (scale_grad_by_freq && n > 0) {
    axle::Tensor one = axle::expand(scalar(1, g.dtype()), {n});
    axle::Tensor counts = ops::call1(ops::OpKind::IndexAdd, {one, idx},
                                     ops::attr::IndexAdd{.dim = 0, .input_shape = {num_weights}}.pack());
    g = axle::div(g, axle::unsqueeze(axle::index_select(counts, 0, idx), 1));
  }
  if (n == 0) return wrap(axle::zeros({num_weights, D}, {.dtype = g.dtype(), .device = axle::device()}));
  return wrap(ops::call1(ops::OpKind::IndexAdd, {g, idx},
                         ops::attr::IndexAdd{.dim = 0, .input_shape = {num_weights, D}}.pack()));
}

// ------------------------------------------------------------------ layer norm
/// The normalized dims (the last k of an n-D input) and the dims before them.
struct LnDims {
  axle::Shape norm, batch;
};
LnDims ln_dims(int64_t rank, IntArrayRef normalized_shape, const char* op) {
  const int64_t k = int64_t(normalized_shape.size());
  TORCH_CHECK(k >= 1 && k <= rank, "[", op, "] expected 1..", rank, " normalized dims, got ", normalized_shape);
  LnDims d;
  for (int64_t i = 0; i < rank - k; ++i) d.batch.push_back(i);
  for (int64_t i = rank - k; i < rank; ++i) d.norm.push_back(i);
  return d;
}

void check_ln_input(const Tensor& input, IntArrayRef normalized_shape, const optional<Tensor>& weight,
                    const optional<Tensor>& bias) {
  const auto in = input.sizes();
  const size_t k = normalized_shape.size();
  bool ok = k >= 1 && in.size() >= k;
  for (size_t i = 0; ok && i < k; ++i) ok = in[in.size() - k + i] == normalized_shape[i];
  TORCH_CHECK(ok, "Given normalized_shape=", normalized_shape, ", expected input with shape [*",
              [&] {
                std::string s;
                for (int64_t v : normalized_shape) s += ", " + std::to_string(v);
                return s;
              }(),
              "], but got input of size", in);
  if (weight && weight->defined())
    TORCH_CHECK(weight->sizes() == normalized_shape, "Expected weight to be of same shape as normalized_shape, but got ",
                "weight of shape ", weight->sizes(), " and normalized_shape = ", normalized_shape);
  if (bias && bias->defined())
    TORCH_CHECK(bias->sizes() == normalized_shape, "Expected bias to be of same shape as normalized_shape, but got ",
                "bias of shape ", bias->sizes(), " and normalized_shape = ", normalized_shape);
}

/// (y, mean, rstd): mean and rstd keep the normalized dims as 1 ([*, 1, ..., 1]), as PyTorch's.
/// The variance is the biased one, mean((x - mean)^2), computed from the centred input.
std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input, c10::SymIntArrayRef normalized_shape_,
                                                     const optional<Tensor>& weight, const optional<Tensor>& bias,
                                                     double eps) {
  IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_);
  check_ln_input(input, normalized_shape, weight, bias);
  axle::Tensor x = ax(input, "native_layer_norm");
  TORCH_CHECK(x.dtype() == axle::kFloat32, "[native_layer_norm] expected a float32 input on the xla device, got ",
              c10::toString(input.scalar_type()));
  const LnDims d = ln_dims(x.dim(), normalized_shape, "native_layer_norm");
  if (x.numel() == 0) {
    axle::Shape stat = x.shape();
    for (int64_t i : d.norm) stat[size_t(i)] = 1;
    axle::Tensor e = axle::zeros(stat, {.device = axle::device()});
    return {wrap(x), wrap(e), wrap(e)};
  }
  axle::Tensor mu = axle::mean(x, d.norm, true);
  axle::Tensor c = axle::sub(x, mu);
  axle::Tensor var = axle::mean(axle::mul(c, c), d.norm, true);
  axle::Tensor rstd = axle::rsqrt(axle::add(var, eps));
  axle::Tensor y = axle::mul(c, rstd);
  if (weight && weight->defined()) y = axle::mul(y, ax(*weight, "native_layer_norm"));
  if (bias && bias->defined()) y = axle::add(y, ax(*bias, "native_layer_norm"));
  return {wrap(y), wrap(mu), wrap(rstd)};
}

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the normalized dims, g = dy * weight,
/// xhat = (x - mean) * rstd from the saved statistics; dweight = sum(dy * xhat), dbias = sum(dy)
/// over the dims before them. Undefined where output_mask says so or there is no weight/bias.
std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(const Tensor& grad_out, const Tensor& input,
                                                              c10::SymIntArrayRef normalized_shape_,
                                                              const Tensor& mean, const Tensor& rstd,
                                                              const optional<Tensor>& weight,
                                                              const optional<Tensor>& bias,
                                                              std::array<bool, 3> output_mask) {
  IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_);
  const char* op = "native_layer_norm_backward";
  axle::Tensor dy = ax(grad_out, op), x = ax(input, op), mu = ax(mean, op), rs = ax(rstd, op);
  const LnDims d = ln_dims(x.dim(), normalized_shape, op);
  const bool has_w = weight && weight->defined(), has_b = bias && bias->defined();
  Tensor dx, dw, db;
  if (x.numel() == 0) {
    if (output_mask[0]) dx = wrap(axle::zeros(x.shape(), {.device = axle::device()}));
    if (output_mask[1] && has_w) dw = wrap(axle::zeros(vec(normalized_shape), {.device = axle::device()}));
    if (output_mask[2] && has_b) db = wrap(axle::zeros(vec(normalized_shape), {.device = axle::device()}));
    return {dx, dw, db};
  }
  axle::Tensor xhat = axle::mul(axle::sub(x, mu), rs);
  auto over_batch = [&](const axle::Tensor& t) { return d.batch.empty() ? t : axle::sum(t, d.batch, false); };
  if (output_mask[0]) {
    axle::Tensor g = has_w ? axle::mul(dy, ax(*weight, op)) : dy;
    axle::Tensor a = axle::mean(g, d.norm, true);
    axle::Tensor b = axle::mean(axle::mul(g, xhat), d.norm, true);
    dx = wrap(axle::mul(rs, axle::sub(axle::sub(g, a), axle::mul(xhat, b))));
  }
  if (output_mask[1] && has_w) dw = wrap(over_batch(axle::mul(dy, xhat)));
  if (output_mask[2] && has_b) db = wrap(over_batch(dy));
  return {dx, dw, db};
}

// ------------------------------------------------------------------ gelu, triangles
Tensor gelu_backward(const Tensor& grad, const Tensor& self, c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  axle::Tensor g = ax(grad, "gelu_backward"), x = ax(self, "gelu_backward");
  TORCH_CHECK(ops::same_float(x, g), "[gelu_backward] expected float32 or bfloat16 tensors of one dtype on the xla ",
              "device, got ", c10::toString(self.scalar_type()), " and ", c10::toString(grad.scalar_type()));
  return wrap(ops::call1(ops::OpKind::GeluBackward, {g, x}, ops::attr::GeluBackward{.tanh = approximate == "tanh"}.pack()));
}

Tensor tril(const Tensor& self, c10::SymInt diagonal) {
  axle::Tensor x = ax(self, "tril");
  TORCH_CHECK(x.dim() >= 2, "tril: input tensor must have at least 2 dimensions");
  return wrap(axle::tril(x, diagonal.expect_int()));
}
Tensor triu(const Tensor& self, c10::SymInt diagonal) {
  axle::Tensor x = ax(self, "triu");
  TORCH_CHECK(x.dim() >= 2, "triu: input tensor must have at least 2 dimensions");
  return wrap(axle::triu(x, diagonal.expect_int()));
}

// ---- what PyTorch's _safe_softmax (the math attention path's softmax, a CompositeExplicitAutograd
// kernel that runs below functionalization) calls besides softmax: isneginf and where's out= form ----
Tensor isneginf(const Tensor& self) {
  axle::Tensor x = ax(self, "isneginf");
  if (x.dtype() != axle::kFloat32) return wrap(axle::ne(x, x));  // integers and bools: never infinite
  return wrap(axle::eq(x, scalar(-INFINITY, axle::kFloat32)));
}
Tensor isposinf(const Tensor& self) {
  axle::Tensor x = ax(self, "isposinf");
  if (x.dtype() != axle::kFloat32) return wrap(axle::ne(x, x));
  return wrap(axle::eq(x, scalar(INFINITY, axle::kFloat32)));
}
Tensor& where_out(const Tensor& cond, const Tensor& self, const Tensor& other, Tensor& out) {
  at::ScalarType rt = at::result_type(self, other);
  axle::Tensor a = cast_to(ax(self, "where"), rt), b = cast_to(ax(other, "where"), rt);
  axle::Tensor r = axle::where(cast_to(ax(cond, "where"), axle::kBool), a, b);
  impl_of(out, "where")->reset(cast_to(r, out.scalar_type()));
  return out;
}

// ------------------------------------------------------------------ scaled dot-product attention
/// Whether axle's fused attention runs this call: float32 q, k, v of one rank >= 2 and one batch
/// shape (no broadcasting), matching head dims, no mask, no grouped-query attention, and the
/// overrideable backend not disabled (torch.nn.attention.sdpa_kernel).
bool fused_fits(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask, double dropout_p,
                bool enable_gqa) {
  if (!at::globalContext().userEnabledOverrideableSDP()) return false;
  if (mask && mask->defined()) return false;
  if (!is_xla(q) || !is_xla(k) || !is_xla(v)) return false;
  if (q.scalar_type() != at::kFloat || k.scalar_type() != at::kFloat || v.scalar_type() != at::kFloat) return false;
  if (q.dim() < 2 || q.dim() != k.dim() || q.dim() != v.dim()) return false;
  const int64_t n = q.dim();
  for (int64_t i = 0; i < n - 2; ++i)
    if (q.size(i) != k.size(i) || q.size(i) != v.size(i)) return false;  // also rules out GQA's head counts
  if (q.size(-1) != k.size(-1) || k.size(-2) != v.size(-2)) return false;
  if (q.size(-2) == 0 || k.size(-2) == 0 || q.size(-1) == 0) return false;
  if (dropout_p < 0.0 || dropout_p >= 1.0) return false;
  (void)enable_gqa;  // with equal head counts grouped-query attention is plain attention
  return true;
}

int64_t fused_sdp_choice(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
                         double dropout_p, bool is_causal, optional<double> scale, bool enable_gqa) {
  return int64_t(fused_fits(q, k, v, mask, dropout_p, enable_gqa) ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

/// At AutogradXLA, in place of PyTorch's composite (whose choice stub has no XLA slot): the
/// fused overrideable op where it fits (its autograd formula gives the backward), else the
/// composite itself (the math path).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
                                    double dropout_p, bool is_causal, optional<double> scale, bool enable_gqa) {
  if (fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa) ==
      int64_t(at::SDPBackend::overrideable)) {
    TORCH_CHECK(!(is_causal && mask && mask->defined()),
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True");
    return std::get<0>(at::_scaled_dot_product_fused_attention_overrideable(q, k, v, std::nullopt, dropout_p, is_causal,
                                                                           /*return_debug_mask=*/false, scale));
  }
  return at::native::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

double sdpa_scale(const axle::Tensor& q, optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(double(q.shape().back()));
}

/// (output, logsumexp [..., L], cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset,
/// debug_attn_mask). With dropout, philox_seed is axle's rng operand (int64 [2]: generator seed,
/// first Philox block) and philox_offset its base operand (int64 [batch...]: each batch entry's
/// first weight index), which the backward hands back to regenerate the same keep mask; without,
/// they and the cumulative-sequence outputs are empty.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> sdpa_fused(
    const Tensor& query, const Tensor& key, const Tensor& value, const optional<Tensor>& attn_bias, double dropout_p,
    bool is_causal, bool return_debug_mask, optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable";
  TORCH_CHECK(!(attn_bias && attn_bias->defined()), "[", op, "] an attention bias is not lowered to axle's fused op");
  TORCH_CHECK(!return_debug_mask, "[", op, "] return_debug_mask is not supported on the xla device");
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "[", op, "] expected dropout_p in [0, 1), got ", dropout_p);
  axle::Tensor q = ax(query, op), k = ax(key, op), v = ax(value, op);
  ops::Tensors in = {q, k, v};
  axle::Tensor rng = empty_of(axle::kInt64), base = empty_of(axle::kInt64);
  const int64_t L = q.dim() >= 2 ? q.shape()[size_t(q.dim() - 2)] : 0;
  const int64_t S = k.dim() >= 2 ? k.shape()[size_t(k.dim() - 2)] : 0;
  if (dropout_p > 0.0) {
    // One reservation of the default generator's counter-based stream per call: the keep mask of
    // weight i (in batch-major order) is a pure function of (seed, offset, i), as axle's own
    // scaled_dot_product_attention draws it.
    axle::Shape batch(q.shape().begin(), q.shape().end() - 2);
    int64_t nb = 1;
    for (int64_t b : batch) nb *= b;
    axle::Generator& g = axle::default_generator();
    const uint64_t offset = g.reserve(uint64_t((nb * L * S + 3) / 4));
    rng = axle::from_vector(std::vector<int64_t>{int64_t(g.seed()), int64_t(offset)}, {2},
                            {.dtype = axle::kInt64, .device = axle::device()});
    std::vector<int64_t> b(static_cast<size_t>(nb));
    for (size_t i = 0; i < b.size(); ++i) b[i] = int64_t(i) * L * S;
    base = axle::from_vector(b, batch, {.dtype = axle::kInt64, .device = axle::device()});
    in.push_back(rng);
    in.push_back(base);
  }
  const ops::Attrs a = ops::attr::ScaledDotProductAttention{
      .is_causal = is_causal, .scale = sdpa_scale(q, scale), .dropout_p = dropout_p}.pack();
  ops::Tensors r = ops::call(ops::OpKind::ScaledDotProductAttention, in, a);
  return {wrap(r[0]), wrap(axle::squeeze(r[1], -1)), wrap(empty_of(axle::kInt64)), wrap(empty_of(axle::kInt64)),
          c10::SymInt(L), c10::SymInt(S), wrap(rng), wrap(base), wrap(empty_of(axle::kFloat32))};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> sdpa_fused_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask, const Tensor& out, const Tensor& logsumexp, const Tensor& cum_seq_q,
    const Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const Tensor& philox_seed, const Tensor& philox_offset, optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable_backward";
  TORCH_CHECK(!attn_bias.defined(), "[", op, "] an attention bias is not lowered to axle's fused op");
  axle::Tensor q = ax(query, op);
  ops::Tensors in = {ax(grad_out, op), q, ax(key, op), ax(value, op), ax(out, op),
                     axle::unsqueeze(ax(logsumexp, op), -1)};
  if (dropout_p > 0.0) {
    in.push_back(ax(philox_seed, op));
    in.push_back(ax(philox_offset, op));
  }
  const ops::Attrs a = ops::attr::ScaledDotProductAttentionBackward{
      .is_causal = is_causal, .scale = sdpa_scale(q, scale), .dropout_p = dropout_p}.pack();
  ops::Tensors g = ops::call(ops::OpKind::ScaledDotProductAttentionBackward, in, a);
  return {grad_input_mask[0] ? wrap(g[0]) : Tensor(), grad_input_mask[1] ? wrap(g[1]) : Tensor(),
          grad_input_mask[2] ? wrap(g[2]) : Tensor(), Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, XLA, m) {
  m.impl("embedding", TORCH_FN(embedding));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("gelu_backward", TORCH_FN(gelu_backward));
  m.impl("tril", TORCH_FN(tril));
  m.impl("isneginf", TORCH_FN(isneginf));
  m.impl("isposinf", TORCH_FN(isposinf));
  m.impl("where.self_out", TORCH_FN(where_out));
  m.impl("triu", TORCH_FN(triu));
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_fused));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_fused_backward));
}

TORCH_LIBRARY_IMPL(aten, AutogradXLA, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(scaled_dot_product_attention));
}

}  // namespace axle_py
