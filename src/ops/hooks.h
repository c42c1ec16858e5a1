// How the dispatcher (ops::call) reaches the layers above ops (src/LAYERS): the lazy
// device records ops on its tensors, autograd records the grad_fn of an op's outputs.
// Each layer installs its hooks from its registration function, which src/init/init.cpp
// calls once (core/hooks.h) before any hook is read.
#pragma once
#include "axle/metrics.h"
#include "ops/op.h"

namespace axle::ops {

/// What the dispatcher needs from the lazy device (installed by lazy::register_hooks).
struct LazyHooks {
  /// Records op `k` on lazy-device inputs; returns tensors holding its pending outputs.
  Tensors (*record)(OpKind k, const Tensors& in, const Attrs& a, const std::vector<Meta>& metas, Device dev) = nullptr;
  /// True while eager mode is on and no compile() region is tracing.
  bool (*eager_active)() = nullptr;
  /// Eager mode: runs the pending outputs of one op at once.
  void (*run_eagerly)(const Tensors& outs) = nullptr;
  /// The TraceTime timer (time spent in ops on the lazy device).
  metrics::Timer& (*trace_timer)() = nullptr;
};

/// What the dispatcher needs from autograd (installed by autograd::register_hooks).
struct AutogradHooks {
  /// Makes `out` the outputs of a new grad_fn node of op `k` on inputs `in`;
  /// needs[i]: input i wants a gradient (at least one does).
  void (*record)(OpKind k, const Attrs& a, const Tensors& in, const Tensors& out, std::vector<bool> needs) = nullptr;
};

void set_hooks(const LazyHooks& h);
void set_hooks(const AutogradHooks& h);
/// The installed hooks (every layer is registered first, once).
const LazyHooks& lazy_hooks();
const AutogradHooks& autograd_hooks();

}  // namespace axle::ops
