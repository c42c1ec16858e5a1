// The CPU backend: host-memory buffers from its caching allocator (allocator.h),
// the generic passes plus epilogue and elementwise fusion (fusion.cpp), and a schedule of
// kernel calls (executable.h). It serves the cpu device and, today, the lazy xla device.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace axle::cpu {

/// The cpu backend's name: the key of its kernel table (ops/kernels.h).
inline constexpr const char* kName = "cpu";

/// A new CPU backend (registered for cpu and xla by backend::backend_for's registry).
std::shared_ptr<backend::Backend> make_backend();

/// True if the cpu backend has a kernel for op `k` (Backend::supports).
bool supports_op(ops::OpKind k);

/// Epilogues fused into their producer: relu into conv2d/linear (a oneDNN post-op), and
/// relu_backward into max_pool2d_backward.
std::unique_ptr<compiler::Pass> make_epilogue_fusion_pass();
/// Elementwise chains into one FusedElementwise (or FusedSum) node run tile by tile.
std::unique_ptr<compiler::Pass> make_fusion_pass();

}  // namespace axle::cpu
