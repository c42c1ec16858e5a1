// Counters and timers, with torch_xla's names: counters MarkStep, CachedCompile,
// UncachedCompile, CreateXlaTensor, DestroyXlaTensor; timers CompileTime,
// ExecuteTime, TransferToDeviceTime, TransferFromDeviceTime.
//
//   std::cout << axle::metrics::report();
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace axle::metrics {

/// Adds `delta` to a counter.
void counter_add(const std::string& name, int64_t delta = 1);
int64_t counter_value(const std::string& name);
/// Adds an elapsed time (ms) to a timed metric.
void timer_add(const std::string& name, double ms);
/// Total milliseconds and sample count of a timed metric.
double timer_total_ms(const std::string& name);
int64_t timer_count(const std::string& name);

std::map<std::string, int64_t> counters();
std::map<std::string, double> timers_ms();
/// Every counter and timer, one per line.
std::string report();
/// The compile/step counters on one line.
std::string short_report();
void reset();

/// Times its scope into a timed metric.
class ScopedTimer {
 public:
  explicit ScopedTimer(const char* name);
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  const char* name_;
  int64_t start_ns_;
};

}  // namespace axle::metrics
