// Autograd controls. Gradients are recorded by every op when any input requires grad.
//
//   { axle::NoGradGuard g; auto y = model.forward(x); }   // records nothing
//
// Hooks (what DistributedDataParallel builds on):
//
//   axle::autograd::register_post_accumulate_grad_hook(w, [](const axle::Tensor& p) {
//     axle::autograd::queue_callback([] { /* runs once backward() has finished */ });
//   });
#pragma once
#include <cstdint>
#include <functional>

#include "axle/tensor.h"

namespace axle {

/// Whether ops record gradients on this thread (default true).
bool grad_enabled();
void set_grad_enabled(bool on);

/// Disables gradient recording for its scope.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

/// Called with the parameter after backward() has added a gradient to its grad().
using GradHook = std::function<void(const Tensor& param)>;
/// Registers `hook` on a leaf tensor that requires grad (PyTorch's
/// register_post_accumulate_grad_hook); returns an id for remove_hook.
int64_t register_post_accumulate_grad_hook(const Tensor& param, GradHook hook);
/// Removes a hook registered on `param` (an unknown id is ignored).
void remove_hook(const Tensor& param, int64_t id);
/// Runs `fn` when the backward() now running on this thread has finished, after every
/// gradient is accumulated (PyTorch's queue_callback). Callbacks run in queue order and
/// may queue more. Throws outside a backward pass.
void queue_callback(std::function<void()> fn);

}  // namespace autograd
}  // namespace axle
