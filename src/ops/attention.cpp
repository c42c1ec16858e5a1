// scaled_dot_product_attention. For now the decomposed form (matmul, mask, softmax, dropout,
// matmul), which materialises the L x S scores; the fused op replaces it (issue 15).
#include <cmath>
#include <limits>

#include "axle/ops.h"
#include "ops/op.h"

namespace axle {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  ops::check_defined(q, "scaled_dot_product_attention", "query");
  ops::check_defined(k, "scaled_dot_product_attention", "key");
  ops::check_defined(v, "scaled_dot_product_attention", "value");
  AXLE_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
             "[scaled_dot_product_attention] expected query, key and value of at least 2 dims, got ",
             shape_str(q.shape()), ", ", shape_str(k.shape()), " and ", shape_str(v.shape()));
  AXLE_CHECK(!(o.is_causal && o.attn_mask.defined()),
             "[scaled_dot_product_attention] expected is_causal or attn_mask, got both");
  const int64_t E = q.shape().back();
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(E));
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
  Tensor p = softmax(s, -1);
  if (o.dropout_p > 0) p = dropout(p, o.dropout_p, true, o.generator);
  return matmul(p, v);
}

}  // namespace axle
