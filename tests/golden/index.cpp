// scatter, scatter_add, one_hot and embedding against PyTorch 2.x (rows:
// tests/golden/ops_index.py; harness: tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

AXLE_GOLDEN_ROWS(Index, "golden_ops_index.safetensors",
  // ---- scatter (overwrite)
  {"scatter_dim0", [](const In& x) { return Out{scatter(x[0], 0, x[1], x[2])}; }},
  {"scatter_dim1_src_larger", [](const In& x) { return Out{scatter(x[0], 1, x[1], x[2])}; }},
  {"scatter_negative_dim_transposed", [](const In& x) { return Out{scatter(x[0].t(), -1, x[1], x[2].t())}; }},
  {"scatter_value", [](const In& x) { return Out{scatter(x[0], 0, x[1], -2.5)}; }},
  {"scatter_special_values", [](const In& x) { return Out{scatter(x[0], 1, x[1], x[2])}; }},
  {"scatter_0d", [](const In& x) { return Out{scatter(x[0], 0, x[1], x[2])}; }},
  {"scatter_int64", [](const In& x) { return Out{scatter(x[0], 1, x[1], x[2])}; }},
  {"scatter_int32_index", [](const In& x) { return Out{scatter(x[0], 0, x[1], x[2])}; }},
  // ---- scatter_add
  {"scatter_add_repeated", [](const In& x) { return Out{scatter_add(x[0], 0, x[1], x[2])}; }},
  {"scatter_add_dim2_src_larger", [](const In& x) { return Out{scatter_add(x[0], 2, x[1], x[2])}; }},
  {"scatter_add_transposed", [](const In& x) { return Out{scatter_add(x[0].t(), 1, x[1], x[2].t())}; }},
  {"scatter_add_empty_index", [](const In& x) { return Out{scatter_add(x[0], 0, x[1], x[2])}; }},
  {"scatter_add_int64", [](const In& x) { return Out{scatter_add(x[0], 0, x[1], x[2])}; }},
  // ---- one_hot
  {"one_hot", [](const In& x) { return Out{one_hot(x[0], 6)}; }},
  {"one_hot_inferred", [](const In& x) { return Out{one_hot(x[0])}; }},
  {"one_hot_0d", [](const In& x) { return Out{one_hot(x[0], 4)}; }},
  {"one_hot_empty", [](const In& x) { return Out{one_hot(x[0], 3)}; }},
  // ---- embedding
  {"embedding", [](const In& x) { return Out{embedding(x[0], x[1])}; }},
  {"embedding_1d_repeats", [](const In& x) { return Out{embedding(x[0], x[1])}; }},
  {"embedding_transposed_weight", [](const In& x) { return Out{embedding(x[0].t(), x[1])}; }})
