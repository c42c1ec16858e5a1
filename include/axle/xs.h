// SPMD sharding (torch_xla.distributed.spmd as xs): one process drives N devices; a mesh
// names their axes, a partition spec maps tensor dims to mesh axes, and the compiler
// partitions each step's graph into one local program run on every device, inserting
// the collectives the shardings require.
//
//   axle::runtime::use_spmd();                                   // AXLE_CPU_DEVICES=4
//   int64_t n = axle::runtime::global_runtime_device_count();    // 4
//   axle::xs::Mesh mesh(iota(n), {n, 1}, {"data", "model"});
//   auto x = batch.data.to(axle::device());
//   axle::xs::mark_sharding(x, mesh, {"data", axle::xs::None, axle::xs::None, axle::xs::None});
//   auto loss = ...;  axle::sync();                              // partitioned, run on 4 devices
//   axle::xs::get_sharding_spec(x);                              // "{devices=[4,1,1,1]0,1,2,3}"
//
// Names, semantics and strings follow torch_xla 2.x (see docs/spmd.md for the differences).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "axle/tensor.h"

namespace axle::xs {

/// One partition-spec entry: None (the tensor dim is replicated), one mesh axis (by name or
/// index), or a tuple of mesh axes (the dim is split over all of them, major first).
class Dim {
 public:
  Dim() = default;                  ///< None
  Dim(std::nullopt_t) {}            ///< None
  Dim(const char* axis);            ///< a mesh axis by name
  Dim(std::string axis);            ///< a mesh axis by name
  Dim(int axis_index);              ///< a mesh axis by index
  /// A tuple of axes (each a name or an index; None or a nested tuple is an error).
  static Dim axes(std::vector<Dim> axes);
  bool is_none() const { return items_.empty(); }
  bool is_tuple() const { return tuple_; }
  /// The axes: names, or indices written as decimal strings prefixed with '#' ("#1").
  const std::vector<std::string>& items() const { return items_; }

 private:
  std::vector<std::string> items_;
  bool tuple_ = false;
};
/// The None entry: `{"data", xs::None}`.
inline const Dim None{};
/// xs::axes("data", "model"): a tensor dim split over both axes.
template <class... A>
Dim axes(A&&... a) { return Dim::axes({Dim(std::forward<A>(a))...}); }
/// One entry per tensor dim; `{}` for a scalar.
using PartitionSpec = std::vector<Dim>;

/// A logical mesh of devices: `device_ids` reshaped row-major to `mesh_shape`, each axis named.
class Mesh {
 public:
  /// Checks, each with its own error: axis names as many as mesh dims and unique; as many
  /// device ids as global_runtime_device_count() and the mesh's size; ids unique and < size.
  Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> mesh_shape, std::vector<std::string> axis_names = {});
  int64_t size() const;
  /// (axis name, size) in axis order; unnamed axes are "0", "1", ...
  std::vector<std::pair<std::string, int64_t>> shape() const;
  /// The device ids, row-major in mesh_shape (get_logical_mesh()[i][j] = ids[i * cols + j]).
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  const std::vector<int64_t>& mesh_shape() const { return mesh_shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  /// The device ids as an int64 cpu tensor of shape mesh_shape ([[0, 1], [2, 3]]).
  Tensor get_logical_mesh() const;
  std::optional<int> get_axis_name_idx(std::string_view name) const;
  /// A text form that from_str reads back: "Mesh(device_ids=[0, 1, 2, 3], mesh_shape=(2, 2), axis_names=('data', 'model'))".
  std::string str() const;
  static std::optional<Mesh> from_str(std::string_view s);
  bool operator==(const Mesh& o) const = default;

 private:
  std::vector<int64_t> device_ids_, mesh_shape_;
  std::vector<std::string> axis_names_;
};
/// Mesh(0..n-1, {n}, {axis_name}) over every device.
Mesh get_1d_mesh(std::optional<std::string> axis_name = std::nullopt);
/// The mesh FSDP v2 and manual sharding use when none is given.
void set_global_mesh(std::optional<Mesh> mesh);
std::optional<Mesh> get_global_mesh();

enum class ShardingType : int { REPLICATED = 0, MAXIMAL = 1, TUPLE = 2, TILED = 3, MANUAL = 4, PARTIAL = 5, UNKNOWN = 6 };

/// A sharding to apply to tensors later (the loader's input_sharding).
struct ShardingSpec {
  ShardingSpec(Mesh mesh, PartitionSpec partition_spec, bool minibatch = false);
  /// t.dim() == partition_spec.size(), as torch_xla: other tensors are left replicated.
  bool can_apply(const Tensor& t) const;
  /// mark_sharding(t, mesh, partition_spec) (inline below: mark_sharding is the lazy layer's).
  void apply(Tensor& t) const;
  Mesh mesh;
  PartitionSpec partition_spec;
  bool minibatch = false;
};

/// Shards `t` (an xla tensor, under SPMD) in place: data on the device is split at once
/// (one padded shard per device); a pending value gets a sharding constraint in its graph.
/// Re-marking with the same sharding is a no-op; a different one on a sharded tensor is an
/// error (clear_sharding first); a replicated tensor may be re-marked. Counts XlaMarkSharding.
Tensor& mark_sharding(Tensor& t, const Mesh& mesh, const PartitionSpec& spec);
// Inline so that the spmd layer, which defines ShardingSpec, does not call up into lazy.
inline void ShardingSpec::apply(Tensor& t) const { mark_sharding(t, mesh, partition_spec); }
/// A new tensor equal to `t` with the constraint applied, and the same constraint on its
/// gradient in backward.
Tensor mark_sharding_with_gradients(const Tensor& t, const Mesh& mesh, const PartitionSpec& spec);
/// Drops the annotation (the data is gathered if it was sharded); returns t.
Tensor& clear_sharding(Tensor& t);

/// torch_xla's _get_xla_sharding_spec: "" when unannotated, else the HLO sharding text
/// ("{devices=[4,1]0,1,2,3}", "{replicated}", "... last_tile_dim_replicate}").
std::string get_sharding_spec(const Tensor& t);
std::optional<ShardingType> get_sharding_type(const Tensor& t);
/// The sharding the compiler will give `t` (pending or not), by running propagation on
/// its pending graph without executing anything; for data, get_sharding_spec (or
/// "{replicated}" when unannotated).
std::string inferred_sharding(const Tensor& t);

struct Slice {
  int64_t start = 0, stop = 0;
  bool operator==(const Slice&) const = default;
};
/// One device's piece of a tensor.
struct XLAShard {
  Tensor data;                                ///< the padded local shard, on cpu
  std::optional<std::vector<Slice>> indices;  ///< the global ranges it holds; nullopt: all (replicated)
  std::string shard_device;                   ///< "CPU:2"
  int replica_id = 0;                         ///< 0 tiled; the device if replicated; its index in its group if partial
  /// `data` without its padding (the part `indices` names).
  Tensor unpadded_data() const;
};
/// Every device's shard, in device order (materialises `t`).
std::vector<XLAShard> local_shards(const Tensor& t);
/// Replaces t's data with `shards` (one per device, padded shapes as local_shards gives);
/// an incomplete list or a wrong shape is an error; not allowed on replicated tensors.
void load_local_shards_(Tensor& t, const std::vector<XLAShard>& shards);
/// Text with "XLAShardedData", "OpSharding: {...}", "NumShards: N" for sharded tensors.
std::string debug_info(const Tensor& t);

/// Manual regions (torch_xla's shard_map): marks `t` with `spec` on `mesh` (default: the
/// global mesh) and returns its local shard as a tensor of the local shape; ops on it are
/// not partitioned. disable_manual_sharding brings a manual tensor back to `full_shape`.
Tensor enable_manual_sharding(const Tensor& t, const PartitionSpec& spec, const Mesh* mesh = nullptr);
Tensor disable_manual_sharding(const Tensor& t, const PartitionSpec& spec, const Shape& full_shape,
                               const Mesh* mesh = nullptr);

/// The collective table of the last SPMD graph compiled for `outputs` (what AXLE_DEBUG=1
/// prints per new graph): every inserted collective with its bytes per device, value,
/// from -> to sharding and the rule that required it, then opaque ops and warnings.
std::string explain(const std::vector<Tensor>& outputs);

namespace debugging {
struct VisualizeOptions {
  bool use_color = false;
  int min_width = 9, max_width = 80;
};
/// A box table of which device holds which tile, any rank (dims beyond 2 folded into rows,
/// so no device is missing); cells read "CPU 3" or "CPU [0, 1]" for replicated groups.
std::string visualize_tensor_sharding(const Tensor& t, VisualizeOptions o = {});
/// The same for a sharding string ("{devices=[2,2]0,1,2,3}").
std::string visualize_sharding(std::string_view sharding, VisualizeOptions o = {});
}  // namespace debugging

}  // namespace axle::xs

namespace axle::runtime {
/// Turns SPMD on: one logical device xla:0 backed by every virtual device. auto_sharding
/// is not implemented (an error). Tensors already on the device become replicated (a warning).
void use_spmd(bool auto_sharding = false);
/// True after use_spmd(), or when AXLE_USE_SPMD=1 (XLA_USE_SPMD=1 accepted).
bool is_spmd();
/// Every device of the job: this process's virtual cpu devices times the hosts. The local
/// count is AXLE_CPU_DEVICES (or CPU_NUM_DEVICES, or
/// XLA_FLAGS=--xla_force_host_platform_device_count=N; disagreeing values are an error
/// naming both; each must be an integer 1..4096, an empty one counts as unset), default 1,
/// read once, at the first call. Hosts: under SPMD with an external launcher (torchrun,
/// Slurm, MPI) one process per host, the launcher's world size; else 1. Host h owns the
/// global devices h*L .. h*L+L-1 (L the local count, the same on every host).
int64_t global_runtime_device_count();
/// This host's devices (the local count above).
int64_t addressable_runtime_device_count();
}  // namespace axle::runtime
