// Cpu kernel of optimization_barrier (src/ops/barrier.cpp): the identity, each output a view
// of its input's buffer (nothing is copied; the barrier only matters to the compiler).
#include "backend/cpu/kernels/kernels.h"
#include "ops/kernels.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

Tensors optimization_barrier_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>&) {
  Tensors out;
  out.reserve(in.size());
  for (const Tensor& x : in) out.push_back(make_view(x, x.shape(), x.strides(), x.storage_offset()));
  return out;
}

}  // namespace

void register_cpu_barrier_kernels() { ops::register_kernel("cpu", OpKind::OptimizationBarrier, optimization_barrier_cpu); }

}  // namespace axle::cpu
