// CPU memory: a caching allocator keyed by rounded size. A training step allocates
// the same sizes every iteration; reusing them avoids page faults and mmap churn.
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor_impl.h"

namespace axle {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t(4) << 30;  // 4 GiB of idle blocks at most

size_t round_size(size_t n) {
  if (n <= 4096) return (n + kAlign - 1) & ~(kAlign - 1);
  return (n + 4095) & ~size_t(4095);
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  size_t cached = 0;

  void* get(size_t n) {
    {
      std::lock_guard<std::mutex> g(mu);
      auto it = free.find(n);
      if (it != free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached -= n;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, n);
    AXLE_CHECK(p != nullptr, "[alloc] out of memory: could not allocate ", n, " bytes");
    return p;
  }
  void put(void* p, size_t n) {
    {
      std::lock_guard<std::mutex> g(mu);
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

}  // namespace

Storage::Storage(size_t n, Device d) : nbytes(round_size(n == 0 ? 1 : n)), device(d) {
  data = cache().get(nbytes);
}

Storage::~Storage() { cache().put(data, nbytes); }

}  // namespace axle
