// The older torch_xla API (xla_model), kept working for code that still uses it.
// Each name says what replaces it.
#pragma once
#include "axle/device.h"

namespace axle::xm {

/// Old torch_xla.core.xla_model.mark_step(). Throws inside an axle::step() scope
/// (mixing the two cuts steps twice): pick one.
[[deprecated("use axle::sync() or an axle::step() scope")]] void mark_step();

/// Old xm.xla_device().
[[deprecated("use axle::device()")]] Device xla_device();

}  // namespace axle::xm
