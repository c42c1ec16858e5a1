// Training progress on stderr: a live bar redrawn in place on a terminal, a plain
// line every few seconds otherwise (logs, CI).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace axle_train {

class Progress {
 public:
  /// `label` prefixes every update ("epoch 1/3"); `total` steps in this phase.
  Progress(std::string label, int64_t total, bool enabled = true);  ///< disabled: draws nothing
  ~Progress();
  /// Reports step `done` (1-based) with the latest loss.
  void update(int64_t done, double loss);
  /// Also show a throughput: `per_step` items per step, shown as "<rate> <unit>" (e.g. tok/s).
  void set_units(double per_step, std::string unit);
  /// Ends the phase (clears the live bar).
  void finish();

 private:
  void draw(int64_t done, bool final);
  std::string label_;
  int64_t total_;
  bool tty_;
  bool finished_ = false;
  int64_t done_ = 0;
  double loss_avg_ = 0;  // exponential moving average of the loss
  bool have_loss_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool enabled_ = true;
  double per_step_ = 0;
  std::string unit_;
};

}  // namespace axle_train
