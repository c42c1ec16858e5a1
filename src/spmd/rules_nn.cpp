// The SPMD rules of the neural-network ops (src/spmd/rules.h): Conv, Window, AlongDim, Attention,
// Loss.
//
// Each op's rule is described by a dim map: for each operand dim, the output dim it runs
// along (its sharding passes through), kRep (must be replicated: a conv's channels and
// spatial dims, a pooling window's dims, softmax's `dim`), or kSum (contracted: the conv
// weight gradient's batch, a reduced loss's batch; the result is Partial over its axes).
// Propagation passes shardings through the map both ways; partitioning reshards each
// operand to what the map asks of the chosen output, masks contracted padding, rewrites the
// shape attributes that name global sizes, and emits the op on local shapes.
//
// nll_loss is special (Loss): padded rows must not count, so the target's padding becomes
// ignore_index; sum is a local sum (Partial); mean divides by the GLOBAL count of counted
// targets (a local count, all-reduced); nll_loss_backward scales by the same global count.
#include <algorithm>

#include "axle/ops.h"
#include "spmd/rules.h"

namespace axle::spmd {
namespace {

using ops::OpKind;
namespace attr = ops::attr;
using Axes = std::vector<std::vector<int>>;

constexpr int kRep = -1;  ///< the operand dim must be replicated
constexpr int kSum = -2;  ///< the operand dim is contracted: its axes make the result Partial (sum)

int64_t wrap(int64_t d, size_t rank) { return d < 0 ? d + int64_t(rank) : d; }

/// Every dim passes to the same output dim, except `except` (replicated).
std::vector<int> identity_except(size_t rank, int64_t except) {
  std::vector<int> m(rank);
  for (size_t k = 0; k < rank; ++k) m[k] = int64_t(k) == except ? kRep : int(k);
  return m;
}
/// Dims 0..keep-1 pass, the rest are replicated; dim 0 is `first` (kSum for a contraction).
std::vector<int> leading(size_t rank, size_t keep, int first = 0) {
  std::vector<int> m(rank, kRep);
  for (size_t k = 0; k < std::min(keep, rank); ++k) m[k] = int(k);
  if (rank > 0 && keep > 0) m[0] = first;
  return m;
}

/// The dim map of node n (operand global shapes `in`, an absent operand's empty; output 0's
/// global shape `out`): per operand, per dim, the output dim, kRep or kSum.
std::vector<std::vector<int>> dim_map(const compiler::PNode& n, const std::vector<Shape>& in, const Shape& out) {
  std::vector<std::vector<int>> m(in.size());
  auto all_rep = [&](size_t i) { m[i].assign(in[i].size(), kRep); };
  for (size_t i = 0; i < in.size(); ++i) all_rep(i);
  const ops::Attrs& a = n.attrs;
  switch (n.op) {
    // ---- AlongDim
    case OpKind::Softmax: case OpKind::LogSoftmax:
      m[0] = identity_except(in[0].size(), wrap(attr::Softmax::of(a).dim, in[0].size()));
      break;
    case OpKind::SoftmaxBackward: case OpKind::LogSoftmaxBackward: {
      const int64_t d = wrap(attr::SoftmaxBackward::of(a).dim, in[1].size());
      m[0] = identity_except(in[0].size(), d);
      m[1] = identity_except(in[1].size(), d);
      break;
    }
    case OpKind::Argmax: case OpKind::Argmin: {
      const attr::Argmax v = attr::Argmax::of(a);
      const int64_t d = wrap(v.dim, in[0].size());
      for (size_t k = 0; k < in[0].size(); ++k)
        m[0][k] = int64_t(k) == d ? kRep : int64_t(k) < d || v.keepdim ? int(k) : int(k) - 1;
      break;
    }
    case OpKind::Cat: {
      const int64_t d = wrap(attr::Cat::of(a).dim, out.size());
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i].size() == out.size()) m[i] = identity_except(out.size(), d);  // else a skipped empty
      break;
    }
    case OpKind::Slice:
      m[0] = identity_except(in[0].size(), wrap(attr::Slice::of(a).dim, in[0].size()));
      break;
    case OpKind::SliceBackward:
      m[0] = identity_except(in[0].size(), wrap(attr::SliceBackward::of(a).dim, in[0].size()));
      break;
    case OpKind::IndexSelect: {  // (x, index): a 1-D index's dim 0 is the output's `dim` (an embedding's batch)
      const int64_t d = wrap(attr::IndexSelect::of(a).dim, in[0].size());
      m[0] = identity_except(in[0].size(), d);
      if (in[1].size() == 1 && !out.empty()) m[1] = {int(d)};
      break;
    }
    case OpKind::IndexAdd: {  // (grad, index): grad's `dim` and the index are contracted (summed into rows)
      const int64_t d = wrap(attr::IndexAdd::of(a).dim, in[0].size());
      m[0] = identity_except(in[0].size(), d);
      if (in[1].size() == 1 && !in[0].empty()) {
        m[0][size_t(d)] = kSum;
        m[1] = {kSum};
      }
      break;
    }
    case OpKind::Gather: case OpKind::ScatterAdd: {
      // gather (x, index) -> index's shape; scatter_add (grad, index) -> input_shape. A dim
      // passes where the operand and the output have one size (same tiles), else replicated.
      const int64_t d = wrap(n.op == OpKind::Gather ? attr::Gather::of(a).dim : attr::ScatterAdd::of(a).dim, out.size());
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i].size() == out.size())
          for (size_t k = 0; k < out.size(); ++k) m[i][k] = int64_t(k) != d && in[i][k] == out[k] ? int(k) : kRep;
      break;
    }
    // ---- Window: [N, C, H, W] operands, batch and channels pass, the window's dims replicated
    case OpKind::MaxPool2d: case OpKind::MaxPool2dBackward: case OpKind::AvgPool2d: case OpKind::AvgPool2dBackward:
    case OpKind::AdaptiveAvgPool2d: case OpKind::AdaptiveAvgPool2dBackward:
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i].size() == 4 && out.size() == 4) m[i] = leading(4, 2);
      break;
    // ---- Conv: the batch passes (or is contracted, for the weight gradient); the rest replicated
    case OpKind::Conv2d:              // (x, w, b?)
    case OpKind::Conv2dBackwardInput:  // (grad, w)
    case OpKind::ConvTranspose2d:      // (x, w)
      m[0] = leading(in[0].size(), 1);
      break;
    case OpKind::Conv2dBackwardWeight:  // (grad, x) -> (gw, gb?)
      m[0] = leading(in[0].size(), 1, kSum);
      m[1] = leading(in[1].size(), 1, kSum);
      break;
    // ---- Attention: q, k, v, out, lse, grads: [..., L or S, E] of one rank; the batch/head dims
    // pass, the last two (sequence, head size) replicated; the dropout's rng [2] replicated, its
    // weight index bases [...] (the batch dims: operand 4, or 7 of the backward) pass
    case OpKind::ScaledDotProductAttention: case OpKind::ScaledDotProductAttentionBackward: {
      const size_t base_at = n.op == OpKind::ScaledDotProductAttention ? 4 : 7;
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i].size() == out.size() && out.size() >= 2) m[i] = leading(out.size(), out.size() - 2);
        if (i == base_at && out.size() >= 2) m[i] = leading(out.size() - 2, out.size() - 2);
      }
      break;
    }
    // ---- Loss: the batch passes (reduction none) or is contracted (sum, mean)
    case OpKind::NllLoss: {  // (logp, target)
      const bool reduced = attr::NllLoss::of(a).reduction != 0;
      m[0] = leading(in[0].size(), 1, reduced ? kSum : 0);
      m[1] = leading(in[1].size(), 1, reduced ? kSum : 0);
      break;
    }
    case OpKind::NllLossBackward:  // (grad, target, logp) -> logp's shape
      if (!in[0].empty()) m[0] = leading(in[0].size(), 1);
      m[1] = leading(in[1].size(), 1);
      m[2] = leading(in[2].size(), 1);
      break;
    default: break;  // not an nn op: everything replicated
  }
  return m;
}

/// The axes `s` splits each dim of a rank-`rank` value over.
Axes axes_of(const Sharding& s, size_t rank) { return dim_axes_of(without_partial(s), rank); }

bool uses(const Axes& ax, int axis) {
  for (const auto& d : ax)
    if (std::find(d.begin(), d.end(), axis) != d.end()) return true;
  return false;
}
bool any_split(const Axes& ax) {
  for (const auto& d : ax)
    if (!d.empty()) return true;
  return false;
}

// ---------------------------------------------------------------- propagation
std::vector<Shape> operand_shapes(const PropagationView& v) {
  std::vector<Shape> s;
  for (size_t i = 0; i < v.node.operands.size(); ++i) s.push_back(v.operand_shape(i));
  return s;
}

/// The output sharding the operands suggest through the map (outputs of another rank than
/// output 0, and those of contracting ops, replicated).
std::vector<MaybeSharding> forward(const PropagationView& v) {
  const std::vector<Shape> in = operand_shapes(v);
  const Shape& out = v.output_shape(0);
  const auto m = dim_map(v.node, in, out);
  Axes ax(out.size());
  bool known = false, all_known = true;
  // Operands claim output dims in order; index_select's index first (an embedding's
  // output follows the batch of its ids, not the split of its table).
  std::vector<size_t> order(in.size());
  for (size_t i = 0; i < in.size(); ++i) order[i] = i;
  if (v.node.op == OpKind::IndexSelect) std::reverse(order.begin(), order.end());
  for (size_t i : order) {
    if (v.node.operands[i].node < 0) continue;
    if (!v.operands[i]) {
      all_known = false;
      continue;
    }
    known = true;
    const Axes oa = axes_of(*v.operands[i], in[i].size());
    for (size_t k = 0; k < m[i].size(); ++k) {
      const int j = m[i][k];
      if (j < 0 || !ax[size_t(j)].empty() || oa[k].empty()) continue;
      bool free = true;
      for (int axis : oa[k]) free = free && !uses(ax, axis);
      if (free) ax[size_t(j)] = oa[k];
    }
  }
  if (!known || (!any_split(ax) && !all_known)) return {};
  std::vector<MaybeSharding> r;
  for (size_t j = 0; j < v.node.outs.size(); ++j)
    r.push_back(j == 0 || v.output_shape(j).size() == out.size() ? make_sharding(v.mesh, ax) : make_sharding(v.mesh, Axes(v.output_shape(j).size())));
  if (v.node.op == OpKind::Conv2dBackwardWeight)  // the batch is contracted: gw and gb replicated
    for (size_t j = 0; j < r.size(); ++j) r[j] = Sharding::replicated(v.mesh);
  return r;
}

/// The operand shardings output 0's sharding asks for (no opinion where it splits nothing).
std::vector<MaybeSharding> backward(const PropagationView& v) {
  if (!v.outputs[0]) return {};
  const std::vector<Shape> in = operand_shapes(v);
  const Shape& out = v.output_shape(0);
  const auto m = dim_map(v.node, in, out);
  const Axes oa = axes_of(*v.outputs[0], out.size());
  std::vector<MaybeSharding> r(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (v.node.operands[i].node < 0) continue;
    Axes ax(in[i].size());
    for (size_t k = 0; k < m[i].size(); ++k)
      if (m[i][k] >= 0) ax[k] = oa[size_t(m[i][k])];
    if (any_split(ax)) r[i] = make_sharding(v.mesh, ax);
  }
  return r;
}

// ---------------------------------------------------------------- partitioning
/// Shape attributes that name global sizes, rewritten for the local output shape.
ops::Attrs local_attrs(const compiler::PNode& n, const Shape& local_out) {
  switch (n.op) {
    case OpKind::SliceBackward: {
      attr::SliceBackward a = attr::SliceBackward::of(n.attrs);
      a.input_shape = local_out;
      return a.pack();
    }
    case OpKind::ScatterAdd: {
      attr::ScatterAdd a = attr::ScatterAdd::of(n.attrs);
      a.input_shape = local_out;
      return a.pack();
    }
    case OpKind::IndexAdd: {
      attr::IndexAdd a = attr::IndexAdd::of(n.attrs);
      a.input_shape = local_out;
      return a.pack();
    }
    case OpKind::Conv2dBackwardInput: {
      attr::Conv2dBackwardInput a = attr::Conv2dBackwardInput::of(n.attrs);
      a.n = local_out[0], a.c = local_out[1], a.h = local_out[2], a.w = local_out[3];
      return a.pack();
    }
    case OpKind::AvgPool2dBackward: {
      attr::AvgPool2dBackward a = attr::AvgPool2dBackward::of(n.attrs);
      a.n = local_out[0], a.c = local_out[1], a.h = local_out[2], a.w = local_out[3];
      return a.pack();
    }
    default: return n.attrs;
  }
}

const char* rule_name(OpKind k) {
  switch (ops::shard_rule(k)) {
    case ops::ShardRule::Conv: return "conv";
    case ops::ShardRule::Window: return "window";
    case ops::ShardRule::AlongDim: return "along_dim";
    case ops::ShardRule::Loss: return "loss";
    case ops::ShardRule::Attention: return "attention";
    default: return "nn";
  }
}

/// Why operand i is resharded, for the collective notes.
std::string why(const compiler::PNode& n, const std::vector<int>& m) {
  std::string s = std::string(rule_name(n.op)) + ": " + ops::op_name(n.op);
  std::string rep, sum;
  for (size_t k = 0; k < m.size(); ++k) {
    if (m[k] == kRep) rep += (rep.empty() ? "" : ",") + std::to_string(k);
    if (m[k] == kSum) sum += (sum.empty() ? "" : ",") + std::to_string(k);
  }
  if (!rep.empty()) s += " needs dim " + rep + " replicated";
  if (!sum.empty()) s += std::string(rep.empty() ? "" : ";") + " contracts dim " + sum;
  return s;
}

/// Why a result is Partial: "conv: conv2d_backward_weight contracts sharded dim 0".
std::string contracts(const compiler::PNode& n, const std::vector<int>& m) {
  std::string dims;
  for (size_t k = 0; k < m.size(); ++k)
    if (m[k] == kSum) dims += (dims.empty() ? "" : ",") + std::to_string(k);
  return std::string(rule_name(n.op)) + ": " + ops::op_name(n.op) + " contracts sharded dim " + dims;
}

struct Plan {
  std::vector<std::vector<int>> map;
  Axes out;                  ///< output 0's axes per dim
  std::vector<int> partial;  ///< the contracted dims' axes
  std::vector<LocalValue> in;  ///< operands resharded to what the map asks
};

/// Chooses the output's axes (chosen[0] where an operand dim feeds that dim, else
/// replicated), the contracted axes (the first operand's that splits a contracted dim), and
/// reshards every operand to match.
Plan plan(PartitionContext& cx, const std::vector<LocalValue>& operands, const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  std::vector<Shape> in;
  for (const LocalValue& v : operands) in.push_back(v.absent() ? Shape{} : v.global);
  const Shape& out = n.outs[0].shape;
  Plan p;
  p.map = dim_map(n, in, out);
  const Axes want = chosen.empty() ? Axes(out.size()) : axes_of(chosen[0], out.size());
  p.out.assign(out.size(), {});
  for (size_t j = 0; j < out.size(); ++j) {
    bool fed = false;
    for (const auto& mi : p.map) fed = fed || std::find(mi.begin(), mi.end(), int(j)) != mi.end();
    if (fed) p.out[j] = want[j];
  }
  for (size_t i = 0; i < operands.size() && p.partial.empty(); ++i) {
    if (operands[i].absent()) continue;
    const Axes oa = axes_of(operands[i].sharding, in[i].size());
    for (size_t k = 0; k < p.map[i].size(); ++k) {
      if (p.map[i][k] != kSum || oa[k].empty()) continue;
      bool free = true;
      for (int axis : oa[k]) free = free && !uses(p.out, axis);
      if (free) p.partial = oa[k];
      break;
    }
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i].absent()) {
      p.in.push_back(operands[i]);
      continue;
    }
    Axes ax(in[i].size());
    for (size_t k = 0; k < ax.size(); ++k) {
      const int j = p.map[i][k];
      ax[k] = j >= 0 ? p.out[size_t(j)] : j == kSum ? p.partial : std::vector<int>{};
    }
    p.in.push_back(cx.reshard(operands[i], make_sharding(cx.mesh(), ax), why(n, p.map[i])));
  }
  return p;
}

std::vector<compiler::Ref> refs_of(const std::vector<LocalValue>& v) {
  std::vector<compiler::Ref> r;
  for (const LocalValue& x : v) r.push_back(x.ref);
  return r;
}

/// Conv, Window and AlongDim: the mapped operands, padding masked where it is contracted
/// (with 0: the weight gradient sums products over the batch, and garbage, even NaN, on
/// one side is only cancelled by zeros on both) and in gather/scatter indices (garbage
/// there is out of bounds), then the local op.
std::vector<LocalValue> partition_mapped(PartitionContext& cx, const std::vector<LocalValue>& operands,
                                         const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  Plan p = plan(cx, operands, chosen);
  const bool index_op = n.op == OpKind::Gather || n.op == OpKind::ScatterAdd || n.op == OpKind::IndexSelect;
  for (size_t i = 0; i < p.in.size(); ++i) {
    if (p.in[i].absent()) continue;
    for (size_t k = 0; k < p.map[i].size(); ++k)
      if (p.map[i][k] == kSum || (index_op && i == 1 && p.map[i][k] >= 0)) p.in[i] = cx.mask_padding(p.in[i], int(k), 0);
  }
  const Sharding out = make_sharding(cx.mesh(), p.out);
  const std::vector<compiler::Ref> r = cx.emit(n.op, refs_of(p.in), local_attrs(n, out.shard_shape(n.outs[0].shape)));
  std::vector<LocalValue> res;
  for (size_t j = 0; j < n.outs.size(); ++j) {
    Sharding s = n.outs[j].shape.size() == n.outs[0].shape.size() ? out : make_sharding(cx.mesh(), Axes(n.outs[j].shape.size()));
    if (!p.partial.empty()) s = with_partial(make_sharding(cx.mesh(), Axes(n.outs[j].shape.size())), p.partial, Reduce::Sum);
    res.push_back({r[j], s, n.outs[j].shape, n.outs[j].dtype, p.partial.empty() ? "" : contracts(n, p.map[0])});
  }
  return res;
}

// ---- Loss
LocalValue emit1(PartitionContext& cx, OpKind k, const std::vector<compiler::Ref>& in, const ops::Attrs& a,
                 const Sharding& s, const Shape& global, DType dt, const std::string& origin = "") {
  return {cx.emit(k, in, a)[0], s, global, dt, origin};
}

/// The global number of counted targets: sum(target != ignore_index) over the local,
/// padding-masked target, all-reduced over the batch axes.
LocalValue global_count(PartitionContext& cx, const LocalValue& target, int64_t ignore, const std::vector<int>& axes) {
  const Sharding part = axes.empty() ? Sharding::replicated(cx.mesh())
                                     : with_partial(Sharding::replicated(cx.mesh()), axes, Reduce::Sum);
  const compiler::Ref ig = cx.constant(full({}, double(ignore), {.dtype = target.dtype}));
  const LocalValue counted = emit1(cx, OpKind::Ne, {target.ref, ig}, {}, target.sharding, target.global, kBool);
  const LocalValue f = emit1(cx, OpKind::Cast, {counted.ref}, attr::Cast{.dtype = kFloat32}.pack(), target.sharding,
                             target.global, kFloat32);
  const LocalValue c = emit1(cx, OpKind::Sum, {f.ref}, attr::Sum{.keepdim = false, .dims = {}}.pack(), part, {}, kFloat32,
                             "loss: nll_loss mean divides by the global count of counted targets");
  return cx.resolve(c, "loss: the mean's divisor is the global count");
}

std::vector<LocalValue> partition_loss(PartitionContext& cx, const std::vector<LocalValue>& operands,
                                       const std::vector<Sharding>& chosen) {
  const compiler::PNode& n = cx.node();
  const attr::NllLoss a = attr::NllLoss::of(n.attrs);  // NllLossBackward has the same fields
  const size_t ti = 1;  // the target: operand 1 of both
  Plan p = plan(cx, operands, chosen);
  const std::vector<int> batch = n.op == OpKind::NllLoss && a.reduction != 0 ? p.partial : p.out.empty() ? std::vector<int>{} : p.out[0];
  // Padded rows must not count: their target becomes ignore_index.
  p.in[ti] = cx.mask_padding(p.in[ti], 0, double(a.ignore_index));
  const Shape& gout = n.outs[0].shape;
  const Sharding out = make_sharding(cx.mesh(), p.out);
  if (a.reduction == 0 || batch.empty())  // none, or nothing sharded: the local op as it is
    return {emit1(cx, n.op, refs_of(p.in), n.attrs, p.partial.empty() ? out : with_partial(out, p.partial, Reduce::Sum), gout, kFloat32)};
  const bool mean = Reduction(a.reduction) == Reduction::Mean;
  const ops::Attrs sum_attrs = attr::NllLoss{.reduction = int64_t(Reduction::Sum), .ignore_index = a.ignore_index}.pack();
  if (n.op == OpKind::NllLoss) {
    const LocalValue s = emit1(cx, OpKind::NllLoss, refs_of(p.in), sum_attrs,
                               with_partial(Sharding::replicated(cx.mesh()), batch, Reduce::Sum), {}, kFloat32,
                               "loss: nll_loss sums over the sharded batch");
    if (!mean) return {s};
    const LocalValue total = cx.resolve(s, "loss: the mean's dividend is the global sum");
    const LocalValue c = global_count(cx, p.in[ti], a.ignore_index, batch);
    return {emit1(cx, OpKind::Div, {total.ref, c.ref}, {}, Sharding::replicated(cx.mesh()), {}, kFloat32)};
  }
  // nll_loss_backward (grad [], target, logp): each device's rows, the scalar grad scaled by
  // the global count for mean.
  std::vector<compiler::Ref> r = refs_of(p.in);
  if (mean) {
    const LocalValue c = global_count(cx, p.in[ti], a.ignore_index, batch);
    r[0] = cx.emit(OpKind::Div, {p.in[0].ref, c.ref}, {})[0];
  }
  return {emit1(cx, OpKind::NllLossBackward, r, sum_attrs, out, gout, kFloat32)};
}

}  // namespace

void register_nn_rules(RuleTable& t) {
  for (ops::ShardRule r : {ops::ShardRule::Conv, ops::ShardRule::Window, ops::ShardRule::AlongDim, ops::ShardRule::Attention})
    t[r] = RuleHooks{.forward = forward, .backward = backward, .partition = partition_mapped};
  t[ops::ShardRule::Loss] = RuleHooks{.forward = forward, .backward = backward, .partition = partition_loss};
}

}  // namespace axle::spmd
