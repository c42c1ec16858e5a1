// conv2d and conv_transpose2d against PyTorch 2.x (rows: tests/golden/ops_conv.py; harness:
// tests/support/golden_ops.h).
#include "golden_ops.h"

namespace {
using axle::Conv2dFuncOptions;
using axle::ConvTranspose2dFuncOptions;
axle::Tensor nhwc(const axle::Tensor& x) { return axle::permute(x, {0, 3, 1, 2}); }
}  // namespace

AXLE_GOLDEN_ROWS(Conv, "golden_ops_conv.safetensors",
  {"conv2d", [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2])}; }},
  {"conv2d_stride_padding_no_bias",
   [](const In& x) { return Out{axle::conv2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}})}; }},
  {"conv2d_dilation",
   [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2], {.padding = {2, 2}, .dilation = {2, 2}})}; }},
  {"conv2d_groups", [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2], {.groups = 2})}; }},
  {"conv2d_depthwise", [](const In& x) { return Out{axle::conv2d(x[0], x[1], {}, {.padding = {1, 1}, .groups = 3})}; }},
  {"conv2d_asymmetric", [](const In& x) {
     return Out{axle::conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}})};
   }},
  {"conv2d_stride3_floor", [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2], {.stride = {3, 3}})}; }},
  {"conv2d_channels_last_input",
   [](const In& x) { return Out{axle::conv2d(nhwc(x[0]), x[1], x[2], {.padding = {1, 1}})}; }},
  {"conv2d_transposed_view",
   [](const In& x) { return Out{axle::conv2d(axle::transpose(x[0], 2, 3), x[1], {}, {.stride = {1, 2}})}; }},
  {"conv2d_unbatched", [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2], {.padding = {1, 1}})}; }},
  {"conv2d_empty_batch", [](const In& x) { return Out{axle::conv2d(x[0], x[1], x[2])}; }},
  {"conv_transpose2d", [](const In& x) { return Out{axle::conv_transpose2d(x[0], x[1], x[2])}; }},
  {"conv_transpose2d_stride2_up",
   [](const In& x) { return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 2}})}; }},
  {"conv_transpose2d_stride_padding_output_padding", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}})};
   }},
  {"conv_transpose2d_padding",
   [](const In& x) { return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.padding = {2, 1}})}; }},
  {"conv_transpose2d_groups",
   [](const In& x) { return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 2}, .groups = 2})}; }},
  {"conv_transpose2d_depthwise", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 3})};
   }},
  {"conv_transpose2d_dilation", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.padding = {1, 1}, .dilation = {2, 2}})};
   }},
  {"conv_transpose2d_output_padding_past_stride", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], x[2],
                                       {.stride = {2, 1}, .output_padding = {2, 0}, .dilation = {3, 1}})};
   }},
  {"conv_transpose2d_asymmetric", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.stride = {1, 2}, .padding = {1, 0}, .output_padding = {0, 1}})};
   }},
  {"conv_transpose2d_all_options", [](const In& x) {
     return Out{axle::conv_transpose2d(
         x[0], x[1], x[2],
         {.stride = {3, 2}, .padding = {1, 2}, .output_padding = {2, 1}, .groups = 2, .dilation = {2, 3}})};
   }},
  {"conv_transpose2d_channels_last_input",
   [](const In& x) { return Out{axle::conv_transpose2d(nhwc(x[0]), x[1], x[2], {.stride = {2, 2}})}; }},
  {"conv_transpose2d_transposed_view", [](const In& x) {
     return Out{axle::conv_transpose2d(axle::transpose(x[0], 2, 3), x[1], {}, {.stride = {2, 2}})};
   }},
  {"conv_transpose2d_unbatched", [](const In& x) {
     return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 2}, .output_padding = {1, 1}})};
   }},
  {"conv_transpose2d_empty_batch",
   [](const In& x) { return Out{axle::conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 2}})}; }})
