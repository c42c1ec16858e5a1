// Counters and timers, with torch_xla's names: counters MarkStep, CachedCompile,
// UncachedCompile, CreateXlaTensor, DestroyXlaTensor, PersistentCacheHit/Miss;
// timers CompileTime, ExecuteTime, TransferToDeviceTime, TransferFromDeviceTime,
// EagerOpCompileTime, EagerOpExecuteTime (and op::<name> with AXLE_PROFILE=1);
// PassTime::<pass> for each compiler pass.
//
//   std::cout << axle::metrics::report();
//   static auto& steps = axle::metrics::counter("MyCounter");  // hot paths keep a handle
//   steps.add();
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace axle::metrics {

struct Counter {
  std::atomic<int64_t> value{0};
  void add(int64_t delta = 1) { value.fetch_add(delta, std::memory_order_relaxed); }
};
struct Timer {
  std::atomic<int64_t> total_ns{0}, count{0};
  void add_ns(int64_t ns) {
    total_ns.fetch_add(ns, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
  }
};

/// The counter / timer of that name, created on first use; the reference stays valid.
Counter& counter(const std::string& name);
Timer& timer(const std::string& name);

void counter_add(const std::string& name, int64_t delta = 1);
int64_t counter_value(const std::string& name);
/// Adds an elapsed time (ms) to a timed metric.
void timer_add(const std::string& name, double ms);
/// Total milliseconds and sample count of a timed metric.
double timer_total_ms(const std::string& name);
int64_t timer_count(const std::string& name);

/// Counters and timers that are non-zero.
std::map<std::string, int64_t> counters();
std::map<std::string, double> timers_ms();
/// Every non-zero counter and timer.
std::string report();
/// The compile/step counters on one line.
std::string short_report();
/// Zeroes every counter and timer.
void reset();

/// Times its scope into a timer.
class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& t);
  explicit ScopedTimer(const char* name) : ScopedTimer(timer(name)) {}
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& t_;
  int64_t start_ns_;
};

}  // namespace axle::metrics
