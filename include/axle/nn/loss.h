// Loss modules as in torch.nn: construct once, call with (input, target).
//
//   nn::CrossEntropyLoss loss_fn;                          // loss_fn = nn.CrossEntropyLoss()
//   Tensor loss = loss_fn(model->forward(x), y);           // loss = loss_fn(output, target)
//   nn::CrossEntropyLoss smooth({.ignore_index = 0, .reduction = "sum", .label_smoothing = 0.1});
//
// Options follow PyTorch's keyword arguments, in PyTorch's order (designated
// initializers must keep it). `weight` (per-class, [C]) is a buffer: module->to(d)
// moves it. The functional forms are axle::cross_entropy / nll_loss / mse_loss (ops.h).
#pragma once
#include <cstdint>
#include <string>

#include "axle/nn/module.h"
#include "axle/ops.h"

namespace axle::nn {

/// A loss reduction spelled as in torch.nn ("mean", "sum", "none") or as axle::Reduction.
/// Any other string throws axle::Error.
struct LossReduction {
  Reduction value = Reduction::Mean;
  LossReduction() = default;
  LossReduction(Reduction r) : value(r) {}  // NOLINT: implicit on purpose
  LossReduction(const char* s);             // NOLINT
  LossReduction(const std::string& s);      // NOLINT
  /// "mean", "sum" or "none".
  std::string str() const;
};

struct CrossEntropyLossOptions {
  Tensor weight = {};             ///< optional per-class weights [C] (float32)
  int64_t ignore_index = -100;    ///< class-index targets equal to it add nothing (nor count in the mean)
  LossReduction reduction = {};   ///< "mean" (weighted by `weight` when given), "sum" or "none"
  double label_smoothing = 0.0;   ///< in [0, 1]
};

/// log_softmax over dim 1 then negative log likelihood, as torch.nn.CrossEntropyLoss.
/// input [N, C] / [N, C, d...] / [C]; target class indices (int64, [N] / [N, d...] / [])
/// or class probabilities (float, the input's shape).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions o = {});
  using Module::forward;  // the one-tensor form throws: a loss takes (input, target)
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string name() const override { return "CrossEntropyLoss"; }
  std::string extra_repr() const override;
  CrossEntropyLossOptions options;
  Tensor weight;  ///< options.weight, registered as buffer "weight" when defined
};

struct NLLLossOptions {
  Tensor weight = {};           ///< optional per-class weights [C] (float32)
  int64_t ignore_index = -100;
  LossReduction reduction = {};
};

/// Negative log likelihood of log-probabilities, as torch.nn.NLLLoss.
/// input [N, C] / [N, C, d...]; target int64 class indices [N] / [N, d...].
class NLLLoss : public Module {
 public:
  explicit NLLLoss(NLLLossOptions o = {});
  using Module::forward;  // the one-tensor form throws: a loss takes (input, target)
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string name() const override { return "NLLLoss"; }
  std::string extra_repr() const override;
  NLLLossOptions options;
  Tensor weight;
};

struct MSELossOptions {
  LossReduction reduction = {};
};

/// Squared error (input - target)^2, reduced, as torch.nn.MSELoss. Shapes must match.
class MSELoss : public Module {
 public:
  explicit MSELoss(MSELossOptions o = {});
  using Module::forward;  // the one-tensor form throws: a loss takes (input, target)
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string name() const override { return "MSELoss"; }
  std::string extra_repr() const override;
  MSELossOptions options;
};

}  // namespace axle::nn
