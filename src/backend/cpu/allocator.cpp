// The cpu backend's caching host allocator (allocator.h). Each live block is counted
// against one device; idle cached blocks are not.
#include "backend/cpu/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "axle/error.h"

namespace axle::cpu {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t(4) << 30;  // 4 GiB of idle blocks at most

struct DeviceCounters {
  Device device;
  MemoryCounters c;
};

thread_local Device t_host_charge = kCPU;  // where this thread's cpu blocks are counted

class CachingHostAllocator final : public Allocator {
 public:
  size_t round_size(size_t n) const override {
    if (n <= 4096) return (n + kAlign - 1) & ~(kAlign - 1);
    return (n + 4095) & ~size_t(4095);
  }

  void* allocate(size_t n, Device& d) override {
    if (d.is_cpu()) d = t_host_charge;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= n;
        charge(d, int64_t(n));
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, n);
    AXLE_CHECK(p != nullptr, "[alloc] out of memory: could not allocate ", n, " bytes");
    std::lock_guard<std::mutex> g(mu_);
    charge(d, int64_t(n));
    return p;
  }

  void deallocate(void* p, size_t n, Device d) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      charge(d, -int64_t(n));
      if (cached_ + n <= kMaxCached) {
        free_[n].push_back(p);
        cached_ += n;
        return;
      }
    }
    std::free(p);
  }

  MemoryCounters counters(Device d) {
    std::lock_guard<std::mutex> g(mu_);
    return counters_of(d);
  }

 private:
  MemoryCounters& counters_of(Device d) {  // needs mu_
    for (DeviceCounters& dc : counters_)
      if (dc.device == d) return dc.c;
    counters_.push_back({d, {}});
    return counters_.back().c;
  }
  void charge(Device d, int64_t n) {  // needs mu_
    MemoryCounters& c = counters_of(d);
    c.bytes_used += n;
    c.peak_bytes_used = std::max(c.peak_bytes_used, c.bytes_used);
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  std::vector<DeviceCounters> counters_;  ///< one per device seen (a handful): a linear search
};

CachingHostAllocator& caching() {
  static auto* a = new CachingHostAllocator();  // leaked on purpose: storages may die during static destruction
  return *a;
}

}  // namespace

Allocator& host_allocator() { return caching(); }

MemoryCounters memory_counters(Device device) { return caching().counters(device); }

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

ChargeHostMemoryTo::ChargeHostMemoryTo(Device device) : saved_(t_host_charge) { t_host_charge = device; }
ChargeHostMemoryTo::~ChargeHostMemoryTo() { t_host_charge = saved_; }

}  // namespace axle::cpu
