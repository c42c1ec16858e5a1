// batch_norm, layer_norm and group_norm against PyTorch 2.x (rows: tests/golden/ops_norm.py;
// harness: tests/support/golden_ops.h). batch_norm's training rows also compare the running statistics
// it updated (outputs 1 and 2).
#include "golden_ops.h"

namespace {
axle::Tensor nhwc(const axle::Tensor& x) { return axle::permute(x, {0, 3, 1, 2}); }
// (y, running_mean, running_var) after one training step; the statistics are the row's inputs,
// updated in place as PyTorch's.
using axle::golden::In;
using axle::golden::Out;
std::function<Out(const In&)> bn_train(double momentum, double eps, bool channels_last = false) {
  return [=](const In& x) {
    axle::Tensor y = axle::batch_norm(channels_last ? nhwc(x[0]) : x[0], x[1], x[2], x[3], x[4], true, momentum, eps);
    return Out{y, x[3], x[4]};
  };
}
}  // namespace

AXLE_GOLDEN_ROWS(Norm, "golden_ops_norm.safetensors",
  {"batch_norm_train", bn_train(0.1, 1e-5)},
  {"batch_norm_train_2d_momentum", bn_train(0.3, 1e-3)},
  {"batch_norm_train_3d", bn_train(0.1, 1e-5)},
  {"batch_norm_train_channels_last", bn_train(0.1, 1e-5, true)},
  {"batch_norm_train_no_running_stats",
   [](const In& x) { return Out{axle::batch_norm(x[0], x[1], x[2], {}, {}, true)}; }},
  {"batch_norm_eval", [](const In& x) { return Out{axle::batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5)}; }},
  {"batch_norm_eval_no_affine",
   [](const In& x) { return Out{axle::batch_norm(x[0], {}, {}, x[1], x[2], false, 0.1, 1e-3)}; }},
  {"layer_norm", [](const In& x) { return Out{axle::layer_norm(x[0], {4}, x[1], x[2])}; }},
  {"layer_norm_2dims_eps", [](const In& x) { return Out{axle::layer_norm(x[0], {3, 4}, x[1], x[2], 1e-3)}; }},
  {"layer_norm_no_affine", [](const In& x) { return Out{axle::layer_norm(x[0], {5})}; }},
  {"layer_norm_transposed_view",
   [](const In& x) { return Out{axle::layer_norm(axle::transpose(x[0], 0, 1), {3}, x[1], x[2])}; }},
  {"layer_norm_broadcast_batch", [](const In& x) { return Out{axle::layer_norm(x[0], {6}, x[1], x[2])}; }},
  {"group_norm", [](const In& x) { return Out{axle::group_norm(x[0], 3, x[1], x[2])}; }},
  {"group_norm_one_group", [](const In& x) { return Out{axle::group_norm(x[0], 1, x[1], x[2])}; }},
  {"group_norm_instance", [](const In& x) { return Out{axle::group_norm(x[0], 4, x[1], x[2])}; }},
  {"group_norm_no_affine_eps", [](const In& x) { return Out{axle::group_norm(x[0], 2, {}, {}, 1e-3)}; }},
  {"group_norm_2d", [](const In& x) { return Out{axle::group_norm(x[0], 2, x[1], x[2])}; }},
  {"group_norm_channels_last", [](const In& x) { return Out{axle::group_norm(nhwc(x[0]), 2, x[1], x[2])}; }},
  {"group_norm_empty_batch", [](const In& x) { return Out{axle::group_norm(x[0], 2, x[1], x[2])}; }})
