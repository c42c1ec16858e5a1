// Autocast inside the ops layer: the rule the dispatcher applies (ops.def's AC_* column),
// and the same rule for the composite functions whose PyTorch counterpart is on an autocast
// list but which have no table row (cross_entropy, mse_loss, the norms).
#pragma once
#include <optional>
#include <vector>

#include "ops/op.h"

namespace axle::ops {

/// The dtype `rule` (an op's AC_* entry, or AC_FP32 for a composite) casts the eligible
/// floating inputs to, in a region of dtype `region`, given their dtypes `floating` (AC_PROMOTE:
/// the widest of them); nullopt when it casts nothing. The one decision of both autocast paths:
/// the dispatcher's (axle::autocast) and the Python path's AutocastXLA kernels
/// (python/csrc/autocast.cpp, torch.autocast('xla')).
std::optional<DType> autocast_target(AutocastRule rule, DType region, const std::vector<DType>& floating);
/// When an autocast region of `dev` is on and `rule` casts some of `in`: fills `out` with the
/// inputs to run instead (floating tensors on `dev` cast by `cast` ops) and returns true.
bool autocast_inputs(OpKind k, AutocastRule rule, DeviceType dev, const Tensors& in, Tensors& out);
/// `x` cast to float32 inside an autocast region of its device type (AC_FP32 for a
/// composite), else `x` itself.
Tensor autocast_fp32(const Tensor& x);

}  // namespace axle::ops
