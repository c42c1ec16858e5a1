// The hook tables of core/hooks.h.
#include "core/hooks.h"

namespace axle {
namespace {
LazyDeviceHooks g_lazy;
}  // namespace

void set_lazy_device_hooks(const LazyDeviceHooks& h) { g_lazy = h; }

const LazyDeviceHooks& lazy_device_hooks() {
  ensure_initialized();
  return g_lazy;
}

}  // namespace axle
