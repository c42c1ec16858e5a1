// Adam and AdamW, as torch.optim.Adam / AdamW in PyTorch 1.13 (single-tensor path, amsgrad off).
#include "axle/optim/adam.h"

#include <cmath>

#include "axle/autograd.h"
#include "axle/ops.h"
#include "optim/fsdp_guard.h"

namespace axle::optim {

namespace {
std::map<std::string, double> adam_defaults(const char* name, double lr, double b1, double b2, double eps,
                                            double wd) {
  AXLE_CHECK(eps >= 0, "[", name, "] expected eps >= 0, got ", eps);
  AXLE_CHECK(b1 >= 0 && b1 < 1, "[", name, "] expected beta1 in [0, 1), got ", b1);
  AXLE_CHECK(b2 >= 0 && b2 < 1, "[", name, "] expected beta2 in [0, 1), got ", b2);
  AXLE_CHECK(wd >= 0, "[", name, "] expected weight_decay >= 0, got ", wd);
  return {{"beta1", b1}, {"beta2", b2}, {"eps", eps}, {"weight_decay", wd}};
}

// One Adam/AdamW update of p. `decoupled`: AdamW's p *= 1 - lr*wd instead of grad += wd*p.
void adam_update(Optimizer& opt, const Tensor& p, const Tensor& grad_in, double lr, double beta1, double beta2,
                 double eps, double wd, bool decoupled) {
  ParamState& st = opt.state(p);
  if (st.tensors.find("exp_avg") == st.tensors.end()) {
    st.scalars["step"] = 0;
    st.tensors["exp_avg"] = zeros_like(p);
    st.tensors["exp_avg_sq"] = zeros_like(p);
  }
  double step = (st.scalars["step"] += 1);
  Tensor& exp_avg = st.tensors["exp_avg"];
  Tensor& exp_avg_sq = st.tensors["exp_avg_sq"];

  Tensor grad = grad_in;
  Tensor param = p;
  if (wd != 0) {
    if (decoupled) param = mul(p, 1 - lr * wd);
    else grad = add(grad, mul(p, wd));
  }
  exp_avg.set_data(add(mul(exp_avg, beta1), mul(grad, 1 - beta1)));
  exp_avg_sq.set_data(add(mul(exp_avg_sq, beta2), mul(mul(grad, grad), 1 - beta2)));

  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  Tensor denom = add(div(sqrt(exp_avg_sq), bias_correction2_sqrt), eps);
  p.set_data(sub(param, div(mul(exp_avg, step_size), denom)));
}
// One step of every parameter with a gradient; `option` reads a group's hyperparameter.
template <class Option>
void adam_step(Optimizer& opt, std::vector<ParamGroup>& groups, Option option, bool decoupled) {
  NoGradGuard ng;
  for (auto& g : groups) {
    const double b1 = option(g, "beta1"), b2 = option(g, "beta2"), eps = option(g, "eps");
    const double wd = option(g, "weight_decay");
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (grad.defined()) adam_update(opt, p, grad, g.lr, b1, b2, eps, wd, decoupled);
    }
  }
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), o.lr, {}}}, o) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o)
    : Optimizer(std::move(groups), o.lr, adam_defaults("Adam", o.lr, o.beta1, o.beta2, o.eps, o.weight_decay),
                "Adam") {}

void Adam::step() {
  check_no_fsdp_full_params(*this, "Adam");
  adam_step(*this, groups_, [this](const ParamGroup& g, const char* k) { return option(g, k); }, false);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), o.lr, {}}}, o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Optimizer(std::move(groups), o.lr, adam_defaults("AdamW", o.lr, o.beta1, o.beta2, o.eps, o.weight_decay),
                "AdamW") {}

void AdamW::step() {
  check_no_fsdp_full_params(*this, "AdamW");
  adam_step(*this, groups_, [this](const ParamGroup& g, const char* k) { return option(g, k); }, true);
}

}  // namespace axle::optim
