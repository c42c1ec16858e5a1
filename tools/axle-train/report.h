// The run's figures for the JSON report, common to every task: memory per device, the SPMD
// collectives, counters and timers; and the small helpers the report needs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strategy.h"

namespace axle_train {

/// The median (the mean of the two middle values for an even count; 0 when empty).
double median(std::vector<double> v);

/// What each device holds, for the JSON report: its peak bytes and the bytes of the
/// parameters, their gradients and the optimizer state on it (what FSDP divides by N).
struct DeviceMemory {
  std::vector<int64_t> peak, parameters, gradients, optimizer;
};

/// Each device's peak bytes so far: one entry per SPMD device, else this process's device.
std::vector<int64_t> peak_bytes(axle::Device dev, int spmd_devices);

/// Each device's memory figures for the report (`peaks` as peak_bytes gave them, or empty:
/// now); every rank takes part (a rendezvous).
DeviceMemory report_memory(axle::optim::Optimizer& opt, std::vector<int64_t> peaks, axle::Device dev,
                           const SpmdLayout& l, int world);

/// The SPMD collectives counted over a run's training epochs (evaluation and checkpoints
/// excluded): begin() before an epoch, end() after it.
struct CollectiveCount {
  std::map<std::string, int64_t> total, before;
  void begin();
  void end();
};

/// The JSON report's per-device part, common to every model: memory per device (rank order, or
/// SPMD device order), under SPMD the mesh and the collectives the partitioner inserted (per
/// training step, as they ran) and the parameters' shardings, then the torch_xla-named counters
/// and timers (name -> total ms; empty on the eager cpu path).
void add_device_report(nlohmann::ordered_json& j, const DeviceMemory& memory, const SpmdLayout& l,
                       const axle::nn::Module& model, const CollectiveCount& collectives, int64_t trained);

/// Writes `j` to `path` atomically (a temporary file renamed).
void write_json(const std::string& path, const nlohmann::ordered_json& j);

}  // namespace axle_train
