// The SPMD partitioner's ops (ops.def, section spmd.cpp): sharding_constraint, shard_slice,
// mask_padding. The ops layer does not know spmd::Sharding (src/spmd is above it): these ops
// carry plain ints that src/spmd makes (spmd::encode for sharding_constraint,
// spmd::shard_slice_attrs and spmd::mask_padding_attrs in src/spmd/device_ops.h).
//
// shard_slice and mask_padding read the running device (dist::this_device(), in their
// kernels; device 0 outside a device thread), so one local program serves every device.
// Their attributes hold a per-device tile table:
//   shard_slice  layout = [n, tiles_0..tiles_{n-1}, then for each device d = 0..D-1 its tile
//                index along dims 0..n-1]  (1 + n + D*n ints; a 0-d x has layout [0])
//   mask_padding layout = [tile index along `dim` of device 0, of device 1, ..., D-1]
// A shard of a dim of size s over t tiles has ceil(s / t) elements (the last ones padding
// where t does not divide s); tile i starts at global index i * ceil(s / t).
#pragma once
#include <vector>

#include "ops/op.h"

namespace axle::ops {

/// A checked shard_slice layout for a tensor of rank `rank` (errors name `op`).
struct ShardLayout {
  Shape tiles;          ///< tiles per dim
  int64_t devices = 0;  ///< D: devices the table covers (0 for a 0-d tensor)
  std::vector<int64_t> table;  ///< D x rank tile indices, row-major
  /// Device d's tile index along dim k.
  int64_t tile(int64_t d, size_t k) const { return table[size_t(d) * tiles.size() + k]; }
};
ShardLayout shard_layout(const std::vector<int64_t>& layout, int64_t rank, const char* op);

/// The padded shard shape: ceil(global[k] / tiles[k]) per dim.
Shape shard_shape_of(const Shape& global, const Shape& tiles);

/// The device whose shard a kernel computes: `running` (dist::this_device()), or 0 when it is
/// -1 (not on a device thread); checked against the table's `devices`.
int64_t table_device(int64_t running, int64_t devices, const char* op);

/// Identity that pins x's sharding; `sharding` = spmd::encode(...). With on_grad the gradient
/// gets the same constraint (xs::mark_sharding_with_gradients).
Tensor sharding_constraint(const Tensor& x, std::vector<int64_t> sharding, bool on_grad);

/// The running device's padded shard of the global value x (layout above).
Tensor shard_slice(const Tensor& x, std::vector<int64_t> layout);

/// x (a padded local shard) with the padding along `dim` set to `fill`: element i is kept
/// where layout[device] * x.size(dim) + i < global_size.
Tensor mask_padding(const Tensor& x, int64_t dim, int64_t global_size, double fill, std::vector<int64_t> layout);

}  // namespace axle::ops
