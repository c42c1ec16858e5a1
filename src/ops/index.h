// What the index family's rules share with its kernels (src/backend/cpu/kernels/index.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// cat: PyTorch's legacy rule: 1-D empty tensors are skipped when the others have more dims.
bool cat_skip(const Tensor& t, int64_t ndim);
/// index_select / index_add: the dim attribute, checked and wrapped.
int64_t index_dim(const Tensor& x, const Attrs& a, const char* op);
/// Checks index against x for gather/scatter (same ndim; index.size(k) <= x.size(k) for k != dim);
/// returns the wrapped dim.
int64_t gather_check(const Shape& xs, const Tensor& idx, const Attrs& a, const char* op);

}  // namespace axle::ops
