// The op interface shared by every family file (src/ops/*.cpp) and the dispatcher.
#pragma once
#include <vector>

#include "axle/tensor.h"
#include "core/tensor_impl.h"
#include "ops/pointwise.h"
#include "ops/schema.h"  // OpKind, Attrs and the table's schema: op_info(k)

namespace axle::ops {

/// Output metadata from a shape rule.
struct Meta {
  Shape shape;
  DType dtype;
};

using Tensors = std::vector<Tensor>;

struct VjpArgs {
  const Tensors& in;                ///< the op's inputs (no autograd history)
  const Tensors& out;               ///< the op's outputs (no autograd history)
  const Tensors& grad;              ///< one per output; undefined where no gradient flowed
  const Attrs& attrs;
  const std::vector<bool>& needs;   ///< needs[i]: input i wants a gradient
};

/// What an op means, whatever the device. `infer` validates and gives output shapes/dtypes,
/// `vjp` gives input gradients using ops (so it also traces lazily); null vjp = not
/// differentiable. How a device computes it is a kernel in the backend's registry
/// (src/ops/kernels.h).
struct OpDef {
  std::vector<Meta> (*infer)(const Tensors& in, const Attrs& a) = nullptr;
  Tensors (*vjp)(const VjpArgs& v) = nullptr;
  /// UNARY and BINARY ops (ops.def): the op's scalar math over one run of elements
  /// (ops/pointwise.h), which every backend's elementwise kernel runs; null for other ops.
  PointwiseFn pointwise = nullptr;
};

/// Sets op k's definition (called from the family registration functions below).
void register_op(OpKind k, const OpDef& d);
/// Op k's definition; registers every op family first (once).
const OpDef& op_def(OpKind k);
/// Registers every op family's definitions, once (std::call_once): explicit calls, no
/// static initialisers, so it works however the library is linked.
void ensure_registered();
/// One per family file (src/ops/<family>.cpp), called by ensure_registered().
void register_elementwise_ops();
void register_shape_ops();
void register_index_ops();
void register_reduce_ops();
void register_linalg_ops();
void register_conv_ops();
void register_pool_ops();
void register_attention_ops();
void register_norm_ops();
void register_fused_ops();
void register_collective_ops();
void register_spmd_ops();
void register_barrier_ops();
const char* op_name(OpKind k);
OpKind op_from_name(const std::string& name);  ///< throws if unknown

/// AXLE_PROFILE=1: each cpu kernel's time goes to the timed metric "op::<name>".
bool profiling();
const char* op_timer_name(OpKind k);

/// AXLE_CHECK_NUMERICS=1: every eager op output and every graph output is checked.
bool checking_numerics();
/// Throws axle::Error naming `what` if a float32 cpu tensor holds NaN or Inf.
void check_finite(const Tensor& t, const std::string& what);

/// Runs op `k`: shape rule, device kernel (or lazy trace), autograd record.
Tensors call(OpKind k, const Tensors& in, const Attrs& a = {});
inline Tensor call1(OpKind k, const Tensors& in, const Attrs& a = {}) { return call(k, in, a)[0]; }

/// Reduces `g` (broadcast result) back to `shape` by summing broadcast dims.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace axle::ops

namespace axle::ops {
/// Broadcast result shape of two shapes (numpy rules); `op` names the caller in errors.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
/// `s` with the dims where m is true removed (kept as 1 with keepdim): a reduction's result shape.
Shape reduced_shape(const Shape& s, const std::vector<bool>& m, bool keepdim);
/// The dtype an elementwise op computes in, given its operand dtypes.
DType elementwise_compute_dtype(OpKind k, const std::vector<DType>& in);
/// FusedElementwise: every (output k, input j) pair where output k may safely be written
/// over input j (same dtype and size, input not read after k is produced).
std::vector<std::pair<int64_t, int64_t>> fused_donation_candidates(const Attrs& a);
/// float32 or bfloat16: the floating dtypes the float kernels take (bfloat16 is stored in 2
/// bytes and computed in float32); such an op's outputs take its operands' dtype.
inline bool is_float_kernel_dtype(DType t) { return t == kFloat32 || t == kBFloat16; }
/// Both float32, or both bfloat16.
inline bool same_float(const Tensor& a, const Tensor& b) { return is_float_kernel_dtype(a.dtype()) && a.dtype() == b.dtype(); }
/// Checks a tensor is defined, naming the op and the argument.
void check_defined(const Tensor& t, const char* op, const char* arg);
}  // namespace axle::ops
