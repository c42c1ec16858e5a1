// The graph passes: dead-code elimination, common-subexpression elimination,
// constant folding and algebraic simplification.
#include <algorithm>
#include <map>
#include <sstream>

#include "axle/autograd.h"
#include "ops/kernels.h"
#include "compiler/program.h"

namespace axle::compiler {
namespace {

using ops::OpKind;

class DcePass final : public Pass {
 public:
  const char* name() const override { return "dce"; }
  bool run(Program& p) override {
    std::vector<bool> live(p.nodes.size(), false);
    for (const Ref& r : p.outputs) live[size_t(r.node)] = true;
    // Ops with side effects (collectives) run even if no output is used.
    for (size_t i = 0; i < p.nodes.size(); ++i)
      if (!p.nodes[i].dead && p.nodes[i].kind == NodeKind::Op && ops::has_side_effects(p.nodes[i].op))
        live[i] = true;
    for (size_t i = p.nodes.size(); i-- > 0;) {
      if (!live[i]) continue;
      for (const Ref& r : p.nodes[i].operands)
        if (r.node >= 0) live[size_t(r.node)] = true;
    }
    bool changed = false;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      // Inputs stay: their positions are the executable's calling convention.
      if (!live[i] && n.kind != NodeKind::Data && !n.dead) {
        n.dead = true;
        changed = true;
      }
    }
    return changed;
  }
};

std::string node_key(const PNode& n) {
  std::ostringstream os;
  os << int(n.kind) << ':' << int(n.op) << '|';
  for (auto v : n.attrs.ints) os << v << ',';
  os << '|';
  for (auto v : n.attrs.floats) os << v << ',';
  os << '|';
  for (const Ref& r : n.operands) os << r.node << '.' << r.index << ',';
  os << '|';
  for (const ops::Meta& m : n.outs) os << int(m.dtype) << shape_str(m.shape);
  if (n.kind == NodeKind::Constant) os << '=' << n.constant.item();
  return os.str();
}

class CsePass final : public Pass {
 public:
  const char* name() const override { return "cse"; }
  bool run(Program& p) override {
    std::map<std::string, int> seen;
    bool changed = false;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind == NodeKind::Data) continue;
      if (n.kind == NodeKind::Constant && n.constant.numel() != 1) continue;
      // A barrier is never merged: two barriers on the same values stay two (that is what
      // they are for: FSDP's backward re-gather must not become the forward's gather).
      if (n.kind == NodeKind::Op && ops::is_barrier(n.op)) continue;
      // Two identical collectives (same op, operands, attributes) are one: every rank runs
      // the same graph, so every rank merges the same pair, and the survivor is the earlier
      // one, so the collectives left keep their order. Other effects would stay apart.
      if (n.kind == NodeKind::Op && ops::has_side_effects(n.op) && ops::shard_rule(n.op) != ops::ShardRule::Collective)
        continue;
      auto [it, fresh] = seen.try_emplace(node_key(n), int(i));
      if (fresh) continue;
      for (size_t j = 0; j < n.outs.size(); ++j) p.replace_uses({int(i), int(j)}, {it->second, int(j)});
      n.dead = true;
      changed = true;
    }
    return changed;
  }
};

class ConstantFoldingPass final : public Pass {
 public:
  const char* name() const override { return "constant-folding"; }
  bool run(Program& p) override {
    bool changed = false;
    NoGradGuard no_grad;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind != NodeKind::Op || n.operands.empty()) continue;
      if (ops::has_side_effects(n.op)) continue;  // must run with the other ranks, at run time
      if (ops::is_barrier(n.op)) continue;  // its outputs are opaque, even of constants
      if (ops::shard_rule(n.op) == ops::ShardRule::Device) continue;  // its value depends on the running device
      if (!ops::kernels_for(DeviceType::CPU).supports(n.op)) continue;  // folding runs the host's kernels
      bool all_const = true;
      int64_t numel = 0;
      for (const Ref& r : n.operands) all_const = all_const && (r.node < 0 || p.nodes[size_t(r.node)].kind == NodeKind::Constant);
      for (const ops::Meta& m : n.outs) numel += shape_numel(m.shape);
      if (!all_const || numel > 4096) continue;
      ops::Tensors in;
      for (const Ref& r : n.operands) in.push_back(r.node < 0 ? Tensor() : p.nodes[size_t(r.node)].constant);
      ops::Tensors out = ops::kernels_for(DeviceType::CPU).get(n.op)(in, n.attrs, n.outs);
      // Each output becomes a constant node appended... in place: the first output reuses this slot.
      if (out.size() != 1) continue;
      n.kind = NodeKind::Constant;
      n.constant = out[0].contiguous();
      n.operands.clear();
      n.attrs = {};
      changed = true;
    }
    return changed;
  }
};

bool is_scalar_const(const Program& p, const Ref& r, double v) {
  if (r.node < 0) return false;
  const PNode& n = p.nodes[size_t(r.node)];
  return n.kind == NodeKind::Constant && n.constant.numel() == 1 && n.constant.item() == v;
}

// A sum of slice_backward values that tile their common input shape along one dim (step 1,
// disjoint ranges covering it): the gradient of slicing one tensor into pieces, e.g. GPT's
// packed qkv split into q, k, v. Returns the pieces' gradients in range order, or nothing.
// As a sum it costs a zero-filled buffer per piece and an add per piece; as a cat one pass.
std::vector<Ref> tiled_slice_backwards(const Program& p, const PNode& root, int64_t& dim_out) {
  std::vector<std::pair<int64_t, Ref>> pieces;  // (start, grad)
  std::vector<int64_t> ends;
  const ops::Meta& out = root.outs[0];
  std::vector<int64_t> key;  // dim + input_shape, shared by every piece
  std::vector<Ref> stack{root.operands[0], root.operands[1]};
  while (!stack.empty() && pieces.size() <= 64) {
    const Ref r = stack.back();
    stack.pop_back();
    if (r.node < 0) return {};
    const PNode& n = p.nodes[size_t(r.node)];
    if (n.kind != NodeKind::Op || n.outs.size() != 1 || n.outs[0].shape != out.shape || n.outs[0].dtype != out.dtype)
      return {};
    if (n.op == OpKind::Add) {
      stack.push_back(n.operands[0]);
      stack.push_back(n.operands[1]);
      continue;
    }
    if (n.op != OpKind::SliceBackward) return {};
    const auto& a = n.attrs.ints;  // dim, start, end, step, input_shape...
    if (a.size() < 4 || a[3] != 1 || a[2] <= a[1]) return {};
    std::vector<int64_t> k{a[0]};
    k.insert(k.end(), a.begin() + 4, a.end());
    if (key.empty()) key = k;
    else if (k != key) return {};
    if (n.operands[0].node < 0) return {};
    const ops::Meta& g = p.nodes[size_t(n.operands[0].node)].outs[size_t(n.operands[0].index)];
    if (g.dtype != out.dtype) return {};
    pieces.push_back({a[1], n.operands[0]});
    ends.push_back(a[2]);
  }
  if (!stack.empty() || pieces.size() < 2 || key.empty()) return {};
  const int64_t dim = key[0];
  if (dim < 0 || dim >= int64_t(out.shape.size())) return {};
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return pieces[x].first < pieces[y].first; });
  int64_t at = 0;
  std::vector<Ref> grads;
  for (size_t i : order) {
    if (pieces[i].first != at) return {};  // a gap or an overlap
    at = ends[i];
    grads.push_back(pieces[i].second);
  }
  if (at != out.shape[size_t(dim)]) return {};
  dim_out = dim;
  return grads;
}

class AlgebraicSimplificationPass final : public Pass {
 public:
  const char* name() const override { return "algebraic-simplification"; }
  bool run(Program& p) override {
    bool changed = false;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind != NodeKind::Op) continue;
      Ref self{int(i), 0};
      auto same_meta = [&](const Ref& r) {
        const ops::Meta& m = p.nodes[size_t(r.node)].outs[size_t(r.index)];
        return m.shape == n.outs[0].shape && m.dtype == n.outs[0].dtype;
      };
      auto forward_to = [&](const Ref& r) {
        p.replace_uses(self, r);
        n.dead = true;
        changed = true;
      };
      const auto& o = n.operands;
      switch (n.op) {
        case OpKind::Mul:
          if (is_scalar_const(p, o[1], 1.0) && same_meta(o[0])) forward_to(o[0]);
          else if (is_scalar_const(p, o[0], 1.0) && same_meta(o[1])) forward_to(o[1]);
          break;
        case OpKind::Add:
          if (is_scalar_const(p, o[1], 0.0) && same_meta(o[0])) forward_to(o[0]);
          else if (is_scalar_const(p, o[0], 0.0) && same_meta(o[1])) forward_to(o[1]);
          else if (int64_t d = 0; !tiled_slice_backwards(p, n, d).empty()) {
            // sum of slice_backward pieces tiling the input -> cat of the pieces (the adds
            // and slice_backwards left without uses go at dce)
            std::vector<Ref> grads = tiled_slice_backwards(p, n, d);
            n.op = OpKind::Cat;
            n.operands = std::move(grads);
            n.attrs = {.ints = {d}};
            changed = true;
          }
          break;
        case OpKind::Sub:
          if (is_scalar_const(p, o[1], 0.0) && same_meta(o[0])) forward_to(o[0]);
          break;
        case OpKind::Div:
          if (is_scalar_const(p, o[1], 1.0) && same_meta(o[0])) forward_to(o[0]);
          break;
        case OpKind::Reshape:
        case OpKind::Expand: {
          if (same_meta(o[0])) { forward_to(o[0]); break; }
          const PNode& src = p.nodes[size_t(o[0].node)];
          if (n.op == OpKind::Reshape && src.kind == NodeKind::Op && src.op == OpKind::Reshape) {
            n.operands[0] = src.operands[0];  // reshape(reshape(x)) -> reshape(x)
            changed = true;
          }
          break;
        }
        case OpKind::Permute: {
          bool identity = true;
          for (size_t d = 0; d < n.attrs.ints.size(); ++d) identity = identity && n.attrs.ints[d] == int64_t(d);
          if (identity) { forward_to(o[0]); break; }
          const PNode& src = p.nodes[size_t(o[0].node)];
          if (src.kind == NodeKind::Op && src.op == OpKind::Permute) {
            // permute(permute(x, a), b)[i] = x dim a[b[i]]
            std::vector<int64_t> comp(n.attrs.ints.size());
            for (size_t d = 0; d < comp.size(); ++d) comp[d] = src.attrs.ints[size_t(n.attrs.ints[d])];
            n.attrs.ints = comp;
            n.operands[0] = src.operands[0];
            changed = true;
            bool id2 = true;
            for (size_t d = 0; d < comp.size(); ++d) id2 = id2 && comp[d] == int64_t(d);
            if (id2) forward_to(n.operands[0]);
          }
          break;
        }
        default: break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dce_pass() { return std::make_unique<DcePass>(); }
std::unique_ptr<Pass> make_cse_pass() { return std::make_unique<CsePass>(); }
std::unique_ptr<Pass> make_constant_folding_pass() { return std::make_unique<ConstantFoldingPass>(); }
std::unique_ptr<Pass> make_algebraic_simplification_pass() { return std::make_unique<AlgebraicSimplificationPass>(); }

}  // namespace axle::compiler
