// Compiler barriers: optimization_barrier (ops.def, section barrier.cpp). Its value is the
// identity; what it means is for the compiler (the BARRIER trait, ops::is_barrier): CSE never
// merges a barrier or values across it, folding and simplification treat its outputs as
// opaque, fusion never crosses it. The cpu kernel (src/backend/cpu/kernels/barrier.cpp)
// aliases its inputs.
#include "axle/ops.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

std::vector<Meta> optimization_barrier_infer(const Tensors& in, const Attrs&) {
  AXLE_CHECK(!in.empty(), "[optimization_barrier] expected at least one tensor, got none");
  std::vector<Meta> out;
  out.reserve(in.size());
  for (const Tensor& t : in) {
    check_defined(t, "optimization_barrier", "x");
    out.push_back({t.shape(), t.dtype()});
  }
  return out;
}

// The gradients pass through a barrier of their own, so the backward keeps the forward's
// separation (a gradient is not merged with, or folded into, what it would otherwise equal).
Tensors optimization_barrier_vjp(const VjpArgs& v) {
  Tensors flowing;
  std::vector<size_t> where;
  for (size_t i = 0; i < v.grad.size(); ++i)
    if (v.grad[i].defined() && v.needs[i]) flowing.push_back(v.grad[i]), where.push_back(i);
  Tensors g(v.in.size());
  if (flowing.empty()) return g;
  Tensors b = call(OpKind::OptimizationBarrier, flowing);
  for (size_t k = 0; k < where.size(); ++k) g[where[k]] = b[k];
  return g;
}

}  // namespace

void register_barrier_ops() {
  register_op(OpKind::OptimizationBarrier, {.infer = optimization_barrier_infer, .vjp = optimization_barrier_vjp});
}

}  // namespace axle::ops

namespace axle {

std::vector<Tensor> optimization_barrier(std::vector<Tensor> xs) {
  if (xs.empty()) return {};
  for (size_t i = 0; i < xs.size(); ++i)
    AXLE_CHECK(xs[i].defined(), "[optimization_barrier] expected defined tensors, got an undefined one at index ", i);
  return ops::call(ops::OpKind::OptimizationBarrier, xs);
}

namespace xm {
void optimization_barrier_(std::vector<Tensor>& xs) {
  std::vector<Tensor> out = optimization_barrier(xs);
  for (size_t i = 0; i < out.size(); ++i) xs[i] = std::move(out[i]);
}
}  // namespace xm

}  // namespace axle
