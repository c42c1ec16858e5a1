// The SPMD partitioner's ops: sharding_constraint (identity; vjp: identity or the same
// constraint on the gradient), shard_slice and mask_padding (device-dependent; no vjp: the
// partitioner makes them in local programs, after autodiff). Layouts: src/ops/spmd.h.
// Cpu kernels: src/backend/cpu/kernels/spmd.cpp.
#include <cmath>

#include "ops/op.h"
#include "ops/spmd.h"

namespace axle::ops {

ShardLayout shard_layout(const std::vector<int64_t>& layout, int64_t rank, const char* op) {
  AXLE_CHECK(!layout.empty() && layout[0] == rank, "[", op, "] expected a layout for a tensor of rank ", rank,
             " (first int ", rank, "), got ", layout.empty() ? std::string("an empty layout") : "rank " + std::to_string(layout[0]));
  ShardLayout l;
  const size_t n = size_t(rank);
  if (n == 0) {
    AXLE_CHECK(layout.size() == 1, "[", op, "] expected the layout [0] for a 0-d tensor, got ", layout.size(), " ints");
    return l;
  }
  AXLE_CHECK(layout.size() >= 1 + 2 * n && (layout.size() - 1 - n) % n == 0, "[", op, "] expected a layout of 1 + ",
             n, " + devices * ", n, " ints, got ", layout.size());
  l.tiles.assign(layout.begin() + 1, layout.begin() + 1 + std::ptrdiff_t(n));
  for (size_t k = 0; k < n; ++k)
    AXLE_CHECK(l.tiles[k] >= 1, "[", op, "] expected tile counts >= 1, got ", l.tiles[k], " for dim ", k);
  l.devices = int64_t((layout.size() - 1 - n) / n);
  l.table.assign(layout.begin() + std::ptrdiff_t(1 + n), layout.end());
  for (int64_t d = 0; d < l.devices; ++d)
    for (size_t k = 0; k < n; ++k)
      AXLE_CHECK(l.tile(d, k) >= 0 && l.tile(d, k) < l.tiles[k], "[", op, "] expected device ", d,
                 "'s tile index along dim ", k, " in [0, ", l.tiles[k], "), got ", l.tile(d, k));
  return l;
}

Shape shard_shape_of(const Shape& global, const Shape& tiles) {
  Shape s = global;
  for (size_t k = 0; k < s.size(); ++k) s[k] = (global[k] + tiles[k] - 1) / tiles[k];
  return s;
}

int64_t table_device(int64_t running, int64_t devices, const char* op) {
  const int64_t d = running < 0 ? 0 : running;
  AXLE_CHECK(d < devices, "[", op, "] running on device ", d, " but the layout covers ", devices, " devices");
  return d;
}

namespace {

// ---- sharding_constraint
std::vector<Meta> sharding_constraint_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "sharding_constraint", "x");
  AXLE_CHECK(!attr::ShardingConstraint::of(a).sharding.empty(),
             "[sharding_constraint] expected an encoded sharding (spmd::encode), got none");
  return {{in[0].shape(), in[0].dtype()}};
}
Tensors sharding_constraint_vjp(const VjpArgs& v) {
  if (!attr::ShardingConstraint::of(v.attrs).on_grad) return {v.grad[0]};
  return {call1(OpKind::ShardingConstraint, {v.grad[0]}, v.attrs)};
}

// ---- shard_slice
std::vector<Meta> shard_slice_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "shard_slice", "x");
  const ShardLayout l = shard_layout(attr::ShardSlice::of(a).layout, in[0].dim(), "shard_slice");
  return {{shard_shape_of(in[0].shape(), l.tiles), in[0].dtype()}};
}

// ---- mask_padding
std::vector<Meta> mask_padding_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "mask_padding", "x");
  const attr::MaskPadding m = attr::MaskPadding::of(a);
  const int64_t d = wrap_dim(m.dim, in[0].dim(), "mask_padding");
  AXLE_CHECK(m.global_size >= 0, "[mask_padding] expected a global size >= 0, got ", m.global_size);
  AXLE_CHECK(!m.layout.empty(), "[mask_padding] expected a tile index per device, got none");
  for (size_t i = 0; i < m.layout.size(); ++i)
    AXLE_CHECK(m.layout[i] >= 0, "[mask_padding] expected tile indices >= 0, got ", m.layout[i], " for device ", i);
  (void)d;
  if (!is_floating(in[0].dtype()))
    AXLE_CHECK(std::isfinite(m.fill) && m.fill == std::trunc(m.fill), "[mask_padding] expected an integer fill for a ",
               in[0].dtype(), " tensor, got ", m.fill);
  return {{in[0].shape(), in[0].dtype()}};
}

}  // namespace

void register_spmd_ops() {
  register_op(OpKind::ShardingConstraint, {.infer = sharding_constraint_infer, .vjp = sharding_constraint_vjp});
  register_op(OpKind::ShardSlice, {.infer = shard_slice_infer});
  register_op(OpKind::MaskPadding, {.infer = mask_padding_infer});
}

Tensor sharding_constraint(const Tensor& x, std::vector<int64_t> sharding, bool on_grad) {
  return call1(OpKind::ShardingConstraint, {x}, attr::ShardingConstraint{.on_grad = on_grad, .sharding = std::move(sharding)}.pack());
}

Tensor shard_slice(const Tensor& x, std::vector<int64_t> layout) {
  return call1(OpKind::ShardSlice, {x}, attr::ShardSlice{.layout = std::move(layout)}.pack());
}

Tensor mask_padding(const Tensor& x, int64_t dim, int64_t global_size, double fill, std::vector<int64_t> layout) {
  return call1(OpKind::MaskPadding, {x},
               attr::MaskPadding{.dim = dim, .global_size = global_size, .fill = fill, .layout = std::move(layout)}.pack());
}

}  // namespace axle::ops
