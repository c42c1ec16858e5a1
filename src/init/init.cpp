// The composition root: the one file that knows every layer (src/LAYERS). It calls each
// layer's registration function once, lowest layer first, the first time a lower layer
// reads a hook (core/hooks.h, ops/hooks.h), so registration is explicit and works however
// axle is linked.
#include <mutex>

#include "autograd/node.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/hooks.h"
#include "lazy/hooks.h"

namespace axle {

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    autograd::register_hooks();
    lazy::register_hooks();
    // The backends' kernels (ops/kernels.h), one line per backend.
    cpu::register_cpu_kernels();
  });
}

}  // namespace axle
