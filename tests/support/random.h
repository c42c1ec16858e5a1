// Reproducible random test data from a seed (std::mt19937, uniform), independent of axle's
// own generator so that a test's inputs do not move when that generator changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "axle/tensor.h"
#include "core/tensor_impl.h"

namespace axle::test {

/// `n` floats uniform in [lo, hi) from `seed`.
std::vector<float> rand_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

/// A float32 cpu tensor of shape `s`, uniform in [lo, hi) from `seed`.
Tensor rnd(const Shape& s, uint32_t seed, double lo = -1, double hi = 1);

}  // namespace axle::test
