// The cpu backend's memory: a caching allocator of host blocks keyed by rounded size (a
// training step allocates the same sizes every iteration; reusing them avoids page faults
// and mmap churn), and its accounting: bytes held by live blocks, per device. It serves
// every device type the cpu backend serves (core/allocator.h).
#pragma once
#include <cstdint>

#include "axle/device.h"
#include "core/allocator.h"

namespace axle::cpu {

/// The host allocator (one per process; never destroyed: storages may die during static
/// destruction).
Allocator& host_allocator();

struct MemoryCounters {
  int64_t bytes_used = 0;       ///< bytes of live blocks charged to the device now
  int64_t peak_bytes_used = 0;  ///< the most bytes_used has been since the process started
};

/// The counters of `device`. A block is counted once, however many tensors view it, at
/// its allocated size (the request rounded up to 64 bytes, or to 4 KiB above 4 KiB).
MemoryCounters memory_counters(Device device);

/// Physical memory of this machine in bytes (the limit of host-memory devices).
int64_t physical_memory_bytes();

/// While alive, cpu blocks that this thread allocates are charged to `device` instead of
/// the cpu (the lazy device keeps its data in host memory). Nests; restores on exit.
class ChargeHostMemoryTo {
 public:
  explicit ChargeHostMemoryTo(Device device);
  ~ChargeHostMemoryTo();
  ChargeHostMemoryTo(const ChargeHostMemoryTo&) = delete;
  ChargeHostMemoryTo& operator=(const ChargeHostMemoryTo&) = delete;

 private:
  Device saved_;
};

}  // namespace axle::cpu
