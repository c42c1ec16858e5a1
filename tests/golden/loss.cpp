// cross_entropy, nll_loss and mse_loss against PyTorch 2.x (rows: tests/golden/ops_loss.py;
// harness: tests/support/golden_ops.h).
#include "golden_ops.h"

using namespace axle;

namespace {
using axle::golden::In;
using axle::golden::Out;
Out ce(const In& x, CrossEntropyOptions o = {}) { return Out{cross_entropy(x[0], x[1], o)}; }
Out nll(const In& x, Reduction r, int64_t ignore = -100) { return Out{nll_loss(log_softmax(x[0], 1), x[1], r, ignore)}; }
}  // namespace

AXLE_GOLDEN_ROWS(Loss, "golden_ops_loss.safetensors",
  // ---- cross_entropy
  {"cross_entropy", [](const In& x) { return ce(x); }},
  {"cross_entropy_sum", [](const In& x) { return ce(x, {.reduction = Reduction::Sum}); }},
  {"cross_entropy_none", [](const In& x) { return ce(x, {.reduction = Reduction::None}); }},
  {"cross_entropy_ignore_default", [](const In& x) { return ce(x); }},
  {"cross_entropy_ignore_index", [](const In& x) { return ce(x, {.ignore_index = 2}); }},
  {"cross_entropy_ignore_none", [](const In& x) { return ce(x, {.reduction = Reduction::None}); }},
  {"cross_entropy_label_smoothing", [](const In& x) { return ce(x, {.label_smoothing = 0.1}); }},
  {"cross_entropy_label_smoothing_ignore", [](const In& x) { return ce(x, {.label_smoothing = 0.2}); }},
  {"cross_entropy_label_smoothing_sum_ignore",
   [](const In& x) { return ce(x, {.reduction = Reduction::Sum, .ignore_index = 1, .label_smoothing = 0.3}); }},
  {"cross_entropy_label_smoothing_none",
   [](const In& x) { return ce(x, {.reduction = Reduction::None, .label_smoothing = 0.15}); }},
  {"cross_entropy_spatial", [](const In& x) { return ce(x); }},
  {"cross_entropy_spatial_smoothing_none",
   [](const In& x) { return ce(x, {.reduction = Reduction::None, .label_smoothing = 0.1}); }},
  {"cross_entropy_transposed_logits", [](const In& x) { return Out{cross_entropy(x[0].t(), x[1])}; }},
  {"cross_entropy_all_ignored", [](const In& x) { return ce(x); }},
  {"cross_entropy_large_logits", [](const In& x) { return ce(x); }},
  // ---- nll_loss
  {"nll_loss_mean", [](const In& x) { return nll(x, Reduction::Mean); }},
  {"nll_loss_ignore_mean", [](const In& x) { return nll(x, Reduction::Mean, 0); }},
  {"nll_loss_sum", [](const In& x) { return nll(x, Reduction::Sum); }},
  {"nll_loss_ignore_sum", [](const In& x) { return nll(x, Reduction::Sum, 0); }},
  {"nll_loss_none", [](const In& x) { return nll(x, Reduction::None); }},
  {"nll_loss_ignore_none", [](const In& x) { return nll(x, Reduction::None, 0); }},
  {"nll_loss_raw_input", [](const In& x) { return Out{nll_loss(x[0], x[1])}; }},
  {"nll_loss_spatial", [](const In& x) { return Out{nll_loss(x[0], x[1], Reduction::Sum)}; }},
  // ---- mse_loss
  {"mse_loss_mean", [](const In& x) { return Out{mse_loss(x[0], x[1])}; }},
  {"mse_loss_sum", [](const In& x) { return Out{mse_loss(x[0], x[1], Reduction::Sum)}; }},
  {"mse_loss_none", [](const In& x) { return Out{mse_loss(x[0], x[1], Reduction::None)}; }},
  {"mse_loss_transposed", [](const In& x) { return Out{mse_loss(x[0].t(), x[1])}; }},
  {"mse_loss_special", [](const In& x) { return Out{mse_loss(x[0], x[1], Reduction::None)}; }},
  {"mse_loss_empty", [](const In& x) { return Out{mse_loss(x[0], x[1], Reduction::Sum)}; }})
