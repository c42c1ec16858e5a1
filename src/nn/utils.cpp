// torch.nn.utils: clip_grad_norm_, written with public ops so that it traces on `xla`.
#include "axle/nn/utils.h"

#include <cmath>
#include <limits>

#include "axle/autograd.h"
#include "axle/error.h"
#include "axle/ops.h"

namespace axle::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  AXLE_CHECK(max_norm >= 0, "[clip_grad_norm_] expected max_norm >= 0, got ", max_norm);
  AXLE_CHECK(norm_type > 0, "[clip_grad_norm_] expected norm_type > 0 (or infinity), got ", norm_type);
  std::vector<Tensor> with_grad;
  for (const Tensor& p : parameters) {
    AXLE_CHECK(p.defined(), "[clip_grad_norm_] expected defined parameters, got an undefined tensor");
    if (p.grad().defined()) with_grad.push_back(p);
  }
  NoGradGuard no_grad;
  if (with_grad.empty()) return zeros({}, {.device = parameters.empty() ? Device(kCPU) : parameters[0].device()});
  const Device dev = with_grad[0].device();
  const bool inf = std::isinf(norm_type);
  Tensor total;
  for (const Tensor& p : with_grad) {
    const Tensor& g = p.grad();
    AXLE_CHECK(g.device() == dev, "[clip_grad_norm_] expected every gradient on ", dev.str(), ", got one on ",
               g.device().str());
    // Per parameter, then combined: PyTorch's order of summation (norm of the norms).
    Tensor part;  // this parameter's norm raised to norm_type (its max for infinity)
    if (inf) part = max(abs(g));
    else if (norm_type == 2.0) part = sum(mul(g, g));
    else part = sum(pow(abs(g), norm_type));
    total = !total.defined() ? part : (inf ? maximum(total, part) : add(total, part));
  }
  if (!inf) total = pow(total, 1.0 / norm_type);
  if (error_if_nonfinite) {
    const double v = total.item<float>();
    AXLE_CHECK(std::isfinite(v), "[clip_grad_norm_] expected a finite total norm of order ", norm_type,
               " over the gradients, got ", v);
  }
  const Tensor coef = clamp(div(full_like(total, max_norm), add(total, 1e-6)), -std::numeric_limits<double>::infinity(), 1.0);
  for (const Tensor& p : with_grad) {
    Tensor q = p;
    q.set_grad(mul(p.grad(), coef));
  }
  return total;
}

}  // namespace axle::nn::utils
