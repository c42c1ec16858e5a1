// The SPMD compiler's per-rule interface: what each ShardRule (ops.def's S_* column) does in
// sharding propagation and in partitioning. spmd::propagate and spmd::partition
// (src/spmd/propagate.cpp, partition.cpp) look an op's rule up in rule_table() and call
// its hooks; a rule without hooks is Opaque (operands replicated, op run on global shapes,
// outputs replicated, the op listed once in Partitioned::opaque_ops).
//
// Who registers what:
//   src/spmd/rules.cpp     register_core_rules: Pointwise, Broadcast, Transpose, Reshape,
//                          Reduce, Dot, Constraint, Collective, PassThrough
//   src/spmd/rules_nn.cpp  register_nn_rules: Conv, Window, AlongDim, Loss
//
// Conventions every hook follows:
//   - Shardings are those of GLOBAL shapes (Sharding::dim_axes has one entry per global dim,
//     or is empty for a replicated value). All shardings of one program share one mesh.
//   - Propagation never sees Partial: it proposes plain Replicated/Tiled shardings.
//   - Partitioning sees operands as LocalValues, which may be Partial (an unreduced sum,
//     max or min over some mesh axes). A hook that cannot take a Partial operand calls
//     cx.reshard(v, v.sharding without partial, rule) (or any target) first; cx.resolve()
//     does exactly that.
//   - Padding: a tiled dim of global size n over t tiles has ceil(n/t) elements per device,
//     the last devices' tails being padding (spec §2.7). Padding holds garbage: a hook that
//     reduces or contracts over an unevenly sharded dim masks it first (cx.mask_padding
//     with the reduction's identity: 0 for sum and dot, -inf for max, +inf for min).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "ops/op.h"
#include "spmd/sharding.h"

namespace axle::spmd {

// ---------------------------------------------------------------- propagation ----

/// A sharding, or nullopt when not known (yet).
using MaybeSharding = std::optional<Sharding>;

/// What a propagation hook sees of one node: its operands' and outputs' shardings as known
/// so far (nullopt: unknown, or an absent optional operand) and their global shapes.
struct PropagationView {
  const compiler::Program& program;
  int node_index = 0;
  const compiler::PNode& node;
  std::vector<MaybeSharding> operands;  ///< one per node.operands
  std::vector<MaybeSharding> outputs;   ///< one per node.outs
  std::shared_ptr<const xs::Mesh> mesh;  ///< the program's mesh (null: no input is on a mesh)

  /// Operand i's global shape (empty for an absent operand).
  const Shape& operand_shape(size_t i) const;
  /// Output j's global shape.
  const Shape& output_shape(size_t j) const { return node.outs[j].shape; }
};

/// Forward: proposes a sharding per output from what is known of the operands (nullopt:
/// no opinion). Must return node.outs.size() entries (or none: no opinion at all).
using ForwardFn = std::function<std::vector<MaybeSharding>(const PropagationView&)>;
/// Backward: proposes a sharding per operand from what is known of the outputs (nullopt:
/// no opinion). Must return node.operands.size() entries (or none).
using BackwardFn = std::function<std::vector<MaybeSharding>(const PropagationView&)>;

// --------------------------------------------------------------- partitioning ----

/// A value of the local program: its reference there, its sharding (possibly Partial) and
/// its GLOBAL metadata. Its local shape is sharding.shard_shape(global).
struct LocalValue {
  compiler::Ref ref;  ///< node -1: an absent optional operand
  Sharding sharding;
  Shape global;
  DType dtype = DType::Float32;
  /// For a Partial value: why it is partial ("dot: contracting dim 1 sharded on both
  /// operands"); the note of the collective that later resolves it starts with this.
  std::string origin;
  bool absent() const { return ref.node < 0; }
  Shape local_shape() const { return sharding.shard_shape(global); }
};

/// What a partitioning hook uses to build the local program. Implemented by
/// spmd::partition (src/spmd/partition.cpp); one context per node being partitioned.
class PartitionContext {
 public:
  virtual ~PartitionContext() = default;
  /// The global program and the node being partitioned (its index in global.nodes).
  virtual const compiler::Program& global() const = 0;
  virtual int node_index() const = 0;
  const compiler::PNode& node() const { return global().nodes[size_t(node_index())]; }
  /// The program's mesh (never null inside a hook: a program without one has no hooks run).
  virtual const std::shared_ptr<const xs::Mesh>& mesh() const = 0;

  /// `v` with sharding `to` (same global shape), inserting what the §2.4 table says:
  /// nothing (same), shard_slice (replicated -> tiled), all_gather (tiled -> replicated),
  /// all_reduce (partial -> replicated), reduce_scatter (partial -> tiled), all_to_all
  /// (a dim's tiling moves to another dim), collective_permute (same tiling, other device
  /// order), else through replicated with a "full rematerialization" warning. Each
  /// collective is recorded as a CollectiveNote whose rule text is `rule` ("dot: lhs free
  /// dim matches output; gathered rhs"). `to` must not be Partial unless equal to v's.
  virtual LocalValue reshard(const LocalValue& v, const Sharding& to, const std::string& rule) = 0;
  /// v with its pending reduction done (all-reduce), its tiling kept; v itself if not Partial.
  LocalValue resolve(const LocalValue& v, const std::string& rule);

  /// Appends op `op` to the local program on local operands (Ref node -1: absent) and
  /// returns its outputs. `local_outs`: the outputs' local metadata; empty: from the op's
  /// shape rule run on the operands' local metadata (the usual case).
  virtual std::vector<compiler::Ref> emit(ops::OpKind op, const std::vector<compiler::Ref>& operands,
                                          const ops::Attrs& attrs, std::vector<ops::Meta> local_outs = {}) = 0;
  /// A constant (scalar cpu tensor) or other leaf in the local program.
  virtual compiler::Ref constant(const Tensor& value) = 0;

  /// `v` with the padding of its dim `dim` (global size v.global[dim]) set to `fill`, read at
  /// run time from the running device (the mask_padding op); v itself when that dim has no
  /// padding (not split, or split evenly). Partial operands keep their sharding.
  virtual LocalValue mask_padding(const LocalValue& v, int dim, double fill) = 0;

  /// How many times global value `r` is read (operands of live nodes and program outputs).
  /// A Partial value read more than once is reduced at its first reader (once: reshard
  /// caches), not kept Partial through linear ops into several values reduced one by one.
  virtual int uses(compiler::Ref r) const = 0;
  /// Whether operand `i` of the node being partitioned may stay Partial through a linear op:
  /// its value has this one reader.
  bool single_use(size_t i) const { return uses(node().operands[i]) <= 1; }

  /// Adds a line to Partitioned::warnings.
  virtual void warn(const std::string& message) = 0;
  /// The text naming global value `r` in notes and warnings ("%12 = linear(...) : float32[4,8]",
  /// or an input's label).
  virtual std::string value_text(compiler::Ref r) const = 0;

  /// The local metadata of a local reference (recorded when it was emitted); the reference
  /// returned is valid until the next emit.
  virtual const ops::Meta& local_meta(compiler::Ref r) const = 0;
};

/// Partitioning: emits the node's local computation into cx and returns one LocalValue per
/// output (node.outs), with the sharding the local result really has (possibly Partial;
/// need not equal `chosen`, which is what propagation picked for each output: the consumers
/// reshard as they need). `operands` are the node's operands as they are now (possibly
/// Partial, possibly not what the rule wants: the hook reshards them).
using PartitionFn = std::function<std::vector<LocalValue>(PartitionContext& cx, const std::vector<LocalValue>& operands,
                                                          const std::vector<Sharding>& chosen)>;

/// One rule's hooks; any may be empty (empty forward/backward: no opinion; empty partition:
/// the op is handled as Opaque and listed in Partitioned::opaque_ops).
struct RuleHooks {
  ForwardFn forward;
  BackwardFn backward;
  PartitionFn partition;
};

/// The hooks of every ShardRule, indexed by the rule.
struct RuleTable {
  std::vector<RuleHooks> hooks = std::vector<RuleHooks>(size_t(ops::ShardRule::Device) + 1);
  RuleHooks& operator[](ops::ShardRule r) { return hooks[size_t(r)]; }
  const RuleHooks& operator[](ops::ShardRule r) const { return hooks[size_t(r)]; }
};

/// The table spmd::propagate and spmd::partition use: register_core_rules then
/// register_nn_rules, made once.
const RuleTable& rule_table();
/// Pointwise, Broadcast, Transpose, Reshape, Reduce, Dot, Constraint, Collective, PassThrough (rules.cpp).
void register_core_rules(RuleTable& t);
/// Conv, Window, AlongDim, Loss (rules_nn.cpp). Each hook serves every op with that S_
/// entry in ops.def (the ops k with ops::shard_rule(k) == that rule).
void register_nn_rules(RuleTable& t);

// ---------------------------------------------------------------- helpers ----
// Small sharding algebra the rules share (rules.cpp).

/// A sharding on `mesh` with `dim_axes` (one entry per dim): Replicated when no dim is split.
Sharding make_sharding(std::shared_ptr<const xs::Mesh> mesh, std::vector<std::vector<int>> dim_axes);
/// The per-dim axes of `s` for a value of rank `rank` ({} per dim when replicated).
std::vector<std::vector<int>> dim_axes_of(const Sharding& s, size_t rank);
/// `s` with dims `dims` not split (the mesh axes they used become replication).
Sharding with_dims_replicated(const Sharding& s, size_t rank, const std::vector<int>& dims);
/// `s` without its Partial state.
Sharding without_partial(Sharding s);
/// `s` Partial over `axes` with `op` (added to s's own partial axes; they must agree in op).
Sharding with_partial(Sharding s, const std::vector<int>& axes, Reduce op);
/// The number of tiles of `s` over all dims (1: not split). Propagation's merge prefers more.
int64_t total_tiles(const Sharding& s);
/// Whether dim d of a value with global size n is split unevenly by s (its last shards padded).
bool has_padding(const Sharding& s, int d, int64_t n);
/// XLA's ReshapeSharding (spec §2.3): the sharding of shape `to` that keeps every device's
/// shard of `s` on shape `from` (size-1 dims added or removed, dims carried over, consecutive
/// dims merged where only the major one is split evenly, a dim split into consecutive dims
/// whose major one takes the split evenly, unsplit dims reshaped freely); nullopt if none.
/// Partial axes are dropped.
std::optional<Sharding> reshape_sharding(const Shape& from, const Shape& to, const Sharding& s);
/// The name of a sharding for notes ("{devices=[4,1]0,1,2,3}", "partial(data) {replicated}").
inline std::string sharding_text(const Sharding& s) { return s.str(); }

}  // namespace axle::spmd
