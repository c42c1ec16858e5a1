// The kernel registry: one kernel table per backend, keyed by the backend's name ("cpu"),
// saying which function computes op k. It lives with the op table (the ops layer) so that
// the dispatcher and the compiler can ask it; backends, above, fill their own table.
//
// The op table (src/ops/ops.def, op.h) says what an op means: shape rule, vjp, traits.
// A backend says how it computes each op it supports by registering a kernel in its
// table, from an explicit registration function (src/backend/cpu/kernels/register.cpp for
// the cpu), never from a static initialiser, so registration works however axle is linked.
// A device type reaches its backend's table through core's binding (core/allocator.h):
// the cpu device's eager ops run the kernels of the backend serving DeviceType::CPU.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "axle/device.h"
#include "ops/op.h"

namespace axle::ops {

/// A kernel: computes an op's outputs (allocating them, or returning views of the inputs)
/// from its inputs, attributes and the output metadata its shape rule gave.
using KernelFn = Tensors (*)(const Tensors& in, const Attrs& a, const std::vector<Meta>& out);

/// One backend's kernels, one slot per op.
class KernelTable {
 public:
  explicit KernelTable(std::string backend) : backend_(std::move(backend)) {}
  /// The backend whose kernels these are.
  const std::string& backend() const { return backend_; }
  /// Registers `fn` as op `op`'s kernel (replacing any earlier one).
  void set(OpKind op, KernelFn fn);
  /// Whether op `op` has a kernel here (as ggml's supports_op): what the compiler and the
  /// backend ask before choosing where an op runs.
  bool supports(OpKind op) const;
  /// The kernel of `op`; throws axle::Error naming the op and the backend when there is none.
  KernelFn get(OpKind op) const;
  /// The kernel registered so far for `op`, or null, without triggering registration (for a
  /// backend's registration code, which may wrap kernels registered before it).
  KernelFn registered(OpKind op) const;

 private:
  std::string backend_;
  std::array<KernelFn, size_t(OpKind::kNumOps)> fns_{};
};

/// The kernel table of the backend named `backend` (made empty on first use; stays valid
/// until the process ends).
KernelTable& kernels(std::string_view backend);
/// The kernel table of the backend serving devices of type `t` (core/allocator.h).
const KernelTable& kernels_for(DeviceType t);

/// Shorthands: kernels(backend).set / .supports / .get.
void register_kernel(std::string_view backend, OpKind op, KernelFn fn);
bool supports(std::string_view backend, OpKind op);
KernelFn kernel(std::string_view backend, OpKind op);

/// Shorthand: kernels(backend).registered(op).
KernelFn registered_kernel(std::string_view backend, OpKind op);

/// Registers every backend's kernels, once: the composition root (src/init/init.cpp) calls
/// each backend's registration function; supports() and get() call this first, so no
/// caller needs to.
void ensure_kernels_registered();

}  // namespace axle::ops
