// Automatic mixed precision: torch.autocast for axle.
//
//   {
//     axle::autocast ac("xla", axle::DType::BFloat16);   // with torch.autocast('xla', torch.bfloat16):
//     Tensor loss = loss_fn((*model)(x), y);             //   matmul, linear, conv, attention in bf16;
//   }                                                    //   softmax, the losses, the norms in fp32
//   loss.backward();                                     // gradients reach fp32 parameters in fp32
//
// Each op's rule is a column of the op table (src/ops/ops.def: AC_LOWER, AC_FP32, AC_PROMOTE)
// and the dispatcher applies it, once, before the op's shape rule: its floating inputs are
// cast by `cast` ops (graph ops on the lazy device, autograd-recorded, whose backward casts
// the gradient back to the input's dtype). The rules are PyTorch 2.15's CPU lists
// (docs/precision.md lists them and the two places axle differs). The scope is per thread
// and per device type, nests (a guard restores what it found) and may turn autocast off
// inside an enabled region (`enabled = false`). The backward pass runs with autocast off:
// a vjp's ops compute in the dtypes its forward used.
#pragma once
#include "axle/device.h"
#include "axle/dtype.h"

namespace axle {

/// An autocast region for one device type, on this thread, until the guard is destroyed.
class autocast {
 public:
  /// `device`: "cpu" or "xla" (the index is ignored: the region covers the device type).
  /// `dtype`: the lower precision type, BFloat16 (float32 is accepted and casts nothing
  /// down; any other dtype throws axle::Error).
  explicit autocast(const Device& device, DType dtype = DType::BFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  /// Whether ops on `device`'s type run under autocast on this thread
  /// (torch.is_autocast_enabled(device_type)).
  static bool is_enabled(const Device& device);
  /// The lower precision dtype of `device`'s type on this thread (BFloat16 outside a region,
  /// as torch.get_autocast_dtype('cpu')).
  static DType dtype(const Device& device);

 private:
  DeviceType type_;
  bool prev_enabled_;
  DType prev_dtype_;
};

}  // namespace axle
