// torch.nn.utils for training loops: gradient clipping.
#pragma once
#include <vector>

#include "axle/tensor.h"

namespace axle::nn::utils {

/// Scales the gradients of `parameters` in place so that their joint norm is at most
/// `max_norm` (torch.nn.utils.clip_grad_norm_: coefficient min(1, max_norm / (norm + 1e-6))),
/// and returns the total norm before clipping as a 0-d tensor on the parameters' device.
/// Parameters without a gradient are skipped (an empty set gives a norm of 0). On `xla` it
/// is traced into the step graph: nothing is read back to the host. norm_type: p > 0, or
/// infinity for the largest absolute value. error_if_nonfinite: throw when the norm is nan or
/// inf (this reads the norm, so on `xla` it runs the graph so far; the gradients are left as
/// they were when it throws). Each clipped gradient is a new tensor set with set_grad (not
/// written in place as PyTorch's mul_: autograd may share one gradient tensor between uses).
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace axle::nn::utils
