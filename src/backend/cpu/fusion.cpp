// Elementwise fusion: maximal groups of elementwise ops (ops.def's EW trait) over one
// iteration shape become a single FusedElementwise node (a program, src/ops/fused.h), run as one pass
// over memory. Inputs of a group are values of that shape or single elements.
// A group whose ops read only graph inputs and constants (an optimizer's state times a
// constant) moves into the group of the op that reads it, so an update is one pass.
// A float32 sum of a group's value that nothing else reads joins the group (FusedSum):
// the value is summed tile by tile as it is computed and never written.
#include <algorithm>
#include <map>

#include "backend/cpu/backend.h"
#include "compiler/program.h"
#include "ops/fused.h"

namespace axle::cpu {
namespace {

using compiler::NodeKind;
using compiler::Pass;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;

using ops::OpKind;

struct Group {
  int first = 0;               // position the fused node takes
  std::vector<int> members;    // in topological order
  Shape shape;
  bool floating = false;       // every member reads only graph inputs, constants and members
};

class FusionPass final : public Pass {
 public:
  const char* name() const override { return "elementwise-fusion"; }

  bool run(Program& p) override {
    const size_t n = p.nodes.size();
    std::vector<int> group_of(n, -1);
    std::vector<Group> groups;
    // Where a value becomes available: inputs and constants from the start, a fused value
    // where its group runs, anything else where it stands.
    auto avail = [&](int node) {
      if (p.nodes[size_t(node)].kind != NodeKind::Op) return -1;
      return group_of[size_t(node)] >= 0 ? groups[size_t(group_of[size_t(node)])].first : node;
    };
    auto meta = [&](const Ref& r) -> const ops::Meta& { return p.nodes[size_t(r.node)].outs[size_t(r.index)]; };

    // Who reads each node (a floating group may move only where its readers can still see it).
    std::vector<std::vector<int>> readers(n);
    for (size_t i = 0; i < n; ++i)
      if (!p.nodes[i].dead)
        for (const Ref& r : p.nodes[i].operands)
          if (r.node >= 0) readers[size_t(r.node)].push_back(int(i));
    // Whether floating group h may run at position `at` instead of h.first, given that node
    // `cur` is being placed now: every reader already placed outside h runs after `at`.
    auto can_move = [&](int h, int at, int cur) {
      if (groups[size_t(h)].first >= at) return true;  // earlier: its operands are inputs and constants
      for (int m : groups[size_t(h)].members)
        for (int u : readers[size_t(m)]) {
          if (u >= cur || group_of[size_t(u)] == h) continue;
          const int pos = group_of[size_t(u)] >= 0 ? groups[size_t(group_of[size_t(u)])].first : u;
          if (pos <= at) return false;
        }
      return true;
    };
    for (size_t i = 0; i < n; ++i) {
      const PNode& nd = p.nodes[i];
      if (nd.dead || nd.kind != NodeKind::Op || !ops::is_elementwise(nd.op) || nd.outs.size() != 1) continue;
      const Shape& s = nd.outs[0].shape;
      if (shape_numel(s) == 0) continue;
      bool ok = true;
      for (const Ref& r : nd.operands) {
        const ops::Meta& m = meta(r);
        ok = ok && r.node >= 0 && (m.shape == s || shape_numel(m.shape) == 1);
      }
      if (!ok) continue;
      // Join the group of an operand's producer when every other operand is ready before that
      // group starts, or is made by a floating group of the same shape: that group moves into
      // this one (it reads only inputs and constants, so it may run earlier, and later too
      // when every reader placed so far runs after the new position). Groups of computed values first, so an op chain such as AdamW's
      // (exp_avg * beta1 + grad * (1 - beta1), ...: the state's ops read only inputs) becomes
      // one pass over the parameter, not a group per op that starts from the inputs.
      int join = -1;
      std::vector<int> merge;
      auto try_join = [&](int g) {
        std::vector<int> m;
        for (const Ref& o : nd.operands) {
          const int og = group_of[size_t(o.node)];
          if (og == g) continue;
          const Group* h = og >= 0 ? &groups[size_t(og)] : nullptr;
          if (h && h->floating && h->shape == s && can_move(og, groups[size_t(g)].first, int(i))) {
            if (std::find(m.begin(), m.end(), og) == m.end()) m.push_back(og);
            continue;
          }
          if (avail(o.node) >= groups[size_t(g)].first) return false;
        }
        merge = std::move(m);
        return true;
      };
      for (int pass = 0; pass < 2 && join < 0; ++pass)
        for (const Ref& r : nd.operands) {
          const int g = group_of[size_t(r.node)];
          if (g < 0 || groups[size_t(g)].shape != s || groups[size_t(g)].floating != (pass == 1)) continue;
          if (try_join(g)) { join = g; break; }
        }
      if (join < 0) {
        join = int(groups.size());
        groups.push_back({int(i), {}, s, true});
      }
      Group& jg = groups[size_t(join)];
      for (int h : merge) {  // a floating group's members go first: they read no member of jg
        std::vector<int> ms = std::move(groups[size_t(h)].members);
        groups[size_t(h)].members.clear();
        for (int m : ms) group_of[size_t(m)] = join;
        jg.members.insert(jg.members.begin(), ms.begin(), ms.end());
      }
      for (const Ref& o : nd.operands)
        if (group_of[size_t(o.node)] != join && p.nodes[size_t(o.node)].kind == NodeKind::Op) jg.floating = false;
      jg.members.push_back(int(i));
      group_of[i] = join;
    }

    const std::vector<std::vector<int>>& users = readers;  // to find group outputs
    std::vector<bool> is_program_output(n, false);
    for (const Ref& r : p.outputs) is_program_output[size_t(r.node)] = true;

    // The sum each group takes in, if any: the first float32 sum of a member that nothing
    // else outside the group reads. (A value written out anyway is summed by the sum kernel
    // instead: fusing would save only a re-read, and the plain sum keeps eager's exact
    // summation order, so a training step's gradients stay bit-identical to the cpu path.)
    std::vector<int> sum_of(groups.size(), -1);
    for (size_t i = 0; i < n; ++i) {
      const PNode& nd = p.nodes[i];
      if (nd.dead || nd.kind != NodeKind::Op || nd.op != OpKind::Sum || nd.operands.size() != 1) continue;
      const Ref& r = nd.operands[0];
      if (r.node < 0 || r.index != 0 || group_of[size_t(r.node)] < 0 || is_program_output[size_t(r.node)]) continue;
      const int g = group_of[size_t(r.node)];
      bool only_sum = true;
      for (int u : users[size_t(r.node)]) only_sum = only_sum && (u == int(i) || group_of[size_t(u)] == g);
      if (!only_sum) continue;
      const int64_t rank = int64_t(meta(r).shape.size());
      bool dims_ok = !nd.attrs.ints.empty() && rank <= 16;
      for (size_t k = 1; k < nd.attrs.ints.size(); ++k)
        dims_ok = dims_ok && rank > 0 && nd.attrs.ints[k] >= 0 && nd.attrs.ints[k] < rank;
      if (sum_of[size_t(g)] < 0 && dims_ok && meta(r).dtype == kFloat32 && nd.outs[0].dtype == kFloat32)
        sum_of[size_t(g)] = int(i);
    }

    bool changed = false;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const Group& g = groups[gi];
      const int red = sum_of[gi];
      if (g.members.size() + (red >= 0 ? 1 : 0) < 2) continue;
      std::map<int, int64_t> local;       // member node -> op index
      std::vector<Ref> externals;         // fused node operands
      std::vector<int> outputs;           // member nodes whose values leave the group
      ops::FProgram prog;
      prog.shape = g.shape;
      auto ext_index = [&](const Ref& r) {
        for (size_t k = 0; k < externals.size(); ++k)
          if (externals[k] == r) return int64_t(k);
        externals.push_back(r);
        return int64_t(externals.size() - 1);
      };
      for (int m : g.members) {
        const PNode& nd = p.nodes[size_t(m)];
        std::vector<DType> in_types;
        for (const Ref& r : nd.operands) in_types.push_back(meta(r).dtype);
        const DType compute = ops::elementwise_compute_dtype(nd.op, in_types);
        std::vector<int64_t> refs;
        for (size_t k = 0; k < nd.operands.size(); ++k) {
          const Ref& r = nd.operands[k];
          int64_t ref = group_of[size_t(r.node)] == int(gi) ? local.at(r.node) : -(ext_index(r) + 1);
          // Operands must arrive in the compute dtype (where's condition stays bool).
          const bool is_cond = nd.op == OpKind::Where && k == 0;
          if (nd.op != OpKind::Cast && !is_cond && in_types[k] != compute) {
            prog.ops.push_back({OpKind::Cast, compute, in_types[k], {ref}});
            ref = int64_t(prog.ops.size()) - 1;
          }
          refs.push_back(ref);
        }
        prog.ops.push_back({nd.op, nd.outs[0].dtype, compute, refs, nd.attrs});
        local[m] = int64_t(prog.ops.size()) - 1;
        bool leaves = is_program_output[size_t(m)];
        for (int u : users[size_t(m)]) leaves = leaves || (group_of[size_t(u)] != int(gi) && u != red);
        if (leaves) outputs.push_back(m);
      }
      for (const Ref& r : externals) prog.inputs.push_back({meta(r).dtype, meta(r).shape != g.shape});
      for (int m : outputs) prog.outputs.push_back(local.at(m));
      if (red >= 0) prog.outputs.push_back(local.at(p.nodes[size_t(red)].operands[0].node));

      PNode fused;
      fused.kind = NodeKind::Op;
      fused.op = red >= 0 ? OpKind::FusedSum : OpKind::FusedElementwise;
      if (red >= 0) {  // FusedSum: the summed member is the program's last output
        const ops::attr::Sum sum = ops::attr::Sum::of(p.nodes[size_t(red)].attrs);
        std::vector<bool> mask(g.shape.size(), sum.dims.empty());  // no dims: all of them
        for (int64_t d : sum.dims) mask[size_t(d)] = true;
        fused.attrs = ops::encode_sum(sum.keepdim, mask, prog);
      } else {
        prog.encode(fused.attrs);
      }
      fused.operands = externals;
      for (int m : outputs) fused.outs.push_back(p.nodes[size_t(m)].outs[0]);
      if (red >= 0) fused.outs.push_back(p.nodes[size_t(red)].outs[0]);
      // Point users at placeholders first, then at the fused node's outputs.
      const int placeholder = int(p.nodes.size()) + 1000000;
      for (size_t k = 0; k < outputs.size(); ++k) p.replace_uses({outputs[k], 0}, {placeholder, int(k)});
      if (red >= 0) p.replace_uses({red, 0}, {placeholder, int(outputs.size())});
      for (int m : g.members) p.nodes[size_t(m)].dead = true;
      if (red >= 0) p.nodes[size_t(red)].dead = true;
      p.nodes[size_t(g.first)] = std::move(fused);
      for (size_t k = 0; k < p.nodes[size_t(g.first)].outs.size(); ++k)
        p.replace_uses({placeholder, int(k)}, {g.first, int(k)});
      changed = true;
    }
    // A fused node may use an input that stood after its first member.
    if (changed) p.hoist_leaves();
    return changed;
  }
};

// Epilogues fused into the op that produces their operand, so a large activation or
// gradient is written once instead of written, read and written again:
// - conv2d or linear followed by relu: the relu becomes a oneDNN post-op of the convolution
//   or matmul;
// - max_pool2d_backward(g, x, ws) followed by relu_backward(., x): the pooling gradient goes
//   only to each window's argmax, where x equals the pooled output y, so the relu mask
//   (x > 0) is y > 0 and applies per window while the gradient is written (max_pool2d_backward
//   with its relu field set and y as a 4th input; see src/ops/pool.cpp). Same values exactly.
// - layer_norm(add(x, r)) (a transformer's residual stream: s = x + r feeds this norm and the
//   next block): the norm takes x and r, writes s as its 4th output and normalises the rows of
//   s while they are in cache (ops.def: LayerNorm's residual); the fused node stands where the
//   add stood. Same values exactly (s is the same float sum). Under autocast r is a bf16
//   product added to the float32 stream: the norm widens its rows as the add would.
// - add(layer_norm_backward(...).dx, g) where only the add reads dx (the gradient of the
//   residual stream: the norm's input gradient plus the one from the block above): g is
//   added as dx is written (LayerNormBackward's residual). Same values exactly.
// - cast(layer_norm(x).y, bf16) and layer_norm_backward(cast(g_bf16, float32), ...) (autocast
//   around a float32 norm): the norm writes y in bf16 and its backward widens g's rows itself
//   (fold_norm_casts). Same values exactly.
class EpilogueFusionPass final : public Pass {
 public:
  const char* name() const override { return "epilogue-fusion"; }
  bool run(Program& p) override {
    std::vector<int> uses(p.nodes.size(), 0);
    for (const PNode& n : p.nodes)
      if (!n.dead)
        for (const Ref& r : n.operands)
          if (r.node >= 0) ++uses[size_t(r.node)];
    for (const Ref& r : p.outputs) uses[size_t(r.node)] += 2;  // a graph output must stay unfused
    const std::map<std::pair<int, int>, int> ref_uses = readers_of(p);  // layer norm's residual epilogues
    bool changed = false, moved = false;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind != NodeKind::Op) continue;
      if (n.op == OpKind::LayerNorm) {
        const bool f = fuse_layer_norm_residual(p, int(i));
        changed = changed || f;
        moved = moved || f;
        continue;
      }
      if (n.op == OpKind::Add) {
        changed = fuse_layer_norm_backward_residual(p, int(i), ref_uses) || changed;
        continue;
      }
      if (n.op == OpKind::ReluBackward) {
        changed = fuse_pool_relu_backward(p, int(i), uses) || changed;
        continue;
      }
      if (n.op != OpKind::Relu) continue;
      const Ref src = n.operands[0];
      PNode& prod = p.nodes[size_t(src.node)];
      if (prod.kind != NodeKind::Op || uses[size_t(src.node)] != 1 || !f32_or_bf16(n.outs[0].dtype)) continue;
      // The relu becomes the producer's typed epilogue field (ops.def: FLAG(relu)). In bf16 the
      // same bits: relu commutes with rounding (it keeps the sign and maps to 0 exactly).
      if (prod.op == OpKind::Conv2d) {
        ops::attr::Conv2d c = ops::attr::Conv2d::of(prod.attrs);
        if (c.relu) continue;
        c.relu = true;
        prod.attrs = c.pack();
      } else if (prod.op == OpKind::Linear) {
        ops::attr::Linear l = ops::attr::Linear::of(prod.attrs);
        if (l.relu) continue;
        l.relu = true;
        prod.attrs = l.pack();
      } else {
        continue;
      }
      p.replace_uses({int(i), 0}, src);
      n.dead = true;
      changed = true;
    }
    if (moved) p.hoist_leaves();  // a fused norm may read an input that stood after the add
    changed = fold_norm_casts(p) || changed;
    return changed;
  }

 private:
  static bool f32_or_bf16(DType t) { return t == kFloat32 || t == kBFloat16; }
  /// Whether value r is float32 of `shape`.
  static bool is_f32(const Program& p, const Ref& r, const Shape& shape) {
    if (r.node < 0) return false;
    const ops::Meta& m = p.nodes[size_t(r.node)].outs[size_t(r.index)];
    return m.dtype == kFloat32 && m.shape == shape;
  }
  /// Readers of each (node, output) of the live nodes; a graph output counts 2.
  static std::map<std::pair<int, int>, int> readers_of(const Program& p) {
    std::map<std::pair<int, int>, int> readers;
    for (const PNode& n : p.nodes)
      if (!n.dead)
        for (const Ref& r : n.operands)
          if (r.node >= 0) ++readers[{r.node, r.index}];
    for (const Ref& r : p.outputs) readers[{r.node, r.index}] += 2;
    return readers;
  }
  /// Whether value r is bf16 of `shape`.
  static bool is_bf16(const Program& p, const Ref& r, const Shape& shape) {
    if (r.node < 0) return false;
    const ops::Meta& m = p.nodes[size_t(r.node)].outs[size_t(r.index)];
    return m.dtype == kBFloat16 && m.shape == shape;
  }
  /// Whether value r is ready before node `at` runs (inputs and constants always are).
  static bool ready_before(const Program& p, const Ref& r, int at) {
    return r.node >= 0 && (p.nodes[size_t(r.node)].kind != NodeKind::Op || r.node < at);
  }
  // layer_norm(add(x, r), w, b) -> layer_norm(x, w, b, r) with s = x + r its 4th output, at the add's place.
  static bool fuse_layer_norm_residual(Program& p, int i) {
    ops::attr::LayerNorm at = ops::attr::LayerNorm::of(p.nodes[size_t(i)].attrs);
    const Ref s = p.nodes[size_t(i)].operands[0];
    if (at.residual || s.index != 0 || !is_op(p, s, OpKind::Add)) return false;
    const int ai = s.node;
    const PNode& add = p.nodes[size_t(ai)];
    const Shape& shape = add.outs[0].shape;
    // The norm's x is a float32 operand; r float32 too, or bf16 (a product under autocast
    // added to the float32 stream: the add widens it, as the norm's row loads do).
    Ref x = add.operands[0], r = add.operands[1];
    if (!is_f32(p, x, shape)) std::swap(x, r);
    if (!is_f32(p, s, shape) || !is_f32(p, x, shape) || !(is_f32(p, r, shape) || is_bf16(p, r, shape))) return false;
    PNode fused = p.nodes[size_t(i)];
    for (size_t k = 1; k < fused.operands.size(); ++k)
      if (!ready_before(p, fused.operands[k], ai)) return false;
    fused.operands = {x, fused.operands[1], fused.operands[2], r};
    at.residual = true;
    fused.attrs = at.pack();
    fused.outs.push_back(add.outs[0]);
    // Users of the norm's outputs and of the sum move to the fused node (through placeholders).
    const int ph = int(p.nodes.size()) + 1000000;
    for (int k = 0; k < 3; ++k) p.replace_uses({i, k}, {ph, k});
    p.replace_uses({ai, 0}, {ph, 3});
    p.nodes[size_t(ai)] = std::move(fused);
    p.nodes[size_t(i)].dead = true;
    for (int k = 0; k < 4; ++k) p.replace_uses({ph, k}, {ai, k});
    return true;
  }
  // add(dx, g) (either order) with dx = layer_norm_backward(...)[0] read only here -> the
  // backward with g as its residual input; g must be ready before the backward runs.
  static bool fuse_layer_norm_backward_residual(Program& p, int i, const std::map<std::pair<int, int>, int>& ref_uses) {
    const PNode& add = p.nodes[size_t(i)];
    const Shape& shape = add.outs[0].shape;
    if (add.outs[0].dtype != kFloat32) return false;
    for (int k = 0; k < 2; ++k) {
      const Ref d = add.operands[size_t(k)], g = add.operands[size_t(1 - k)];
      if (d.index != 0 || !is_op(p, d, OpKind::LayerNormBackward)) continue;
      auto u = ref_uses.find({d.node, 0});
      if (u == ref_uses.end() || u->second != 1) continue;
      PNode& lb = p.nodes[size_t(d.node)];
      ops::attr::LayerNormBackward at = ops::attr::LayerNormBackward::of(lb.attrs);
      if (at.residual || !is_f32(p, d, shape) || !is_f32(p, g, shape) || !ready_before(p, g, d.node)) continue;
      at.residual = true;
      lb.attrs = at.pack();
      lb.operands.push_back(g);
      p.replace_uses({i, 0}, d);
      p.nodes[size_t(i)].dead = true;
      return true;
    }
    return false;
  }
  // Under autocast a float32 norm's y is read by a cast to bf16 (the next product's input), and
  // the gradient reaching its backward is a cast of a bf16 one to float32: both casts fold into
  // the norm, which writes y in bf16 (bf16_y: rounded as the cast rounded it) and reads the
  // bf16 gradient widening its rows (exactly, as the cast did). After the residual folds above,
  // with the readers counted afresh (those moved nodes' outputs).
  static bool fold_norm_casts(Program& p) {
    const std::map<std::pair<int, int>, int> readers = readers_of(p);
    auto only_reader = [&](const Ref& r) {
      auto u = readers.find({r.node, r.index});
      return u != readers.end() && u->second == 1;
    };
    bool changed = false;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind != NodeKind::Op) continue;
      if (n.op == OpKind::Cast && n.outs[0].dtype == kBFloat16) {  // cast(layer_norm(x).y, bf16)
        const Ref y = n.operands[0];
        if (y.index != 0 || !is_op(p, y, OpKind::LayerNorm) || !only_reader(y)) continue;
        PNode& ln = p.nodes[size_t(y.node)];
        ops::attr::LayerNorm at = ops::attr::LayerNorm::of(ln.attrs);
        if (at.bf16_y || !is_f32(p, y, n.outs[0].shape)) continue;
        at.bf16_y = true;
        ln.attrs = at.pack();
        ln.outs[0].dtype = kBFloat16;
        p.replace_uses({int(i), 0}, y);
        n.dead = true;
        changed = true;
      } else if (n.op == OpKind::LayerNormBackward) {  // layer_norm_backward(cast(g, float32), x, ...)
        const Ref g = n.operands[0];
        if (!is_op(p, g, OpKind::Cast) || !only_reader(g)) continue;
        PNode& c = p.nodes[size_t(g.node)];
        const Ref src = c.operands[0];
        if (!is_f32(p, g, n.outs[0].shape) || !is_bf16(p, src, n.outs[0].shape)) continue;
        n.operands[0] = src;
        c.dead = true;
        changed = true;
      }
    }
    return changed;
  }
  static bool is_op(const Program& p, const Ref& r, OpKind k) {
    if (r.node < 0) return false;
    const PNode& n = p.nodes[size_t(r.node)];
    return !n.dead && n.kind == NodeKind::Op && n.op == k;
  }
  // relu_backward(max_pool2d_backward(g, x, ws), x) with ws from max_pool2d(x).
  static bool fuse_pool_relu_backward(Program& p, int i, const std::vector<int>& uses) {
    PNode& rb = p.nodes[size_t(i)];
    const Ref g = rb.operands[0], y = rb.operands[1];
    if (g.index != 0 || !is_op(p, g, OpKind::MaxPool2dBackward) || uses[size_t(g.node)] != 1) return false;
    PNode& pb = p.nodes[size_t(g.node)];
    ops::attr::MaxPool2dBackward pool = ops::attr::MaxPool2dBackward::of(pb.attrs);
    if (pool.relu || pb.operands.size() != 3 || !(pb.operands[1] == y)) return false;
    const Ref ws = pb.operands[2];
    if (ws.index != 1 || !is_op(p, ws, OpKind::MaxPool2d)) return false;
    const PNode& pf = p.nodes[size_t(ws.node)];
    if (!(pf.operands[0] == y) || pf.attrs.ints != pb.attrs.ints) return false;
    if (!f32_or_bf16(rb.outs[0].dtype) || !(rb.outs[0].shape == pb.outs[0].shape)) return false;
    pool.relu = true;
    pb.attrs = pool.pack();
    pb.operands.push_back({ws.node, 0});
    p.replace_uses({i, 0}, g);
    rb.dead = true;
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_epilogue_fusion_pass() { return std::make_unique<EpilogueFusionPass>(); }
std::unique_ptr<Pass> make_fusion_pass() { return std::make_unique<FusionPass>(); }

}  // namespace axle::cpu
