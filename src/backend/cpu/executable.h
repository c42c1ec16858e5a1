// A compiled graph for the cpu backend: a fixed schedule of kernel calls over
// value slots, with each slot freed after its last use.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "compiler/program.h"
#include "lazy/graph.h"

namespace axle::compiler {

class Executable {
 public:
  /// Runs on the graph's inputs (dense cpu buffers, in Graph::inputs order);
  /// returns one dense buffer per graph output.
  /// Inputs nobody else holds may be overwritten (donated).
  std::vector<Tensor> run(std::vector<Tensor> inputs) const;
  size_t num_steps() const { return steps_.size(); }

 private:
  friend std::shared_ptr<const Executable> lower(const Program& p);
  struct Step {
    ops::OpKind op;
    ops::Attrs attrs;
    std::vector<int> in;     ///< slot per operand, -1 for an absent optional input
    std::vector<int> out;    ///< slot per output
    std::vector<ops::Meta> metas;
    std::vector<int> release;  ///< slots whose last use is this step
  };
  int num_slots_ = 0;
  std::vector<int> input_slots_;
  std::vector<std::pair<int, Tensor>> constants_;
  std::vector<int> output_slots_;
  std::vector<Step> steps_;
};

/// Runs the standard pass pipeline on a traced graph and lowers it.
std::shared_ptr<const Executable> compile(const lazy::Graph& g);
/// Lowers an (optimised) program to an Executable.
std::shared_ptr<const Executable> lower(const Program& p);

}  // namespace axle::compiler
