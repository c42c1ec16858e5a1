// Autograd controls. Gradients are recorded by every op when any input requires grad.
//
//   { axle::NoGradGuard g; auto y = model.forward(x); }   // records nothing
#pragma once

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

}  // namespace axle
