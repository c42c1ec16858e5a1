#include "axle/metrics.h"

#include <chrono>
#include <mutex>
#include <sstream>

namespace axle::metrics {
namespace {
struct Timer {
  double total_ms = 0;
  int64_t count = 0;
};
struct Registry {
  std::mutex mu;
  std::map<std::string, int64_t> counters;
  std::map<std::string, Timer> timers;
};
Registry& reg() {
  static Registry* r = new Registry();
  return *r;
}
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void counter_add(const std::string& name, int64_t delta) {
  std::lock_guard<std::mutex> g(reg().mu);
  reg().counters[name] += delta;
}
int64_t counter_value(const std::string& name) {
  std::lock_guard<std::mutex> g(reg().mu);
  auto it = reg().counters.find(name);
  return it == reg().counters.end() ? 0 : it->second;
}
void timer_add(const std::string& name, double ms) {
  std::lock_guard<std::mutex> g(reg().mu);
  Timer& t = reg().timers[name];
  t.total_ms += ms;
  ++t.count;
}
double timer_total_ms(const std::string& name) {
  std::lock_guard<std::mutex> g(reg().mu);
  auto it = reg().timers.find(name);
  return it == reg().timers.end() ? 0 : it->second.total_ms;
}
int64_t timer_count(const std::string& name) {
  std::lock_guard<std::mutex> g(reg().mu);
  auto it = reg().timers.find(name);
  return it == reg().timers.end() ? 0 : it->second.count;
}
std::map<std::string, int64_t> counters() {
  std::lock_guard<std::mutex> g(reg().mu);
  return reg().counters;
}
std::map<std::string, double> timers_ms() {
  std::lock_guard<std::mutex> g(reg().mu);
  std::map<std::string, double> r;
  for (auto& [k, v] : reg().timers) r[k] = v.total_ms;
  return r;
}
std::string report() {
  std::lock_guard<std::mutex> g(reg().mu);
  std::ostringstream os;
  for (auto& [k, v] : reg().counters) os << "Counter: " << k << "\n  Value: " << v << "\n";
  for (auto& [k, v] : reg().timers)
    os << "Metric: " << k << "\n  TotalSamples: " << v.count << "\n  Accumulator: " << v.total_ms << " ms\n";
  return os.str();
}
std::string short_report() {
  std::ostringstream os;
  os << "MarkStep=" << counter_value("MarkStep") << " UncachedCompile=" << counter_value("UncachedCompile")
     << " CachedCompile=" << counter_value("CachedCompile") << " CompileTime=" << timer_total_ms("CompileTime")
     << "ms ExecuteTime=" << timer_total_ms("ExecuteTime") << "ms";
  return os.str();
}
void reset() {
  std::lock_guard<std::mutex> g(reg().mu);
  reg().counters.clear();
  reg().timers.clear();
}

ScopedTimer::ScopedTimer(const char* name) : name_(name), start_ns_(now_ns()) {}
ScopedTimer::~ScopedTimer() { timer_add(name_, double(now_ns() - start_ns_) / 1e6); }

}  // namespace axle::metrics
