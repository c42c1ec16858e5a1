// CPU memory: a caching allocator keyed by rounded size. A training step allocates
// the same sizes every iteration; reusing them avoids page faults and mmap churn.
// Each live block is counted against one device (core/memory.h); idle cached blocks are not.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/memory.h"
#include "core/tensor_impl.h"

namespace axle {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t(4) << 30;  // 4 GiB of idle blocks at most

size_t round_size(size_t n) {
  if (n <= 4096) return (n + kAlign - 1) & ~(kAlign - 1);
  return (n + 4095) & ~size_t(4095);
}

struct DeviceCounters {
  Device device;
  MemoryCounters c;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  size_t cached = 0;
  std::vector<DeviceCounters> counters;  ///< one per device seen (a handful): a linear search

  MemoryCounters& counters_of(Device d) {  // needs mu
    for (DeviceCounters& dc : counters)
      if (dc.device == d) return dc.c;
    counters.push_back({d, {}});
    return counters.back().c;
  }
  void charge(Device d, int64_t n) {  // needs mu
    MemoryCounters& c = counters_of(d);
    c.bytes_used += n;
    c.peak_bytes_used = std::max(c.peak_bytes_used, c.bytes_used);
  }

  void* get(size_t n, Device d) {
    {
      std::lock_guard<std::mutex> g(mu);
      auto it = free.find(n);
      if (it != free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached -= n;
        charge(d, int64_t(n));
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, n);
    AXLE_CHECK(p != nullptr, "[alloc] out of memory: could not allocate ", n, " bytes");
    std::lock_guard<std::mutex> g(mu);
    charge(d, int64_t(n));
    return p;
  }
  void put(void* p, size_t n, Device d) {
    {
      std::lock_guard<std::mutex> g(mu);
      charge(d, -int64_t(n));
      if (cached + n <= kMaxCached) {
        free[n].push_back(p);
        cached += n;
        return;
      }
    }
    std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storages may die during static destruction
  return *c;
}

thread_local Device t_host_charge = kCPU;  // where this thread's cpu blocks are counted

}  // namespace

Storage::Storage(size_t n, Device d)
    : nbytes(round_size(n == 0 ? 1 : n)), device(d.is_cpu() ? t_host_charge : d) {
  data = cache().get(nbytes, device);
}

Storage::~Storage() { cache().put(data, nbytes, device); }

MemoryCounters memory_counters(Device device) {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.counters_of(device);
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

ChargeHostMemoryTo::ChargeHostMemoryTo(Device device) : saved_(t_host_charge) { t_host_charge = device; }
ChargeHostMemoryTo::~ChargeHostMemoryTo() { t_host_charge = saved_; }

}  // namespace axle
