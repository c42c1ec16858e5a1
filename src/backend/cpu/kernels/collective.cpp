// Collective kernels on cpu: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
// collective_permute call the process group named by the op's `group id` attribute (a Gloo
// group, or an in-process SPMD device group: dist/local_devices.h); the lazy device's
// executables run the same kernels, so on xla tensors a collective happens in graph order
// when the step's graph runs.
#include <cstring>

#include "axle/dist.h"
#include "axle/ops.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "dist/groups.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

using dist::ReduceOp;

Tensors all_reduce_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  dist::ProcessGroup& g = dist::detail::group_by_id(a.ints[1]);
  const DType t = metas[0].dtype;
  int64_t total = 0;
  for (const Meta& m : metas) total += shape_numel(m.shape);
  // One flat buffer; the outputs are contiguous views of it.
  Tensor flat = make_tensor({total}, t);
  int64_t off = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t n = shape_numel(metas[i].shape);
    Tensor dst = make_view(flat, metas[i].shape, contiguous_strides(metas[i].shape), off);
    cpu::copy_into(dst, in[i]);
    off += n;
  }
  g.all_reduce(flat.data_ptr(), total, t, ReduceOp(a.ints[0]));
  Tensors out;
  off = 0;
  for (const Meta& m : metas) {
    out.push_back(make_view(flat, m.shape, contiguous_strides(m.shape), off));
    off += shape_numel(m.shape);
  }
  return out;
}

Tensors all_gather_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  dist::ProcessGroup& g = dist::detail::group_by_id(a.ints[0]);
  AXLE_CHECK(g.size() == a.ints[1], "[all_gather] graph traced for world size ", a.ints[1], ", group has ", g.size());
  Tensor x = in[0].is_contiguous() ? in[0] : in[0].contiguous();
  Tensor out = make_tensor(metas[0].shape, metas[0].dtype);
  g.all_gather(x.data_ptr(), out.data_ptr(), x.numel(), x.dtype());
  return {out};
}

Tensors reduce_scatter_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  dist::ProcessGroup& g = dist::detail::group_by_id(a.ints[1]);
  AXLE_CHECK(g.size() == a.ints[2], "[reduce_scatter] graph traced for world size ", a.ints[2], ", group has ",
             g.size());
  Tensor buf = make_tensor(in[0].shape(), in[0].dtype());
  cpu::copy_into(buf, in[0]);
  g.all_reduce(buf.data_ptr(), buf.numel(), buf.dtype(), ReduceOp(a.ints[0]));
  const int64_t n = shape_numel(metas[0].shape);
  return {make_view(buf, metas[0].shape, contiguous_strides(metas[0].shape), n * g.rank())};
}

Tensors broadcast_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  dist::ProcessGroup& g = dist::detail::group_by_id(a.ints[1]);
  Tensor out = make_tensor(metas[0].shape, metas[0].dtype);
  cpu::copy_into(out, in[0]);
  g.broadcast(out.data_ptr(), out.numel(), out.dtype(), int(a.ints[0]));
  return {out};
}

// x's chunk r along dim d (c elements there), a strided view.
Tensor chunk_view(const Tensor& x, const Shape& chunk_shape, size_t d, int64_t r) {
  const int64_t c = chunk_shape[d];
  return make_view(x, chunk_shape, x.strides(), x.storage_offset() + (c > 0 ? r * c * x.strides()[d] : 0));
}

Tensors all_to_all_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  const auto at = attr::AllToAll::of(a);
  dist::ProcessGroup& g = dist::detail::group_by_id(at.group);
  AXLE_CHECK(g.size() == at.world, "[all_to_all] graph traced for world size ", at.world, ", group has ", g.size());
  const Tensor& x = in[0];
  const int64_t w = at.world;
  Shape chunk = x.shape();
  chunk[size_t(at.split_dim)] /= w;
  const int64_t chunk_numel = shape_numel(chunk);
  // Send buffer: chunk r (along split_dim) at r * chunk_numel, each contiguous.
  Shape stacked = chunk;
  stacked.insert(stacked.begin(), w);
  Tensor send = make_tensor(stacked, x.dtype());
  Tensor recv = make_tensor(stacked, x.dtype());
  for (int64_t r = 0; r < w; ++r)
    cpu::copy_into(make_view(send, chunk, contiguous_strides(chunk), r * chunk_numel),
                   chunk_view(x, chunk, size_t(at.split_dim), r));
  g.all_to_all(send.data_ptr(), recv.data_ptr(), chunk_numel, x.dtype());
  if (w == 1 || (at.split_dim == at.concat_dim && at.split_dim == 0))
    return {make_view(recv, metas[0].shape, contiguous_strides(metas[0].shape), 0)};
  // Received chunk r goes to place r along concat_dim.
  Tensor out = make_tensor(metas[0].shape, metas[0].dtype);
  for (int64_t r = 0; r < w; ++r)
    cpu::copy_into(chunk_view(out, chunk, size_t(at.concat_dim), r),
                   make_view(recv, chunk, contiguous_strides(chunk), r * chunk_numel));
  return {out};
}

Tensors collective_permute_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& metas) {
  const auto at = attr::CollectivePermute::of(a);
  dist::ProcessGroup& g = dist::detail::group_by_id(at.group);
  AXLE_CHECK(g.size() == int64_t(at.source_of.size()), "[collective_permute] graph traced for ",
             at.source_of.size(), " ranks, group has ", g.size());
  Tensor x = in[0].is_contiguous() ? in[0] : in[0].contiguous();
  Tensor out = make_tensor(metas[0].shape, metas[0].dtype);
  g.permute(x.data_ptr(), out.data_ptr(), x.numel(), x.dtype(),
            std::vector<int>(at.source_of.begin(), at.source_of.end()));
  return {out};
}

}  // namespace

void register_cpu_collective_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::AllReduce, all_reduce_cpu);
  reg(OpKind::AllGather, all_gather_cpu);
  reg(OpKind::ReduceScatter, reduce_scatter_cpu);
  reg(OpKind::Broadcast, broadcast_cpu);
  reg(OpKind::AllToAll, all_to_all_cpu);
  reg(OpKind::CollectivePermute, collective_permute_cpu);
}

}  // namespace axle::cpu
