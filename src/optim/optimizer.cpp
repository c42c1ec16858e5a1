// Optimizer base: parameter groups, zero_grad, learning rate, per-parameter state.
#include "axle/optim/optimizer.h"

#include <unordered_set>

#include "axle/autograd.h"
#include "axle/fsdp.h"
#include "axle/ops.h"
#include "core/tensor_impl.h"
#include "optim/fsdp_guard.h"

namespace axle::optim {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, std::map<std::string, double> defaults,
                     const char* name)
    : groups_(std::move(groups)), defaults_(std::move(defaults)), name_(name) {
  AXLE_CHECK(!groups_.empty(), "[", name_, "] optimizer got an empty parameter list");
  AXLE_CHECK(default_lr >= 0, "[", name_, "] expected lr >= 0, got ", default_lr);
  std::unordered_set<const TensorImpl*> seen;
  size_t total = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    if (g.lr < 0) g.lr = default_lr;
    for (const auto& [k, v] : g.options)
      AXLE_CHECK(defaults_.count(k), "[", name_, "] param group ", gi, " has unknown option \"", k, "\"");
    for (const auto& [k, v] : defaults_) g.options.emplace(k, v);  // fills only missing keys
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      AXLE_CHECK(p.defined(), "[", name_, "] param group ", gi, " holds an undefined tensor at index ", i);
      AXLE_CHECK(is_floating(p.dtype()), "[", name_, "] can only optimize floating-point tensors, got ", p.dtype(),
                 " (param group ", gi, ", index ", i, ")");
      AXLE_CHECK(p.is_leaf(), "[", name_, "] can't optimize a non-leaf tensor (param group ", gi, ", index ", i,
                 ")");
      AXLE_CHECK(seen.insert(p.impl()).second, "[", name_,
                 "] some parameters appear more than once (param group ", gi, ", index ", i, ")");
    }
    total += g.params.size();
  }
  AXLE_CHECK(total > 0, "[", name_, "] optimizer got an empty parameter list");
}

double Optimizer::option(const ParamGroup& g, const std::string& key) const {
  auto it = g.options.find(key);
  if (it != g.options.end()) return it->second;
  auto d = defaults_.find(key);
  AXLE_CHECK(d != defaults_.end(), "[", name_, "] unknown option \"", key, "\"");
  return d->second;
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.impl()->autograd) p.impl()->autograd->grad = Tensor();
}

double Optimizer::lr() const { return groups_.front().lr; }

void Optimizer::set_lr(double lr) {
  AXLE_CHECK(lr >= 0, "[", name_, "] expected lr >= 0, got ", lr);
  for (auto& g : groups_) g.lr = lr;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

ParamState& Optimizer::state(const Tensor& p) { return state_[p.impl()]; }

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  int64_t idx = 0;
  for (const auto& g : groups_) {
    OptimizerState::Group sg;
    sg.options = g.options;
    sg.options["lr"] = g.lr;
    for (const auto& p : g.params) {
      auto it = state_.find(p.impl());
      s.state.push_back(it == state_.end() ? ParamState{} : it->second);
      sg.params.push_back(idx++);
    }
    s.param_groups.push_back(std::move(sg));
  }
  return s;
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  AXLE_CHECK(s.param_groups.size() == groups_.size(), "[", name_, ".load_state_dict] expected ", groups_.size(),
             " param group(s), got ", s.param_groups.size());
  // Validate everything before changing anything.
  std::vector<std::pair<Tensor, const ParamState*>> todo;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& sg = s.param_groups[gi];
    const auto& g = groups_[gi];
    AXLE_CHECK(sg.params.size() == g.params.size(), "[", name_, ".load_state_dict] param group ", gi, " has ",
               g.params.size(), " parameter(s), the saved group has ", sg.params.size());
    AXLE_CHECK(sg.options.count("lr"), "[", name_, ".load_state_dict] saved param group ", gi, " has no \"lr\"");
    for (const auto& [k, v] : sg.options)
      AXLE_CHECK(k == "lr" || defaults_.count(k), "[", name_, ".load_state_dict] saved param group ", gi,
                 " has unknown option \"", k, "\"");
    for (size_t i = 0; i < g.params.size(); ++i) {
      int64_t idx = sg.params[i];
      AXLE_CHECK(idx >= 0 && size_t(idx) < s.state.size(), "[", name_, ".load_state_dict] parameter index ", idx,
                 " out of range for ", s.state.size(), " state entries");
      const ParamState& ps = s.state[size_t(idx)];
      const Tensor& p = g.params[i];
      for (const auto& [k, t] : ps.tensors) {
        AXLE_CHECK(t.defined(), "[", name_, ".load_state_dict] state \"", k, "\" of parameter ", idx,
                   " is undefined");
        AXLE_CHECK(t.shape() == p.shape(), "[", name_, ".load_state_dict] state \"", k, "\" of parameter ", idx,
                   " has shape ", shape_str(t.shape()), ", the parameter has shape ", shape_str(p.shape()));
      }
      todo.emplace_back(p, &ps);
    }
  }
  NoGradGuard ng;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    for (const auto& [k, v] : s.param_groups[gi].options) {
      if (k == "lr") g.lr = v;
      else g.options[k] = v;
    }
  }
  for (auto& [p, ps] : todo) {
    if (ps->empty()) {
      state_.erase(p.impl());
      continue;
    }
    ParamState copy;
    copy.scalars = ps->scalars;
    for (const auto& [k, t] : ps->tensors) {
      Tensor v = t.detach();
      if (v.device() != p.device()) v = v.to(p.device());
      if (v.dtype() != p.dtype()) v = cast(v, p.dtype());
      copy.tensors[k] = v.clone();
    }
    state_[p.impl()] = std::move(copy);
  }
}

void check_no_fsdp_full_params(const Optimizer& opt, const char* name) {
  for (const ParamGroup& g : opt.param_groups())
    for (const Tensor& p : g.params)
      if (fsdp::param_role(p) == fsdp::ParamRole::Full)
        AXLE_FAIL("[", name, "] parameter '", fsdp::param_name(p),
                  "' belongs to a module wrapped with XlaFullyShardedDataParallel after this optimizer was built: "
                  "the optimizer must be initialized after the module has been wrapped (pass fsdp_model->parameters(), "
                  "the shards)");
}

}  // namespace axle::optim
