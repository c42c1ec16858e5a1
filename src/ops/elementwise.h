// What the elementwise family's rules share with its kernels (src/backend/cpu/kernels/elementwise.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// The dtype a binary op computes in: the promoted operand dtype (float32 for float-only ops).
DType binary_compute_dtype(OpKind k, DType a, DType b);

}  // namespace axle::ops
