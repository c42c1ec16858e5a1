// matmul and linear against PyTorch 2.x (rows: tests/golden/ops_linalg.py; harness:
// tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

namespace {
using axle::golden::In;
using axle::golden::Out;
Out mm(const In& x) { return Out{matmul(x[0], x[1])}; }
}  // namespace

AXLE_GOLDEN_ROWS(Linalg, "golden_ops_linalg.safetensors",
  {"matmul_2d", mm},
  {"matmul_dot", mm},
  {"matmul_vec_mat", mm},
  {"matmul_mat_vec", mm},
  {"matmul_batched", mm},
  {"matmul_batched_2d", mm},
  {"matmul_2d_batched", mm},
  {"matmul_broadcast_batch", mm},
  {"matmul_vec_batched", mm},
  {"matmul_batched_vec", mm},
  {"matmul_transposed", [](const In& x) { return Out{matmul(x[0].t(), x[1].t())}; }},
  {"matmul_strided", [](const In& x) { return Out{matmul(slice(x[0], 2, 0, 8, 2), transpose(x[1], 1, 2))}; }},
  {"matmul_batched_permuted", [](const In& x) { return Out{matmul(permute(x[0], {1, 0, 2}), x[1])}; }},
  {"matmul_special", mm},
  {"matmul_zero_inner", mm},
  {"matmul_empty_batch", mm},
  {"linear", [](const In& x) { return Out{linear(x[0], x[1], x[2])}; }},
  {"linear_no_bias", [](const In& x) { return Out{linear(x[0], x[1])}; }},
  {"linear_3d", [](const In& x) { return Out{linear(x[0], x[1], x[2])}; }},
  {"linear_1d", [](const In& x) { return Out{linear(x[0], x[1], x[2])}; }},
  {"linear_transposed_weight", [](const In& x) { return Out{linear(x[0], x[1].t(), x[2])}; }},
  {"linear_transposed_input", [](const In& x) { return Out{linear(transpose(x[0], 0, 1), x[1])}; }},
  {"linear_strided_input", [](const In& x) { return Out{linear(slice(x[0], 1, 0, 8, 2), x[1], x[2])}; }},
  {"linear_empty_batch", [](const In& x) { return Out{linear(x[0], x[1], x[2])}; }})
