// A cut of the lazy IR: the nodes the roots need, in topological order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "lazy/ir.h"

namespace axle::lazy {

struct Graph {
  std::vector<Node*> nodes;                   ///< topological order
  std::vector<int> inputs;                    ///< node indices of Data nodes, in order of first use
  std::vector<std::pair<int, int>> outputs;   ///< (node index, output index) per root
  uint64_t hash = 0;                          ///< the roots' node hashes + which node each use reads (the topology); never data
  /// Graphviz form.
  std::string dot(const std::string& name) const;
};

/// Computes `n.hash` from its contents and its operands' hashes (theirs must be set).
void seal_node(Node& n);

/// Builds the graph that computes `roots` (deduplicated by the caller).
Graph build_graph(const std::vector<Value>& roots);

/// Copies a graph into the compiler's IR; `graph` names it (with its hash appended) in
/// errors and saved files.
compiler::Program to_program(const Graph& g, const std::string& graph = "graph");

}  // namespace axle::lazy
