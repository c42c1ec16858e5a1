// What the layer_norm op's shape rule shares with its kernels (internal).
#pragma once
#include <cstdint>

#include "axle/tensor.h"

namespace axle::ops {
/// The shape of layer_norm's mean and rstd outputs: x's shape with its last `dims` dims 1.
Shape layer_norm_stat_shape(const Shape& x, int64_t dims);
}  // namespace axle::ops
