// The lazy IR: nodes recorded by ops on xla tensors, and the per-tensor lazy state.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "axle/metrics.h"
#include "compiler/program.h"
#include "core/tensor_impl.h"
#include "ops/op.h"
#include "spmd/sharding.h"

namespace axle::lazy {

struct Node;
struct LazyTensor;  ///< an xla tensor's state (below)
using NodePtr = std::shared_ptr<Node>;
struct Execution;
struct SpmdProgram;  ///< a compiled SPMD graph (spmd_exec.cpp)

/// One output of a graph dispatched to the device thread (async execution): `value` is
/// written by the device thread before `producer` is done; read it through ready_buffer.
struct PendingBuffer {
  std::shared_ptr<Execution> producer;
  Tensor value;
};

/// One output of a node. A null node stands for an absent optional input.
struct Value {
  NodePtr node;
  int index = 0;
  explicit operator bool() const { return node != nullptr; }
};

using NodeKind = compiler::NodeKind;  ///< Op, Data or Constant (compiler/program.h)

struct Node {
  NodeKind kind = NodeKind::Op;
  ops::OpKind op{};
  ops::Attrs attrs;
  std::vector<Value> operands;
  std::vector<ops::Meta> outs;
  Tensor data;        ///< Data: the buffer, a dense cpu tensor
  std::shared_ptr<PendingBuffer> pending;  ///< Data: the buffer, while its execution may still run
  /// Data made for a tensor: that tensor. Once it is gone, a full sync may let the
  /// graph overwrite the buffer (donation: an updated parameter reuses its memory).
  std::weak_ptr<LazyTensor> owner;
  bool has_owner = false;
  double scalar = 0;  ///< Constant: its value
  std::string label;  ///< Data: what this input is, for AXLE_DEBUG ("parameter fc1.weight", ...)
  /// Data under SPMD: the owner's sharding (null: unannotated, i.e. replicated) and, for
  /// materialised SPMD data, one padded shard per device (then `data` is empty).
  std::shared_ptr<const spmd::Sharding> sharding;
  std::vector<Tensor> shards;
  /// Kind, op, attrs, output metas, constant value and the operands' hashes: computed
  /// once when the node is made (seal_node), so cutting a graph never rehashes its nodes.
  uint64_t hash = 0;
  /// build_graph's scratch: the pass that last visited this node, and the node's index in
  /// that pass's graph (faster than a hash map on every cut; graphs are cut on one thread).
  uint64_t visit = 0;
  int index = -1;
};

/// What an xla tensor holds: pending IR, or materialised device data. Shared by a
/// tensor and its detached aliases, so materialising one materialises all. Held as its
/// TensorImpl's device state (core/tensor_impl.h); read it through lazy_of.
struct LazyTensor final : DeviceState {
  LazyTensor();   ///< counts live lazy states (use_spmd warns when some exist)
  ~LazyTensor();  ///< counts DestroyXlaTensor
  Value ir;           ///< pending computation; null once materialised
  Tensor buffer;      ///< device data: a buffer of the backend serving the device (the cpu's: a dense cpu tensor)
  /// Async execution: the buffer an execution still running will write (then `buffer`
  /// is empty until ready_buffer collects it).
  std::shared_ptr<PendingBuffer> pending;
  NodePtr data_node;  ///< the Data node that stands for `buffer` in graphs
  std::string label;  ///< what this tensor is, for explanations (see set_label)
  int label_rank = 0; ///< a LabelRank: a label replaces only one of equal or lower rank
  // ---- SPMD (runtime::is_spmd()); unused otherwise.
  /// The tensor's sharding: set by xs::mark_sharding, by an SPMD execution that computed
  /// it, and kept when Tensor::set_data replaces the state (in-place updates); null:
  /// unannotated (replicated when used).
  std::shared_ptr<const spmd::Sharding> sharding;
  /// Materialised SPMD data: one padded shard per device, in device order (then `buffer`
  /// is empty). Unsharded data put on the device keeps `buffer` until it is used.
  std::vector<Tensor> shards;
  /// Pending state made by set_data over data: that data's node. An execution computing
  /// this tensor from that node updates it in place (its output is pinned to the input's
  /// sharding; InputOutputAliasCount).
  std::weak_ptr<Node> updates;
  /// The SPMD graph that computed this tensor (for xs::explain); null otherwise.
  std::shared_ptr<const SpmdProgram> producer;
};

/// The lazy state of `t`; null for an undefined or cpu tensor. This layer is the only one
/// that sets a TensorImpl's device state (make_xla), so the cast back is static.
LazyTensor* lazy_of(const Tensor& t);
/// The same, shared: for what must keep the state alive (the live-tensor registry, targets).
std::shared_ptr<LazyTensor> shared_lazy_of(const Tensor& t);

/// The tensor's device data: waits for the execution that produces it (only that one)
/// if it is still running; throws that execution's error, naming its graph.
const Tensor& ready_buffer(LazyTensor& lt);

/// How much a label says about a tensor: a parameter's name outranks "argument k of a
/// compiled function", which outranks where the data came from ("copied from cpu").
enum LabelRank : int { kLabelOrigin = 1, kLabelArgument = 2, kLabelModule = 3 };
/// Names an xla tensor's data for AXLE_DEBUG explanations (no-op for cpu or undefined
/// tensors, or when the tensor already has a label of higher rank).
void set_label(const Tensor& t, const std::string& label, LabelRank rank);
/// The label of an xla tensor ("" if none).
std::string label_of(const Tensor& t);
/// The explanation of the last uncached compile (whether or not AXLE_DEBUG printed it).
std::string last_explanation();

/// What the current trace belongs to: a plain step, or a compile()d function.
struct TraceContext {
  std::string name = "step";  ///< graph name in debug output, saved graphs and errors
  bool full_graph = false;    ///< a value read inside throws
  /// Called with each new graph hash before it runs (compile()'s max_different_graphs); may throw.
  std::function<void(uint64_t hash, const std::function<std::string()>& explain)> on_graph;
};
/// The innermost active compile() context on this thread, or null.
TraceContext* current_context();
void set_current_context(TraceContext* c);

/// Records op `k` on xla inputs; returns xla tensors holding its pending outputs.
ops::Tensors record(ops::OpKind k, const ops::Tensors& in, const ops::Attrs& a, const std::vector<ops::Meta>& metas,
                    Device dev);
/// Copies a cpu tensor to the lazy device (counted as TransferToDeviceTime).
Tensor to_device(const Tensor& cpu_tensor, Device dev);
/// Materialises (running only what it needs) and copies to cpu (TransferFromDeviceTime).
/// `reason` names the reading op ("item", "to(cpu)", "print") for full_graph errors.
Tensor to_cpu(const Tensor& xla_tensor, const char* reason);
/// Runs every pending live tensor's graph. Returns false if there was nothing to run.
bool sync_all(const char* cause);
/// A step boundary (counted in MarkStep) caused by `cause` ("user sync", "loader", ...).
void mark_step(const char* cause);
/// Eager mode: runs the pending outputs of one op at once (a cached one-op graph).
void run_eagerly(const ops::Tensors& outs);
/// Entries in the live-tensor registry (bounded: dead and materialised entries are pruned).
size_t pending_count();
/// Drops every compiled graph from the in-memory cache, so the next sync of any graph
/// counts as a compile (the disk cache is untouched). For tests that count compiles.
void clear_graph_cache();
/// The TraceTime timer (time spent in ops on the lazy device).
metrics::Timer& trace_timer();
/// True while eager mode is on and no compile() region is tracing.
bool eager_active();

}  // namespace axle::lazy
