// The op table's schema, declared once in src/ops/ops.def and queried here: each op's
// arity, traits and typed attributes. Every classification of ops (which ops the fused
// kernel runs, which compute in float, which have side effects or a gradient, which the
// fuzzer draws) is a query of this table, never a hand-kept list.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "axle/dtype.h"

namespace axle::ops {

enum class OpKind : uint16_t {
#define AXLE_OP(name, ...) name,
#include "ops/ops.def"
#undef AXLE_OP
  kNumOps
};

/// Op attributes: a flat list of ints and floats, flat and comparable so the lazy device can
/// hash them. Their layout per op is declared in ops.def; read and write them through the
/// typed views in namespace attr below (attr::Slice::of(a).dim), never by position.
struct Attrs {
  std::vector<int64_t> ints{};  // `{}`: {.ints = ...} may omit floats without a -Wextra warning
  std::vector<double> floats{};
  friend bool operator==(const Attrs&, const Attrs&) = default;
};

/// An op's traits (ops.def explains each).
enum Trait : uint32_t {
  kElementwise = 1u << 0,     ///< EW: the fused-elementwise kernel can run it
  kUnary = 1u << 1,           ///< UNARY: elementwise math of one tensor
  kBinary = 1u << 2,          ///< BINARY: elementwise math of two broadcasting tensors
  kFloatMath = 1u << 3,       ///< FLOAT_MATH: computes in float32 for integer operands
  kCompare = 1u << 4,         ///< COMPARE: bool output
  kDifferentiable = 1u << 5,  ///< DIFF: has a vjp
  kBackward = 1u << 6,        ///< BACKWARD: a gradient op, called only by vjps
  kCompilerMade = 1u << 7,    ///< COMPILER: made by compiler passes, never by users
  kSideEffects = 1u << 8,     ///< EFFECTS: never dropped, folded or reordered; merged only if identical collectives
  kIndex = 1u << 9,           ///< INDEX: int64 (index) output
  kPositive = 1u << 10,       ///< POSITIVE: domain is positive inputs
  kNonzero = 1u << 11,        ///< NONZERO: domain is inputs away from 0
  kBarrier = 1u << 12,        ///< BARRIER: opaque to the compiler (never merged, folded, fused through)
};

/// How the SPMD partitioner (src/spmd) handles an op: the S_* entry of its traits in
/// ops.def (bits 24..31; none: Opaque). The rules themselves live in src/spmd/rules.cpp.
enum class ShardRule : uint8_t {
  Opaque = 0,    ///< no rule: operands and outputs replicated (correct, slow; AXLE_DEBUG lists it)
  Pointwise,     ///< elementwise after broadcasting: dims unify
  Broadcast,     ///< expand: new dims replicated, mapped dims keep theirs
  Transpose,     ///< permute: dims permuted
  Reshape,       ///< reshape: XLA's ReshapeSharding, else reshard
  Reduce,        ///< reduction over dims: reduced sharded dims become Partial
  Dot,           ///< matmul / linear: batch, contracting and free dims (dot_handler order)
  Conv,          ///< conv2d and its gradients: batch like a dot's, spatial dims replicated
  AlongDim,      ///< needs its `dim` attribute's dim replicated (softmax, argmax, index ops, cat, slice)
  Window,        ///< pooling: spatial dims replicated, batch and channels keep theirs
  Loss,          ///< nll_loss: batch dims sharded, class dim replicated; reduction Partial
  Constraint,    ///< sharding_constraint: pins its value's sharding
  Collective,    ///< an explicit collective (DDP, FSDP v1, manual regions)
  PassThrough,   ///< output i takes operand i's sharding (optimization_barrier)
  Attention,     ///< fused attention: batch/head dims pass, the last two (L or S, E) replicated
  Device,        ///< reads the running device (shard_slice, mask_padding): made by the partitioner
};
inline constexpr uint32_t kShardRuleShift = 24;

/// What an autocast region (axle/autocast.h) does to an op's floating inputs: the AC_* entry
/// of its traits in ops.def (bits 16..17; none: None). PyTorch 2.15's CPU cast policies.
enum class AutocastRule : uint8_t {
  None = 0,  ///< runs in its inputs' types (PyTorch's fallthrough)
  Lower,     ///< AC_LOWER: floating inputs cast to the region's dtype (bf16): matmul, conv, attention
  Fp32,      ///< AC_FP32: floating inputs cast to float32: softmax, losses, layer norm, prod
  Promote,   ///< AC_PROMOTE: floating inputs cast to the widest of their types (cat)
};
inline constexpr uint32_t kAutocastShift = 16;

/// How many inputs or outputs an op takes: lo..hi, hi = kAny for "any number".
struct Arity {
  static constexpr int kAny = -1;
  int lo = 0, hi = 0;
  constexpr Arity(int n) : lo(n), hi(n) {}  // NOLINT: a plain count in ops.def
  constexpr Arity(int l, int h) : lo(l), hi(h) {}
  constexpr bool accepts(size_t n) const { return int64_t(n) >= lo && (hi == kAny || int64_t(n) <= hi); }
  constexpr bool variadic() const { return lo != hi; }
};

/// An attribute field's type. Int, Bool, DType: one entry of Attrs::ints; Ints: the rest of
/// Attrs::ints; Float: one entry of Attrs::floats; Flag: an epilogue the compiler fused in,
/// the last int, absent (false) or 1.
enum class AttrType : uint8_t { Int, Bool, DType, Ints, Float, Flag };

struct AttrField {
  const char* name;
  AttrType type;
  double default_value = 0;  ///< Float fields: the default ops.def declares
};

/// One op's schema, as ops.def declares it.
struct OpInfo {
  OpKind kind;
  const char* name;
  Arity inputs, outputs;
  uint32_t traits;
  const AttrField* attrs;  ///< num_attrs fields, in order
  size_t num_attrs;
  constexpr bool has(Trait t) const { return (traits & t) != 0; }
};

namespace schema_detail {
// The vocabulary of ops.def lines.
constexpr uint32_t EW = kElementwise, UNARY = kUnary, BINARY = kBinary, FLOAT_MATH = kFloatMath,
                   COMPARE = kCompare, DIFF = kDifferentiable, BACKWARD = kBackward, COMPILER = kCompilerMade,
                   EFFECTS = kSideEffects, INDEX = kIndex, POSITIVE = kPositive, NONZERO = kNonzero,
                   BARRIER = kBarrier;
constexpr uint32_t S_POINTWISE = uint32_t(ShardRule::Pointwise) << kShardRuleShift,
                   S_BROADCAST = uint32_t(ShardRule::Broadcast) << kShardRuleShift,
                   S_TRANSPOSE = uint32_t(ShardRule::Transpose) << kShardRuleShift,
                   S_RESHAPE = uint32_t(ShardRule::Reshape) << kShardRuleShift,
                   S_REDUCE = uint32_t(ShardRule::Reduce) << kShardRuleShift,
                   S_DOT = uint32_t(ShardRule::Dot) << kShardRuleShift,
                   S_CONV = uint32_t(ShardRule::Conv) << kShardRuleShift,
                   S_ALONG_DIM = uint32_t(ShardRule::AlongDim) << kShardRuleShift,
                   S_WINDOW = uint32_t(ShardRule::Window) << kShardRuleShift,
                   S_LOSS = uint32_t(ShardRule::Loss) << kShardRuleShift,
                   S_CONSTRAINT = uint32_t(ShardRule::Constraint) << kShardRuleShift,
                   S_COLLECTIVE = uint32_t(ShardRule::Collective) << kShardRuleShift,
                   S_PASS = uint32_t(ShardRule::PassThrough) << kShardRuleShift,
                   S_ATTENTION = uint32_t(ShardRule::Attention) << kShardRuleShift,
                   S_DEVICE = uint32_t(ShardRule::Device) << kShardRuleShift;
constexpr uint32_t AC_LOWER = uint32_t(AutocastRule::Lower) << kAutocastShift,
                   AC_FP32 = uint32_t(AutocastRule::Fp32) << kAutocastShift,
                   AC_PROMOTE = uint32_t(AutocastRule::Promote) << kAutocastShift;
constexpr int N = Arity::kAny;
constexpr Arity R(int lo, int hi) { return {lo, hi}; }
constexpr double INF = std::numeric_limits<double>::infinity();  // an unbounded default

#define INT(x) {#x, AttrType::Int},
#define BOOL(x) {#x, AttrType::Bool},
#define DTYPE(x) {#x, AttrType::DType},
#define INTS(x) {#x, AttrType::Ints},
#define FLOAT(x, d) {#x, AttrType::Float, double(d)},
#define FLAG(x) {#x, AttrType::Flag},
#define AXLE_OP(Name, str, in, out, traits, attrs) \
  inline constexpr AttrField Name##_fields[] = {attrs{nullptr, AttrType::Int}};
#include "ops/ops.def"
#undef AXLE_OP
#undef INT
#undef BOOL
#undef DTYPE
#undef INTS
#undef FLOAT
#undef FLAG

template <size_t K>
constexpr size_t count(const AttrField (&)[K]) { return K - 1; }  // less the terminator

inline constexpr OpInfo kTable[] = {
#define AXLE_OP(Name, str, in, out, traits, attrs) \
  OpInfo{OpKind::Name, str, Arity(in), Arity(out), uint32_t(traits), Name##_fields, count(Name##_fields)},
#include "ops/ops.def"
#undef AXLE_OP
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == size_t(OpKind::kNumOps));
}  // namespace schema_detail

/// Op k's schema.
constexpr const OpInfo& op_info(OpKind k) { return schema_detail::kTable[size_t(k)]; }
/// Every op's schema, in OpKind order.
constexpr const OpInfo* op_infos_begin() { return schema_detail::kTable; }
constexpr const OpInfo* op_infos_end() { return schema_detail::kTable + size_t(OpKind::kNumOps); }

/// True for the ops the fused-elementwise kernel can run (unary, binary, where, cast).
constexpr bool is_elementwise(OpKind k) { return op_info(k).has(kElementwise); }
/// Effects beyond its outputs (collectives talk to other processes): the compiler never
/// drops (DCE) or constant-folds such an op, nor reorders it; CSE merges only identical
/// collectives (same op, operands and attributes).
constexpr bool has_side_effects(OpKind k) { return op_info(k).has(kSideEffects); }
/// An optimization barrier: the compiler treats its outputs as opaque values (no CSE of it
/// or across it, no folding or simplification through it, no fusion across it).
constexpr bool is_barrier(OpKind k) { return op_info(k).has(kBarrier); }
/// Computes in float32 when its operands are integers.
constexpr bool is_float_op(OpKind k) { return op_info(k).has(kFloatMath); }
/// The SPMD partitioner's rule for op k (its S_* trait in ops.def; Opaque if none).
constexpr ShardRule shard_rule(OpKind k) { return ShardRule(op_info(k).traits >> kShardRuleShift); }
/// Op k's autocast rule (its AC_* trait in ops.def; None if none).
constexpr AutocastRule autocast_rule(OpKind k) {
  return AutocastRule((op_info(k).traits >> kAutocastShift) & 3u);
}
/// Every op with all of `traits`, in OpKind order.
std::vector<OpKind> ops_with(uint32_t traits);

/// Whether `a` fits op k's declared attributes (counts and flag values); if not and `why`
/// is given, says which field is missing or what is extra.
bool attrs_match(OpKind k, const Attrs& a, std::string* why = nullptr);

/// The table's text (every ops.def entry, whitespace folded), and a 64-bit hash of it:
/// anything derived from the table (the persistent cache's format) changes with it.
const char* schema_text();
uint64_t schema_hash();
/// FNV-1a over `s`: schema_hash() is hash_text(schema_text()).
uint64_t hash_text(const std::string& s);

namespace schema_detail {
// Readers of the typed views below; they throw axle::Error naming the op and the field.
int64_t take_int(OpKind k, const char* field, const Attrs& a, size_t& i);
double take_float(OpKind k, const char* field, const Attrs& a, size_t& f);
bool take_flag(OpKind k, const char* field, const Attrs& a, size_t& i);
void check_consumed(OpKind k, const Attrs& a, size_t i, size_t f);
}  // namespace schema_detail

/// Typed views of each op's attributes, generated from ops.def: attr::Slice has fields
/// dim, start, end, step; attr::Slice::of(a) reads them from Attrs (throwing, naming the op
/// and the field, when `a` does not fit), attr::Slice{...}.pack() writes them.
namespace attr {
using schema_detail::INF;
#define INT(x) int64_t x = 0;
#define BOOL(x) bool x = false;
#define DTYPE(x) DType x = DType::Float32;
#define INTS(x) std::vector<int64_t> x{};
#define FLOAT(x, d) double x = d;
#define FLAG(x) bool x = false;
#define AXLE_OP(Name, str, in, out, traits, attrs) \
  struct Name {                                    \
    attrs static Name of(const Attrs& a);          \
    Attrs pack() const;                            \
  };
#include "ops/ops.def"
#undef AXLE_OP
#undef INT
#undef BOOL
#undef DTYPE
#undef INTS
#undef FLOAT
#undef FLAG

#define INT(x) r.x = schema_detail::take_int(op_, #x, a, i_);
#define BOOL(x) r.x = schema_detail::take_int(op_, #x, a, i_) != 0;
#define DTYPE(x) r.x = DType(schema_detail::take_int(op_, #x, a, i_));
#define INTS(x) r.x.assign(a.ints.begin() + std::ptrdiff_t(std::min(i_, a.ints.size())), a.ints.end()), i_ = a.ints.size();
#define FLOAT(x, d) r.x = schema_detail::take_float(op_, #x, a, f_);
#define FLAG(x) r.x = schema_detail::take_flag(op_, #x, a, i_);
#define AXLE_OP(Name, str, in, out, traits, attrs)               \
  inline Name Name::of([[maybe_unused]] const Attrs& a) {        \
    [[maybe_unused]] constexpr OpKind op_ = OpKind::Name;         \
    Name r;                                                      \
    [[maybe_unused]] size_t i_ = 0, f_ = 0;                      \
    attrs schema_detail::check_consumed(op_, a, i_, f_);         \
    return r;                                                    \
  }
#include "ops/ops.def"
#undef AXLE_OP
#undef INT
#undef BOOL
#undef DTYPE
#undef INTS
#undef FLOAT
#undef FLAG

#define INT(x) a.ints.push_back(x);
#define BOOL(x) a.ints.push_back(x ? 1 : 0);
#define DTYPE(x) a.ints.push_back(int64_t(x));
#define INTS(x) a.ints.insert(a.ints.end(), x.begin(), x.end());
#define FLOAT(x, d) a.floats.push_back(x);
#define FLAG(x) \
  if (x) a.ints.push_back(1);
#define AXLE_OP(Name, str, in, out, traits, attrs) \
  inline Attrs Name::pack() const {                \
    Attrs a;                                       \
    attrs return a;                                \
  }
#include "ops/ops.def"
#undef AXLE_OP
#undef INT
#undef BOOL
#undef DTYPE
#undef INTS
#undef FLOAT
#undef FLAG

/// attr::Name for OpKind::Name: AttrOf<OpKind::Clamp>::type is attr::Clamp.
template <OpKind K>
struct AttrOf;
#define AXLE_OP(Name, ...)             \
  template <>                          \
  struct AttrOf<OpKind::Name> {        \
    using type = Name;                 \
  };
#include "ops/ops.def"
#undef AXLE_OP
}  // namespace attr

}  // namespace axle::ops
