// The compiler's own IR: a graph copied out of the lazy trace (lazy::to_program) so
// passes can rewrite it freely. Nodes are in topological order; operands refer to earlier nodes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "axle/tensor.h"
#include "ops/op.h"

namespace axle::compiler {

/// What a node is; the lazy IR uses the same kinds (lazy::NodeKind).
enum class NodeKind : uint8_t {
  Op,        ///< an op from ops.def
  Data,      ///< a graph input: device data (hashed by shape and dtype, never by value)
  Constant,  ///< a scalar 0, 1 or -1 baked into the graph (other scalars are Data)
};

struct Ref {
  int node = -1;  ///< -1: absent optional input
  int index = 0;
  friend bool operator==(const Ref&, const Ref&) = default;
};

struct PNode {
  NodeKind kind = NodeKind::Op;
  ops::OpKind op{};
  ops::Attrs attrs;
  std::vector<Ref> operands;
  std::vector<ops::Meta> outs;
  int input = -1;     ///< Data: position among the graph inputs
  Tensor constant;    ///< Constant: its value (a cpu tensor)
  bool dead = false;  ///< removed by a pass (compacted by Program::compact)
};

struct Program {
  std::string name;  ///< names the program in errors and saved files: "<graph>-<hash>"
  std::vector<PNode> nodes;
  int num_inputs = 0;
  std::vector<Ref> outputs;

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
  /// Node i's line of text() (without the newline).
  std::string node_text(size_t i) const;
  /// Throws axle::Error if the program is malformed, naming `stage` (what made it, e.g.
  /// "after pass 'cse'"), the node's text line and what was expected. Checks: operands refer
  /// to earlier live nodes and existing outputs; each op has the operand and output counts
  /// and the attributes its schema declares (ops.def), required operands present; inputs are numbered 0..num_inputs-1 once each; a
  /// constant's value matches its recorded dtype and shape; and it re-runs each op's shape
  /// rule (ops::op_def(op).infer) on data-less tensors of its operands' recorded shapes
  /// and dtypes, which must accept them and give exactly the node's recorded outputs.
  void verify(const std::string& stage = "") const;
};

/// A tensor with `m`'s dtype and shape and no data, as the tracer hands shape rules lazy
/// tensors whose values do not exist yet: running ops::op_def(k).infer on such tensors
/// reads only metadata (the verifier and the SPMD partitioner do).
Tensor meta_tensor(const ops::Meta& m);

/// Whether PassPipeline::run verifies the program before the first pass and after each one.
/// AXLE_VERIFY=1 turns it on, AXLE_VERIFY=0 off; unset: on in builds without NDEBUG, off in
/// release builds. Every test program sets AXLE_VERIFY=1 (tests/support/verify_on.cpp), so tests and
/// CI always verify. Read at each call.
bool verifying();

/// A rewrite of a Program. Passes run in order (PassPipeline::run).
class Pass {
 public:
  virtual ~Pass() = default;
  /// Names the pass in verifier errors, in AXLE_SAVE_GRAPHS file names and in its
  /// PassTime::<name> timer.
  virtual const char* name() const = 0;
  /// Returns true if it changed the program.
  virtual bool run(Program& p) = 0;
};

class PassPipeline {
 public:
  PassPipeline& add(std::unique_ptr<Pass> p);
  /// Runs the passes in order. Each pass's time (compaction included) goes to the timer
  /// `PassTime::<name>`. When verifying(), the program is verified before the first pass
  /// and after each one (an error names the pass). With AXLE_SAVE_GRAPHS=DIR the program's
  /// text is written before the passes (DIR/<p.name>.00.input.txt), after each pass
  /// (DIR/<p.name>.<nn>.<pass name>.txt, nn = 01, 02, ...) and at the end, as it will be
  /// lowered and run (DIR/<p.name>.final.txt); each file is written before it is verified.
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
