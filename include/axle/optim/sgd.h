// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay,
// exactly as torch.optim.SGD (PyTorch 1.13).
#pragma once
#include "axle/optim/optimizer.h"

namespace axle::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions o = {});
  /// Per-group options: "momentum", "dampening", "weight_decay", "nesterov" (0/1).
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);
  void step() override;
};

}  // namespace axle::optim
