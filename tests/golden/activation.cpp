// The activations against PyTorch 2.x (rows: tests/golden/ops_activation.py; harness:
// tests/support/golden_ops.h).
#include "golden_ops.h"

AXLE_GOLDEN_ROWS(Activation, "golden_ops_activation.safetensors",
  {"silu", [](const In& x) { return Out{axle::silu(x[0])}; }},
  {"silu_transposed", [](const In& x) { return Out{axle::silu(x[0].t())}; }},
  {"softplus", [](const In& x) { return Out{axle::softplus(x[0])}; }},
  {"softplus_beta2_threshold5", [](const In& x) { return Out{axle::softplus(x[0], 2, 5)}; }},
  {"leaky_relu", [](const In& x) { return Out{axle::leaky_relu(x[0])}; }},
  {"leaky_relu_slope02", [](const In& x) { return Out{axle::leaky_relu(x[0], 0.2)}; }},
  {"hardtanh", [](const In& x) { return Out{axle::hardtanh(x[0])}; }},
  {"hardtanh_0_6", [](const In& x) { return Out{axle::hardtanh(x[0], 0.0, 6.0)}; }},
  {"masked_fill", [](const In& x) { return Out{axle::masked_fill(x[0], x[1], -1.5)}; }},
  {"masked_fill_broadcast_inf", [](const In& x) { return Out{axle::masked_fill(x[0], x[1], -INFINITY)}; }})
