// The core SPMD rules (rules.h): pointwise, broadcast, transpose, reshape, reduce, dot,
// constraint and collective, each a propagation pair (forward, backward) and a
// partitioning hook; plus the small sharding algebra the rules share.
#include "spmd/rules.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <set>

#include "axle/error.h"
#include "axle/ops.h"
#include "spmd/device_ops.h"

namespace axle::spmd {

using compiler::Ref;
using ops::OpKind;

// ---------------------------------------------------------------- helpers ----

Sharding make_sharding(std::shared_ptr<const xs::Mesh> mesh, std::vector<std::vector<int>> dim_axes) {
  Sharding s;
  s.mesh = std::move(mesh);
  const bool split = std::any_of(dim_axes.begin(), dim_axes.end(), [](const auto& a) { return !a.empty(); });
  if (split) {
    s.kind = Sharding::Kind::Tiled;
    s.dim_axes = std::move(dim_axes);
  }
  return s;
}

std::vector<std::vector<int>> dim_axes_of(const Sharding& s, size_t rank) {
  std::vector<std::vector<int>> r(rank);
  if (s.kind == Sharding::Kind::Tiled)
    for (size_t d = 0; d < rank && d < s.dim_axes.size(); ++d) r[d] = s.dim_axes[d];
  return r;
}

Sharding with_dims_replicated(const Sharding& s, size_t rank, const std::vector<int>& dims) {
  auto da = dim_axes_of(s, rank);
  for (int d : dims)
    if (d >= 0 && size_t(d) < rank) da[size_t(d)].clear();
  Sharding r = make_sharding(s.mesh, std::move(da));
  r.partial_axes = s.partial_axes;
  r.partial_op = s.partial_op;
  return r;
}

Sharding without_partial(Sharding s) {
  s.partial_axes.clear();
  s.partial_op = Reduce::Sum;
  return s;
}

Sharding with_partial(Sharding s, const std::vector<int>& axes, Reduce op) {
  if (axes.empty()) return s;
  AXLE_CHECK(s.partial_axes.empty() || s.partial_op == op,
             "[spmd] internal: a value cannot be partial under two reductions (", s.str(), ")");
  for (int a : axes) {
    for (const auto& da : s.dim_axes)
      AXLE_CHECK(std::find(da.begin(), da.end(), a) == da.end(), "[spmd] internal: ", s.str(),
                 " cannot also be partial over mesh axis ", a, ", which splits one of its dims");
    if (std::find(s.partial_axes.begin(), s.partial_axes.end(), a) == s.partial_axes.end()) s.partial_axes.push_back(a);
  }
  std::sort(s.partial_axes.begin(), s.partial_axes.end());
  s.partial_op = op;
  return s;
}

int64_t total_tiles(const Sharding& s) {
  if (s.kind != Sharding::Kind::Tiled) return 1;
  int64_t t = 1;
  for (size_t d = 0; d < s.dim_axes.size(); ++d) t *= s.tiles(int(d));
  return t;
}

bool has_padding(const Sharding& s, int d, int64_t n) {
  const int64_t t = s.tiles(d);
  return t > 1 && n % t != 0;
}

LocalValue PartitionContext::resolve(const LocalValue& v, const std::string& rule) {
  if (!v.sharding.is_partial()) return v;
  return reshard(v, without_partial(v.sharding), rule);
}

namespace {

using Axes = std::vector<int>;
using DimAxes = std::vector<Axes>;

bool usable(const Sharding& s) { return s.kind != Sharding::Kind::Manual; }

// The axes used by any dim of `da`.
std::set<int> used_axes(const DimAxes& da) {
  std::set<int> u;
  for (const Axes& a : da) u.insert(a.begin(), a.end());
  return u;
}
bool disjoint(const Axes& a, const std::set<int>& used) {
  return std::none_of(a.begin(), a.end(), [&](int x) { return used.count(x) > 0; });
}

// Sets da[d] = axes when none of them is used yet (and da[d] is free).
void claim(DimAxes& da, size_t d, const Axes& axes, std::set<int>& used) {
  if (axes.empty() || !da[d].empty() || !disjoint(axes, used)) return;
  da[d] = axes;
  used.insert(axes.begin(), axes.end());
}

// ---- broadcasting: operand dim k of rank r sits at output dim k + R - r
// An operand's dims mapped onto the output (a size-1 operand dim broadcast to more is {}).
DimAxes operand_to_output(const Sharding& s, const Shape& in, const Shape& out) {
  DimAxes r(out.size());
  const auto da = dim_axes_of(s, in.size());
  const size_t off = out.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k] == out[k + off]) r[k + off] = da[k];
  return r;
}
DimAxes output_to_operand(const DimAxes& out_da, const Shape& in, const Shape& out) {
  DimAxes r(in.size());
  const size_t off = out.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k] == out[k + off]) r[k] = out_da[k + off];
  return r;
}

// ---- pointwise
std::vector<MaybeSharding> pointwise_forward(const PropagationView& v) {
  const Shape& out = v.output_shape(0);
  std::vector<DimAxes> cands;
  for (size_t i = 0; i < v.operands.size(); ++i)
    if (v.operands[i] && usable(*v.operands[i]) && v.operand_shape(i).size() <= out.size())
      cands.push_back(operand_to_output(*v.operands[i], v.operand_shape(i), out));
  if (cands.empty()) return {};
  // The most tiled candidate first (the first on ties), then others' dims where free.
  auto tiles = [&](const DimAxes& da) { return total_tiles(make_sharding(v.mesh, da)); };
  size_t best = 0;
  for (size_t i = 1; i < cands.size(); ++i)
    if (tiles(cands[i]) > tiles(cands[best])) best = i;
  DimAxes da = cands[best];
  std::set<int> used = used_axes(da);
  for (size_t i = 0; i < cands.size(); ++i)
    for (size_t d = 0; d < da.size(); ++d) claim(da, d, cands[i][d], used);
  return {make_sharding(v.mesh, da)};
}
std::vector<MaybeSharding> pointwise_backward(const PropagationView& v) {
  if (!v.outputs[0] || !usable(*v.outputs[0])) return {};
  const Shape& out = v.output_shape(0);
  const DimAxes oda = dim_axes_of(*v.outputs[0], out.size());
  std::vector<MaybeSharding> r(v.operands.size());
  for (size_t i = 0; i < v.operands.size(); ++i)
    if (v.node.operands[i].node >= 0 && v.operand_shape(i).size() <= out.size())
      r[i] = make_sharding(v.mesh, output_to_operand(oda, v.operand_shape(i), out));
  return r;
}

// Ops through which a Partial (sum) operand stays Partial: linear in that operand.
bool linear_in(OpKind op, size_t operand) {
  switch (op) {
    case OpKind::Neg:
    case OpKind::Copy:
    case OpKind::Add:
    case OpKind::Sub: return true;       // when every operand is Partial alike (checked below)
    case OpKind::Mul: return true;       // the other operand not Partial
    case OpKind::Div: return operand == 0;  // x / replicated
    default: return false;
  }
}

std::vector<LocalValue> pointwise_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                            const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const Shape& out = n.outs[0].shape;
  const DimAxes oda = dim_axes_of(chosen[0], out.size());
  const std::string rule = std::string("pointwise: ") + ops::op_name(n.op) + " operands follow its output";
  // Partial operands stay Partial through linear ops when all of them can (add/sub: all
  // Partial alike; mul/div: the others not Partial); otherwise they are reduced first.
  size_t npartial = 0;
  for (const LocalValue& x : in) npartial += !x.absent() && x.sharding.is_partial();
  bool keep_partial = npartial > 0;
  const LocalValue* first_partial = nullptr;
  for (size_t i = 0; i < in.size() && keep_partial; ++i) {
    if (in[i].absent()) continue;
    const bool p = in[i].sharding.is_partial();
    if (p && !first_partial) first_partial = &in[i];
    if (p && (!linear_in(n.op, i) || in[i].sharding.partial_op != Reduce::Sum || !cx.single_use(i))) keep_partial = false;
    if (p && first_partial && (in[i].sharding.partial_axes != first_partial->sharding.partial_axes)) keep_partial = false;
  }
  if (keep_partial && (n.op == OpKind::Add || n.op == OpKind::Sub)) keep_partial = npartial == in.size();
  if (keep_partial && (n.op == OpKind::Mul || n.op == OpKind::Div)) keep_partial = npartial == 1;
  // A value split on an axis cannot also be Partial over it (each device would hold a
  // different tile's share): the output must not be split on the partial axes.
  if (keep_partial) keep_partial = disjoint(first_partial->sharding.partial_axes, used_axes(oda));
  // Scalars: a Partial sum plus (or minus) replicated scalars stays Partial, the replicated
  // ones counted on the first device of each group only (times 1, elsewhere times 0), so a
  // sum of per-parameter partial sums (a gradient norm) is all-reduced once, not per term.
  std::vector<bool> count_once(in.size(), false);
  if (!keep_partial && npartial > 0 && out.empty() && (n.op == OpKind::Add || n.op == OpKind::Sub)) {
    bool ok = true;
    for (size_t i = 0; i < in.size() && ok; ++i) {
      if (in[i].absent()) continue;
      if (in[i].sharding.is_partial()) {
        if (!first_partial) first_partial = &in[i];
        ok = in[i].sharding.partial_op == Reduce::Sum && cx.single_use(i) &&
             in[i].sharding.partial_axes == first_partial->sharding.partial_axes && in[i].global.empty();
      } else {
        ok = in[i].sharding.is_replicated() && in[i].global.empty() && is_floating(in[i].dtype);
        count_once[i] = ok;
      }
    }
    if (ok) keep_partial = true;
    else count_once.assign(in.size(), false);
  }
  std::vector<Ref> refs;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].absent()) {
      refs.push_back(in[i].ref);
      continue;
    }
    Sharding target = make_sharding(cx.mesh(), output_to_operand(oda, in[i].global, out));
    LocalValue x = in[i];
    if (count_once[i]) {
      // [1, 0, ..., 0] over the partial axes' devices: each device's element is its factor.
      const std::vector<int>& axes = first_partial->sharding.partial_axes;
      const Sharding split = make_sharding(cx.mesh(), {axes});
      const int64_t g = split.tiles(0);
      std::vector<float> one(size_t(g), 0.0f);
      one[0] = 1.0f;
      Ref f = cx.constant(from_vector(one, {g}).to(x.dtype));
      f = cx.emit(OpKind::ShardSlice, {f}, shard_slice_attrs(split, {g}))[0];
      f = cx.emit(OpKind::Reshape, {f}, ops::attr::Reshape{.shape = {}}.pack())[0];
      refs.push_back(cx.emit(OpKind::Mul, {x.ref, f}, {})[0]);
      continue;
    }
    if (x.sharding.is_partial() && keep_partial && without_partial(x.sharding) == target) {
      refs.push_back(x.ref);
      continue;
    }
    // A Partial operand goes straight to its target: a reduce-scatter when the target is
    // tiled on the partial axes (FSDP's gradient into its sharded optimizer update), not
    // an all-reduce and a slice.
    refs.push_back(cx.reshard(x, target, rule).ref);
  }
  Sharding os = chosen[0];
  std::string origin;
  if (keep_partial) {
    os = with_partial(os, first_partial->sharding.partial_axes, Reduce::Sum);
    origin = first_partial->origin;
  }
  Ref r = cx.emit(n.op, refs, n.attrs)[0];
  return {LocalValue{r, os, out, n.outs[0].dtype, origin}};
}

// ---- broadcast (expand): operand dims that grow are broadcast
std::vector<MaybeSharding> broadcast_forward(const PropagationView& v) {
  if (!v.operands[0] || !usable(*v.operands[0])) return {};
  return {make_sharding(v.mesh, operand_to_output(*v.operands[0], v.operand_shape(0), v.output_shape(0)))};
}
std::vector<MaybeSharding> broadcast_backward(const PropagationView& v) {
  if (!v.outputs[0] || !usable(*v.outputs[0])) return {};
  const Shape& out = v.output_shape(0);
  return {make_sharding(v.mesh, output_to_operand(dim_axes_of(*v.outputs[0], out.size()), v.operand_shape(0), out))};
}
std::vector<LocalValue> broadcast_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                            const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const Shape& out = n.outs[0].shape;
  const Sharding target = make_sharding(cx.mesh(), output_to_operand(dim_axes_of(chosen[0], out.size()), in[0].global, out));
  LocalValue x = in[0];
  Sharding os = chosen[0];
  if (x.sharding.is_partial() && without_partial(x.sharding) == target && cx.single_use(0) &&
      disjoint(x.sharding.partial_axes, used_axes(dim_axes_of(os, out.size())))) {
    os = with_partial(os, x.sharding.partial_axes, x.sharding.partial_op);  // expand is linear and keeps max/min
  } else {
    x = cx.reshard(cx.resolve(x, "broadcast: expand"), target, "broadcast: expand operand follows its output");
  }
  Shape local = without_partial(os).shard_shape(out);
  ops::Attrs a = n.attrs;
  a.ints = local;  // expand's INTS(shape): the local shape
  Ref r = cx.emit(n.op, {x.ref}, a)[0];
  return {LocalValue{r, os, out, n.outs[0].dtype, x.origin}};
}

// ---- transpose (permute): output dim k is input dim perm[k]
std::vector<int64_t> perm_of(const compiler::PNode& n) { return ops::attr::Permute::of(n.attrs).dims; }
std::vector<MaybeSharding> transpose_forward(const PropagationView& v) {
  if (!v.operands[0] || !usable(*v.operands[0])) return {};
  const auto perm = perm_of(v.node);
  const DimAxes ida = dim_axes_of(*v.operands[0], perm.size());
  DimAxes oda(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) oda[k] = ida[size_t(perm[k])];
  return {make_sharding(v.mesh, oda)};
}
std::vector<MaybeSharding> transpose_backward(const PropagationView& v) {
  if (!v.outputs[0] || !usable(*v.outputs[0])) return {};
  const auto perm = perm_of(v.node);
  const DimAxes oda = dim_axes_of(*v.outputs[0], perm.size());
  DimAxes ida(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) ida[size_t(perm[k])] = oda[k];
  return {make_sharding(v.mesh, ida)};
}
std::vector<LocalValue> transpose_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                            const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const auto perm = perm_of(n);
  const DimAxes oda = dim_axes_of(chosen[0], perm.size());
  DimAxes ida(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) ida[size_t(perm[k])] = oda[k];
  const Sharding target = make_sharding(cx.mesh(), ida);
  LocalValue x = in[0];
  Sharding os = chosen[0];
  if (x.sharding.is_partial() && without_partial(x.sharding) == target && cx.single_use(0))
    os = with_partial(os, x.sharding.partial_axes, x.sharding.partial_op);
  else
    x = cx.reshard(cx.resolve(x, "transpose"), target, "transpose: operand follows its output");
  Ref r = cx.emit(n.op, {x.ref}, n.attrs)[0];
  return {LocalValue{r, os, n.outs[0].shape, n.outs[0].dtype, x.origin}};
}

}  // namespace

// ---- reshape: XLA's ReshapeSharding (spec §2.3)
// The sharding of `to` equal to `s` on `from`, when the reshape keeps every device's shard
// contiguous: size-1 dims added or removed (unsplit), a dim carried over unchanged,
// consecutive dims merged where only the most major one is split (evenly), a dim split
// into consecutive dims whose most major one takes the split (evenly), any reshaping of
// unsplit dims. nullopt otherwise.
std::optional<Sharding> reshape_sharding(const Shape& from, const Shape& to, const Sharding& s) {
  if (s.kind != Sharding::Kind::Tiled) return s.kind == Sharding::Kind::Manual ? std::nullopt : std::optional(without_partial(s));
  const DimAxes da = dim_axes_of(s, from.size());
  DimAxes out(to.size());
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    // Size-1 dims stand alone (a split size-1 dim cannot be carried).
    if (i < from.size() && from[i] == 1 && (j >= to.size() || to[j] != 1)) {
      if (!da[i].empty()) return std::nullopt;
      ++i;
      continue;
    }
    if (j < to.size() && to[j] == 1 && (i >= from.size() || from[i] != 1)) {
      ++j;
      continue;
    }
    if (i >= from.size() || j >= to.size()) return std::nullopt;
    // A group: from[i..i2) and to[j..j2) of equal products.
    size_t i2 = i + 1, j2 = j + 1;
    int64_t pa = from[i], pb = to[j];
    while (pa != pb) {
      if (pa < pb) {
        if (i2 >= from.size()) return std::nullopt;
        pa *= from[i2++];
      } else {
        if (j2 >= to.size()) return std::nullopt;
        pb *= to[j2++];
      }
    }
    const int64_t ti = s.tiles(int(i));
    bool minor_split = false;
    for (size_t k = i + 1; k < i2; ++k) minor_split |= !da[k].empty();
    if (minor_split) return std::nullopt;  // a sharded minor dim merged or regrouped
    if (!da[i].empty()) {
      if (j2 - j > 1 && i2 - i > 1) return std::nullopt;
      // Merge (many -> one): the major dim must split evenly. Split (one -> many): the
      // output's major dim takes the split and must be divisible by it.
      if (i2 - i > 1 && from[i] % ti != 0) return std::nullopt;
      if (j2 - j > 1 && to[j] % ti != 0) return std::nullopt;
      out[j] = da[i];
    }
    i = i2;
    j = j2;
  }
  return make_sharding(s.mesh, out);
}

namespace {

std::vector<MaybeSharding> reshape_forward(const PropagationView& v) {
  if (!v.operands[0]) return {};
  auto r = reshape_sharding(v.operand_shape(0), v.output_shape(0), *v.operands[0]);
  if (!r) return {};
  return {*r};
}
std::vector<MaybeSharding> reshape_backward(const PropagationView& v) {
  if (!v.outputs[0]) return {};
  auto r = reshape_sharding(v.output_shape(0), v.operand_shape(0), *v.outputs[0]);
  if (!r) return {};
  return {*r};
}
std::vector<LocalValue> reshape_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                          const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const Shape& out = n.outs[0].shape;
  const Shape& ish = in[0].global;
  LocalValue x = in[0];
  // The input sharding the chosen output needs, if the reshape can carry it; else the
  // output the input's own sharding gives; else the input is replicated (recorded).
  Sharding os;
  Sharding target;
  auto need = reshape_sharding(out, ish, chosen[0]);
  auto back = need ? reshape_sharding(ish, out, *need) : std::nullopt;
  if (need && back && *back == chosen[0]) {
    target = *need;
    os = chosen[0];
  } else if (auto mine = reshape_sharding(ish, out, without_partial(x.sharding))) {
    target = without_partial(x.sharding);
    os = *mine;
  } else {
    target = Sharding::replicated(cx.mesh());
    os = target;
  }
  const std::string rule = "reshape " + shape_str(ish) + " -> " + shape_str(out) +
                           (os.is_replicated() && !without_partial(x.sharding).is_replicated()
                                ? ": the input's sharding does not carry over (ReshapeSharding); input replicated"
                                : "");
  if (x.sharding.is_partial() && without_partial(x.sharding) == target && cx.single_use(0))
    os = with_partial(os, x.sharding.partial_axes, x.sharding.partial_op);
  else
    x = cx.reshard(cx.resolve(x, rule), target, rule);
  ops::Attrs a = n.attrs;
  a.ints = without_partial(os).shard_shape(out);
  Ref r = cx.emit(n.op, {x.ref}, a)[0];
  return {LocalValue{r, os, out, n.outs[0].dtype, x.origin}};
}

// ---- reduce (sum, amax, amin over dims; none: all)
struct ReduceAttrs {
  bool keepdim = false;
  std::vector<bool> reduced;  // per input dim
};
ReduceAttrs reduce_attrs(const compiler::PNode& n, size_t rank) {
  ReduceAttrs r;
  const auto s = ops::attr::Sum::of(n.attrs);  // sum, amax and amin share the layout
  r.keepdim = s.keepdim;
  r.reduced.assign(rank, s.dims.empty());
  for (int64_t d : s.dims) r.reduced[size_t(d < 0 ? d + int64_t(rank) : d)] = true;
  return r;
}
std::vector<MaybeSharding> reduce_forward(const PropagationView& v) {
  if (!v.operands[0] || !usable(*v.operands[0])) return {};
  const size_t rank = v.operand_shape(0).size();
  const ReduceAttrs ra = reduce_attrs(v.node, rank);
  const DimAxes ida = dim_axes_of(*v.operands[0], rank);
  DimAxes oda;
  for (size_t d = 0; d < rank; ++d) {
    if (!ra.reduced[d]) oda.push_back(ida[d]);
    else if (ra.keepdim) oda.push_back({});
  }
  return {make_sharding(v.mesh, oda)};
}
std::vector<MaybeSharding> reduce_backward(const PropagationView& v) {
  if (!v.outputs[0] || !usable(*v.outputs[0])) return {};
  const size_t rank = v.operand_shape(0).size();
  const ReduceAttrs ra = reduce_attrs(v.node, rank);
  const DimAxes oda = dim_axes_of(*v.outputs[0], v.output_shape(0).size());
  DimAxes ida(rank);
  size_t j = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (!ra.reduced[d]) ida[d] = oda[j++];
    else if (ra.keepdim) ++j;
  }
  return {make_sharding(v.mesh, ida)};
}
std::vector<LocalValue> reduce_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                         const std::vector<Sharding>&) {
  const compiler::PNode& n = cx.node();
  const Reduce op = n.op == OpKind::Sum ? Reduce::Sum : n.op == OpKind::Amax ? Reduce::Max : Reduce::Min;
  const double identity = op == Reduce::Sum ? 0.0 : op == Reduce::Max ? -INFINITY : INFINITY;
  const char* name = ops::op_name(n.op);
  LocalValue x = in[0];
  // A sum of a Partial sum stays Partial; any other Partial operand is reduced first.
  if (x.sharding.is_partial() && !(op == Reduce::Sum && x.sharding.partial_op == Reduce::Sum && cx.single_use(0)))
    x = cx.resolve(x, std::string("reduce: ") + name + " of a partial value");
  const size_t rank = x.global.size();
  const ReduceAttrs ra = reduce_attrs(n, rank);
  const DimAxes ida = dim_axes_of(x.sharding, rank);
  Axes partial;
  std::string dims_text;
  for (size_t d = 0; d < rank; ++d) {
    if (!ra.reduced[d] || ida[d].empty()) continue;
    x = cx.mask_padding(x, int(d), identity);  // padding never reaches the reduction
    partial.insert(partial.end(), ida[d].begin(), ida[d].end());
    dims_text += (dims_text.empty() ? "" : ", ") + std::to_string(d);
  }
  DimAxes oda;
  for (size_t d = 0; d < rank; ++d) {
    if (!ra.reduced[d]) oda.push_back(ida[d]);
    else if (ra.keepdim) oda.push_back({});
  }
  Sharding os = make_sharding(cx.mesh(), oda);
  os.partial_axes = x.sharding.partial_axes;
  os.partial_op = x.sharding.partial_op;
  os = with_partial(os, partial, op);
  std::string origin = x.origin;
  if (!partial.empty()) origin = std::string("reduce: ") + name + " over sharded dim" + (partial.size() > 1 ? "s " : " ") + dims_text;
  Ref r = cx.emit(n.op, {x.ref}, n.attrs)[0];
  return {LocalValue{r, os, n.outs[0].shape, n.outs[0].dtype, origin}};
}

// ---- dot: matmul (a [..., m, k] @ b [..., k, n], batch dims broadcast) and linear
// (x [..., in], w [out, in], bias [out]?). Each operand dim has a role; the output's dims
// are batch..., lhs free..., rhs free.
struct DotDims {
  // Per output dim: the lhs dim and rhs dim it comes from (-1: none, or broadcast from 1).
  std::vector<int> out_lhs, out_rhs;
  int lhs_contract = 0, rhs_contract = 0;
  size_t lhs_rank = 0, rhs_rank = 0, out_rank = 0;
  size_t batch = 0;  // leading output dims that are batch dims (matmul)
};
DotDims dot_dims(OpKind op, const Shape& a, const Shape& b, const Shape& out) {
  DotDims d;
  d.lhs_rank = a.size();
  d.rhs_rank = b.size();
  d.out_rank = out.size();
  d.out_lhs.assign(out.size(), -1);
  d.out_rhs.assign(out.size(), -1);
  if (op == OpKind::Linear) {
    for (size_t k = 0; k + 1 < a.size(); ++k) d.out_lhs[k] = int(k);
    d.out_rhs[out.size() - 1] = 0;
    d.lhs_contract = int(a.size()) - 1;
    d.rhs_contract = 1;
    return d;
  }
  const size_t nb = out.size() - 2;
  d.batch = nb;
  for (size_t k = 0; k < nb; ++k) {
    const int la = int(k) - int(nb - (a.size() - 2)), lb = int(k) - int(nb - (b.size() - 2));
    if (la >= 0 && a[size_t(la)] == out[k]) d.out_lhs[k] = la;
    if (lb >= 0 && b[size_t(lb)] == out[k]) d.out_rhs[k] = lb;
  }
  d.out_lhs[nb] = int(a.size()) - 2;
  d.out_rhs[nb + 1] = int(b.size()) - 1;
  d.lhs_contract = int(a.size()) - 1;
  d.rhs_contract = int(b.size()) - 2;
  return d;
}

std::vector<MaybeSharding> dot_forward(const PropagationView& v) {
  const DotDims dd = dot_dims(v.node.op, v.operand_shape(0), v.operand_shape(1), v.output_shape(0));
  const bool l = v.operands[0] && usable(*v.operands[0]), r = v.operands[1] && usable(*v.operands[1]);
  if (!l && !r) return {};
  const DimAxes la = l ? dim_axes_of(*v.operands[0], dd.lhs_rank) : DimAxes(dd.lhs_rank);
  const DimAxes ra = r ? dim_axes_of(*v.operands[1], dd.rhs_rank) : DimAxes(dd.rhs_rank);
  DimAxes oda(dd.out_rank);
  // Contracting axes make a Partial result: the output is not split on them.
  std::set<int> used;
  used.insert(la[size_t(dd.lhs_contract)].begin(), la[size_t(dd.lhs_contract)].end());
  used.insert(ra[size_t(dd.rhs_contract)].begin(), ra[size_t(dd.rhs_contract)].end());
  for (size_t k = 0; k < dd.out_rank; ++k)  // lhs first: batch and free dims
    if (dd.out_lhs[k] >= 0) claim(oda, k, la[size_t(dd.out_lhs[k])], used);
  for (size_t k = 0; k < dd.out_rank; ++k)
    if (dd.out_rhs[k] >= 0) claim(oda, k, ra[size_t(dd.out_rhs[k])], used);
  return {make_sharding(v.mesh, oda)};
}
std::vector<MaybeSharding> dot_backward(const PropagationView& v) {
  if (!v.outputs[0] || !usable(*v.outputs[0])) return {};
  const DotDims dd = dot_dims(v.node.op, v.operand_shape(0), v.operand_shape(1), v.output_shape(0));
  const DimAxes oda = dim_axes_of(*v.outputs[0], dd.out_rank);
  DimAxes la(dd.lhs_rank), ra(dd.rhs_rank);
  for (size_t k = 0; k < dd.out_rank; ++k) {
    if (dd.out_lhs[k] >= 0) la[size_t(dd.out_lhs[k])] = oda[k];
    if (dd.out_rhs[k] >= 0) ra[size_t(dd.out_rhs[k])] = oda[k];
  }
  std::vector<MaybeSharding> r(v.operands.size());
  r[0] = make_sharding(v.mesh, la);
  r[1] = make_sharding(v.mesh, ra);
  if (v.operands.size() > 2 && v.node.operands[2].node >= 0) r[2] = make_sharding(v.mesh, {oda.back()});
  return r;
}

// A local dot of lhs (sharding la) and rhs (ra) is right when their batch dims and their
// contracting dims are split alike and their free dims use different axes. Returns the
// output's dim axes and the contracting axes (the result is Partial over them).
std::optional<std::pair<DimAxes, Axes>> local_dot(const DotDims& dd, const DimAxes& la, const DimAxes& ra) {
  if (la[size_t(dd.lhs_contract)] != ra[size_t(dd.rhs_contract)]) return std::nullopt;
  DimAxes oda(dd.out_rank);
  std::set<int> used(la[size_t(dd.lhs_contract)].begin(), la[size_t(dd.lhs_contract)].end());
  // Each lhs/rhs non-contracting dim must show up in the output (a broadcast batch dim of
  // size 1 must be unsplit).
  std::vector<bool> lseen(dd.lhs_rank), rseen(dd.rhs_rank);
  for (size_t k = 0; k < dd.out_rank; ++k) {
    const int l = dd.out_lhs[k], r = dd.out_rhs[k];
    const Axes* al = l >= 0 ? &la[size_t(l)] : nullptr;
    const Axes* ar = r >= 0 ? &ra[size_t(r)] : nullptr;
    if (l >= 0) lseen[size_t(l)] = true;
    if (r >= 0) rseen[size_t(r)] = true;
    if (al && ar && *al != *ar) return std::nullopt;  // batch dims split differently
    const Axes& a = al ? *al : ar ? *ar : oda[k];
    if (!disjoint(a, used)) return std::nullopt;
    used.insert(a.begin(), a.end());
    oda[k] = a;
  }
  for (size_t d = 0; d < dd.lhs_rank; ++d)
    if (!lseen[d] && int(d) != dd.lhs_contract && !la[d].empty()) return std::nullopt;
  for (size_t d = 0; d < dd.rhs_rank; ++d)
    if (!rseen[d] && int(d) != dd.rhs_contract && !ra[d].empty()) return std::nullopt;
  return std::pair{oda, la[size_t(dd.lhs_contract)]};
}

int64_t numel_of(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()); }

std::vector<LocalValue> dot_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                      const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const char* name = ops::op_name(n.op);
  const Shape& out = n.outs[0].shape;
  const DotDims dd = dot_dims(n.op, in[0].global, in[1].global, out);
  const std::string pre = std::string("dot: ") + name + " ";
  LocalValue a = cx.resolve(in[0], pre + "needs a reduced lhs");
  LocalValue b = cx.resolve(in[1], pre + "needs a reduced rhs");
  const DimAxes la = dim_axes_of(a.sharding, dd.lhs_rank), ra = dim_axes_of(b.sharding, dd.rhs_rank);
  const DimAxes want = dim_axes_of(chosen[0], dd.out_rank);
  const auto mesh = cx.mesh();
  // Operand shardings that make a local dot, given the other operand's and the output's.
  auto rhs_for = [&](const DimAxes& l, const DimAxes& o) {  // rhs split to match lhs batch/contracting and output rhs free
    DimAxes r(dd.rhs_rank);
    r[size_t(dd.rhs_contract)] = l[size_t(dd.lhs_contract)];
    for (size_t k = 0; k < dd.out_rank; ++k)
      if (dd.out_rhs[k] >= 0) r[size_t(dd.out_rhs[k])] = dd.out_lhs[k] >= 0 ? l[size_t(dd.out_lhs[k])] : o[k];
    return r;
  };
  auto lhs_for = [&](const DimAxes& r, const DimAxes& o) {
    DimAxes l(dd.lhs_rank);
    l[size_t(dd.lhs_contract)] = r[size_t(dd.rhs_contract)];
    for (size_t k = 0; k < dd.out_rank; ++k)
      if (dd.out_lhs[k] >= 0) l[size_t(dd.out_lhs[k])] = dd.out_rhs[k] >= 0 ? r[size_t(dd.out_rhs[k])] : o[k];
    return l;
  };
  DimAxes tl = la, tr = ra;
  std::string why;
  auto free_matches = [&](const DimAxes& o) {
    return make_sharding(mesh, o) == chosen[0];
  };
  auto local_ok = [&](const DimAxes& l, const DimAxes& r) { return local_dot(dd, l, r).has_value(); };
  const bool lcon = !la[size_t(dd.lhs_contract)].empty(), rcon = !ra[size_t(dd.rhs_contract)].empty();
  if (auto ld = local_dot(dd, la, ra)) {
    why = lcon ? "contracting dim sharded on both operands" : "operands split alike (batch) or one replicated";
  } else {
    // §2.5 case 6: one operand contracting-sharded and bigger than the output's shard, the
    // output not split on those axes, and the other operand reaching the matching sharding
    // by local slices only: slice it (no collective) and reduce the output (all-reduce or
    // reduce-scatter), rather than gather the big operand (a tensor-parallel weight).
    const int64_t on = numel_of(chosen[0].shard_shape(out));
    const std::set<int> out_axes = used_axes(want);
    auto slices_only = [](const DimAxes& from, const DimAxes& to) {  // each dim kept, or unsplit -> split
      for (size_t d = 0; d < from.size(); ++d)
        if (from[d] != to[d] && !from[d].empty()) return false;
      return true;
    };
    const DimAxes rl = rhs_for(la, want), lr = lhs_for(ra, want);
    if (lcon && disjoint(la[size_t(dd.lhs_contract)], out_axes) && numel_of(a.global) > on && local_ok(la, rl) &&
        rl[size_t(dd.rhs_contract)] == la[size_t(dd.lhs_contract)] && slices_only(ra, rl)) {
      tr = rl;
      why = "lhs contracting-sharded and larger than the output's shard: rhs sliced to match";
    } else if (rcon && disjoint(ra[size_t(dd.rhs_contract)], out_axes) && numel_of(b.global) > on &&
               local_ok(lr, ra) && slices_only(la, lr)) {
      tl = lr;
      why = "rhs contracting-sharded and larger than the output's shard: lhs sliced to match";
    } else {
      // Case 5: an operand whose free dims match the output keeps its sharding; the other
      // is resharded (gathered) to match it.
      auto out_of = [&](const DimAxes& l, const DimAxes& r) {
        auto ld = local_dot(dd, l, r);
        return ld ? std::optional(ld->first) : std::nullopt;
      };
      DimAxes r5 = rhs_for(la, DimAxes(dd.out_rank)), l5 = lhs_for(ra, DimAxes(dd.out_rank));
      auto oa = out_of(la, r5), ob = out_of(l5, ra);
      if (oa && !lcon && free_matches(*oa)) {
        tr = r5;
        why = "lhs free dims match the output; rhs resharded";
      } else if (ob && !rcon && free_matches(*ob)) {
        tl = l5;
        why = "rhs free dims match the output; lhs resharded";
      } else {
        // Both operands resharded to the output's split (contracting dims whole).
        DimAxes l(dd.lhs_rank), r(dd.rhs_rank);
        for (size_t k = 0; k < dd.out_rank; ++k) {
          if (dd.out_lhs[k] >= 0) l[size_t(dd.out_lhs[k])] = want[k];
          if (dd.out_rhs[k] >= 0) r[size_t(dd.out_rhs[k])] = want[k];
        }
        if (local_ok(l, r)) {
          tl = l, tr = r;
          why = "operands resharded to the output's sharding";
        } else {
          tl = DimAxes(dd.lhs_rank), tr = DimAxes(dd.rhs_rank);
          why = "no sharding fits; operands replicated";
        }
      }
    }
  }
  a = cx.reshard(a, make_sharding(mesh, tl), pre + why);
  b = cx.reshard(b, make_sharding(mesh, tr), pre + why);
  auto ld = local_dot(dd, tl, tr);
  AXLE_CHECK(ld.has_value(), "[spmd] internal: dot operands ", a.sharding.str(), " and ", b.sharding.str(),
             " do not make a local dot");
  const Axes& contract = ld->second;
  std::string origin;
  if (!contract.empty()) {
    // Padding of a split contracting dim is zeroed on both sides (NaN on one side would not
    // be masked by a zero on the other).
    a = cx.mask_padding(a, dd.lhs_contract, 0.0);
    b = cx.mask_padding(b, dd.rhs_contract, 0.0);
    origin = pre + "contracting dim " + std::to_string(dd.lhs_contract) + " sharded on both operands";
  }
  Sharding os = make_sharding(mesh, ld->first);
  std::vector<Ref> refs{a.ref, b.ref};
  const bool has_bias = in.size() > 2 && !in[2].absent();
  const bool relu = n.op == OpKind::Linear && ops::attr::Linear::of(n.attrs).relu;
  LocalValue bias;
  if (has_bias) {
    bias = cx.reshard(cx.resolve(in[2], pre + "bias"), make_sharding(mesh, {ld->first.back()}),
                      pre + "bias follows the output's last dim");
  }
  if (contract.empty()) {
    if (has_bias) refs.push_back(bias.ref);
    Ref r = cx.emit(n.op, refs, n.attrs)[0];
    return {LocalValue{r, os, out, n.outs[0].dtype, ""}};
  }
  // Partial result: a bias or relu applies after the reduction.
  Ref r = cx.emit(n.op, refs, ops::Attrs{})[0];
  LocalValue y{r, with_partial(os, contract, Reduce::Sum), out, n.outs[0].dtype, origin};
  if (!has_bias && !relu) return {y};
  y = cx.resolve(y, pre + "bias or relu after a contracting-sharded dot");
  if (has_bias) y.ref = cx.emit(OpKind::Add, {y.ref, bias.ref}, {})[0];
  if (relu) y.ref = cx.emit(OpKind::Relu, {y.ref}, {})[0];
  return {y};
}

// ---- constraint: its operand resharded to the pinned sharding; no op remains
Sharding constraint_sharding(const compiler::PNode& n) {
  const auto c = ops::attr::ShardingConstraint::of(n.attrs);
  return decode(c.sharding.data(), c.sharding.size());
}
std::vector<MaybeSharding> constraint_forward(const PropagationView& v) { return {constraint_sharding(v.node)}; }
std::vector<MaybeSharding> constraint_backward(const PropagationView& v) { return {constraint_sharding(v.node)}; }
std::vector<LocalValue> constraint_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                             const std::vector<Sharding>&) {
  const Sharding to = constraint_sharding(cx.node());
  return {cx.reshard(in[0], to, "sharding_constraint " + to.str())};
}

// ---- collective: explicit collectives (DDP, FSDP v1) on replicated operands. Under SPMD
// the process group has one rank, so they act on each device's whole value.
std::vector<LocalValue> collective_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                             const std::vector<Sharding>&) {
  const compiler::PNode& n = cx.node();
  std::vector<Ref> refs;
  const Sharding repl = Sharding::replicated(cx.mesh());
  for (const LocalValue& x : in)
    refs.push_back(x.absent() ? x.ref
                              : cx.reshard(x, repl, std::string("collective: ") + ops::op_name(n.op) +
                                                        " takes replicated operands")
                                    .ref);
  std::vector<Ref> outs = cx.emit(n.op, refs, n.attrs, n.outs);
  std::vector<LocalValue> r;
  for (size_t j = 0; j < outs.size(); ++j) r.push_back({outs[j], repl, n.outs[j].shape, n.outs[j].dtype, ""});
  return r;
}
std::vector<MaybeSharding> replicated_outputs(const PropagationView& v) {
  return std::vector<MaybeSharding>(v.node.outs.size(), Sharding::replicated(v.mesh));
}

// ---- pass-through (optimization_barrier): output i is operand i, sharding and all; a Partial
// operand stays Partial (the op is the identity), and consumers reshard after the op.
std::vector<MaybeSharding> pass_forward(const PropagationView& v) {
  std::vector<MaybeSharding> r(v.node.outs.size());
  for (size_t j = 0; j < r.size() && j < v.operands.size(); ++j) r[j] = v.operands[j];
  return r;
}
std::vector<MaybeSharding> pass_backward(const PropagationView& v) {
  std::vector<MaybeSharding> r(v.operands.size());
  for (size_t k = 0; k < r.size() && k < v.outputs.size(); ++k) r[k] = v.outputs[k];
  return r;
}
std::vector<LocalValue> pass_partition(PartitionContext& cx, const std::vector<LocalValue>& in,
                                       const std::vector<Sharding>&) {
  const compiler::PNode& n = cx.node();
  std::vector<Ref> refs;
  for (const LocalValue& x : in) refs.push_back(x.ref);
  const std::vector<Ref> outs = cx.emit(n.op, refs, n.attrs);
  std::vector<LocalValue> r;
  for (size_t j = 0; j < outs.size(); ++j) r.push_back({outs[j], in[j].sharding, in[j].global, in[j].dtype, in[j].origin});
  return r;
}

}  // namespace

const Shape& PropagationView::operand_shape(size_t i) const {
  static const Shape kNone;
  const Ref r = node.operands[i];
  return r.node < 0 ? kNone : program.nodes[size_t(r.node)].outs[size_t(r.index)].shape;
}

void register_core_rules(RuleTable& t) {
  using ops::ShardRule;
  t[ShardRule::Pointwise] = {pointwise_forward, pointwise_backward, pointwise_partition};
  t[ShardRule::Broadcast] = {broadcast_forward, broadcast_backward, broadcast_partition};
  t[ShardRule::Transpose] = {transpose_forward, transpose_backward, transpose_partition};
  t[ShardRule::Reshape] = {reshape_forward, reshape_backward, reshape_partition};
  t[ShardRule::Reduce] = {reduce_forward, reduce_backward, reduce_partition};
  t[ShardRule::Dot] = {dot_forward, dot_backward, dot_partition};
  t[ShardRule::Constraint] = {constraint_forward, constraint_backward, constraint_partition};
  t[ShardRule::Collective] = {replicated_outputs, nullptr, collective_partition};
  t[ShardRule::PassThrough] = {pass_forward, pass_backward, pass_partition};
}

const RuleTable& rule_table() {
  static const RuleTable table = [] {
    RuleTable t;
    register_core_rules(t);
    register_nn_rules(t);
    return t;
  }();
  return table;
}

}  // namespace axle::spmd
