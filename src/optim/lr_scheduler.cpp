// StepLR and CosineAnnealingLR with PyTorch 1.13's recursive get_lr() formulas; LambdaLR and
// the warmup + cosine factor of GPT-style training.
#include "axle/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

namespace axle::optim {

LRScheduler::~LRScheduler() = default;

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (const auto& g : opt_.param_groups()) base_lrs_.push_back(g.lr);
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  std::vector<double> lrs = get_lr();
  auto& groups = opt_.param_groups();
  AXLE_CHECK(lrs.size() == groups.size(), "[LRScheduler] the optimizer has ", groups.size(),
             " param group(s), the scheduler was built for ", lrs.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].lr = lrs[i];
  last_lrs_ = std::move(lrs);
}

double LRScheduler::get_last_lr() const {
  AXLE_CHECK(!last_lrs_.empty(), "[LRScheduler] get_last_lr() before the first step");
  return last_lrs_.front();
}

LRScheduler::State LRScheduler::state_dict() const { return {last_epoch_, step_count_, base_lrs_, last_lrs_}; }

void LRScheduler::load_state_dict(const State& s) {
  AXLE_CHECK(s.base_lrs.size() == base_lrs_.size() && s.last_lrs.size() == base_lrs_.size(),
             "[LRScheduler.load_state_dict] expected ", base_lrs_.size(), " learning rate(s) per list, got ",
             s.base_lrs.size(), " base and ", s.last_lrs.size(), " last");
  last_epoch_ = s.last_epoch;
  step_count_ = s.step_count;
  base_lrs_ = s.base_lrs;
  last_lrs_ = s.last_lrs;
}

// ---- StepLR ----
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  AXLE_CHECK(step_size > 0, "[StepLR] expected step_size > 0, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  for (const auto& g : opt_.param_groups()) {
    bool decay = last_epoch_ != 0 && last_epoch_ % step_size_ == 0;
    out.push_back(decay ? g.lr * gamma_ : g.lr);
  }
  return out;
}

// ---- CosineAnnealingLR ----
CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), T_max_(T_max), eta_min_(eta_min) {
  AXLE_CHECK(T_max > 0, "[CosineAnnealingLR] expected T_max > 0, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const double pi = std::numbers::pi;
  const double T = double(T_max_);
  const auto& groups = opt_.param_groups();
  std::vector<double> out;
  // Python's floor modulo.
  auto pymod = [](int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; };
  for (size_t i = 0; i < groups.size(); ++i) {
    double lr = groups[i].lr, base = base_lrs_[i];
    double e = double(last_epoch_);
    if (last_epoch_ == 0) {
      out.push_back(lr);
    } else if (step_count_ == 1 && last_epoch_ > 0) {
      out.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(e * pi / T)) / 2);
    } else if (pymod(last_epoch_ - 1 - T_max_, 2 * T_max_) == 0) {
      out.push_back(lr + (base - eta_min_) * (1 - std::cos(pi / T)) / 2);
    } else {
      out.push_back((1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) + eta_min_);
    }
  }
  return out;
}

// ---- LambdaLR ----
LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(opt), lambda_(std::move(lr_lambda)) {
  AXLE_CHECK(lambda_ != nullptr, "[LambdaLR] expected a function, got none");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() const {
  const double f = lambda_(last_epoch_);
  std::vector<double> out;
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

std::function<double(int64_t)> warmup_cosine(double base_lr, int64_t warmup_steps, int64_t max_steps, double min_lr) {
  AXLE_CHECK(max_steps > 0, "[warmup_cosine] expected max_steps > 0, got ", max_steps);
  AXLE_CHECK(warmup_steps >= 0 && warmup_steps <= max_steps, "[warmup_cosine] expected 0 <= warmup_steps <= max_steps (",
             max_steps, "), got ", warmup_steps);
  AXLE_CHECK(base_lr > 0, "[warmup_cosine] expected base_lr > 0, got ", base_lr);
  AXLE_CHECK(min_lr >= 0 && min_lr <= base_lr, "[warmup_cosine] expected 0 <= min_lr <= base_lr (", base_lr, "), got ",
             min_lr);
  const double floor = min_lr / base_lr;
  return [=](int64_t step) {
    if (step < warmup_steps) return double(step + 1) / double(warmup_steps);
    if (step >= max_steps) return floor;
    const double progress = double(step - warmup_steps) / double(max_steps - warmup_steps);
    return floor + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (1.0 - floor);
  };
}

}  // namespace axle::optim
