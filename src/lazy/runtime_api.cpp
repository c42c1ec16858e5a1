// The public runtime API of the lazy device: device(), sync(), step(), xm::mark_step().
#include <exception>

#include "axle/runtime.h"
#include "axle/xm.h"
#include "dist/spmd_mode.h"
#include "lazy/lazy_internal.h"

namespace axle {

Device device() {
  dist::detail::note_device_requested();  // launch() refuses a parent that asked (anti-pattern 1)
  return Device{DeviceType::XLA, 0};
}

namespace lazy {
using namespace detail;
void mark_step(const char* cause) {
  stats().mark_step.add();
  sync_all(cause);
}
}  // namespace lazy
using lazy::mark_step;

void sync() { mark_step("user sync"); }

void wait_device_ops() {
  lazy::detail::drain();
  lazy::detail::rethrow_async_error();
}

namespace experimental {
void async_execution(bool on) { lazy::detail::set_async(on); }
bool is_async_execution() { return lazy::detail::async_enabled(); }
}  // namespace experimental

namespace {
thread_local int g_step_depth = 0;
}  // namespace

StepGuard::StepGuard() : uncaught_(std::uncaught_exceptions()) {
  mark_step("step start");
  ++g_step_depth;
}

StepGuard::~StepGuard() noexcept(false) {
  --g_step_depth;
  if (std::uncaught_exceptions() > uncaught_) {
    // Unwinding: still cut the step, but never throw a second exception.
    try { mark_step("step end (unwinding)"); } catch (...) {}
    return;
  }
  mark_step("step end");
}

}  // namespace axle

namespace axle::xm {
void mark_step() {
  AXLE_CHECK(g_step_depth == 0, "[mark_step] called inside an axle::step() scope, which already marks the step "
             "boundary; don't mix xm::mark_step() with axle::step(): use one (axle::step() is preferred)");
  axle::sync();
}
Device xla_device() { return axle::device(); }
}  // namespace axle::xm
