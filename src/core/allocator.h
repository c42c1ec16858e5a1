// Where a Storage's memory comes from: the allocator of the backend serving its device
// type. Core keeps only the slots; each backend fills its device types' slots when it is
// registered (backend::register_backend), so core never includes a backend. The cpu
// backend's allocator is the caching host allocator (src/backend/cpu/allocator.h).
#pragma once
#include <cstddef>

#include "axle/device.h"

namespace axle {

/// A backend's memory: blocks identified by a handle that only the backend may interpret
/// (a host pointer for the cpu backend, an opaque handle for a device's memory).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// The size actually reserved for a request of `nbytes` (>= nbytes).
  virtual size_t round_size(size_t nbytes) const { return nbytes; }
  /// A new block of `nbytes` (already rounded) for `device`. `device` may be rewritten to
  /// the device whose counters hold the block (the cpu charges host blocks to the xla
  /// device while it computes for it); deallocate gets the rewritten one back.
  virtual void* allocate(size_t nbytes, Device& device) = 0;
  /// Returns a block from allocate(nbytes, device).
  virtual void deallocate(void* block, size_t nbytes, Device device) = 0;
};

/// Makes `allocator` (of the backend named `backend`) serve new storage of devices of type
/// `t`. Called by the backend registry; both stay alive until the process ends.
void bind_device_type(DeviceType t, const char* backend, Allocator* allocator);

/// The allocator serving devices of type `t` (registering the built-in backends on first
/// use); throws axle::Error when no backend serves `t`.
Allocator& allocator_for(DeviceType t);

/// The name of the backend serving devices of type `t` ("cpu"); throws like allocator_for.
const char* backend_name_for(DeviceType t);

}  // namespace axle
