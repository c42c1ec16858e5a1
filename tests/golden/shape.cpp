// Views and data movement against PyTorch 2.x (rows: tests/golden/ops_shape.py; harness:
// tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

AXLE_GOLDEN_ROWS(Shape, "golden_ops_shape.safetensors",
  // ---- reshape / view
  {"reshape", [](const In& x) { return Out{reshape(x[0], {4, 6})}; }},
  {"reshape_infer", [](const In& x) { return Out{x[0].reshape({3, -1})}; }},
  {"reshape_of_transposed", [](const In& x) { return Out{x[0].t().reshape({-1})}; }},
  {"reshape_to_0d", [](const In& x) { return Out{reshape(x[0], {})}; }},
  {"view", [](const In& x) { return Out{view(x[0], {6, 4})}; }},
  {"view_special", [](const In& x) { return Out{x[0].view({2, 6})}; }},
  // ---- permute / transpose
  {"permute", [](const In& x) { return Out{permute(x[0], {2, 0, 1})}; }},
  {"permute_of_strided_slice", [](const In& x) { return Out{permute(slice(x[0], 1, 0, 7, 2), {1, 0})}; }},
  {"transpose", [](const In& x) { return Out{transpose(x[0], 0, 2)}; }},
  {"transpose_negative", [](const In& x) { return Out{x[0].transpose(-1, -2)}; }},
  {"t", [](const In& x) { return Out{x[0].t()}; }},
  // ---- expand
  {"expand", [](const In& x) { return Out{expand(x[0], {2, 3, 4})}; }},
  {"expand_keep", [](const In& x) { return Out{x[0].expand({3, -1})}; }},
  {"expand_0d", [](const In& x) { return Out{expand(x[0], {2, 3})}; }},
  {"expand_of_transposed", [](const In& x) { return Out{expand(x[0].t(), {2, 4, 3})}; }},
  // ---- squeeze / unsqueeze / flatten
  {"squeeze_dim", [](const In& x) { return Out{squeeze(x[0], 1)}; }},
  {"squeeze_dim_not_one", [](const In& x) { return Out{squeeze(x[0], 0)}; }},
  {"squeeze_all", [](const In& x) { return Out{squeeze(x[0])}; }},
  {"unsqueeze", [](const In& x) { return Out{unsqueeze(x[0], 1)}; }},
  {"unsqueeze_end", [](const In& x) { return Out{x[0].unsqueeze(-1)}; }},
  {"flatten", [](const In& x) { return Out{flatten(x[0])}; }},
  {"flatten_range_of_permuted", [](const In& x) { return Out{permute(x[0], {0, 2, 1, 3}).flatten(1, 2)}; }},
  // ---- slice / narrow
  {"slice_step", [](const In& x) { return Out{slice(x[0], 0, 1, 7, 3)}; }},
  {"slice_negative_step2", [](const In& x) { return Out{slice(x[0], 1, -6, -1, 2)}; }},
  {"slice_clamped", [](const In& x) { return Out{slice(x[0], 1, 2, 100)}; }},
  {"slice_of_transposed", [](const In& x) { return Out{slice(x[0].t(), 0, 1, 6, 2)}; }},
  {"narrow", [](const In& x) { return Out{narrow(x[0], 1, 2, 3)}; }},
  {"narrow_negative_start", [](const In& x) { return Out{x[0].narrow(0, -3, 2)}; }},
  // ---- cat / stack
  {"cat_dim0", [](const In& x) { return Out{cat({x[0], x[1], x[2]}, 0)}; }},
  {"cat_dim1_transposed", [](const In& x) { return Out{cat({x[0], x[1].t()}, 1)}; }},
  {"cat_negative_dim", [](const In& x) { return Out{cat({x[0], x[1]}, -1)}; }},
  {"cat_zero_size", [](const In& x) { return Out{cat({x[0], x[1]}, 0)}; }},
  {"cat_legacy_empty", [](const In& x) { return Out{cat({x[0], x[1]}, 0)}; }},
  {"stack", [](const In& x) { return Out{stack({x[0], x[1], x[2]}, 0)}; }},
  {"stack_last_transposed", [](const In& x) { return Out{stack({x[0].t(), x[1]}, -1)}; }},
  // ---- index_select / gather
  {"index_select_dim0_repeats", [](const In& x) { return Out{index_select(x[0], 0, x[1])}; }},
  {"index_select_dim1_transposed", [](const In& x) { return Out{index_select(x[0].t(), 1, x[1])}; }},
  {"index_select_empty_index", [](const In& x) { return Out{index_select(x[0], 0, x[1])}; }},
  {"gather_dim0", [](const In& x) { return Out{gather(x[0], 0, x[1])}; }},
  {"gather_dim1_smaller_index", [](const In& x) { return Out{gather(x[0], 1, x[1])}; }},
  {"gather_3d_transposed", [](const In& x) { return Out{gather(transpose(x[0], 0, 2), 1, x[1])}; }},
  // ---- tril / triu
  {"tril", [](const In& x) { return Out{tril(x[0])}; }},
  {"tril_diagonal_batched", [](const In& x) { return Out{tril(x[0], 1)}; }},
  {"triu_negative_diagonal", [](const In& x) { return Out{triu(x[0], -1)}; }},
  {"triu_special", [](const In& x) { return Out{triu(x[0])}; }},
  {"tril_of_transposed", [](const In& x) { return Out{tril(x[0].t(), -1)}; }},
  // ---- contiguous copies of views
  {"contiguous_of_transposed", [](const In& x) { return Out{x[0].t().contiguous()}; }},
  {"contiguous_of_strided_slice", [](const In& x) { return Out{slice(slice(x[0], 0, 0, 5, 2), 1, 1, 4).contiguous()}; }},
  {"clone", [](const In& x) { return Out{x[0].clone()}; }},
  // ---- empty tensors
  {"reshape_zero_size", [](const In& x) { return Out{reshape(x[0], {2, 0, 2})}; }},
  {"permute_zero_size", [](const In& x) { return Out{permute(x[0], {1, 0})}; }},
  {"slice_to_empty", [](const In& x) { return Out{slice(x[0], 1, 3, 3)}; }},
  {"expand_zero_size", [](const In& x) { return Out{expand(x[0], {3, 0})}; }})
