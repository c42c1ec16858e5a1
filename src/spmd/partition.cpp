// The SPMD partitioner (partition.h): walks the global program in order, keeping each
// value as (local reference, sharding possibly Partial), asks each op's rule (rules.h) to
// emit its local computation, and reshards by the spec's §2.4 table, recording every
// collective it inserts.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "axle/error.h"
#include "ops/replica_groups.h"
#include "spmd/device_ops.h"
#include "spmd/partition.h"
#include "spmd/rules.h"

namespace axle::spmd {

using compiler::NodeKind;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;
using ops::OpKind;

std::shared_ptr<const xs::Mesh> program_mesh(const Program& g, const std::vector<Sharding>& inputs,
                                             const PartitionOptions& o);  // propagate.cpp

namespace {

int64_t numel_of(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()); }

bool disjoint_axes(const std::vector<int>& a, const std::vector<int>& b) {
  return std::none_of(a.begin(), a.end(), [&](int x) { return std::find(b.begin(), b.end(), x) != b.end(); });
}

int64_t reduce_code(Reduce r) { return r == Reduce::Sum ? 0 : r == Reduce::Min ? 2 : 3; }  // dist::ReduceOp

class Ctx final : public PartitionContext {
 public:
  Ctx(const Program& g, Partitioned& p, std::shared_ptr<const xs::Mesh> mesh, const PartitionOptions& o)
      : g_(g), p_(p), mesh_(std::move(mesh)), o_(o) {}

  const Program& global() const override { return g_; }
  int node_index() const override { return cur_; }
  const std::shared_ptr<const xs::Mesh>& mesh() const override { return mesh_; }
  void set_node(int i) { cur_ = i; }

  std::vector<Ref> emit(OpKind op, const std::vector<Ref>& operands, const ops::Attrs& attrs,
                        std::vector<ops::Meta> local_outs) override {
    if (local_outs.empty()) {
      ops::Tensors in;
      for (const Ref& r : operands) in.push_back(r.node < 0 ? Tensor() : compiler::meta_tensor(local_meta(r)));
      try {
        local_outs = ops::op_def(op).infer(in, attrs);
      } catch (const Error& e) {
        AXLE_FAIL("[spmd] internal: partitioning `", g_.node_text(size_t(cur_)), "` made a local ",
                  ops::op_name(op), " its shape rule rejects: ", e.what());
      }
    }
    PNode n;
    n.kind = NodeKind::Op;
    n.op = op;
    n.attrs = attrs;
    n.operands = operands;
    n.outs = std::move(local_outs);
    const int id = int(local().nodes.size());
    std::vector<Ref> r;
    for (size_t j = 0; j < n.outs.size(); ++j) r.push_back({id, int(j)});
    local().nodes.push_back(std::move(n));
    for (const Ref& x : r) origin_[key(x)] = cur_ >= 0 ? Ref{cur_, 0} : Ref{};
    return r;
  }

  Ref constant(const Tensor& value) override {
    PNode n;
    n.kind = NodeKind::Constant;
    n.constant = value;
    n.outs = {{value.shape(), value.dtype()}};
    local().nodes.push_back(std::move(n));
    return {int(local().nodes.size()) - 1, 0};
  }

  const ops::Meta& local_meta(Ref r) const override {
    return p_.local.nodes[size_t(r.node)].outs[size_t(r.index)];
  }

  void warn(const std::string& m) override { p_.warnings.push_back(m); }

  int uses(Ref r) const override {
    auto it = uses_.find(key(r));
    return it == uses_.end() ? 0 : it->second;
  }
  void count_uses() {
    for (const PNode& n : g_.nodes)
      if (!n.dead && n.kind == NodeKind::Op)
        for (const Ref& r : n.operands)
          if (r.node >= 0) ++uses_[key(r)];
    for (const Ref& r : g_.outputs) ++uses_[key(r)];
  }

  std::string value_text(Ref r) const override {
    if (r.node < 0) return "?";
    const PNode& n = g_.nodes[size_t(r.node)];
    if (n.kind == NodeKind::Data && size_t(n.input) < o_.input_labels.size() && !o_.input_labels[size_t(n.input)].empty())
      return o_.input_labels[size_t(n.input)] + " " + shape_str(n.outs[0].shape);
    if (n.kind != NodeKind::Op) return g_.node_text(size_t(r.node));
    // "%12 = linear(...) : float32[128, 256]": the op and the moved output's type.
    std::ostringstream os;
    os << "%" << r.node << " = " << ops::op_name(n.op) << "(...)";
    if (n.outs.size() > 1) os << " output " << r.index;
    os << " : " << n.outs[size_t(r.index)].dtype << shape_str(n.outs[size_t(r.index)].shape);
    return os.str();
  }

  LocalValue mask_padding(const LocalValue& v, int dim, double fill) override {
    const int64_t n = v.global[size_t(dim)];
    if (!has_padding(v.sharding, dim, n)) return v;
    const ops::Attrs a = mask_padding_attrs(v.sharding, dim, n, fill);
    LocalValue r = v;
    r.ref = emit(OpKind::MaskPadding, {v.ref}, a, {})[0];
    origin_[key(r.ref)] = global_of(v.ref);
    return r;
  }

  // Each (value, target) is resharded once: later uses take the first result (a gradient
  // that is both an output and an operand is all-reduced once).
  LocalValue reshard(const LocalValue& v, const Sharding& to_in, const std::string& rule) override {
    Sharding to = to_in;
    if (!to.mesh) to.mesh = mesh_;
    if (v.sharding == to) return v;
    auto& done = reshards_[key(v.ref)];
    for (const auto& [from, target, r] : done)
      if (from == v.sharding && target == to) return r;
    LocalValue r = reshard_uncached(v, to, rule);
    reshards_[key(v.ref)].push_back({v.sharding, to, r});
    return r;
  }

  LocalValue reshard_uncached(const LocalValue& v, const Sharding& to, const std::string& rule) {
    AXLE_CHECK(!to.is_partial(), "[spmd] internal: cannot reshard ", v.sharding.str(), " to the partial ", to.str());
    const std::string why = v.sharding.is_partial() && !v.origin.empty() ? v.origin + "; for " + rule : rule;
    const size_t rank = v.global.size();
    if (v.sharding.is_partial()) {
      const Sharding s0 = without_partial(v.sharding);
      // partial -> tiled(d, A): a reduce-scatter along d when d is split exactly on the
      // partial axes (and every other dim as before).
      const auto sd = dim_axes_of(s0, rank), td = dim_axes_of(to, rank);
      for (size_t d = 0; d < rank; ++d) {
        if (td[d] != v.sharding.partial_axes || !sd[d].empty()) continue;
        bool rest = true;
        for (size_t k = 0; k < rank; ++k) rest &= k == d || sd[k] == td[k];
        if (rest) return reduce_scatter(v, int(d), to, why);
      }
      // partial -> split on other axes: each device's share of the sum is sliced like the
      // sum, so slice first (no collective) and all-reduce the smaller shard.
      {
        std::vector<int> dims;
        bool ok = true;
        for (size_t d = 0; d < rank && ok; ++d) {
          if (sd[d] == td[d]) continue;
          ok = sd[d].empty() && disjoint_axes(td[d], v.sharding.partial_axes);
          dims.push_back(int(d));
        }
        if (ok && !dims.empty()) {
          LocalValue r = shard_slice(v, dims, to);
          r.sharding = with_partial(to, v.sharding.partial_axes, v.sharding.partial_op);
          return all_reduce(r, why);
        }
      }
      LocalValue r = all_reduce(v, why);
      return reshard(r, to, rule);
    }
    const Sharding& s = v.sharding;
    if (s.kind == Sharding::Kind::Manual || to.kind == Sharding::Kind::Manual)
      AXLE_FAIL("[spmd] cannot reshard between ", s.str(), " and ", to.str(), " (manual shardings are not partitioned)");
    const auto sd = dim_axes_of(s, rank), td = dim_axes_of(to, rank);
    bool same_tiles = s.kind == Sharding::Kind::Tiled && to.kind == Sharding::Kind::Tiled;
    for (size_t d = 0; d < rank && same_tiles; ++d) same_tiles = s.tiles(int(d)) == to.tiles(int(d));
    if (same_tiles) return collective_permute(v, to, rule);
    // tiled(d1, A) -> tiled(d2, A): an all-to-all.
    for (size_t d1 = 0; d1 < rank; ++d1) {
      if (sd[d1].empty() || !td[d1].empty()) continue;
      for (size_t d2 = 0; d2 < rank; ++d2) {
        if (d2 == d1 || td[d2] != sd[d1] || !sd[d2].empty()) continue;
        bool rest = true;
        for (size_t k = 0; k < rank; ++k) rest &= k == d1 || k == d2 || sd[k] == td[k];
        if (rest) return all_to_all(v, int(d1), int(d2), to, rule);
      }
    }
    // Per dim: kept, gathered (split in s, not in `to` or otherwise), sliced (split in `to`).
    std::vector<int> gather, slice;
    for (size_t d = 0; d < rank; ++d) {
      if (sd[d] == td[d]) continue;
      if (!sd[d].empty()) gather.push_back(int(d));
      if (!td[d].empty()) slice.push_back(int(d));
    }
    // A slice may only use axes free once the gathers are done.
    std::set<int> busy;
    for (size_t d = 0; d < rank; ++d)
      if (std::find(gather.begin(), gather.end(), int(d)) == gather.end()) busy.insert(sd[d].begin(), sd[d].end());
    bool ok = true;
    for (int d : slice)
      for (int a : td[size_t(d)]) ok &= busy.count(a) == 0;
    const bool full = !s.is_replicated() && !to.is_replicated() && !slice.empty() && ok &&
                      gather.size() == size_t(std::count_if(sd.begin(), sd.end(), [](const auto& a) { return !a.empty(); }));
    if (!ok || full) {
      warn("full rematerialization of " + value_text(global_of(v.ref)) + " from " + s.str() + " to " + to.str() +
           " (" + rule + "; annotate to avoid)");
      LocalValue r = reshard(v, Sharding::replicated(mesh_), rule + " (full rematerialization)");
      return reshard(r, to, rule + " (full rematerialization)");
    }
    LocalValue r = v;
    for (int d : gather) r = all_gather(r, d, rule);
    if (!slice.empty()) r = shard_slice(r, slice, to);
    r.sharding = to;
    return r;
  }

  // ---- the collectives of the §2.4 table
  LocalValue all_reduce(const LocalValue& v, const std::string& rule) {
    const auto groups = v.sharding.groups(v.sharding.partial_axes);
    const int64_t gid = ops::replica_groups_attr(groups);
    LocalValue r = v;
    r.ref = emit(OpKind::AllReduce, {v.ref}, ops::attr::AllReduce{.reduce_op = reduce_code(v.sharding.partial_op), .group = gid}.pack(), {})[0];
    r.sharding = without_partial(v.sharding);
    r.origin.clear();
    const int64_t D = int64_t(groups[0].size());
    note("all-reduce", local_bytes(v) * 2 * (D - 1) / D, v, r.sharding, rule);
    keep_origin(r.ref, v.ref);
    return r;
  }

  LocalValue all_gather(const LocalValue& v, int d, const std::string& rule) {
    const size_t rank = v.global.size();
    const auto axes = dim_axes_of(v.sharding, rank)[size_t(d)];
    const auto groups = v.sharding.groups(axes);
    const int64_t gid = ops::replica_groups_attr(groups);
    const int64_t D = int64_t(groups[0].size());
    Ref x = to_front(v.ref, d, rank);
    x = emit(OpKind::AllGather, {x}, ops::attr::AllGather{.group = gid, .world = D}.pack(), {})[0];
    const int64_t gathered = numel_of(local_meta(x).shape) * int64_t(itemsize(v.dtype));
    x = from_front(x, d, rank);
    const int64_t n = v.global[size_t(d)];
    if (local_meta(x).shape[size_t(d)] != n) x = slice(x, d, n);
    LocalValue r = v;
    r.ref = x;
    r.sharding = with_dims_replicated(v.sharding, rank, {d});
    note("all-gather", gathered * (D - 1) / D, v, r.sharding, rule);
    keep_origin(r.ref, v.ref);
    return r;
  }

  LocalValue reduce_scatter(const LocalValue& v, int d, const Sharding& to, const std::string& rule) {
    const size_t rank = v.global.size();
    const auto groups = v.sharding.groups(v.sharding.partial_axes);
    const int64_t gid = ops::replica_groups_attr(groups);
    const int64_t D = int64_t(groups[0].size());
    const int64_t n = v.global[size_t(d)], s = (n + D - 1) / D;
    Ref x = v.ref;
    if (n != s * D) x = pad(x, d, s * D);
    x = to_front(x, d, rank);
    const int64_t in_bytes = numel_of(local_meta(x).shape) * int64_t(itemsize(v.dtype));
    x = emit(OpKind::ReduceScatter, {x},
             ops::attr::ReduceScatter{.reduce_op = reduce_code(v.sharding.partial_op), .group = gid, .world = D}.pack(),
             {})[0];
    x = from_front(x, d, rank);
    LocalValue r = v;
    r.ref = x;
    r.sharding = to;
    r.origin.clear();
    note("reduce-scatter", in_bytes * (D - 1) / D, v, to, rule);
    keep_origin(r.ref, v.ref);
    return r;
  }

  LocalValue all_to_all(const LocalValue& v, int d1, int d2, const Sharding& to, const std::string& rule) {
    const size_t rank = v.global.size();
    const auto groups = v.sharding.groups(dim_axes_of(v.sharding, rank)[size_t(d1)]);
    const int64_t gid = ops::replica_groups_attr(groups);
    const int64_t D = int64_t(groups[0].size());
    const int64_t n2 = v.global[size_t(d2)], s2 = (n2 + D - 1) / D;
    Ref x = v.ref;
    if (n2 != s2 * D) x = pad(x, d2, s2 * D);
    x = emit(OpKind::AllToAll, {x},
             ops::attr::AllToAll{.split_dim = d2, .concat_dim = d1, .group = gid, .world = D}.pack(), {})[0];
    if (local_meta(x).shape[size_t(d1)] != v.global[size_t(d1)]) x = slice(x, d1, v.global[size_t(d1)]);
    LocalValue r = v;
    r.ref = x;
    r.sharding = to;
    note("all-to-all", local_bytes(v) * (D - 1) / D, v, to, rule);
    keep_origin(r.ref, v.ref);
    return r;
  }

  LocalValue collective_permute(const LocalValue& v, const Sharding& to, const std::string& rule) {
    const size_t rank = v.global.size();
    std::vector<int> all(mesh_->mesh_shape().size());
    std::iota(all.begin(), all.end(), 0);
    const auto groups = v.sharding.groups(all);  // one group: every device
    const std::vector<int>& members = groups[0];
    auto tiles_of = [&](const Sharding& s, int dev) {
      std::vector<int64_t> t;
      for (size_t d = 0; d < rank; ++d) t.push_back(s.tile_index(int(d), dev));
      return t;
    };
    std::vector<int64_t> source_of(members.size());
    for (size_t r = 0; r < members.size(); ++r) {
      const auto want = tiles_of(to, members[r]);
      int64_t src = -1;
      if (tiles_of(v.sharding, members[r]) == want) src = int64_t(r);
      for (size_t q = 0; q < members.size() && src < 0; ++q)
        if (tiles_of(v.sharding, members[q]) == want) src = int64_t(q);
      AXLE_CHECK(src >= 0, "[spmd] internal: no device holds the tile device ", members[r], " needs for ", to.str());
      source_of[r] = src;
    }
    LocalValue r = v;
    r.ref = emit(OpKind::CollectivePermute, {v.ref},
                 ops::attr::CollectivePermute{.group = ops::replica_groups_attr(groups), .source_of = source_of}.pack(), {})[0];
    r.sharding = to;
    note("collective-permute", local_bytes(v), v, to, rule);
    keep_origin(r.ref, v.ref);
    return r;
  }

  // Slices dims `dims` of v (unsplit in v) to their tiles under `to` on the running device:
  // shard_slice of v's local value as if it were global, split only on those dims.
  LocalValue shard_slice(const LocalValue& v, const std::vector<int>& dims, const Sharding& to) {
    const size_t rank = v.global.size();
    std::vector<std::vector<int>> da(rank);
    for (int d : dims) da[size_t(d)] = dim_axes_of(to, rank)[size_t(d)];
    LocalValue r = v;
    r.ref = emit(OpKind::ShardSlice, {v.ref}, shard_slice_attrs(make_sharding(mesh_, da), local_meta(v.ref).shape), {})[0];
    keep_origin(r.ref, v.ref);
    return r;
  }

  // ---- small local ops
  Ref to_front(Ref x, int d, size_t rank) {
    if (d == 0) return x;
    std::vector<int64_t> perm{d};
    for (int k = 0; k < int(rank); ++k)
      if (k != d) perm.push_back(k);
    return emit(OpKind::Permute, {x}, ops::attr::Permute{.dims = perm}.pack(), {})[0];
  }
  Ref from_front(Ref x, int d, size_t rank) {
    if (d == 0) return x;
    std::vector<int64_t> perm;
    for (int k = 1; k <= d; ++k) perm.push_back(k);
    perm.push_back(0);
    for (int k = d + 1; k < int(rank); ++k) perm.push_back(k);
    return emit(OpKind::Permute, {x}, ops::attr::Permute{.dims = perm}.pack(), {})[0];
  }
  Ref slice(Ref x, int d, int64_t n) {
    return emit(OpKind::Slice, {x}, ops::attr::Slice{.dim = d, .start = 0, .end = n, .step = 1}.pack(), {})[0];
  }
  // x with dim d zero-padded on the right to n (slice_backward places x at [0, size)).
  Ref pad(Ref x, int d, int64_t n) {
    Shape s = local_meta(x).shape;
    const int64_t have = s[size_t(d)];
    s[size_t(d)] = n;
    return emit(OpKind::SliceBackward, {x},
                ops::attr::SliceBackward{.dim = d, .start = 0, .end = have, .step = 1, .input_shape = s}.pack(), {})[0];
  }

  int64_t local_bytes(const LocalValue& v) const {
    return numel_of(local_meta(v.ref).shape) * int64_t(itemsize(local_meta(v.ref).dtype));
  }
  void note(const char* kind, int64_t bytes, const LocalValue& from, const Sharding& to, const std::string& rule) {
    p_.collectives.push_back({kind, bytes, value_text(global_of(from.ref)), from.sharding.str(), to.str(), rule});
  }

  // Which global value a local reference holds (for notes).
  static int64_t key(Ref r) { return (int64_t(r.node) << 20) | r.index; }
  Ref global_of(Ref local) const {
    auto it = origin_.find(key(local));
    return it == origin_.end() ? Ref{cur_, 0} : it->second;
  }
  void keep_origin(Ref to, Ref from) { origin_[key(to)] = global_of(from); }
  void set_global(Ref local, Ref global) { origin_[key(local)] = global; }

  Program& local() { return p_.local; }

 private:
  const Program& g_;
  Partitioned& p_;
  std::shared_ptr<const xs::Mesh> mesh_;
  const PartitionOptions& o_;
  int cur_ = -1;
  std::map<int64_t, Ref> origin_;
  std::map<int64_t, int> uses_;  // by key(global ref)
  std::map<int64_t, std::vector<std::tuple<Sharding, Sharding, LocalValue>>> reshards_;  // by key(ref)
};

}  // namespace

Partitioned partition(const Program& g, const std::vector<Sharding>& inputs, const PartitionOptions& o) {
  const auto shardings = propagate(g, inputs, o);  // checks the counts
  const auto mesh = program_mesh(g, inputs, o);
  Partitioned p;
  p.local.name = g.name;
  p.local.num_inputs = g.num_inputs;
  p.inputs = inputs;
  p.mesh = mesh;
  p.devices = mesh ? mesh->size() : inputs.empty() ? 1 : inputs[0].num_devices();
  if (!mesh) {  // nothing split: the program runs as is on every device
    p.local = g;
    for (size_t j = 0; j < g.outputs.size(); ++j) p.outputs.push_back(Sharding::replicated());
    return p;
  }
  Ctx cx(g, p, mesh, o);
  cx.count_uses();
  const RuleTable& table = rule_table();
  std::vector<std::vector<LocalValue>> vals(g.nodes.size());
  std::set<std::string> opaque_seen;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const PNode& n = g.nodes[i];
    if (n.dead) continue;
    cx.set_node(int(i));
    if (n.kind == NodeKind::Data) {
      Sharding s = inputs[size_t(n.input)];
      if (!s.mesh && s.is_replicated()) s = Sharding::replicated(mesh);
      PNode d = n;
      d.outs[0].shape = s.shard_shape(n.outs[0].shape);
      p.local.nodes.push_back(d);
      const Ref r{int(p.local.nodes.size()) - 1, 0};
      cx.set_global(r, {int(i), 0});
      vals[i] = {LocalValue{r, s, n.outs[0].shape, n.outs[0].dtype, ""}};
      continue;
    }
    if (n.kind == NodeKind::Constant) {
      const Ref r = cx.constant(n.constant);
      cx.set_global(r, {int(i), 0});
      vals[i] = {LocalValue{r, Sharding::replicated(mesh), n.outs[0].shape, n.outs[0].dtype, ""}};
      continue;
    }
    std::vector<LocalValue> in;
    for (const Ref& r : n.operands) in.push_back(r.node < 0 ? LocalValue{} : vals[size_t(r.node)][size_t(r.index)]);
    std::vector<LocalValue> out;
    const auto manual = std::find_if(in.begin(), in.end(), [](const LocalValue& x) {
      return !x.absent() && x.sharding.kind == Sharding::Kind::Manual;
    });
    if (manual != in.end()) {
      // A manual region: the op as written, on local values (a manual value's shape in the
      // program is its local shape); other operands replicated; outputs manual.
      const Sharding ms = manual->sharding;
      std::vector<Ref> refs;
      for (const LocalValue& x : in)
        refs.push_back(x.absent() || x.sharding.kind == Sharding::Kind::Manual
                           ? x.ref
                           : cx.reshard(x, Sharding::replicated(mesh), "manual region: other operands replicated").ref);
      const std::vector<Ref> r = cx.emit(n.op, refs, n.attrs, n.outs);
      for (size_t j = 0; j < r.size(); ++j) out.push_back({r[j], ms, n.outs[j].shape, n.outs[j].dtype, ""});
      for (size_t j = 0; j < out.size(); ++j) cx.set_global(out[j].ref, {int(i), int(j)});
      vals[i] = std::move(out);
      continue;
    }
    const RuleHooks& h = table[ops::shard_rule(n.op)];
    if (h.partition) out = h.partition(cx, in, shardings[i]);
    if (out.empty()) {  // Opaque: replicated operands, the op on global shapes, replicated outputs
      if (opaque_seen.insert(ops::op_name(n.op)).second) p.opaque_ops.push_back(ops::op_name(n.op));
      const Sharding repl = Sharding::replicated(mesh);
      std::vector<Ref> refs;
      for (const LocalValue& x : in)
        refs.push_back(x.absent() ? x.ref
                                  : cx.reshard(x, repl, std::string("opaque: ") + ops::op_name(n.op) +
                                                            " has no SPMD rule; operands replicated")
                                        .ref);
      const std::vector<Ref> r = cx.emit(n.op, refs, n.attrs, n.outs);
      for (size_t j = 0; j < r.size(); ++j) out.push_back({r[j], repl, n.outs[j].shape, n.outs[j].dtype, ""});
    }
    AXLE_CHECK(out.size() == n.outs.size(), "[spmd] internal: the rule of `", g.node_text(i), "` gave ", out.size(),
               " values for ", n.outs.size(), " outputs");
    for (size_t j = 0; j < out.size(); ++j) cx.set_global(out[j].ref, {int(i), int(j)});
    vals[i] = std::move(out);
  }
  // Outputs: pinned or propagated shardings, never Partial.
  cx.set_node(-1);
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    const Ref r = g.outputs[j];
    Sharding target = j < o.output_pins.size() && o.output_pins[j] ? *o.output_pins[j]
                                                                      : shardings[size_t(r.node)][size_t(r.index)];
    if (!target.mesh) target.mesh = mesh;
    const LocalValue v = cx.reshard(vals[size_t(r.node)][size_t(r.index)], target, "output " + std::to_string(j) + " is " + target.str());
    p.local.outputs.push_back(v.ref);
    p.outputs.push_back(target);
  }
  if (compiler::verifying()) p.local.verify("after spmd::partition");
  return p;
}

namespace {
std::string human_bytes(int64_t b) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  if (b < 1000) os << b << " B";
  else if (b < 1000 * 1000) os.precision(1), os << double(b) / 1e3 << " KB";
  else os.precision(2), os << double(b) / 1e6 << " MB";
  return os.str();
}
std::string pad_to(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}
}  // namespace

std::string explain_table(const Partitioned& p, const std::string& name) {
  std::ostringstream os;
  int64_t total = 0;
  for (const CollectiveNote& c : p.collectives) total += c.bytes_per_device;
  std::string mesh;
  if (p.mesh)
    for (const auto& [axis, size] : p.mesh->shape()) mesh += (mesh.empty() ? "" : ",") + axis + "=" + std::to_string(size);
  else
    mesh = "none";
  os << "[spmd] graph " << name << " (mesh " << mesh << "): " << p.collectives.size() << " collective"
     << (p.collectives.size() == 1 ? "" : "s") << ", " << human_bytes(total) << "/device\n";
  if (!p.collectives.empty()) {
    size_t wv = 5, wf = 10;
    for (const CollectiveNote& c : p.collectives) {
      wv = std::max(wv, c.value.size());
      wf = std::max(wf, c.from.size() + 4 + c.to.size());
    }
    os << "  " << pad_to("#", 3) << pad_to("collective", 20) << pad_to("bytes/dev", 11) << pad_to("value", wv + 2)
       << pad_to("from -> to", wf + 2) << "rule\n";
    for (size_t k = 0; k < p.collectives.size(); ++k) {
      const CollectiveNote& c = p.collectives[k];
      os << "  " << pad_to(std::to_string(k + 1), 3) << pad_to(c.kind, 20) << pad_to(human_bytes(c.bytes_per_device), 11)
         << pad_to(c.value, wv + 2) << pad_to(c.from + " -> " + c.to, wf + 2) << c.rule << "\n";
    }
  }
  if (!p.opaque_ops.empty()) {
    os << "  opaque (no SPMD rule, replicated):";
    for (const std::string& op : p.opaque_ops) os << " " << op;
    os << "\n";
  }
  for (const std::string& w : p.warnings) os << "  warning: " << w << "\n";
  return os.str();
}

}  // namespace axle::spmd
