// axle::optim::Optimizer: the base of SGD / Adam / AdamW, as torch.optim.Optimizer.
//
//   axle::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
//   opt.zero_grad(); loss.backward(); opt.step();
//
// step() runs under NoGradGuard and is written with public tensor ops, updating each
// parameter with Tensor::set_data (so the same code traces on the lazy device).
// Create optimizers after model->to(device): state tensors live on the parameters' device.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "axle/tensor.h"

namespace axle::optim {

/// A set of parameters sharing hyperparameters. `lr < 0` (the default) and options
/// missing from `options` take the optimizer's defaults.
struct ParamGroup {
  ParamGroup() = default;
  /// `ParamGroup{{w1, w2}, 0.1, {{"momentum", 0.9}}}`
  ParamGroup(std::vector<Tensor> params, double lr = -1, std::map<std::string, double> options = {})
      : params(std::move(params)), lr(lr), options(std::move(options)) {}
  std::vector<Tensor> params;
  double lr = -1;
  /// Per-optimizer hyperparameters ("momentum", "beta1", "weight_decay", ...).
  std::map<std::string, double> options;
};

/// Per-parameter optimizer state: named tensors ("momentum_buffer", "exp_avg",
/// "exp_avg_sq") and scalars ("step").
struct ParamState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
  bool empty() const { return tensors.empty() && scalars.empty(); }
};

/// Serializable optimizer state, shaped like PyTorch's optimizer.state_dict():
/// `state[i]` belongs to the i-th parameter counting across groups in order (empty
/// if the parameter has no state yet); `param_groups[g]` holds that group's
/// hyperparameters (with "lr") and the indices of its parameters.
struct OptimizerState {
  struct Group {
    std::map<std::string, double> options;  ///< includes "lr"
    std::vector<int64_t> params;            ///< indices into `state`
  };
  std::vector<ParamState> state;
  std::vector<Group> param_groups;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient (others are skipped).
  virtual void step() = 0;
  /// Sets every parameter's gradient to undefined (PyTorch's set_to_none=True).
  void zero_grad();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// The learning rate of the first group.
  double lr() const;
  /// Sets the learning rate of every group.
  void set_lr(double lr);
  /// All parameters, across groups in order.
  std::vector<Tensor> parameters() const;

  /// The state of parameter `p` (created empty on first use).
  ParamState& state(const Tensor& p);

  OptimizerState state_dict() const;
  /// Restores state saved by state_dict() of an optimizer over the same parameter
  /// layout; throws axle::Error on a mismatch (group count, parameter count, shapes).
  void load_state_dict(const OptimizerState& s);

 protected:
  /// `defaults` holds every option this optimizer knows, with its default value.
  Optimizer(std::vector<ParamGroup> groups, double default_lr, std::map<std::string, double> defaults,
            const char* name);
  /// A group's option (the default if the group lacks it).
  double option(const ParamGroup& g, const std::string& key) const;

  std::vector<ParamGroup> groups_;
  std::map<std::string, double> defaults_;
  std::map<const void*, ParamState> state_;  ///< keyed by TensorImpl
  const char* name_;
};

}  // namespace axle::optim
