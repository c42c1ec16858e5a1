// The kernel registry: a table of kernels per (device type, op), filled once by each
// backend's explicit registration function.
#include "backend/kernels.h"

#include <array>
#include <mutex>

#include "backend/cpu/kernels/kernels.h"

namespace axle::backend {
namespace {

constexpr size_t kNumDeviceTypes = 8;
constexpr size_t kNumOps = size_t(ops::OpKind::kNumOps);

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

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    // One line per backend.
    cpu::register_cpu_kernels();
  });
}

void register_kernel(DeviceType t, ops::OpKind op, KernelFn fn) {
  AXLE_CHECK(size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps, "[kernels] expected a known device type and op, got ",
             int(t), " and ", int(op));
  table()[size_t(t)][size_t(op)] = fn;
}

bool supports(DeviceType t, ops::OpKind op) {
  ensure_registered();
  return size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps && table()[size_t(t)][size_t(op)] != nullptr;
}

KernelFn kernel(DeviceType t, ops::OpKind op) {
  ensure_registered();
  KernelFn fn = size_t(t) < kNumDeviceTypes && size_t(op) < kNumOps ? table()[size_t(t)][size_t(op)] : nullptr;
  AXLE_CHECK(fn, "[", size_t(op) < kNumOps ? ops::op_name(op) : "?", "] no kernel registered for this op on ",
             type_name(t), " devices");
  return fn;
}

}  // namespace axle::backend
