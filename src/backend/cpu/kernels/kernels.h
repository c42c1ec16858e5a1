// The cpu backend's kernel registration: one function per op family
// (src/backend/cpu/kernels/<family>.cpp), all called by register_cpu_kernels().
#pragma once

namespace axle::cpu {

/// Registers every cpu kernel with backend::register_kernel (called once, from
/// backend::ensure_registered).
void register_cpu_kernels();

void register_cpu_elementwise_kernels();
void register_cpu_shape_kernels();
void register_cpu_index_kernels();
void register_cpu_reduce_kernels();
void register_cpu_linalg_kernels();
void register_cpu_conv_kernels();
void register_cpu_pool_kernels();
void register_cpu_fused_kernels();
void register_cpu_collective_kernels();

}  // namespace axle::cpu
