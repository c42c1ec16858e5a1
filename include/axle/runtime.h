// The lazy `xla` device: ops on xla tensors are traced into a graph; a step
// boundary compiles the graph once (cached by its structure) and runs it.
//
//   auto dev = axle::device();                  // xla:0
//   model->to(dev);
//   for (auto& batch : loader) {
//     auto step = axle::step();                 // syncs on entry and on exit
//     auto x = batch.data.to(dev), y = batch.target.to(dev);
//     opt.zero_grad();
//     auto loss = axle::cross_entropy((*model)(x), y);
//     loss.backward();
//     opt.step();
//   }
//   axle::sync();
#pragma once
#include "axle/device.h"

namespace axle {

/// The lazy device of this process, `xla:0`.
Device device();

/// Cuts the pending graph of every live xla tensor, compiles it (or takes it from
/// the cache) and runs it; afterwards those tensors hold data. Counts `MarkStep`.
void sync();

/// RAII step boundary (torch_xla.step()): syncs on entry and on exit, also when an
/// exception unwinds. `{ auto s = axle::step(); ... }`
class StepGuard {
 public:
  StepGuard();
  ~StepGuard() noexcept(false);
  StepGuard(const StepGuard&) = delete;
  StepGuard& operator=(const StepGuard&) = delete;

 private:
  int uncaught_;
};
[[nodiscard]] inline StepGuard step() { return StepGuard(); }

/// Waits until every graph handed to the device thread has run (async execution), and
/// throws the first error of one whose error was not reported yet.
void wait_device_ops();

namespace experimental {
/// Eager mode (debugging): each op on an xla tensor runs at once as a one-op graph,
/// compiled once per op signature and cached; values can be read at any point and
/// sync() has nothing left to do. compile()d functions still trace whole graphs.
void eager_mode(bool on);
bool is_eager_mode();

/// Asynchronous execution: a sync hands the graph to a device thread and returns while
/// it runs, so the host traces the next step meanwhile. A value read (item(), .cpu(),
/// to_vector()) waits only for the execution producing that value; an error inside an
/// execution is thrown (as axle::Error naming the graph) at the next sync or value read.
/// Graphs with collectives still run on the calling thread. Off by default; AXLE_ASYNC=1
/// turns it on at start. Switching waits for what is running.
void async_execution(bool on);
bool is_async_execution();
}  // namespace experimental

}  // namespace axle
