#include "axle/metrics.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>

namespace axle::metrics {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Counter>> counters;
  std::map<std::string, std::unique_ptr<Timer>> timers;
};
Registry& reg() {
  static Registry* r = new Registry();  // never destroyed: handles outlive static destruction
  return *r;
}
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
template <class T>
T& find_or_add(std::map<std::string, std::unique_ptr<T>>& m, const std::string& name) {
  std::lock_guard<std::mutex> g(reg().mu);
  auto& p = m[name];
  if (!p) p = std::make_unique<T>();
  return *p;
}
}  // namespace

Counter& counter(const std::string& name) { return find_or_add(reg().counters, name); }
Timer& timer(const std::string& name) { return find_or_add(reg().timers, name); }

void counter_add(const std::string& name, int64_t delta) { counter(name).add(delta); }
int64_t counter_value(const std::string& name) { return counter(name).value.load(); }
void timer_add(const std::string& name, double ms) { timer(name).add_ns(int64_t(ms * 1e6)); }
double timer_total_ms(const std::string& name) { return double(timer(name).total_ns.load()) / 1e6; }
int64_t timer_count(const std::string& name) { return timer(name).count.load(); }

std::map<std::string, int64_t> counters() {
  std::lock_guard<std::mutex> g(reg().mu);
  std::map<std::string, int64_t> r;
  for (auto& [k, v] : reg().counters)
    if (int64_t x = v->value.load()) r[k] = x;
  return r;
}
std::map<std::string, double> timers_ms() {
  std::lock_guard<std::mutex> g(reg().mu);
  std::map<std::string, double> r;
  for (auto& [k, v] : reg().timers)
    if (v->count.load()) r[k] = double(v->total_ns.load()) / 1e6;
  return r;
}
std::string report() {
  std::ostringstream os;
  for (auto& [k, v] : counters()) os << "Counter: " << k << "\n  Value: " << v << "\n";
  for (auto& [k, v] : timers_ms())
    os << "Metric: " << k << "\n  TotalSamples: " << timer_count(k) << "\n  Accumulator: " << v << " ms\n";
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
  for (auto& [k, v] : reg().counters) v->value.store(0);
  for (auto& [k, v] : reg().timers) {
    v->total_ns.store(0);
    v->count.store(0);
  }
}

ScopedTimer::ScopedTimer(Timer& t) : t_(t), start_ns_(now_ns()) {}
ScopedTimer::~ScopedTimer() { t_.add_ns(now_ns() - start_ns_); }

}  // namespace axle::metrics
