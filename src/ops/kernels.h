// The kernel registry: which function computes op k on a device of type t. It lives with
// the op table (the ops layer) so that the dispatcher and the compiler can ask it; backends,
// above, fill it.
//
// The op table (src/ops/ops.def, op.h) says what an op means: shape rule, vjp, traits.
// A backend says how it computes each op it supports by registering a kernel here,
// from an explicit registration function (src/backend/cpu/kernels/register.cpp for the
// cpu), never from a static initialiser, so registration works however axle is linked.
#pragma once
#include "axle/device.h"
#include "ops/op.h"

namespace axle::ops {

/// A kernel: computes an op's outputs (allocating them, or returning views of the inputs)
/// from its inputs, attributes and the output metadata its shape rule gave.
using KernelFn = Tensors (*)(const Tensors& in, const Attrs& a, const std::vector<Meta>& out);

/// Registers `fn` as op `op`'s kernel on devices of type `t` (replacing any earlier one).
void register_kernel(DeviceType t, OpKind op, KernelFn fn);

/// Whether a kernel for `op` is registered on devices of type `t` (as ggml's supports_op):
/// what the compiler and the dispatcher ask before choosing where an op runs.
bool supports(DeviceType t, OpKind op);

/// The kernel for `op` on devices of type `t`; throws axle::Error naming the op and the
/// device type when there is none.
KernelFn kernel(DeviceType t, OpKind op);

/// The kernel registered so far for `op` on `t`, or null; for a backend's registration code,
/// which may wrap kernels registered before it (it does not trigger registration).
KernelFn registered_kernel(DeviceType t, OpKind op);

/// Registers every backend's kernels, once: the composition root (src/init/init.cpp) calls
/// each backend's registration function; supports() and kernel() call this first, so no
/// caller needs to.
void ensure_kernels_registered();

}  // namespace axle::ops
