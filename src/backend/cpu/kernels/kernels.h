// The cpu backend's kernel registration: one function per op family
// (src/backend/cpu/kernels/<family>.cpp), all called by register_cpu_kernels().
#pragma once
#include "ops/op.h"

namespace axle::cpu {

/// Runs elementwise op `k` (not Cast) on one run of n elements: p[0] = out, p[1..] = operands
/// (already in `compute` dtype), s = byte strides (0 broadcasts); `a`: the op's attributes.
void elementwise_raw(ops::OpKind k, DType compute, char** p, const int64_t* s, int64_t n, const ops::Attrs& a);

/// Registers every cpu kernel in the cpu backend's table, ops::kernels("cpu") (called
/// once, by cpu::make_backend).
void register_cpu_kernels();

void register_cpu_elementwise_kernels();
void register_cpu_shape_kernels();
void register_cpu_index_kernels();
void register_cpu_reduce_kernels();
void register_cpu_linalg_kernels();
void register_cpu_conv_kernels();
void register_cpu_pool_kernels();
void register_cpu_attention_kernels();
void register_cpu_norm_kernels();
void register_cpu_fused_kernels();
void register_cpu_collective_kernels();
void register_cpu_spmd_kernels();
void register_cpu_barrier_kernels();
/// Gives every kernel that computes in float32 only a bfloat16 path (kernels/bf16.cpp).
void register_cpu_bf16_kernels();

}  // namespace axle::cpu
