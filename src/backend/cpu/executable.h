// A compiled graph for the cpu backend: a fixed schedule of kernel calls over
// value slots, with each slot freed after its last use.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "compiler/program.h"
#include "ops/kernels.h"

namespace axle::cpu {

/// The device a cpu buffer made for `device` is charged to: on an SPMD device thread k
/// (dist::this_device() == k) an xla device's buffers are virtual device xla:k's.
Device charged_device(Device device);

class Executable final : public backend::Executable {
 public:
  /// Runs on the program's inputs (dense cpu buffers, in Program input order);
  /// returns one dense buffer per program output, charged to charged_device(device()).
  /// Inputs nobody else holds may be overwritten (donated).
  std::vector<Tensor> run(std::vector<Tensor> inputs) const;
  size_t num_steps() const { return steps_.size(); }
  Device device() const override { return device_; }

 private:
  friend std::shared_ptr<const Executable> lower(const compiler::Program& p, Device device);
  struct Step {
    ops::OpKind op;
    ops::Attrs attrs;
    std::vector<int> in;     ///< slot per operand, -1 for an absent optional input
    std::vector<int> out;    ///< slot per output
    std::vector<ops::Meta> metas;
    std::vector<int> release;  ///< slots whose last use is this step
  };
  Device device_;
  int num_slots_ = 0;
  std::vector<int> input_slots_;
  std::vector<std::pair<int, Tensor>> constants_;
  std::vector<int> output_slots_;
  std::vector<Step> steps_;
  const ops::KernelTable* kernels_ = nullptr;  ///< the cpu backend's
};

/// Lowers an (optimised) program to an Executable for `device` (cpu or xla: both run
/// on the host). Throws axle::Error naming an op that has no cpu kernel.
std::shared_ptr<const Executable> lower(const compiler::Program& p, Device device);

}  // namespace axle::cpu
