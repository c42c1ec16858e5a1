// pad, interpolate and einsum against PyTorch 2.x (rows: tests/golden/ops_resample.py;
// harness: tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

namespace {
Tensor bilinear(const Tensor& x, std::vector<int64_t> size, bool align) {
  return interpolate(x, {.size = std::move(size), .mode = "bilinear", .align_corners = align});
}
Tensor bilinear_scale(const Tensor& x, std::vector<double> scale, bool align) {
  return interpolate(x, {.scale_factor = std::move(scale), .mode = "bilinear", .align_corners = align});
}
Tensor interp(const Tensor& x, std::vector<int64_t> size, const std::string& mode, std::optional<bool> align = {}) {
  return interpolate(x, {.size = std::move(size), .mode = mode, .align_corners = align});
}
Tensor aa(const Tensor& x, std::vector<int64_t> size, const std::string& mode) {
  return interpolate(x, {.size = std::move(size), .mode = mode, .antialias = true});
}
}  // namespace

AXLE_GOLDEN_ROWS(Resample, "golden_ops_resample.safetensors",
  // ---- pad: constant
  {"pad_constant", [](const In& x) { return Out{pad(x[0], {1, 2}, "constant", 0.5)}; }},
  {"pad_constant_two_dims", [](const In& x) { return Out{pad(x[0], {2, 0, 1, 3})}; }},
  {"pad_constant_negative", [](const In& x) { return Out{pad(x[0], {-1, 2, 1, -2})}; }},
  {"pad_constant_all_dims_transposed", [](const In& x) { return Out{pad(transpose(x[0], 0, 2), {1, 0, 0, 1, 2, 1}, "constant", -1)}; }},
  {"pad_constant_inf_value", [](const In& x) { return Out{pad(x[0], {1, 1}, "constant", -INFINITY)}; }},
  {"pad_constant_special", [](const In& x) { return Out{pad(x[0], {0, 2, 1, 0})}; }},
  {"pad_constant_empty", [](const In& x) { return Out{pad(x[0], {1, 1})}; }},
  {"pad_constant_int64", [](const In& x) { return Out{pad(x[0], {2, 1}, "constant", 7)}; }},
  // ---- pad: reflect
  {"pad_reflect_1d", [](const In& x) { return Out{pad(x[0], {2, 4}, "reflect")}; }},
  {"pad_reflect_1d_unbatched", [](const In& x) { return Out{pad(x[0], {3, 1}, "reflect")}; }},
  {"pad_reflect_2d", [](const In& x) { return Out{pad(x[0], {1, 3, 3, 2}, "reflect")}; }},
  {"pad_reflect_2d_unbatched_transposed", [](const In& x) { return Out{pad(transpose(x[0], 1, 2), {1, 2, 2, 1}, "reflect")}; }},
  {"pad_reflect_3d", [](const In& x) { return Out{pad(x[0], {1, 1, 2, 0, 0, 1}, "reflect")}; }},
  {"pad_reflect_negative", [](const In& x) { return Out{pad(x[0], {-1, 3}, "reflect")}; }},
  {"pad_reflect_empty_batch", [](const In& x) { return Out{pad(x[0], {1, 1}, "reflect")}; }},
  // ---- pad: replicate
  {"pad_replicate_1d", [](const In& x) { return Out{pad(x[0], {3, 2}, "replicate")}; }},
  {"pad_replicate_2d", [](const In& x) { return Out{pad(x[0], {2, 1, 1, 3}, "replicate")}; }},
  {"pad_replicate_3d", [](const In& x) { return Out{pad(x[0], {1, 1, 0, 2, 1, 0}, "replicate")}; }},
  {"pad_replicate_negative", [](const In& x) { return Out{pad(x[0], {2, -1, -1, 1}, "replicate")}; }},
  {"pad_replicate_special", [](const In& x) { return Out{pad(x[0], {1, 2}, "replicate")}; }},
  // ---- interpolate: nearest
  {"nearest_size_1d", [](const In& x) { return Out{interpolate(x[0], {.size = {7}})}; }},
  {"nearest_size_down", [](const In& x) { return Out{interpolate(x[0], {.size = {3, 2}})}; }},
  {"nearest_scale_2", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {2}})}; }},
  {"nearest_scale_fraction", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {1.5, 1.7}})}; }},
  {"nearest_scale_recompute",
   [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {1.5, 1.7}, .recompute_scale_factor = true})}; }},
  {"nearest_scale_down", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {0.6}})}; }},
  {"nearest_5d", [](const In& x) { return Out{interpolate(x[0], {.size = {3, 2, 5}})}; }},
  {"nearest_transposed", [](const In& x) { return Out{interpolate(transpose(x[0], 2, 3), {.size = {5, 4}})}; }},
  {"nearest_special", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {2}})}; }},
  // ---- interpolate: bilinear
  {"bilinear_up_noalign", [](const In& x) { return Out{bilinear(x[0], {5, 7}, false)}; }},
  {"bilinear_down_noalign", [](const In& x) { return Out{bilinear(x[0], {3, 2}, false)}; }},
  {"bilinear_scale_noalign", [](const In& x) { return Out{bilinear_scale(x[0], {1.5, 2.5}, false)}; }},
  {"bilinear_to_one_noalign", [](const In& x) { return Out{bilinear(x[0], {1, 3}, false)}; }},
  {"bilinear_up_align", [](const In& x) { return Out{bilinear(x[0], {5, 7}, true)}; }},
  {"bilinear_down_align", [](const In& x) { return Out{bilinear(x[0], {3, 2}, true)}; }},
  {"bilinear_scale_align", [](const In& x) { return Out{bilinear_scale(x[0], {1.5, 2.5}, true)}; }},
  {"bilinear_to_one_align", [](const In& x) { return Out{bilinear(x[0], {1, 3}, true)}; }},
  {"bilinear_scale_recompute", [](const In& x) {
     return Out{interpolate(x[0], {.scale_factor = {0.6}, .mode = "bilinear", .recompute_scale_factor = true})};
   }},
  {"bilinear_scale_down", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {0.6}, .mode = "bilinear"})}; }},
  {"bilinear_transposed", [](const In& x) {
     return Out{interpolate(transpose(x[0], 2, 3), {.scale_factor = {2}, .mode = "bilinear"})};
   }},
  {"bilinear_special", [](const In& x) { return Out{interpolate(x[0], {.size = {3, 5}, .mode = "bilinear"})}; }},
  {"bilinear_same_size", [](const In& x) { return Out{interpolate(x[0], {.size = {3, 4}, .mode = "bilinear"})}; }},
  // ---- pad: circular
  {"pad_circular_1d", [](const In& x) { return Out{pad(x[0], {2, 3}, "circular")}; }},
  {"pad_circular_1d_unbatched", [](const In& x) { return Out{pad(x[0], {1, 2}, "circular")}; }},
  {"pad_circular_2d", [](const In& x) { return Out{pad(x[0], {1, 2, 2, 1}, "circular")}; }},
  {"pad_circular_3d", [](const In& x) { return Out{pad(x[0], {1, 0, 2, 1, 1, 1}, "circular")}; }},
  {"pad_circular_full_wrap", [](const In& x) { return Out{pad(x[0], {5, 5}, "circular")}; }},
  {"pad_circular_negative_left", [](const In& x) { return Out{pad(x[0], {-1, 2}, "circular")}; }},
  {"pad_circular_negative_right", [](const In& x) { return Out{pad(x[0], {2, -1, 1, -2}, "circular")}; }},
  {"pad_circular_transposed", [](const In& x) { return Out{pad(transpose(x[0], 2, 3), {1, 1, 2, 0}, "circular")}; }},
  // ---- interpolate: nearest-exact
  {"nearest_exact_size_1d", [](const In& x) { return Out{interp(x[0], {7}, "nearest-exact")}; }},
  {"nearest_exact_size_down", [](const In& x) { return Out{interp(x[0], {3, 2}, "nearest-exact")}; }},
  {"nearest_exact_scale_fraction",
   [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {1.5, 1.7}, .mode = "nearest-exact"})}; }},
  {"nearest_exact_scale_down",
   [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {0.6}, .mode = "nearest-exact"})}; }},
  {"nearest_exact_5d", [](const In& x) { return Out{interp(x[0], {3, 2, 5}, "nearest-exact")}; }},
  // ---- interpolate: linear, trilinear
  {"linear_up_noalign", [](const In& x) { return Out{interp(x[0], {9}, "linear", false)}; }},
  {"linear_down_noalign", [](const In& x) { return Out{interp(x[0], {3}, "linear", false)}; }},
  {"trilinear_noalign", [](const In& x) { return Out{interp(x[0], {3, 5, 2}, "trilinear", false)}; }},
  {"linear_up_align", [](const In& x) { return Out{interp(x[0], {9}, "linear", true)}; }},
  {"linear_down_align", [](const In& x) { return Out{interp(x[0], {3}, "linear", true)}; }},
  {"trilinear_align", [](const In& x) { return Out{interp(x[0], {3, 5, 2}, "trilinear", true)}; }},
  {"linear_scale", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {1.7}, .mode = "linear"})}; }},
  // ---- interpolate: bicubic
  {"bicubic_up_noalign", [](const In& x) { return Out{interp(x[0], {5, 7}, "bicubic", false)}; }},
  {"bicubic_down_noalign", [](const In& x) { return Out{interp(x[0], {3, 2}, "bicubic", false)}; }},
  {"bicubic_up_align", [](const In& x) { return Out{interp(x[0], {5, 7}, "bicubic", true)}; }},
  {"bicubic_down_align", [](const In& x) { return Out{interp(x[0], {3, 2}, "bicubic", true)}; }},
  {"bicubic_scale", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {1.5, 2.5}, .mode = "bicubic"})}; }},
  {"bicubic_same_size", [](const In& x) { return Out{interp(x[0], {3, 4}, "bicubic")}; }},
  {"bicubic_transposed",
   [](const In& x) { return Out{interpolate(transpose(x[0], 2, 3), {.scale_factor = {2}, .mode = "bicubic"})}; }},
  // ---- interpolate: area
  {"area_1d", [](const In& x) { return Out{interp(x[0], {3}, "area")}; }},
  {"area_2d", [](const In& x) { return Out{interp(x[0], {3, 4}, "area")}; }},
  {"area_2d_up", [](const In& x) { return Out{interp(x[0], {5, 4}, "area")}; }},
  {"area_scale", [](const In& x) { return Out{interpolate(x[0], {.scale_factor = {0.5}, .mode = "area"})}; }},
  {"area_3d", [](const In& x) { return Out{interp(x[0], {2, 3, 2}, "area")}; }},
  // ---- interpolate: antialias
  {"bilinear_antialias_down", [](const In& x) { return Out{aa(x[0], {4, 3}, "bilinear")}; }},
  {"bilinear_antialias_scale", [](const In& x) {
     return Out{interpolate(x[0], {.scale_factor = {0.4}, .mode = "bilinear", .antialias = true})};
   }},
  {"bilinear_antialias_up", [](const In& x) { return Out{aa(x[0], {6, 5}, "bilinear")}; }},
  {"bilinear_antialias_one_dim", [](const In& x) { return Out{aa(x[0], {5, 3}, "bilinear")}; }},
  {"bicubic_antialias_down", [](const In& x) { return Out{aa(x[0], {4, 3}, "bicubic")}; }},
  {"bicubic_antialias_scale", [](const In& x) {
     return Out{interpolate(x[0], {.scale_factor = {0.4}, .mode = "bicubic", .antialias = true})};
   }},
  {"bicubic_antialias_up", [](const In& x) { return Out{aa(x[0], {6, 5}, "bicubic")}; }},
  {"bicubic_antialias_one_dim", [](const In& x) { return Out{aa(x[0], {5, 3}, "bicubic")}; }},
  {"bilinear_antialias_align", [](const In& x) {
     return Out{interpolate(x[0], {.size = {3, 4}, .mode = "bilinear", .align_corners = true, .antialias = true})};
   }},
  // ---- einsum
  {"einsum_matmul", [](const In& x) { return Out{einsum("ij,jk->ik", {x[0], x[1]})}; }},
  {"einsum_implicit", [](const In& x) { return Out{einsum("ij,jk", {x[0], x[1]})}; }},
  {"einsum_implicit_order", [](const In& x) { return Out{einsum("bA", {x[0]})}; }},
  {"einsum_batched", [](const In& x) { return Out{einsum("bij,bjk->bik", {x[0], x[1]})}; }},
  {"einsum_transposed_operands", [](const In& x) { return Out{einsum("ji,kj->ik", {x[0].t(), x[1].t()})}; }},
  {"einsum_ellipsis_broadcast", [](const In& x) { return Out{einsum("...ij,...jk->...ik", {x[0], x[1]})}; }},
  {"einsum_ellipsis_implicit", [](const In& x) { return Out{einsum("...i,...i", {x[0], x[1]})}; }},
  {"einsum_ellipsis_summed", [](const In& x) { return Out{einsum("...ij->ij", {x[0]})}; }},
  {"einsum_ellipsis_middle", [](const In& x) { return Out{einsum("i...j->j...i", {x[0]})}; }},
  {"einsum_diagonal", [](const In& x) { return Out{einsum("ii->i", {x[0]})}; }},
  {"einsum_trace_batched", [](const In& x) { return Out{einsum("bii", {x[0]})}; }},
  {"einsum_diagonal_with_other", [](const In& x) { return Out{einsum("iji,j->ij", {x[0], x[1]})}; }},
  {"einsum_outer", [](const In& x) { return Out{einsum("i,j->ij", {x[0], x[1]})}; }},
  {"einsum_dot", [](const In& x) { return Out{einsum("i,i", {x[0], x[1]})}; }},
  {"einsum_sum_permute", [](const In& x) { return Out{einsum("ijk->kj", {x[0]})}; }},
  {"einsum_three", [](const In& x) { return Out{einsum("ij,jk,kl->il", {x[0], x[1], x[2]})}; }},
  {"einsum_bilinear", [](const In& x) { return Out{einsum("bn,anm,bm->ba", {x[0], x[1], x[2]})}; }},
  {"einsum_attention_scores", [](const In& x) { return Out{einsum("bhqd,bhkd->bhqk", {x[0], x[1]})}; }},
  {"einsum_broadcast_label", [](const In& x) { return Out{einsum("ij,j->i", {x[0], x[1]})}; }},
  {"einsum_empty_dim", [](const In& x) { return Out{einsum("ij,jk->ik", {x[0], x[1]})}; }})
