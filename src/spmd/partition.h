// The SPMD compiler: sharding propagation and partitioning of a global compiler::Program
// into one local program that every device runs (local shapes, collectives inserted).
//
// Where it runs: the lazy executor, under SPMD, runs the standard passes (fold, simplify,
// CSE, DCE) on the global program, then spmd::partition, then the backend's own passes
// (fusion) on the local program, and lowers that once for all devices.
//
// Each op's rule is its ShardRule in ops.def (ops::shard_rule); ops without one are
// opaque: replicated, correctly, and listed once in Partitioned::opaque_ops.
//
// Device-dependent values never become constants: shard_slice and mask_padding ops read
// the running device (dist::this_device()) at run time, so one program serves every device.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "spmd/sharding.h"

namespace axle::spmd {

/// One collective the partitioner inserted, for AXLE_DEBUG and xs::explain.
struct CollectiveNote {
  std::string kind;            ///< "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"
  int64_t bytes_per_device = 0;  ///< bytes each device sends (the §2.4 cost of the spec)
  std::string value;           ///< what is moved: "%12 = linear(...) : float32[128,256]" or an input's label
  std::string from, to;        ///< shardings (Sharding::str())
  std::string rule;            ///< why: "dot: contracting dim 1 sharded on both operands"
};

struct Partitioned {
  compiler::Program local;             ///< local shapes, collectives; inputs and outputs as the global one's
  std::vector<Sharding> inputs;        ///< each input's sharding (as given)
  std::vector<Sharding> outputs;       ///< each output's sharding (never Partial)
  std::vector<CollectiveNote> collectives;
  std::vector<std::string> opaque_ops;   ///< op names replicated for lack of a rule, once each
  std::vector<std::string> warnings;     ///< full rematerialisations, with the value and shardings
  int64_t devices = 1;
  std::shared_ptr<const xs::Mesh> mesh;  ///< the program's mesh (null: nothing is split)
};

struct PartitionOptions {
  /// Per program output: a sharding it must have (an updated parameter keeps its input's
  /// sharding, so its buffer can be donated); nullopt: whatever propagation chooses.
  std::vector<std::optional<Sharding>> output_pins;
  /// Per program input: its label ("parameter fc1.weight") for notes; may be empty.
  std::vector<std::string> input_labels;
};

/// Sharding propagation (forward and backward sweeps to a fixed point; input shardings
/// and sharding_constraint nodes are fixed). Returns, per node, the sharding of each of
/// its outputs (Partial never appears here: it is a partitioning state). Whatever stays
/// unknown is replicated. Used by partition() and by xs::inferred_sharding.
std::vector<std::vector<Sharding>> propagate(const compiler::Program& global, const std::vector<Sharding>& inputs,
                                             const PartitionOptions& o = {});

/// Partitions `global` (shapes global) given each input's sharding. All shardings must be
/// on one mesh (an error names two that differ). The local program's input i is device
/// d's shard of input i (shape inputs[i].shard_shape); its output j is device d's shard of
/// output j under outputs[j].
Partitioned partition(const compiler::Program& global, const std::vector<Sharding>& inputs,
                      const PartitionOptions& o = {});

/// The collective table AXLE_DEBUG prints for a newly compiled graph `name`.
std::string explain_table(const Partitioned& p, const std::string& name);

}  // namespace axle::spmd
