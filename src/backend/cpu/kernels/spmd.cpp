// Cpu kernels of the SPMD partitioner's device-dependent ops (src/ops/spmd.h): the device is
// dist::this_device(), or 0 outside a device thread. sharding_constraint is the identity.
#include <algorithm>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "dist/local_devices.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/spmd.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

Tensor view_of(const Tensor& x) { return make_view(x, x.shape(), x.strides(), x.storage_offset()); }

Tensors sharding_constraint_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) { return {view_of(in[0])}; }

Tensors shard_slice_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  const ShardLayout l = shard_layout(attr::ShardSlice::of(a).layout, x.dim(), "shard_slice");
  Tensor out = zeros(m[0].shape, {.dtype = m[0].dtype});
  if (x.dim() == 0) {
    copy_into(out, x);
    return {out};
  }
  const int64_t dev = table_device(dist::this_device(), l.devices, "shard_slice");
  Shape valid(size_t(x.dim()));
  int64_t off = x.storage_offset();
  for (size_t k = 0; k < valid.size(); ++k) {
    const int64_t s = m[0].shape[k], start = l.tile(dev, k) * s;
    valid[k] = std::clamp(x.shape()[k] - start, int64_t(0), s);
    if (valid[k] == 0) return {out};  // all padding
    off += start * x.strides()[k];
  }
  copy_into(make_view(out, valid, out.strides(), out.storage_offset()), make_view(x, valid, x.strides(), off));
  return {out};
}

Tensors mask_padding_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  const attr::MaskPadding p = attr::MaskPadding::of(a);
  const size_t d = size_t(wrap_dim(p.dim, x.dim(), "mask_padding"));
  const int64_t dev = table_device(dist::this_device(), int64_t(p.layout.size()), "mask_padding");
  const int64_t local = x.shape()[d], start = p.layout[size_t(dev)] * local;
  const int64_t valid = std::clamp(p.global_size - start, int64_t(0), local);
  if (valid == local) return {view_of(x)};
  Tensor out = make_tensor(x.shape(), x.dtype());
  copy_into(out, x);
  Shape pad = x.shape();
  pad[d] = local - valid;
  const Tensor region = make_view(out, pad, out.strides(), out.storage_offset() + valid * out.strides()[d]);
  copy_into(region, full(pad, p.fill, {.dtype = x.dtype()}));
  return {out};
}

}  // namespace

void register_cpu_spmd_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::ShardingConstraint, sharding_constraint_cpu);
  reg(OpKind::ShardSlice, shard_slice_cpu);
  reg(OpKind::MaskPadding, mask_padding_cpu);
}

}  // namespace axle::cpu
