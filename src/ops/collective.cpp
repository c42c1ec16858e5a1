// Collective ops: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
// collective_permute: shape rules, vjps and the tensor-level API (axle/dist.h). Their cpu
// kernels (src/backend/cpu/kernels/collective.cpp) call the process group named by the op's
// `group id` attribute: a process group's id (>= 0), or in an SPMD program the handle of the
// replica groups the partitioner chose (< 0, ops/replica_groups.h), which the backend maps to
// its communicator when it lowers. ops.def marks them EFFECTS (ops::has_side_effects) and S_COLLECTIVE.
#include <cstring>

#include "axle/dist.h"
#include "axle/ops.h"
#include "dist/groups.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

using dist::ReduceOp;

ReduceOp reduce_attr(int64_t v, const char* op) {
  AXLE_CHECK(v >= 0 && v <= 3, "[", op, "] expected a reduce op 0..3 (sum, mean, min, max), got ", v);
  return ReduceOp(v);
}

void check_dtype(DType t, ReduceOp r, const char* op) {
  AXLE_CHECK(t == kFloat32 || t == kBFloat16 || t == kInt64 || t == kInt32 || t == kUInt8, "[", op,
             "] expected a float32, bfloat16, int64, int32 or uint8 tensor, got ", t);
  AXLE_CHECK(r != ReduceOp::Mean || is_floating(t), "[", op, "] reduce op mean expects a floating tensor, got ", t);
}

// ---- AllReduce: variadic, one collective call for all operands ----
std::vector<Meta> all_reduce_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(!in.empty(), "[all_reduce] expected at least one tensor");
  AXLE_CHECK(a.ints.size() == 2, "[all_reduce] expected attrs {reduce op, group id}");
  const ReduceOp r = reduce_attr(a.ints[0], "all_reduce");
  std::vector<Meta> out;
  for (const Tensor& t : in) {
    check_defined(t, "all_reduce", "x");
    AXLE_CHECK(t.dtype() == in[0].dtype(), "[all_reduce] expected tensors of one dtype, got ", in[0].dtype(), " and ",
               t.dtype());
    check_dtype(t.dtype(), r, "all_reduce");
    out.push_back({t.shape(), t.dtype()});
  }
  return out;
}

Tensors all_reduce_vjp(const VjpArgs& v) {
  const ReduceOp r = ReduceOp(v.attrs.ints[0]);
  AXLE_CHECK(r == ReduceOp::Sum || r == ReduceOp::Mean, "[all_reduce] reduce op ", dist::detail::reduce_op_name(r),
             " is not differentiable (use sum or mean)");
  // Every rank must issue the same collective: a missing gradient reduces as zeros.
  Tensors g;
  for (size_t i = 0; i < v.in.size(); ++i) g.push_back(v.grad[i].defined() ? v.grad[i] : zeros_like(v.out[i]));
  return call(OpKind::AllReduce, g, v.attrs);
}

// ---- AllGather ----
std::vector<Meta> all_gather_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(in.size() == 1, "[all_gather] expected one tensor, got ", in.size());
  AXLE_CHECK(a.ints.size() == 2 && a.ints[1] >= 1, "[all_gather] expected attrs {group id, world size}");
  check_defined(in[0], "all_gather", "x");
  check_dtype(in[0].dtype(), ReduceOp::Sum, "all_gather");
  Shape s = in[0].shape();
  if (s.empty()) s = {a.ints[1]};
  else s[0] *= a.ints[1];
  return {{s, in[0].dtype()}};
}

Tensors all_gather_vjp(const VjpArgs& v) {
  // d/dx of the gathered tensor: this rank's slice of the sum of every rank's gradient.
  return {call1(OpKind::ReduceScatter, {v.grad[0]}, ops::Attrs{.ints = {int64_t(ReduceOp::Sum), v.attrs.ints[0], v.attrs.ints[1]}, .floats = {}})
              .reshape(v.in[0].shape())};
}

// ---- ReduceScatter (an all-reduce, then this rank's slice) ----
std::vector<Meta> reduce_scatter_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(in.size() == 1, "[reduce_scatter] expected one tensor, got ", in.size());
  AXLE_CHECK(a.ints.size() == 3 && a.ints[2] >= 1, "[reduce_scatter] expected attrs {reduce op, group id, world size}");
  check_defined(in[0], "reduce_scatter", "x");
  const ReduceOp r = reduce_attr(a.ints[0], "reduce_scatter");
  check_dtype(in[0].dtype(), r, "reduce_scatter");
  const Shape& xs = in[0].shape();
  AXLE_CHECK(!xs.empty() && xs[0] % a.ints[2] == 0, "[reduce_scatter] expected dim 0 divisible by the world size ",
             a.ints[2], ", got shape ", shape_str(xs));
  Shape s = xs;
  s[0] /= a.ints[2];
  return {{s, in[0].dtype()}};
}

Tensors reduce_scatter_vjp(const VjpArgs& v) {
  const ReduceOp r = ReduceOp(v.attrs.ints[0]);
  AXLE_CHECK(r == ReduceOp::Sum || r == ReduceOp::Mean, "[reduce_scatter] reduce op ",
             dist::detail::reduce_op_name(r), " is not differentiable (use sum or mean)");
  Tensor g = call1(OpKind::AllGather, {v.grad[0]}, ops::Attrs{.ints = {v.attrs.ints[1], v.attrs.ints[2]}, .floats = {}});
  if (r == ReduceOp::Mean) g = g * (1.0 / double(v.attrs.ints[2]));
  return {g};
}

// ---- Broadcast ----
std::vector<Meta> broadcast_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(in.size() == 1, "[broadcast] expected one tensor, got ", in.size());
  AXLE_CHECK(a.ints.size() == 2, "[broadcast] expected attrs {src rank, group id}");
  check_defined(in[0], "broadcast", "x");
  check_dtype(in[0].dtype(), ReduceOp::Sum, "broadcast");
  return {{in[0].shape(), in[0].dtype()}};
}

Tensors broadcast_vjp(const VjpArgs& v) {
  // Every rank's output came from src: src's input gets the sum of all gradients.
  Tensor s = call1(OpKind::AllReduce, {v.grad[0]}, ops::Attrs{.ints = {int64_t(ReduceOp::Sum), v.attrs.ints[1]}, .floats = {}});
  const int rank = dist::detail::group_by_id(v.attrs.ints[1]).rank();
  if (rank == v.attrs.ints[0]) return {s};
  // Elsewhere a zero gradient that still reads s: on the lazy device an all-reduce whose
  // result nothing holds never enters this rank's graph, and the other ranks would hang in it.
  return {where(full({}, 0.0, {.dtype = kBool}), s, zeros_like(v.in[0]))};
}

// ---- AllToAll ----
std::vector<Meta> all_to_all_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(in.size() == 1, "[all_to_all] expected one tensor, got ", in.size());
  const auto at = attr::AllToAll::of(a);
  check_defined(in[0], "all_to_all", "x");
  check_dtype(in[0].dtype(), ReduceOp::Sum, "all_to_all");
  const Shape& xs = in[0].shape();
  const int64_t nd = int64_t(xs.size());
  AXLE_CHECK(at.world >= 1, "[all_to_all] expected a world size >= 1, got ", at.world);
  AXLE_CHECK(at.split_dim >= 0 && at.split_dim < nd && at.concat_dim >= 0 && at.concat_dim < nd,
             "[all_to_all] expected split and concat dims in [0, ", nd, "), got ", at.split_dim, " and ", at.concat_dim,
             " for shape ", shape_str(xs));
  AXLE_CHECK(xs[size_t(at.split_dim)] % at.world == 0, "[all_to_all] expected split dim ", at.split_dim,
             " divisible by the world size ", at.world, ", got shape ", shape_str(xs));
  Shape s = xs;
  s[size_t(at.split_dim)] /= at.world;
  s[size_t(at.concat_dim)] *= at.world;
  return {{s, in[0].dtype()}};
}

Tensors all_to_all_vjp(const VjpArgs& v) {
  // Rank q's output chunk r came from rank r's input chunk q: the gradient goes back by the
  // all-to-all with split and concat swapped.
  attr::AllToAll at = attr::AllToAll::of(v.attrs);
  std::swap(at.split_dim, at.concat_dim);
  const Tensor g = v.grad[0].defined() ? v.grad[0] : zeros_like(v.out[0]);
  return {call1(OpKind::AllToAll, {g}, at.pack())};
}

// ---- CollectivePermute ----
void check_source_of(const std::vector<int64_t>& src) {
  const int64_t n = int64_t(src.size());
  AXLE_CHECK(n >= 1, "[collective_permute] expected one source rank per rank, got none");
  std::vector<char> used(size_t(n), 0);
  for (int64_t s : src) {
    AXLE_CHECK(s >= -1 && s < n, "[collective_permute] expected source ranks in [-1, ", n, "), got ", s);
    if (s < 0) continue;
    AXLE_CHECK(!used[size_t(s)], "[collective_permute] expected each rank to be the source of at most one rank, rank ",
               s, " is named twice");
    used[size_t(s)] = 1;
  }
}

std::vector<Meta> collective_permute_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(in.size() == 1, "[collective_permute] expected one tensor, got ", in.size());
  check_defined(in[0], "collective_permute", "x");
  check_dtype(in[0].dtype(), ReduceOp::Sum, "collective_permute");
  check_source_of(attr::CollectivePermute::of(a).source_of);
  return {{in[0].shape(), in[0].dtype()}};
}

Tensors collective_permute_vjp(const VjpArgs& v) {
  // Rank r's input went to the rank d with source_of[d] == r: the inverse permutation brings
  // d's gradient back (zeros where no rank took r's input).
  attr::CollectivePermute at = attr::CollectivePermute::of(v.attrs);
  std::vector<int64_t> inverse(at.source_of.size(), -1);
  for (size_t d = 0; d < at.source_of.size(); ++d)
    if (at.source_of[d] >= 0) inverse[size_t(at.source_of[d])] = int64_t(d);
  at.source_of = inverse;
  const Tensor g = v.grad[0].defined() ? v.grad[0] : zeros_like(v.out[0]);
  return {call1(OpKind::CollectivePermute, {g}, at.pack())};
}

}  // namespace

void register_collective_ops() {
  register_op(OpKind::AllReduce, {.infer = all_reduce_infer, .vjp = all_reduce_vjp});
  register_op(OpKind::AllGather, {.infer = all_gather_infer, .vjp = all_gather_vjp});
  register_op(OpKind::ReduceScatter, {.infer = reduce_scatter_infer, .vjp = reduce_scatter_vjp});
  register_op(OpKind::Broadcast, {.infer = broadcast_infer, .vjp = broadcast_vjp});
  register_op(OpKind::AllToAll, {.infer = all_to_all_infer, .vjp = all_to_all_vjp});
  register_op(OpKind::CollectivePermute, {.infer = collective_permute_infer, .vjp = collective_permute_vjp});
}

}  // namespace axle::ops

// ---- the tensor-level API (axle/dist.h) ----
namespace axle::dist {

Tensor all_reduce(const Tensor& x, ReduceOp op) { return all_reduce(std::vector<Tensor>{x}, op)[0]; }

std::vector<Tensor> all_reduce(const std::vector<Tensor>& xs, ReduceOp op) {
  if (xs.empty()) return {};
  ProcessGroup& g = default_group();
  return ops::call(ops::OpKind::AllReduce, xs, ops::Attrs{.ints = {int64_t(op), g.id()}, .floats = {}});
}

Tensor all_gather(const Tensor& x) {
  ProcessGroup& g = default_group();
  return ops::call1(ops::OpKind::AllGather, {x}, ops::Attrs{.ints = {g.id(), int64_t(g.size())}, .floats = {}});
}

Tensor reduce_scatter(const Tensor& x, ReduceOp op) {
  ProcessGroup& g = default_group();
  return ops::call1(ops::OpKind::ReduceScatter, {x}, ops::Attrs{.ints = {int64_t(op), g.id(), int64_t(g.size())}, .floats = {}});
}

Tensor broadcast(const Tensor& x, int src) {
  ProcessGroup& g = default_group();
  AXLE_CHECK(src >= 0 && src < g.size(), "[broadcast] expected a source rank in [0, ", g.size(), "), got ", src);
  return ops::call1(ops::OpKind::Broadcast, {x}, ops::Attrs{.ints = {int64_t(src), g.id()}, .floats = {}});
}

void barrier() { default_group().barrier(); }

}  // namespace axle::dist
