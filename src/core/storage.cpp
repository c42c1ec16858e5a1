// Storage: a block from the allocator of the backend serving its device type
// (core/allocator.h), and the slots that the backend registry fills.
#include <array>
#include <atomic>

#include "core/allocator.h"
#include "core/hooks.h"
#include "core/tensor_impl.h"

namespace axle {
namespace {

constexpr size_t kMaxDeviceTypes = 8;

struct Binding {
  std::atomic<Allocator*> allocator{nullptr};
  std::atomic<const char*> backend{nullptr};
};

std::array<Binding, kMaxDeviceTypes>& bindings() {
  static std::array<Binding, kMaxDeviceTypes> b;  // trivially destructible: safe at exit
  return b;
}

Binding& binding(DeviceType t) {
  const size_t i = size_t(t);
  AXLE_CHECK(i < kMaxDeviceTypes, "[device] expected a device type below ", kMaxDeviceTypes, ", got ", i);
  Binding& b = bindings()[i];
  // The built-in backends bind their device types when they are registered (init).
  if (b.allocator.load(std::memory_order_acquire) == nullptr) ensure_initialized();
  AXLE_CHECK(b.allocator.load(std::memory_order_acquire) != nullptr, "[device] no backend serves device type ", i);
  return b;
}

}  // namespace

void bind_device_type(DeviceType t, const char* backend, Allocator* allocator) {
  const size_t i = size_t(t);
  AXLE_CHECK(i < kMaxDeviceTypes, "[device] expected a device type below ", kMaxDeviceTypes, ", got ", i);
  bindings()[i].backend.store(backend, std::memory_order_release);
  bindings()[i].allocator.store(allocator, std::memory_order_release);
}

Allocator& allocator_for(DeviceType t) { return *binding(t).allocator.load(std::memory_order_acquire); }

const char* backend_name_for(DeviceType t) { return binding(t).backend.load(std::memory_order_acquire); }

Storage::Storage(size_t n, Device d) : device(d), allocator(&allocator_for(d.type)) {
  nbytes = allocator->round_size(n == 0 ? 1 : n);
  data = allocator->allocate(nbytes, device);
}

Storage::~Storage() { allocator->deallocate(data, nbytes, device); }

}  // namespace axle
