// What the reduction family's shape rules share with its kernels (src/backend/cpu/kernels/reduce.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

// ------------------------------------------------------------------ reduce kernels
enum class RK { Sum, Max, Min };

template <RK K>
const char* rk_name() {
  return K == RK::Sum ? "sum" : K == RK::Max ? "amax" : "amin";
}

// ------------------------------------------------------------------ nll_loss
struct NllGeom {
  int64_t N, C, S;
};

/// Reduced-dim mask from ints[first..]; an empty list means all dims.
std::vector<bool> reduce_mask(const Shape& shape, const std::vector<int64_t>& ints, size_t first, const char* op);
/// The softmax dim attribute of x, checked and wrapped.
int64_t softmax_dim(const Tensor& x, const Attrs& a, const char* op);
/// Checks nll_loss's (log-probabilities, target) pair and gives its geometry.
NllGeom nll_check(const Tensor& logp, const Tensor& target, const char* op);

}  // namespace axle::ops
