// The hook tables of core/hooks.h.
#include "core/hooks.h"

namespace axle {
namespace {
DeviceHooks g_device;
}  // namespace

void set_device_hooks(const DeviceHooks& h) { g_device = h; }

const DeviceHooks& device_hooks() {
  ensure_initialized();
  return g_device;
}

}  // namespace axle
