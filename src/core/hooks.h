// Hooks: how core reaches the layers above it (src/LAYERS) without including them.
// A hook is a function pointer that the layer implementing it installs from its
// registration function; src/init/init.cpp calls those once, before any hook is read.
#pragma once
#include "axle/tensor.h"

namespace axle {
struct DeviceState;  // core/tensor_impl.h

/// What core needs from the layer serving the xla device (which installs them from its
/// registration function).
struct DeviceHooks {
  /// Materialises an xla tensor (running only what it needs) and copies it to cpu;
  /// `reason` names the reader ("item", "to(cpu)", "print").
  Tensor (*to_cpu)(const Tensor& xla_tensor, const char* reason) = nullptr;
  /// Copies a cpu tensor to the xla device `d`.
  Tensor (*to_device)(const Tensor& cpu_tensor, Device d) = nullptr;
  /// Tensor::set_data replaced `t`'s device state `old` (TensorImpl::device_state): `t`
  /// keeps the name `old` gave it in explanations ("parameter fc1.weight") and, under
  /// SPMD, its sharding.
  void (*keep_label)(const Tensor& t, const DeviceState& old) = nullptr;
};
void set_device_hooks(const DeviceHooks& h);
/// The installed hooks (every layer is registered first, once).
const DeviceHooks& device_hooks();

/// Calls every layer's registration function once, lowest layer first. Defined by the top
/// layer, src/init/init.cpp (the composition root): the one name core calls above itself,
/// so that registration is explicit and never depends on static initialisers.
void ensure_initialized();

}  // namespace axle
