// The tile tables of shard_slice and mask_padding (src/spmd/device_ops.h, src/ops/spmd.h).
#include "spmd/device_ops.h"

#include "axle/error.h"

namespace axle::spmd {

ops::Attrs shard_slice_attrs(const Sharding& s, const Shape& global) {
  AXLE_CHECK(!s.is_partial(), "[shard_slice] expected a non-partial sharding, got ", s.str());
  const int64_t n = int64_t(global.size());
  AXLE_CHECK(s.kind != Sharding::Kind::Tiled || int64_t(s.dim_axes.size()) == n, "[shard_slice] expected a sharding of rank ",
             n, ", got ", s.str());
  std::vector<int64_t> layout{n};
  for (int64_t k = 0; k < n; ++k) layout.push_back(s.tiles(int(k)));
  if (n > 0)
    for (int64_t d = 0; d < s.num_devices(); ++d)
      for (int64_t k = 0; k < n; ++k) layout.push_back(s.tile_index(int(k), d));
  return ops::attr::ShardSlice{.layout = std::move(layout)}.pack();
}

ops::Attrs mask_padding_attrs(const Sharding& s, int64_t dim, int64_t global_size, double fill) {
  std::vector<int64_t> layout;
  for (int64_t d = 0; d < s.num_devices(); ++d) layout.push_back(s.tile_index(int(dim), d));
  return ops::attr::MaskPadding{.dim = dim, .global_size = global_size, .fill = fill, .layout = std::move(layout)}.pack();
}

}  // namespace axle::spmd
