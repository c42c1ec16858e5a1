// Registers every cpu kernel, family by family.
#include "backend/cpu/kernels/kernels.h"

namespace axle::cpu {

void register_cpu_kernels() {
  register_cpu_elementwise_kernels();
  register_cpu_shape_kernels();
  register_cpu_index_kernels();
  register_cpu_reduce_kernels();
  register_cpu_linalg_kernels();
  register_cpu_conv_kernels();
  register_cpu_pool_kernels();
  register_cpu_attention_kernels();
  register_cpu_norm_kernels();
  register_cpu_fused_kernels();
  register_cpu_collective_kernels();
  register_cpu_spmd_kernels();
  register_cpu_barrier_kernels();
  register_cpu_bf16_kernels();  // last: wraps the float32-only kernels registered above
}

}  // namespace axle::cpu
