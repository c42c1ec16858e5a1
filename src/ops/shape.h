// What the shape family's rules share with its kernels (src/backend/cpu/kernels/shape.cpp).
#pragma once
#include <optional>

#include "ops/op.h"

namespace axle::ops {

/// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape);
/// Slice's output shape for ints {dim, start, end, step} (already clamped).
Shape slice_shape(const Shape& s, const Attrs& a);

}  // namespace axle::ops
