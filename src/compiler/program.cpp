#include "compiler/program.h"

#include <sstream>
#include <unordered_map>

#include "axle/tensor.h"

namespace axle::compiler {

Program Program::from_graph(const lazy::Graph& g) {
  Program p;
  std::unordered_map<const lazy::Node*, int> index;
  p.nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const lazy::Node* n = g.nodes[i];
    index[n] = int(i);
    PNode q;
    q.kind = n->kind;
    q.op = n->op;
    q.attrs = n->attrs;
    q.outs = n->outs;
    for (const lazy::Value& v : n->operands) q.operands.push_back(v.node ? Ref{index.at(v.node.get()), v.index} : Ref{});
    if (n->kind == lazy::NodeKind::Constant) q.constant = full(n->outs[0].shape, n->scalar, {.dtype = n->outs[0].dtype});
    p.nodes.push_back(std::move(q));
  }
  for (int i : g.inputs) p.nodes[size_t(i)].input = p.num_inputs++;
  for (auto [n, j] : g.outputs) p.outputs.push_back({n, j});
  return p;
}

void Program::replace_uses(Ref from, Ref to) {
  for (PNode& n : nodes)
    for (Ref& r : n.operands)
      if (r == from) r = to;
  for (Ref& r : outputs)
    if (r == from) r = to;
}

void Program::compact() {
  std::vector<int> remap(nodes.size(), -1);
  std::vector<PNode> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    remap[i] = int(kept.size());
    kept.push_back(std::move(nodes[i]));
  }
  auto fix = [&](Ref& r) {
    if (r.node < 0) return;
    AXLE_CHECK(remap[size_t(r.node)] >= 0, "[compiler] internal: a pass removed node %", r.node, " still in use");
    r.node = remap[size_t(r.node)];
  };
  for (PNode& n : kept)
    for (Ref& r : n.operands) fix(r);
  for (Ref& r : outputs) fix(r);
  nodes = std::move(kept);
}

void Program::hoist_leaves() {
  std::vector<int> order;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind != lazy::NodeKind::Op) order.push_back(int(i));
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == lazy::NodeKind::Op) order.push_back(int(i));
  std::vector<int> remap(nodes.size());
  std::vector<PNode> sorted;
  sorted.reserve(nodes.size());
  for (int i : order) {
    remap[size_t(i)] = int(sorted.size());
    sorted.push_back(std::move(nodes[size_t(i)]));
  }
  for (PNode& n : sorted)
    for (Ref& r : n.operands)
      if (r.node >= 0) r.node = remap[size_t(r.node)];
  for (Ref& r : outputs) r.node = remap[size_t(r.node)];
  nodes = std::move(sorted);
}

int Program::op_count() const {
  int c = 0;
  for (const PNode& n : nodes) c += !n.dead && n.kind == lazy::NodeKind::Op;
  return c;
}

std::string Program::text() const {
  std::ostringstream os;
  auto meta_str = [](const ops::Meta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); };
  auto ref_str = [&](const Ref& r) {
    if (r.node < 0) return std::string("_");
    std::string s = "%" + std::to_string(r.node);
    if (nodes[size_t(r.node)].outs.size() > 1) s += "." + std::to_string(r.index);
    return s;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const PNode& n = nodes[i];
    if (n.dead) continue;
    os << "%" << i << " = ";
    if (n.kind == lazy::NodeKind::Data) os << "input " << n.input;
    else if (n.kind == lazy::NodeKind::Constant) os << "constant " << (n.constant.numel() == 1 ? n.constant.item() : 0.0);
    else {
      os << ops::op_name(n.op) << "(";
      for (size_t j = 0; j < n.operands.size(); ++j) os << (j ? ", " : "") << ref_str(n.operands[j]);
      os << ")";
      if (!n.attrs.ints.empty() || !n.attrs.floats.empty()) {
        os << " {";
        for (size_t j = 0; j < n.attrs.ints.size(); ++j) os << (j ? "," : "") << n.attrs.ints[j];
        if (!n.attrs.floats.empty()) os << ";";
        for (size_t j = 0; j < n.attrs.floats.size(); ++j) os << (j ? "," : "") << n.attrs.floats[j];
        os << "}";
      }
    }
    os << " : ";
    for (size_t j = 0; j < n.outs.size(); ++j) os << (j ? ", " : "") << meta_str(n.outs[j]);
    os << "\n";
  }
  os << "return ";
  for (size_t j = 0; j < outputs.size(); ++j) os << (j ? ", " : "") << ref_str(outputs[j]);
  os << "\n";
  return os.str();
}

void Program::verify() const {
  auto check_ref = [&](const Ref& r, size_t user, const char* what) {
    if (r.node < 0) return;
    AXLE_CHECK(size_t(r.node) < user, "[verify] ", what, " of %", user, " refers to %", r.node,
               " which does not come before it");
    const PNode& d = nodes[size_t(r.node)];
    AXLE_CHECK(!d.dead, "[verify] ", what, " of %", user, " refers to dead node %", r.node);
    AXLE_CHECK(r.index >= 0 && size_t(r.index) < d.outs.size(), "[verify] ", what, " of %", user,
               " uses output ", r.index, " of %", r.node, " which has ", d.outs.size());
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const PNode& n = nodes[i];
    if (n.dead) continue;
    AXLE_CHECK(!n.outs.empty(), "[verify] %", i, " has no outputs");
    if (n.kind == lazy::NodeKind::Data) AXLE_CHECK(n.input >= 0 && n.input < num_inputs, "[verify] bad input index");
    if (n.kind == lazy::NodeKind::Constant) AXLE_CHECK(n.constant.defined(), "[verify] constant %", i, " has no value");
    for (const Ref& r : n.operands) check_ref(r, i, "an operand");
  }
  for (const Ref& r : outputs) check_ref(r, nodes.size(), "an output");
}

PassPipeline& PassPipeline::add(std::unique_ptr<Pass> p) {
  passes_.push_back(std::move(p));
  return *this;
}

void PassPipeline::run(Program& p) const {
#ifndef NDEBUG
  p.verify();
#endif
  for (const auto& pass : passes_) {
    if (pass->run(p)) p.compact();
#ifndef NDEBUG
    p.verify();
#endif
  }
}

PassPipeline PassPipeline::standard() {
  PassPipeline pp;
  pp.add(make_constant_folding_pass())
      .add(make_algebraic_simplification_pass())
      .add(make_cse_pass())
      .add(make_dce_pass());
  return pp;
}

}  // namespace axle::compiler
