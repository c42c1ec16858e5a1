// The lazy device's registration (called by src/init/init.cpp).
#pragma once

namespace axle::lazy {
/// Installs the lazy device's hooks: into core (transfers and labels, core/hooks.h) and
/// into the dispatcher (recording ops, eager mode, ops/hooks.h).
void register_hooks();
}  // namespace axle::lazy
