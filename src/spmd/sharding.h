// The compiler's sharding of a value: how a global tensor is laid out over a mesh's
// devices. User-visible shardings (xs::get_sharding_spec) are Replicated, Tiled (possibly
// partially replicated) or Manual; inside the partitioner a value may also be Partial: an
// unreduced sum (or max, min) over some mesh axes, which an all-reduce or a reduce-scatter
// resolves.
//
// Devices are numbered 0..N-1 (global_runtime_device_count). A device's coordinates are its
// position in the mesh's logical array (device_ids reshaped to mesh_shape).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "axle/tensor.h"
#include "axle/xs.h"

namespace axle::spmd {

/// The pending reduction of a Partial value.
enum class Reduce : uint8_t { Sum, Max, Min };

struct Sharding {
  enum class Kind : uint8_t { Replicated, Tiled, Manual };
  Kind kind = Kind::Replicated;
  /// The mesh; null only for a replicated sharding made without one (unannotated data).
  std::shared_ptr<const xs::Mesh> mesh;
  /// Per tensor dim, the mesh axes (indices into mesh->mesh_shape()) it is split over, major
  /// first; {} = not split. Empty vector for Replicated.
  std::vector<std::vector<int>> dim_axes;
  /// Partial: the mesh axes over which the value is an unreduced `partial_op`.
  std::vector<int> partial_axes;
  Reduce partial_op = Reduce::Sum;

  /// Replicated over every device (of `mesh`, if given).
  static Sharding replicated(std::shared_ptr<const xs::Mesh> mesh = nullptr);
  /// The sharding torch_xla makes of (mesh, spec) for a tensor of rank `rank`; errors name
  /// `op`: spec length != rank, an unknown axis name or index, an axis used twice.
  /// Fully replicated results (no dim split) are Kind::Replicated.
  static Sharding from_spec(const xs::Mesh& mesh, const xs::PartitionSpec& spec, int64_t rank, const char* op);

  bool is_replicated() const { return kind == Kind::Replicated && partial_axes.empty(); }
  bool is_partial() const { return !partial_axes.empty(); }
  /// Devices the value lives on (mesh->size(), or global_runtime_device_count() without a mesh).
  int64_t num_devices() const;
  /// Tiles along dim d: the product of the sizes of dim_axes[d] (1 if not split or out of range).
  int64_t tiles(int d) const;
  /// Per-device (padded) shape: ceil(global[d] / tiles(d)) for each dim.
  Shape shard_shape(const Shape& global) const;
  /// Which tile of dim d `device` holds (0..tiles(d)-1).
  int64_t tile_index(int d, int64_t device) const;
  /// The global range [start, stop) of dim d that `device` holds, without padding
  /// (start == stop: the shard is all padding).
  xs::Slice range(int d, int64_t device, int64_t global_size) const;
  /// torch_xla's replica_id of a device's shard: 0 for tiled, the device for replicated,
  /// and for partially replicated its place in its replication group (the index along the
  /// last tile dim of to_hlo_v1: the row for (None, 'model') on a (2, 2) mesh).
  int replica_id(int64_t device) const;
  /// Replica groups over mesh `axes`: devices whose coordinates agree on every other axis,
  /// each group ordered by the coordinates on `axes`, major first (the order an all-gather
  /// concatenates in); groups ordered by their first member.
  std::vector<std::vector<int>> groups(const std::vector<int>& axes) const;
  /// The mesh axes no dim is split over and that are not partial (devices replicating a shard).
  std::vector<int> replicated_axes() const;

  /// torch_xla's V1 text: "{replicated}", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
  /// "{manual}"; byte for byte as torch_xla._XLAC._get_xla_sharding_spec.
  std::string to_hlo_v1() const;
  /// to_hlo_v1 for non-partial shardings; "partial(data) " + the rest's text otherwise.
  std::string str() const;
  /// The same for equal shardings (mesh device ids included); replicated shardings hash
  /// alike whatever their mesh.
  uint64_t hash() const;
  bool operator==(const Sharding& o) const;
};

/// Parses a V1 text ("{devices=[2,2]0,2,1,3}", "{replicated}", "... last_tile_dim_replicate}")
/// into tile dims, device order and whether the last tile dim is replication (for
/// visualize_sharding). Errors name the text.
struct TileAssignment {
  std::vector<int64_t> dims;      ///< tile counts (with the replication dim last, if any)
  std::vector<int64_t> devices;   ///< row-major over dims
  bool last_tile_dim_replicate = false;
  bool replicated = false, manual = false;
};
TileAssignment parse_hlo_v1(std::string_view text);

/// Attribute encoding of a sharding (sharding_constraint ops carry it in Attrs::ints).
/// Meshes are interned: mesh_id gives the same id for equal meshes.
int64_t mesh_id(const xs::Mesh& m);
std::shared_ptr<const xs::Mesh> mesh_by_id(int64_t id);
void encode(const Sharding& s, std::vector<int64_t>& out);
Sharding decode(const int64_t* data, size_t n);

/// Host side: splits a dense cpu tensor into one padded shard per device (zeros in the
/// padding), in device order.
std::vector<Tensor> shard_host(const Tensor& full, const Sharding& s);
/// Host side: assembles shards (device order, padded) into the global tensor of `global`
/// shape, dropping padding. Partial shardings are reduced (device order).
Tensor assemble_host(const std::vector<Tensor>& shards, const Sharding& s, const Shape& global);

}  // namespace axle::spmd
