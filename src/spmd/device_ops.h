// Attributes of the partitioner's device-dependent ops (ops.def: shard_slice, mask_padding;
// layouts explained in src/ops/spmd.h): the per-device tile tables made from a Sharding, so
// the ops layer and the kernels need no spmd code.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/schema.h"
#include "spmd/sharding.h"

namespace axle::spmd {

/// shard_slice's attributes: device d's output is its padded shard of a value of shape
/// `global` under `s` (s.shard_shape(global)), as shard_host(full, s)[d] gives it. Partial
/// shardings are an error (a slice of a partial value is not its shard).
ops::Attrs shard_slice_attrs(const Sharding& s, const Shape& global);

/// mask_padding's attributes for dim `dim` of a value sharded by `s` whose global size
/// along `dim` is `global_size`: padding (beyond global_size) becomes `fill` (the identity
/// of the reduction that follows: 0, -inf, +inf; ignore_index for loss targets).
ops::Attrs mask_padding_attrs(const Sharding& s, int64_t dim, int64_t global_size, double fill);

}  // namespace axle::spmd
