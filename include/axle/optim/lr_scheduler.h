// Learning-rate schedulers, as torch.optim.lr_scheduler (PyTorch 1.13): construction
// performs the initial step (last_epoch 0); call step() once per epoch after opt.step().
//
//   axle::optim::StepLR sched(opt, /*step_size=*/10, /*gamma=*/0.1);
//   for (...) { train_epoch(); sched.step(); }
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "axle/optim/optimizer.h"

namespace axle::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler();
  /// Advances one epoch and writes the new learning rate into every group.
  virtual void step();
  /// The learning rate of the first group after the latest step.
  double get_last_lr() const;
  /// One learning rate per group.
  const std::vector<double>& get_last_lrs() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  /// Serializable state (checkpoints): restores the schedule position of a scheduler of the
  /// same kind and configuration; the optimizer's learning rates come from its own state.
  struct State {
    int64_t last_epoch = -1;
    int64_t step_count = 0;
    std::vector<double> base_lrs, last_lrs;
  };
  State state_dict() const;
  /// Throws axle::Error if the group count differs.
  void load_state_dict(const State& s);

 protected:
  explicit LRScheduler(Optimizer& opt);
  /// Call at the end of the derived constructor: PyTorch's initial step.
  void initial_step();
  /// The new learning rates for last_epoch_ (the groups still hold the previous ones).
  virtual std::vector<double> get_lr() const = 0;

  Optimizer& opt_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

/// lr = base_lr * gamma^(epoch / step_size), computed recursively as PyTorch.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  int64_t step_size_;
  double gamma_;
};

/// Cosine annealing from base_lr to eta_min over T_max epochs (PyTorch's recursive form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0);

 protected:
  std::vector<double> get_lr() const override;
  int64_t T_max_;
  double eta_min_;
};

/// lr = base_lr * lambda(epoch), as torch.optim.lr_scheduler.LambdaLR with one function for
/// every group. Call step() once per optimizer step for per-step schedules.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lr_lambda);

 protected:
  std::vector<double> get_lr() const override;
  std::function<double(int64_t)> lambda_;
};

/// The factor of GPT-style training's schedule, for LambdaLR: linear warmup from 1/warmup_steps
/// to 1 over steps 0..warmup_steps-1 (factor (step + 1) / warmup_steps), then cosine decay to
/// min_lr / base_lr at step max_steps, and that floor after it. Throws axle::Error unless
/// 0 <= warmup_steps <= max_steps, max_steps > 0 and 0 <= min_lr <= base_lr.
std::function<double(int64_t)> warmup_cosine(double base_lr, int64_t warmup_steps, int64_t max_steps, double min_lr);

}  // namespace axle::optim
