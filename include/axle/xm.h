// The older torch_xla API (xla_model), kept working for code that still uses it.
// Each name says what replaces it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "axle/device.h"
#include "axle/error.h"

namespace axle::optim { class Optimizer; }

namespace axle::xm {

struct OptimizerStepOptions {
  /// Also wait for every rank after the step (on xla: sync the step's graph first).
  bool barrier = false;
};
/// Averages the gradients of opt's parameters over the processes: all-reduces every
/// gradient (sum, scaled by 1/world_size) with as few collective calls as their dtypes
/// allow (one per dtype and device) and sets each parameter's gradient to the result.
/// Nothing to do with world size 1. Refuses FSDP v1 shards (their gradients are already
/// reduce-scattered). torch_xla's xm.reduce_gradients; call it before clipping.
void reduce_gradients(optim::Optimizer& opt);

/// Multi-process step: reduce_gradients(opt), then opt.step(). With world size 1 it is
/// just opt.step().
void optimizer_step(optim::Optimizer& opt, const OptimizerStepOptions& o = {});

/// Prints a line (to stdout) on the master process (global ordinal 0) only.
void master_print(const std::string& line);
template <class... Args>
void master_print(const Args&... args) {
  master_print(detail::str_cat(args...));
}

/// Waits for every rank to reach rendezvous(tag); returns every rank's payload in rank
/// order. Throws if ranks arrive with different tags.
std::vector<std::string> rendezvous(const std::string& tag, const std::string& payload = "");

/// Old torch_xla.core.xla_model.mark_step(). Throws inside an axle::step() scope
/// (mixing the two cuts steps twice): pick one.
[[deprecated("use axle::sync() or an axle::step() scope")]] void mark_step();

/// A device's memory, with torch_xla's xm.get_memory_info keys. A buffer counts once however
/// many tensors view it, at its allocated size; the cpu allocator's idle cache is not counted.
struct MemoryInfo {
  int64_t bytes_used = 0;       ///< bytes held by the device's live buffers now
  int64_t bytes_limit = 0;      ///< what the device can hold (cpu and xla: the machine's physical RAM)
  int64_t peak_bytes_used = 0;  ///< the most bytes_used has been since the process started
};
/// Memory of `device` ("cpu", "xla:0", ...), from its backend's allocator.
MemoryInfo get_memory_info(Device device);

// xm::save (syncs, moves to cpu, writes from the master ordinal) is declared in axle/serialize.h.

/// Old xm.xla_device().
[[deprecated("use axle::device()")]] Device xla_device();

}  // namespace axle::xm
