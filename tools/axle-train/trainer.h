// The trainer every task shares: setup (threads, seed, strategy, optimizer), resume and
// checkpoints, the epoch loop (resuming inside an epoch), progress, memory peaks, the result
// line and the JSON report's common fields. A Task supplies its data, model, loss,
// evaluation and its own figures.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "config.h"
#include "progress.h"
#include "strategy.h"

namespace axle_train {

/// Checkpoint metadata: every step's loss up to the checkpoint (a JSON list).
inline constexpr const char* kLossesKey = "axle-train.losses";

/// This process in the run.
struct Process {
  int world = 1, rank = 0, threads = 1;
  bool master() const { return rank == 0; }
};

/// Where the run stands: what the steps so far produced.
struct RunState {
  int64_t steps = 0;            ///< optimizer steps, restored ones included
  std::vector<double> losses;   ///< every step's loss, the restored ones first
  size_t restored = 0;          ///< how many of `losses` the checkpoint held
  int64_t trained() const { return static_cast<int64_t>(losses.size() - restored); }  ///< by this process
};

class Task {
 public:
  virtual ~Task() = default;
  // Setup, in this order.
  virtual void load_data() = 0;                                ///< timed as the data's load
  virtual void plan(const Process&) {}                         ///< steps per epoch (may set the epochs)
  virtual size_t input_dims() const = 0;                       ///< rank of a batch's inputs
  virtual axle::nn::ModulePtr make_model() = 0;                ///< after manual_seed, on the host
  /// After model->to(device), before wrapping: tensor parallelism on the mesh's model axis.
  virtual void shard_model(axle::nn::Module&, const Strategy&) {}
  virtual axle::fsdp::AutoWrapPolicy wrap_policy() const = 0;  ///< FSDP's units
  /// The optimizer over strategy.net()'s parameters, and its description for the header.
  virtual std::unique_ptr<axle::optim::Optimizer> make_optimizer(const Strategy& s, std::string& desc) = 0;
  virtual axle::optim::LRScheduler* scheduler() { return nullptr; }
  virtual axle::data::DataLoader& make_loader(const Process& p) = 0;
  virtual void print_header(const Process& p, const Strategy& s, int64_t parameters, const std::string& opt_desc,
                            double load_s) = 0;
  // Training.
  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t total_steps() const = 0;
  virtual int64_t accum_steps() const { return 1; }
  virtual void set_progress_units(Progress&, const Process&) const {}
  virtual axle::Tensor loss(axle::nn::Module& net, const axle::Tensor& x, const axle::Tensor& y) = 0;
  virtual std::optional<double> clip() const { return std::nullopt; }
  virtual void before_step() {}
  virtual void after_step(const StepOut&) {}
  /// Evaluation inside an epoch after a step, if due; returns its seconds (not training time).
  virtual double evaluate_after_step(const RunState&) { return 0; }
  /// At an epoch's end: what its line shows after the mean loss (", test accuracy 0.8123").
  virtual std::string end_of_epoch() { return ""; }
  /// After the last epoch (final evaluation, sampling).
  virtual void finish(const RunState&) = 0;
  /// The result line's figure ("test accuracy 0.8123") and its rate's unit ("samples").
  virtual std::string result_figure() const = 0;
  virtual const char* rate_unit() const = 0;
  // Checkpoints.
  virtual std::string resume_position(int64_t skip) const = 0;  ///< "batch 3"
  /// Reads the task's history from a checkpoint's metadata; returns every step's loss.
  virtual std::vector<double> restore(const std::map<std::string, std::string>& metadata, const std::string& file) = 0;
  virtual void save_metadata(std::map<std::string, std::string>&) const {}
  // The report: the common fields plus the task's, in the task's order; `rate` units per second.
  virtual nlohmann::ordered_json report(nlohmann::ordered_json fields, double rate, const RunState& st) const = 0;
};

/// `fields`' entries named by `keys`, in that order (a key missing from `fields` is an error).
nlohmann::ordered_json ordered(const nlohmann::ordered_json& fields, const std::vector<std::string>& keys);

/// One process's training run of `task` (rank 0 prints and writes the results). Returns
/// the exit status.
int train(Config& cfg, Task& task);

}  // namespace axle_train
