// The compiler's own IR: a graph copied out of the lazy trace so passes can rewrite
// it freely. Nodes are in topological order; operands refer to earlier nodes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lazy/graph.h"

namespace axle::compiler {

struct Ref {
  int node = -1;  ///< -1: absent optional input
  int index = 0;
  friend bool operator==(const Ref&, const Ref&) = default;
};

struct PNode {
  lazy::NodeKind kind = lazy::NodeKind::Op;
  ops::OpKind op{};
  ops::Attrs attrs;
  std::vector<Ref> operands;
  std::vector<ops::Meta> outs;
  int input = -1;     ///< Data: position among the graph inputs
  Tensor constant;    ///< Constant: its value (a cpu tensor)
  bool dead = false;  ///< removed by a pass (compacted by Program::compact)
};

struct Program {
  std::string name;
  std::vector<PNode> nodes;
  int num_inputs = 0;
  std::vector<Ref> outputs;

  /// Copies a traced graph.
  static Program from_graph(const lazy::Graph& g);
  /// Replaces every use of `from` with `to` (outputs included).
  void replace_uses(Ref from, Ref to);
  /// Drops dead nodes and renumbers references.
  void compact();
  /// Moves inputs and constants (nodes without operands) to the front, keeping the
  /// order of everything else, so any node may use them.
  void hoist_leaves();
  /// Number of live Op nodes.
  int op_count() const;
  /// Text form, one node per line: `%2 = mul(%0, %1) : float32[4]`.
  std::string text() const;
  /// Throws axle::Error if the program is malformed (operand order, arity, output refs).
  void verify() const;
};

/// A rewrite of a Program. Passes run in order; the verifier runs between them in debug builds.
class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  /// Returns true if it changed the program.
  virtual bool run(Program& p) = 0;
};

class PassPipeline {
 public:
  PassPipeline& add(std::unique_ptr<Pass> p);
  void run(Program& p) const;
  /// The generic passes: fold constants, simplify, CSE, DCE. A backend appends its own
  /// (backend::Backend::pipeline(): the cpu's epilogue and elementwise fusion).
  static PassPipeline standard();

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

std::unique_ptr<Pass> make_dce_pass();
std::unique_ptr<Pass> make_cse_pass();
std::unique_ptr<Pass> make_constant_folding_pass();
std::unique_ptr<Pass> make_algebraic_simplification_pass();

}  // namespace axle::compiler
