// Collective kernels on cpu: all_reduce, all_gather, reduce_scatter, broadcast call the
// process group named by the op's `group id` attribute; the lazy device's executables run
// the same kernels, so on xla tensors a collective happens in graph order when the step's
// graph runs.
#include <cstring>

#include "axle/dist.h"
#include "axle/ops.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "backend/kernels.h"
#include "dist/dist_internal.h"
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

}  // namespace

void register_cpu_collective_kernels() {
  auto reg = [](OpKind k, backend::KernelFn f) { backend::register_kernel(DeviceType::CPU, k, f); };
  reg(OpKind::AllReduce, all_reduce_cpu);
  reg(OpKind::AllGather, all_gather_cpu);
  reg(OpKind::ReduceScatter, reduce_scatter_cpu);
  reg(OpKind::Broadcast, broadcast_cpu);
}

}  // namespace axle::cpu
