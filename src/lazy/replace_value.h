// replace_value: repoint the lazy state an xla tensor shares with its aliases (internal).
#pragma once
#include "axle/tensor.h"

namespace axle::lazy {

/// Makes the lazy state of xla tensor `dst` (the LazyTensor object it shares with its
/// detached aliases, e.g. the inputs autograd saved) hold `src`'s value instead: every alias
/// then reads src's pending computation or data. Same shape and dtype. FSDP points the
/// saved full parameters of a unit at the backward re-gather this way (src/nn/fsdp.cpp).
void replace_value(const Tensor& dst, const Tensor& src);

}  // namespace axle::lazy
