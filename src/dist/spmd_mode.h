// What the layers above dist tell it and ask it about this process's mode (the rest of
// dist's shared state, dist_internal.h, is private to the dist layer).
#pragma once

namespace axle::dist::detail {

/// SPMD mode (runtime::use_spmd, AXLE_USE_SPMD=1; XLA_USE_SPMD=1 with a deprecation
/// warning): one process drives every local device, so init_process_group("xla") and
/// multi-process launch() refuse to run. The flag lives here, the lowest layer reading it.
bool spmd_mode();
void set_spmd_mode(bool on);

/// Called by axle::device() (and xm::xla_device()): outside a launched function that
/// makes a later launch() fail (seed anti-pattern 1).
void note_device_requested();

}  // namespace axle::dist::detail
