// The kernel registry: a table of kernels per (device type, op), filled once by each
// backend's explicit registration function.
#include "ops/kernels.h"

#include <array>
#include <mutex>

#include "core/hooks.h"

namespace axle::ops {
namespace {

constexpr size_t kNumDeviceTypes = 8;
constexpr size_t kNumOps = size_t(OpKind::kNumOps);

std::array<std::array<KernelFn, kNumOps>, kNumDeviceTypes>& table() {
  static std::array<std::array<KernelFn, kNumOps>, kNumDeviceTypes> t{};
  return t;
}

const char* type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::XLA: return "xla";
  }
  return "unknown";
}

}  // namespace

void ensure_kernels_registered() { ensure_initialized(); }

void register_kernel(DeviceType t, OpKind op, KernelFn fn) {
  AXLE_CHECK(size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps, "[kernels] expected a known device type and op, got ",
             int(t), " and ", int(op));
  table()[size_t(t)][size_t(op)] = fn;
}

KernelFn registered_kernel(DeviceType t, OpKind op) {
  return size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps ? table()[size_t(t)][size_t(op)] : nullptr;
}

bool supports(DeviceType t, OpKind op) {
  ensure_kernels_registered();
  return size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps && table()[size_t(t)][size_t(op)] != nullptr;
}

KernelFn kernel(DeviceType t, OpKind op) {
  ensure_kernels_registered();
  KernelFn fn = size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps ? table()[size_t(t)][size_t(op)] : nullptr;
  AXLE_CHECK(fn, "[", size_t(op) < kNumOps ? op_name(op) : "?", "] no kernel registered for this op on ",
             type_name(t), " devices");
  return fn;
}

}  // namespace axle::ops
