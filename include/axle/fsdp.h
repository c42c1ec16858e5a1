// Fully sharded data parallel (torch_xla's FSDP): each device keeps 1/N of every wrapped
// parameter, its gradient and its optimizer state.
//
// v1, one process per device (launch + Gloo), as torch_xla's XlaFullyShardedDataParallel:
//
//   axle::launch([&](int) {
//     axle::dist::init_process_group("xla", "xla://");
//     auto model = nn::to(std::make_shared<Net>(), axle::device());
//     auto fsdp_model = std::make_shared<axle::fsdp::FSDP>(model, axle::fsdp::FSDPOptions{
//         .auto_wrap_policy = axle::fsdp::transformer_auto_wrap_policy({"Linear"})});
//     optim::SGD opt(fsdp_model->parameters(), {.lr = 0.01});   // the shards: built after wrapping
//     for (const auto& batch : loader) {
//       auto step = axle::step();
//       opt.zero_grad();
//       cross_entropy((*fsdp_model)(x), y).backward();             // reduce-scatters the gradients
//       opt.step();                                                // NOT xm::optimizer_step
//     }
//   });
//
// Each parameter (not already owned by an inner FSDP unit) is flattened, padded to a multiple
// of world_size * shard_size_multiple and split; rank r keeps slice r as a new leaf, the only
// one parameters() lists (named "_fsdp_shard_<name with . as _>", or "_fsdp_flat_param"
// and "_fsdp_flat_param_frozen"; the wrapped module is the child "_fsdp_wrapped_module").
// Every rank starts from rank 0's values. forward() all-gathers the unit's full parameters
// into the wrapped module's own parameter tensors and runs it; with reshard_after_forward,
// when backward reaches the unit's output the values autograd saved are pointed at a
// re-gather, so the forward copy dies at its last forward use (the graph's buffer planner
// frees it) and the backward copy at its last backward use. When a full parameter's
// gradient is accumulated it is reduce-scattered (mean over ranks, as DDP) into the shard's
// gradient and dropped, and the full parameter goes back to a 1-element placeholder (frozen
// ones right after forward). On the xla device all of it is ops of the step's graph:
// optimization barriers keep the two all-gathers of a unit apart (CSE would merge them).
// On the cpu device everything runs at once; resharding saves nothing there (autograd's
// saved values keep the gathered storage).
//
// Nested units (auto_wrap_policy) take their module's place among its parent's children,
// and a wrapped module's operator() calls its unit, so a parent's forward that calls
// (*child)(x) (as Sequential does) reaches the unit; calling child->forward(x) directly
// would bypass it (its parameters would be placeholders). With flatten_parameters, a
// unit's gradients are reduce-scattered once every trainable parameter of the unit has one.
//
// v2, SPMD (one process, N devices), as torch_xla's SpmdFullyShardedDataParallel: every
// parameter is sharded on its largest dim over the mesh axis "fsdp" and the output on dim
// 0; the SPMD partitioner derives the weight all-gathers and gradient reduce-scatters.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "axle/nn/module.h"
#include "axle/xs.h"

namespace axle::fsdp {

/// Decides whether to wrap a child module in its own FSDP unit. Called for every module
/// below the root, children first (recurse = true asks "look inside?", recurse = false asks
/// "wrap this one?"); unwrapped_params: the module's parameters not yet in a unit.
using AutoWrapPolicy = std::function<bool(nn::Module& m, bool recurse, int64_t unwrapped_params)>;
/// Wraps a module whose not-yet-wrapped parameters number at least min_num_params.
AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params = 100'000'000);
/// Wraps every module whose name() is one of `layer_names` (e.g. {"Linear"}, {"Block"}).
AutoWrapPolicy transformer_auto_wrap_policy(std::set<std::string> layer_names);

/// torch_xla's option names; the defaults are torch_xla's except shard_size_multiple.
struct XlaFullyShardedDataParallelOptions {
  /// Free the full parameters after forward and all-gather them again in backward (ZeRO-3);
  /// false keeps them from forward to backward (ZeRO-2: more memory, one all-gather fewer).
  bool reshard_after_forward = true;
  /// One flat parameter per unit (one all-gather and one reduce-scatter per unit) instead
  /// of one per parameter.
  bool flatten_parameters = false;
  /// Pad and shard dim 0 only, keeping the other dims (no flattening).
  bool shard_param_on_dim_0 = false;
  /// Barriers on the unit's inputs and outputs in forward / on the backward re-gather's
  /// inputs: without them the compiler may merge a unit's two all-gathers (CSE) and keep
  /// the full parameters alive from forward to backward.
  bool optimization_barrier_in_forward = true;
  bool optimization_barrier_in_backward = true;
  /// float32 or bfloat16. Parameters are all-gathered and computed in compute_dtype, and the
  /// unit's floating input is cast to it; the shards (master weights), their gradients
  /// (reduce-scattered in the shards' dtype) and the optimizer's state stay float32. The unit's
  /// floating buffers are cast to buffer_dtype (unset: compute_dtype, as torch_xla).
  /// nullopt: unchanged. Another dtype is an error.
  std::optional<DType> compute_dtype{};
  std::optional<DType> buffer_dtype{};
  /// Pads each shard to a multiple of this (torch_xla: 128, a TPU all-gather detail; 1 on CPU).
  int shard_size_multiple = 1;
  /// Nested units: children the policy picks are wrapped first, with these same options.
  AutoWrapPolicy auto_wrap_policy{};
  /// What wraps a picked child (default: FSDP with these options and no policy), e.g. to add
  /// checkpointing. The child's parent then holds what it returns; the child's operator()
  /// still goes to the FSDP unit wrapping it (if the callable made one).
  std::function<nn::ModulePtr(nn::ModulePtr child)> auto_wrapper_callable{};
};
using FSDPOptions = XlaFullyShardedDataParallelOptions;

/// How this rank's shards map to the wrapped module's full parameters (written into each
/// rank's checkpoint; consolidation reads it).
struct ShardMetadata {
  struct Param {
    std::string shard_name;            ///< the shard's state_dict key (on the root)
    std::vector<std::string> names;    ///< full parameters it holds, state_dict keys of the unwrapped model
    std::vector<Shape> shapes;         ///< their shapes (one entry each)
    bool dim0 = false;                 ///< shard_param_on_dim_0: sharded on dim 0, not flattened
    int64_t padded_numel = 0;          ///< flattened: total elements after padding (dim0: padded dim-0 size)
  };
  std::vector<Param> params;
  std::vector<std::string> buffer_names;  ///< buffers (full on every rank), unwrapped keys
  int world_size = 1;
  int rank = 0;
  /// JSON text of the above (and back), as stored in checkpoint metadata.
  std::string to_json() const;
  static ShardMetadata from_json(const std::string& json);
};

class XlaFullyShardedDataParallel : public nn::Module {
 public:
  /// Shards `module`'s parameters (float32, on one device) over the default process group.
  /// Errors: a null module; a module already wrapped, an FSDP module, or a module inside a
  /// wrapped tree (its parameters belong to another unit); flatten_parameters together with
  /// shard_param_on_dim_0; a compute_dtype / buffer_dtype other than float32 or bfloat16. A module without forward() throws
  /// at the first forward (nn::Module's own).
  explicit XlaFullyShardedDataParallel(nn::ModulePtr module, XlaFullyShardedDataParallelOptions o = {});
  ~XlaFullyShardedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "XlaFullyShardedDataParallel"; }
  const nn::ModulePtr& module() const { return module_; }
  const XlaFullyShardedDataParallelOptions& options() const { return opts_; }

  /// Scales every shard gradient of this tree so that the global gradient norm (over all
  /// ranks) is at most max_norm; returns the global norm before clipping. Call on the root.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  ShardMetadata get_shard_metadata() const;

  /// Forwards run while it is alive do not reduce-scatter: full gradients accumulate
  /// locally (more memory) and the first forward+backward after it reduce-scatters them.
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    struct State;

   private:
    friend class XlaFullyShardedDataParallel;
    explicit NoSyncGuard(std::vector<std::shared_ptr<State>> s);
    std::vector<std::shared_ptr<State>> states_;
  };
  [[nodiscard]] NoSyncGuard no_sync();

  struct Unit;  ///< implementation (src/nn/fsdp.cpp)

 private:
  nn::ModulePtr module_;
  XlaFullyShardedDataParallelOptions opts_;
  std::shared_ptr<Unit> unit_;
};
using FSDP = XlaFullyShardedDataParallel;

/// What an FSDP v1 unit made of a tensor: Shard (a parameter it lists; xm::optimizer_step
/// refuses those: their gradients are already reduced) or Full (a wrapped module's own
/// parameter, which it gathers and frees; an optimizer holding one was built before
/// wrapping, and its step() says so).
enum class ParamRole { None, Shard, Full };
ParamRole param_role(const Tensor& p);
/// The name param_role's tensor has in the wrapped (unwrapped-model) tree, e.g. "fc1.weight";
/// for a shard, its state_dict key on its unit; "" for ParamRole::None.
std::string param_name(const Tensor& p);

struct SpmdFullyShardedDataParallelOptions {
  /// The mesh; must have an axis named "fsdp". nullopt: xs::get_global_mesh().
  std::optional<xs::Mesh> mesh{};
  /// Shards the output; default: dim 0 over "fsdp", the other dims replicated.
  std::function<void(Tensor& out, const xs::Mesh& mesh)> shard_output{};
  AutoWrapPolicy auto_wrap_policy{};
  /// Each parameter's sharded dim goes over (extra_data_axis, "fsdp") (HSDP-like).
  std::optional<std::string> extra_data_axis{};
};

class SpmdFullyShardedDataParallel : public nn::Module {
 public:
  /// Requires runtime::use_spmd(). Marks every parameter not sharded yet: its largest dim
  /// over "fsdp" (ties: the first). Errors: no mesh, a mesh without "fsdp", a null module.
  explicit SpmdFullyShardedDataParallel(nn::ModulePtr module, SpmdFullyShardedDataParallelOptions o = {});
  ~SpmdFullyShardedDataParallel() override;
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SpmdFullyShardedDataParallel"; }
  const nn::ModulePtr& module() const { return module_; }
  const xs::Mesh& mesh() const { return mesh_; }

 private:
  nn::ModulePtr module_;
  SpmdFullyShardedDataParallelOptions opts_;
  xs::Mesh mesh_;
};

}  // namespace axle::fsdp

namespace axle::experimental {
using fsdp::SpmdFullyShardedDataParallel;  // torch_xla's import path
}
