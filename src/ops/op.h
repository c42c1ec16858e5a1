// The op interface shared by every family file (src/ops/*.cpp) and the dispatcher.
#pragma once
#include <vector>

#include "axle/tensor.h"
#include "core/tensor_impl.h"
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

/// Everything about one op. `infer` validates and gives output shapes/dtypes,
/// `cpu` computes (allocating outputs or returning views), `vjp` gives input
/// gradients using ops (so it also traces lazily); null vjp = not differentiable.
struct OpDef {
  std::vector<Meta> (*infer)(const Tensors& in, const Attrs& a) = nullptr;
  Tensors (*cpu)(const Tensors& in, const Attrs& a, const std::vector<Meta>& out) = nullptr;
  Tensors (*vjp)(const VjpArgs& v) = nullptr;
};

void register_op(OpKind k, const OpDef& d);
const OpDef& op_def(OpKind k);
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

#define AXLE_OP_CONCAT2(a, b) a##b
#define AXLE_OP_CONCAT(a, b) AXLE_OP_CONCAT2(a, b)
/// Registers an op's definition at load time: AXLE_REGISTER_OP(Add, {.infer = ..., .cpu = ..., .vjp = ...});
#define AXLE_REGISTER_OP(kind, ...)                                                       \
  static const bool AXLE_OP_CONCAT(axle_registered_, kind) =                             \
      (::axle::ops::register_op(::axle::ops::OpKind::kind, ::axle::ops::OpDef __VA_ARGS__), true)

namespace axle::ops {
/// Broadcast result shape of two shapes (numpy rules); `op` names the caller in errors.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
/// `s` with the dims where m is true removed (kept as 1 with keepdim): a reduction's result shape.
Shape reduced_shape(const Shape& s, const std::vector<bool>& m, bool keepdim);
/// The dtype an elementwise op computes in, given its operand dtypes.
DType elementwise_compute_dtype(OpKind k, const std::vector<DType>& in);
/// Runs elementwise op `k` (not Cast) on one run of n elements: p[0] = out, p[1..] = operands
/// (already in `compute` dtype), s = byte strides (0 broadcasts).
void elementwise_raw(OpKind k, DType compute, char** p, const int64_t* s, int64_t n);
/// FusedElementwise: every (output k, input j) pair where output k may safely be written
/// over input j (same dtype and size, input not read after k is produced).
std::vector<std::pair<int64_t, int64_t>> fused_donation_candidates(const Attrs& a);
/// Checks a tensor is defined, naming the op and the argument.
void check_defined(const Tensor& t, const char* op, const char* arg);
}  // namespace axle::ops
