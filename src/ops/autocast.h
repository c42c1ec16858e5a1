// Autocast inside the ops layer: the rule the dispatcher applies (ops.def's AC_* column),
// and the same rule for the composite functions whose PyTorch counterpart is on an autocast
// list but which have no table row (cross_entropy, mse_loss, the norms).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// When an autocast region of `dev` is on and `rule` casts some of `in`: fills `out` with the
/// inputs to run instead (floating tensors on `dev` cast by `cast` ops) and returns true.
bool autocast_inputs(OpKind k, AutocastRule rule, DeviceType dev, const Tensors& in, Tensors& out);
/// `x` cast to float32 inside an autocast region of its device type (AC_FP32 for a
/// composite), else `x` itself.
Tensor autocast_fp32(const Tensor& x);

}  // namespace axle::ops
