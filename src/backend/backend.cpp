// The backend registry and axle::xm::get_memory_info.
#include "backend/backend.h"

#include <array>
#include <atomic>
#include <mutex>

#include "backend/cpu/backend.h"

namespace axle::backend {
namespace {

constexpr size_t kMaxDeviceTypes = 8;

struct Registry {
  std::mutex mu;
  std::array<std::atomic<Backend*>, kMaxDeviceTypes> serving{};  ///< read without the lock
  std::vector<std::shared_ptr<Backend>> owned;  ///< every backend ever registered (kept alive)
};

std::shared_ptr<Backend> put(Registry& r, DeviceType type, std::shared_ptr<Backend> b) {
  const size_t t = size_t(type);
  AXLE_CHECK(t < kMaxDeviceTypes, "[backend] expected a device type below ", kMaxDeviceTypes, ", got ", t);
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<Backend> prev;
  for (const auto& o : r.owned)
    if (o.get() == r.serving[t].load()) prev = o;
  if (b) r.owned.push_back(b);
  r.serving[t].store(b.get());
  bind_device_type(type, b ? b->name() : nullptr, b ? &b->allocator() : nullptr);
  return prev;
}

// The built-in backends, registered once, explicitly. A new backend adds its line here
// (e.g. the lazy device on a GPU: `if (cuda::available()) put(r, DeviceType::XLA, cuda::make_backend());`).
void register_builtin_backends(Registry& r) {
  std::shared_ptr<Backend> cpu = cpu::make_backend();
  put(r, DeviceType::CPU, cpu);
  put(r, DeviceType::XLA, cpu);  // the lazy device's data lives in host memory
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry();  // leaked on purpose: backends outlive static destruction
    register_builtin_backends(*reg);
    return reg;
  }();
  return *r;
}

}  // namespace

void ensure_backends_registered() { (void)registry(); }

Backend& backend_for(DeviceType type) {
  const size_t t = size_t(type);
  AXLE_CHECK(t < kMaxDeviceTypes, "[backend] expected a device type below ", kMaxDeviceTypes, ", got ", t);
  Backend* b = registry().serving[t].load(std::memory_order_acquire);
  AXLE_CHECK(b != nullptr, "[backend] no backend is registered for device type ", t);
  return *b;
}

std::shared_ptr<Backend> register_backend(DeviceType type, std::shared_ptr<Backend> b) {
  return put(registry(), type, std::move(b));
}

compiler::PassPipeline Backend::pipeline() const {
  compiler::PassPipeline pp = compiler::PassPipeline::standard();
  add_passes(pp);
  return pp;
}

}  // namespace axle::backend

namespace axle::xm {
MemoryInfo get_memory_info(Device device) { return backend::backend_for(device).memory_info(device); }
}  // namespace axle::xm
