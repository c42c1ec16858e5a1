// bfloat16 for the kernels that compute in float32 only: the registered kernel is wrapped so
// that bf16 operands are widened to float32, the float32 kernel runs, and the outputs the op
// table types as bf16 are rounded back (round to nearest even). Reductions and softmax then
// accumulate in float32 or wider, as PyTorch's bf16 cpu kernels do, and every op rounds its
// result once. Kernels that handle bf16 themselves are left alone: the elementwise loops
// (float32 math on widened blocks, elementwise.cpp), the fused-elementwise kernel, data
// movement (views, cat, index_select, gather, sharding), layer norm (a row at a time, norm.cpp),
// max pooling (2x2 channels-last in bf16, pool.cpp), sum / amax / amin (reduce.cpp), and
// matmul / linear / the convolutions / scaled-dot-product attention when the process's bf16
// path is Native (oneDNN bf16 primitives with float32 accumulation: bf16.h).
// Collectives run here too: an all-reduce of bf16 tensors reduces in float32, then rounds.
#include <array>

#include "backend/cpu/bf16.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr size_t kNumOps = size_t(OpKind::kNumOps);
std::array<KernelFn, kNumOps> g_f32{};

bool handles_bf16(OpKind k) {
  const OpInfo& i = op_info(k);
  if (i.has(kUnary) || i.has(kBinary)) return true;
  switch (k) {
    case OpKind::Cast: case OpKind::Copy: case OpKind::Where:
    case OpKind::FusedElementwise: case OpKind::FusedSum:
    case OpKind::Reshape: case OpKind::Permute: case OpKind::Expand: case OpKind::Slice:
    case OpKind::SliceBackward: case OpKind::Cat: case OpKind::IndexSelect: case OpKind::Gather:
    case OpKind::ShardingConstraint: case OpKind::ShardSlice: case OpKind::MaskPadding:
    case OpKind::OptimizationBarrier:
    case OpKind::MaxPool2d: case OpKind::MaxPool2dBackward:  // 2x2 channels-last in bf16, else widened inside (pool.cpp)
    case OpKind::LayerNorm: case OpKind::LayerNormBackward:  // rows widened one at a time (norm.cpp)
    case OpKind::Sum: case OpKind::Amax: case OpKind::Amin:  // float32 sums (columns widened as read), rounded once (reduce.cpp)
      return true;
    default: return false;
  }
}

// The products oneDNN computes in bf16 with float32 accumulation on the Native path: matmul and
// linear (K > 0: no bias-only fill), the convolutions, forward and both backward kernels
// (conv_transpose2d's forward is conv2d's backward-data), whose operands share one dtype, and
// attention, forward and backward (its shape rules give q, k, v, out and grad one dtype).
bool native_bf16(OpKind k, const Tensors& in) {
  switch (k) {
    case OpKind::Matmul: return in[0].shape().back() > 0;
    case OpKind::Linear: return in[1].shape()[1] > 0;
    case OpKind::Conv2d: case OpKind::Conv2dBackwardInput: case OpKind::Conv2dBackwardWeight:
    case OpKind::ConvTranspose2d:
      return in[0].dtype() == kBFloat16 && in[1].dtype() == kBFloat16;
    // bf16 blocks into float32-accumulating products, the softmax in float32 (attention.cpp)
    case OpKind::ScaledDotProductAttention: case OpKind::ScaledDotProductAttentionBackward:
      return in[0].dtype() == kBFloat16;
    default: return false;
  }
}

Tensors run_bf16(OpKind k, const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const KernelFn f = g_f32[size_t(k)];
  bool any = false;
  for (const Tensor& t : in) any = any || (t.defined() && t.dtype() == kBFloat16);
  for (const Meta& o : m) any = any || o.dtype == kBFloat16;
  if (!any) return f(in, a, m);
  if (bf16_compute() == Bf16Compute::Native && native_bf16(k, in))
    return f(in, a, m);  // oneDNN bf16 primitives, float32 accumulation
  Tensors wide = in;
  for (Tensor& t : wide)
    if (t.defined() && t.dtype() == kBFloat16) t = cast_cpu(t, kFloat32);
  std::vector<Meta> m32 = m;
  for (Meta& o : m32)
    if (o.dtype == kBFloat16) o.dtype = kFloat32;
  Tensors out = f(wide, a, m32);
  for (size_t j = 0; j < out.size() && j < m.size(); ++j)
    if (m[j].dtype == kBFloat16 && out[j].defined() && out[j].dtype() == kFloat32) out[j] = cast_cpu(out[j], kBFloat16);
  return out;
}

template <OpKind K>
Tensors via_f32(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  return run_bf16(K, in, a, m);
}

}  // namespace

void register_cpu_bf16_kernels() {
#define AXLE_OP(Name, ...)                                                                   \
  if (KernelFn f = registered_kernel("cpu", OpKind::Name); f && f != via_f32<OpKind::Name> && !handles_bf16(OpKind::Name)) { \
    g_f32[size_t(OpKind::Name)] = f;                                                         \
    register_kernel("cpu", OpKind::Name, via_f32<OpKind::Name>);                   \
  }
#include "ops/ops.def"
#undef AXLE_OP
}

}  // namespace axle::cpu
