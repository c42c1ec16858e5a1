// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay),
// exactly as torch.optim.Adam / AdamW (PyTorch 1.13, amsgrad=False).
#pragma once
#include "axle/optim/optimizer.h"

namespace axle::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions o = {});
  /// Per-group options: "beta1", "beta2", "eps", "weight_decay".
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  void step() override;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions o = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults);
  void step() override;
};

}  // namespace axle::optim
