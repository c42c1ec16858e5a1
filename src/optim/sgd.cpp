// SGD, as torch.optim.SGD in PyTorch 1.13 (single-tensor path).
#include "axle/optim/sgd.h"

#include "axle/autograd.h"
#include "axle/ops.h"
#include "optim/fsdp_guard.h"

namespace axle::optim {

namespace {
std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  AXLE_CHECK(o.momentum >= 0, "[SGD] expected momentum >= 0, got ", o.momentum);
  AXLE_CHECK(o.weight_decay >= 0, "[SGD] expected weight_decay >= 0, got ", o.weight_decay);
  AXLE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
             "[SGD] Nesterov momentum requires a momentum and zero dampening, got momentum=", o.momentum,
             ", dampening=", o.dampening);
  return {{"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions o)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), o.lr, {}}}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer(std::move(groups), o.lr, sgd_defaults(o), "SGD") {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& g = groups_[gi];
    double m = option(g, "momentum"), d = option(g, "dampening");
    AXLE_CHECK(option(g, "nesterov") == 0 || (m > 0 && d == 0), "[SGD] param group ", gi,
               ": Nesterov momentum requires a momentum and zero dampening");
  }
}

void SGD::step() {
  check_no_fsdp_full_params(*this, "SGD");
  NoGradGuard ng;
  for (auto& g : groups_) {
    const double lr = g.lr;
    const double momentum = option(g, "momentum");
    const double dampening = option(g, "dampening");
    const double weight_decay = option(g, "weight_decay");
    const bool nesterov = option(g, "nesterov") != 0;
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      Tensor d_p = grad;
      if (weight_decay != 0) d_p = add(d_p, mul(p, weight_decay));
      if (momentum != 0) {
        ParamState& st = state(p);
        auto it = st.tensors.find("momentum_buffer");
        if (it == st.tensors.end() && dampening == 0) {
          // A zero buffer through the general update gives exactly PyTorch's first step
          // (buf = grad), and every step then traces the same graph on the lazy device.
          it = st.tensors.emplace("momentum_buffer", zeros_like(d_p)).first;
        }
        if (it == st.tensors.end()) {
          Tensor buf = d_p.clone();  // first step: the buffer is the gradient itself
          st.tensors.emplace("momentum_buffer", buf);
          d_p = nesterov ? add(d_p, mul(buf, momentum)) : buf;
        } else {
          Tensor& buf = it->second;
          Tensor scaled = dampening != 0 ? mul(d_p, 1 - dampening) : d_p;
          buf.set_data(add(mul(buf, momentum), scaled));
          d_p = nesterov ? add(d_p, mul(buf, momentum)) : buf;
        }
      }
      p.set_data(sub(p, mul(d_p, lr)));
    }
  }
}

}  // namespace axle::optim
