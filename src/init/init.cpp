// The composition root: the one file that knows every layer (src/LAYERS). It calls each
// layer's registration function once, lowest layer first, the first time a lower layer
// reads a hook (core/hooks.h, ops/hooks.h), so registration is explicit and works however
// axle is linked.
#include <mutex>

#include "autograd/node.h"
#include "backend/backend.h"
#include "core/hooks.h"
#include "lazy/hooks.h"

namespace axle {

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    // First the backends (src/backend/backend.cpp): each fills its kernel table
    // (ops/kernels.h) and binds its device types' allocator (core/allocator.h), which every
    // tensor made during the registrations below takes its memory from.
    backend::ensure_backends_registered();
    autograd::register_hooks();
    lazy::register_hooks();
  });
}

}  // namespace axle
