// What the linalg family's rules share with its kernels (src/backend/cpu/kernels/linalg.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// linear: no ints, or {1} when the compiler fused a relu epilogue (src/backend/cpu/fusion.cpp).
inline bool linear_relu(const Attrs& a) { return attr::Linear::of(a).relu; }

}  // namespace axle::ops
