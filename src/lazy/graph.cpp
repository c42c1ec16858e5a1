#include "lazy/graph.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "axle/ops.h"

namespace axle::lazy {
namespace {
inline void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
}
void mix_meta(uint64_t& h, const ops::Meta& m) {
  mix(h, uint64_t(m.dtype));
  mix(h, m.shape.size());
  for (int64_t d : m.shape) mix(h, uint64_t(d));
}
}  // namespace

void seal_node(Node& n) {
  uint64_t h = 0xCBF29CE484222325ull;
  mix(h, uint64_t(n.kind));
  mix(h, uint64_t(n.op));
  mix(h, n.attrs.ints.size());
  for (int64_t v : n.attrs.ints) mix(h, uint64_t(v));
  mix(h, n.attrs.floats.size());
  for (double v : n.attrs.floats) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    mix(h, bits);
  }
  if (n.kind == NodeKind::Constant) {
    uint64_t bits;
    std::memcpy(&bits, &n.scalar, sizeof bits);
    mix(h, bits);
  }
  mix(h, n.operands.size());
  for (const Value& v : n.operands) {
    mix(h, v.node ? v.node->hash : 0);
    mix(h, uint64_t(v.index));
  }
  for (const ops::Meta& m : n.outs) mix_meta(h, m);
  n.hash = h;
}

Graph build_graph(const std::vector<Value>& roots) {
  static std::atomic<uint64_t> passes{0};
  const uint64_t pass = ++passes;
  auto seen = [pass](const Node* n) { return n->visit == pass; };
  Graph g;
  // Iterative post-order DFS over operands.
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Value& r : roots) {
    if (seen(r.node.get())) continue;
    stack.push_back({r.node.get(), 0});
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->operands.size()) {
        Node* c = n->operands[next++].node.get();
        if (c && !seen(c)) stack.push_back({c, 0});
        continue;
      }
      if (!seen(n)) {
        n->visit = pass;
        n->index = int(g.nodes.size());
        if (n->kind == NodeKind::Data) g.inputs.push_back(int(g.nodes.size()));
        g.nodes.push_back(n);
      }
      stack.pop_back();
    }
  }
  for (const Value& r : roots) g.outputs.push_back({r.node->index, r.index});

  // The roots' hashes cover every node's contents; what they cannot tell apart is which
  // node each use reads where two nodes hash alike: add(x, x) vs add(x, y) for data nodes
  // (LTC's "parameter sequence"), and as much for any two nodes of one content, such as
  // cast(x) and cast(y) (x * cast(y) vs x * cast(x) would share a compiled program). So the
  // topology is mixed in: every use by the position of the node it reads in this post-order.
  uint64_t h = 0xCBF29CE484222325ull;
  for (const Node* n : g.nodes)
    for (const Value& v : n->operands) {
      mix(h, v.node ? uint64_t(v.node->index) : ~uint64_t(0));
      mix(h, uint64_t(v.index));
    }
  mix(h, g.outputs.size());
  for (size_t r = 0; r < roots.size(); ++r) {
    mix(h, roots[r].node->hash);
    mix(h, uint64_t(roots[r].index));
    if (roots[r].node->kind == NodeKind::Data) mix(h, uint64_t(roots[r].node->index));
  }
  g.hash = h;
  return g;
}

std::string Graph::dot(const std::string& name) const {
  std::ostringstream os;
  std::unordered_map<const Node*, int> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = int(i);
  os << "digraph \"" << name << "\" {\n  node [shape=box, fontname=monospace];\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* n = nodes[i];
    std::string label = n->kind == NodeKind::Data ? "data" : n->kind == NodeKind::Constant ? "constant" : ops::op_name(n->op);
    label += "\\n" + std::string(dtype_name(n->outs[0].dtype)) + shape_str(n->outs[0].shape);
    os << "  n" << i << " [label=\"%" << i << " " << label << "\"" << (n->kind == NodeKind::Data ? ", style=filled" : "") << "];\n";
    for (const Value& v : n->operands)
      if (v.node) os << "  n" << index.at(v.node.get()) << " -> n" << i << ";\n";
  }
  for (size_t j = 0; j < outputs.size(); ++j)
    os << "  out" << j << " [shape=ellipse, label=\"output " << j << "\"];\n  n" << outputs[j].first << " -> out" << j << ";\n";
  os << "}\n";
  return os.str();
}

compiler::Program to_program(const Graph& g, const std::string& graph) {
  compiler::Program p;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(g.hash));
  p.name = graph + "-" + hash;
  std::unordered_map<const Node*, int> index;
  p.nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node* n = g.nodes[i];
    index[n] = int(i);
    compiler::PNode q;
    q.kind = n->kind;
    q.op = n->op;
    q.attrs = n->attrs;
    q.outs = n->outs;
    for (const Value& v : n->operands) q.operands.push_back(v.node ? compiler::Ref{index.at(v.node.get()), v.index} : compiler::Ref{});
    if (n->kind == NodeKind::Constant) q.constant = full(n->outs[0].shape, n->scalar, {.dtype = n->outs[0].dtype});
    p.nodes.push_back(std::move(q));
  }
  for (int i : g.inputs) p.nodes[size_t(i)].input = p.num_inputs++;
  for (auto [n, j] : g.outputs) p.outputs.push_back({n, j});
  return p;
}

}  // namespace axle::lazy
