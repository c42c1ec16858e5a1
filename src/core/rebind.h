// rebind_data: a tensor takes another's value in place, whatever its shape (internal).
#pragma once
#include "axle/tensor.h"

namespace axle {

/// Makes `dst` hold `src`'s values, shape, dtype and device while keeping dst's identity
/// (TensorImpl) and autograd meta, so every handle to dst sees the change (Module::to, and
/// FSDP giving a wrapped parameter its gathered value or its freed placeholder). Unlike
/// Tensor::set_data, the shape and dtype may differ. `src` must be a fresh tensor (not a
/// view of dst). Every data-describing TensorImpl field is carried over (add new ones here).
void rebind_data(const Tensor& dst, const Tensor& src);

}  // namespace axle
