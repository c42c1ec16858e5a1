// Tensor::backward (axle/tensor.h): in the autograd layer, above core (src/LAYERS).
#include "autograd/node.h"
#include "core/tensor_impl.h"

namespace axle {

#define AXLE_DEFINED(op) AXLE_CHECK(impl_ != nullptr, "[" op "] expected a defined tensor, got an undefined one")

void Tensor::backward(const Tensor& grad) const {
  AXLE_DEFINED("backward");
  AXLE_CHECK(requires_grad(), "[backward] expected a tensor that requires grad; none of its inputs do");
  Tensor g = grad;
  if (!g.defined()) {
    AXLE_CHECK(numel() == 1, "[backward] expected a scalar to call backward() without a gradient, got shape ",
               shape_str(shape()));
    g = full(shape(), 1.0, {.dtype = dtype(), .device = device()});
  }
  AXLE_CHECK(g.shape() == shape(), "[backward] expected a gradient of shape ", shape_str(shape()), ", got ",
             shape_str(g.shape()));
  autograd::run_backward(*this, g);
}

}  // namespace axle
