// The virtual device count (axle::runtime::global_runtime_device_count) as the spmd layer
// reads it from the environment: AXLE_CPU_DEVICES, CPU_NUM_DEVICES and
// XLA_FLAGS=--xla_force_host_platform_device_count=N. Read once and cached.
#pragma once
#include <cstdint>
#include <string>

namespace axle::spmd {

/// Where the device count came from, for error messages: "AXLE_CPU_DEVICES=4", or
/// "default: no AXLE_CPU_DEVICES" when no variable sets it.
std::string device_count_source();

/// Forgets the cached count, so the next call reads the environment again (tests that
/// setenv use this).
void reset_device_count();

}  // namespace axle::spmd
