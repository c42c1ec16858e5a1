// scaled_dot_product_attention (no dropout) against PyTorch 2.x (rows:
// tests/golden/ops_attention.py; harness: tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

namespace {
using axle::golden::In;
using axle::golden::Out;
Out sdpa(const In& x, AttentionOptions o = {}) { return Out{scaled_dot_product_attention(x[0], x[1], x[2], o)}; }
Out masked(const In& x) { return sdpa(x, {.attn_mask = x[3]}); }
}  // namespace

AXLE_GOLDEN_ROWS(Attention, "golden_ops_attention.safetensors",
  {"sdpa", [](const In& x) { return sdpa(x); }},
  {"sdpa_3d", [](const In& x) { return sdpa(x); }},
  {"sdpa_causal_odd", [](const In& x) { return sdpa(x, {.is_causal = true}); }},
  {"sdpa_causal_shorter_queries", [](const In& x) { return sdpa(x, {.is_causal = true}); }},
  {"sdpa_causal_longer_queries", [](const In& x) { return sdpa(x, {.is_causal = true}); }},
  {"sdpa_scale", [](const In& x) { return sdpa(x, {.scale = 0.3}); }},
  {"sdpa_bool_mask", masked},
  {"sdpa_bool_mask_per_batch", masked},
  {"sdpa_float_mask", masked},
  {"sdpa_float_mask_inf", masked},
  {"sdpa_bool_mask_fully_masked_row", masked},
  {"sdpa_float_mask_fully_masked_row", masked},
  {"sdpa_transposed_layout", [](const In& x) {
     return Out{scaled_dot_product_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2),
                                             {.is_causal = true})};
   }},
  {"sdpa_broadcast_batch", [](const In& x) { return sdpa(x); }},
  {"sdpa_single_key", [](const In& x) { return sdpa(x); }})
