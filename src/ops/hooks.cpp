// The hook tables of ops/hooks.h.
#include "ops/hooks.h"

#include "core/hooks.h"

namespace axle::ops {
namespace {
LazyHooks g_lazy;
AutogradHooks g_autograd;
}  // namespace

void set_hooks(const LazyHooks& h) { g_lazy = h; }
void set_hooks(const AutogradHooks& h) { g_autograd = h; }

const LazyHooks& lazy_hooks() {
  ensure_initialized();
  return g_lazy;
}

const AutogradHooks& autograd_hooks() {
  ensure_initialized();
  return g_autograd;
}

}  // namespace axle::ops
