// max_pool2d, avg_pool2d and adaptive_avg_pool2d against PyTorch 2.x (rows:
// tests/golden/ops_pool.py; harness: tests/support/golden_ops.h). The ties rows hold the gradient rule
// at equal maxima (ops.def: the first maximum in the window takes it, the last NaN).
#include "golden_ops.h"

namespace {
using axle::Pool2dOptions;
axle::Tensor nhwc(const axle::Tensor& x) { return axle::permute(x, {0, 3, 1, 2}); }
axle::Tensor mp(const axle::Tensor& x, const Pool2dOptions& o) { return axle::max_pool2d(x, o); }
axle::Tensor ap(const axle::Tensor& x, const Pool2dOptions& o) { return axle::avg_pool2d(x, o); }
std::vector<axle::Tensor> mpi(const axle::Tensor& x, const Pool2dOptions& o) {
  auto [y, i] = axle::max_pool2d_with_indices(x, o);
  return {y, i};
}
}  // namespace

AXLE_GOLDEN_ROWS(Pool, "golden_ops_pool.safetensors",
  {"max_pool2d", [](const In& x) { return Out{mp(x[0], {})}; }},
  {"max_pool2d_floor", [](const In& x) { return Out{mp(x[0], {})}; }},
  {"max_pool2d_stride_padding",
   [](const In& x) { return Out{mp(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"max_pool2d_overlap_asymmetric",
   [](const In& x) { return Out{mp(x[0], {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}})}; }},
  {"max_pool2d_ceil", [](const In& x) { return Out{mp(x[0], {.ceil_mode = true})}; }},
  {"max_pool2d_ceil_padding", [](const In& x) {
     return Out{mp(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"max_pool2d_ceil_kernel_past_input", [](const In& x) {
     return Out{mp(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true})};
   }},
  {"avg_pool2d_ceil_kernel_past_input", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true})};
   }},
  {"max_pool2d_ceil_dropped_window", [](const In& x) {
     return Out{mp(x[0], {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"max_pool2d_dilation", [](const In& x) {
     return Out{mp(x[0], {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {2, 2}})};
   }},
  {"max_pool2d_dilation_ceil_asymmetric", [](const In& x) {
     return Out{mp(x[0], {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 1}, .ceil_mode = true})};
   }},
  {"max_pool2d_ties", [](const In& x) { return Out{mp(x[0], {})}; }},
  {"max_pool2d_ties_overlapping",
   [](const In& x) { return Out{mp(x[0], {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}})}; }},
  {"max_pool2d_ties_dilation_ceil", [](const In& x) {
     return Out{mp(x[0], {.kernel = {2, 2}, .stride = {2, 2}, .dilation = {2, 2}, .ceil_mode = true})};
   }},
  {"max_pool2d_ties_channels_last_2x2", [](const In& x) { return Out{mp(nhwc(x[0]), {})}; }},
  {"max_pool2d_ties_channels_last_3x3",
   [](const In& x) { return Out{mp(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"max_pool2d_ties_channels_last_ceil",
   [](const In& x) { return Out{mp(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true})}; }},
  {"max_pool2d_neg_inf", [](const In& x) { return Out{mp(x[0], {.kernel = {3, 3}, .stride = {3, 3}})}; }},
  {"max_pool2d_neg_inf_padded",
   [](const In& x) { return Out{mp(x[0], {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}})}; }},
  {"max_pool2d_neg_inf_channels_last",
   [](const In& x) { return Out{mp(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"max_pool2d_nan", [](const In& x) { return Out{mp(x[0], {})}; }},
  {"max_pool2d_nan_overlapping",
   [](const In& x) { return Out{mp(x[0], {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}})}; }},
  {"max_pool2d_nan_channels_last",
   [](const In& x) { return Out{mp(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"max_pool2d_transposed_view",
   [](const In& x) { return Out{mp(axle::transpose(x[0], 2, 3), {.kernel = {2, 2}, .stride = {1, 1}})}; }},
  {"max_pool2d_unbatched", [](const In& x) { return Out{mp(x[0], {.padding = {1, 1}})}; }},
  {"max_pool2d_empty_batch", [](const In& x) { return Out{mp(x[0], {})}; }},
  {"avg_pool2d", [](const In& x) { return Out{ap(x[0], {})}; }},
  {"avg_pool2d_pad_included",
   [](const In& x) { return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"avg_pool2d_pad_excluded", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false})};
   }},
  {"avg_pool2d_asymmetric",
   [](const In& x) { return Out{ap(x[0], {.kernel = {2, 3}, .stride = {2, 1}, .padding = {1, 0}})}; }},
  {"avg_pool2d_ceil_pad_included", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"avg_pool2d_ceil_pad_excluded", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true,
                          .count_include_pad = false})};
   }},
  {"avg_pool2d_ceil_no_padding", [](const In& x) { return Out{ap(x[0], {.ceil_mode = true})}; }},
  {"avg_pool2d_ceil_no_padding_excluded",
   [](const In& x) { return Out{ap(x[0], {.ceil_mode = true, .count_include_pad = false})}; }},
  {"avg_pool2d_ceil_equals_floor", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"avg_pool2d_ceil_asymmetric", [](const In& x) {
     return Out{ap(x[0], {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"avg_pool2d_channels_last",
   [](const In& x) { return Out{ap(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})}; }},
  {"avg_pool2d_channels_last_ceil", [](const In& x) {
     return Out{ap(nhwc(x[0]), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})};
   }},
  {"avg_pool2d_transposed_view_excluded", [](const In& x) {
     return Out{ap(axle::transpose(x[0], 2, 3),
                   {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}, .count_include_pad = false})};
   }},
  {"avg_pool2d_unbatched", [](const In& x) { return Out{ap(x[0], {})}; }},
  {"avg_pool2d_empty_batch", [](const In& x) { return Out{ap(x[0], {})}; }},
  {"adaptive_avg_pool2d_divisible", [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {3, 3})}; }},
  {"adaptive_avg_pool2d_uneven", [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {3, 4})}; }},
  {"adaptive_avg_pool2d_uneven_tall", [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {4, 3})}; }},
  {"adaptive_avg_pool2d_larger_than_input",
   [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {5, 4})}; }},
  {"adaptive_avg_pool2d_global", [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {1, 1})}; }},
  {"adaptive_avg_pool2d_channels_last",
   [](const In& x) { return Out{axle::adaptive_avg_pool2d(nhwc(x[0]), {2, 3})}; }},
  {"adaptive_avg_pool2d_unbatched", [](const In& x) { return Out{axle::adaptive_avg_pool2d(x[0], {2, 2})}; }},
  // ---- max_pool2d with indices, max_unpool2d
  {"max_pool2d_indices", [](const In& x) { return mpi(x[0], {}); }},
  {"max_pool2d_indices_stride_padding_ceil",
   [](const In& x) { return mpi(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}); }},
  {"max_pool2d_indices_dilation", [](const In& x) { return mpi(x[0], {.stride = {1, 1}, .dilation = {2, 2}}); }},
  {"max_pool2d_indices_ties", [](const In& x) { return mpi(x[0], {.kernel = {3, 3}, .stride = {1, 1}}); }},
  {"max_pool2d_indices_nan", [](const In& x) { return mpi(x[0], {}); }},
  {"max_pool2d_indices_channels_last", [](const In& x) { return mpi(nhwc(x[0]), {}); }},
  {"max_pool2d_indices_unbatched", [](const In& x) { return mpi(x[0], {}); }},
  {"max_unpool2d", [](const In& x) {
     auto [y, i] = axle::max_pool2d_with_indices(x[0]);
     return Out{axle::max_unpool2d(y, i, {})};
   }},
  {"max_unpool2d_output_size", [](const In& x) {
     auto [y, i] = axle::max_pool2d_with_indices(x[0]);
     return Out{axle::max_unpool2d(y, i, {}, {5, 7})};
   }},
  {"max_unpool2d_stride_padding", [](const In& x) {
     const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
     auto [y, i] = axle::max_pool2d_with_indices(x[0], o);
     return Out{axle::max_unpool2d(y, i, o, {x[0].shape()[2], x[0].shape()[3]})};
   }},
  {"max_unpool2d_unbatched", [](const In& x) {
     auto [y, i] = axle::max_pool2d_with_indices(x[0]);
     return Out{axle::max_unpool2d(y, i, {})};
   }})
