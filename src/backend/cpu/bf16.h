// bfloat16 on the cpu backend (internal): how bf16 tensors are computed on this processor,
// and the widening / rounding loops kernels use to compute in float32 registers.
//
// bf16 is a storage type: every kernel computes in float32 and rounds its outputs to bf16
// (reductions accumulate in float32 or wider, as PyTorch's cpu kernels do). The products
// (matmul, linear) either run as oneDNN bf16 primitives with float32 accumulation (`Native`:
// only where that is fast, a processor with AMX-BF16) or widen their operands and run the
// float32 primitive (`F32`: AVX2-only parts, and AVX512_BF16 without AMX, where oneDNN's
// bf16 GEMM measured slower than its float32 one). Decided once per process from the
// processor (oneDNN's ISA query and cpuid); AXLE_BF16_COMPUTE=native|fp32 forces either;
// AXLE_DEBUG prints the decision once, naming the features seen.
#pragma once
#include <cstdint>
#include <string>

#include "axle/dtype.h"

namespace axle::cpu {

enum class Bf16Compute { Native, F32 };

/// The process's bf16 compute path (decided on first call, printed once under AXLE_DEBUG).
Bf16Compute bf16_compute();
/// Forces a path (tests, benchmarks); returns the previous one.
Bf16Compute set_bf16_compute(Bf16Compute c);
/// "native" / "fp32".
const char* bf16_compute_name(Bf16Compute c);
/// The processor's name and its bf16-relevant features, e.g.
/// "Intel(R) Xeon(R) Processor: avx2 avx512f avx512_bf16 amx_bf16 amx_tile; oneDNN isa avx512_core_amx".
std::string bf16_cpu_summary();

/// n bf16 values -> float32 (exact).
inline void widen_bf16(const bfloat16* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bfloat16::to_float(x[i].bits);
}
/// n float32 values -> bf16 (round to nearest even, NaN kept).
inline void round_bf16(const float* __restrict x, bfloat16* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i].bits = bfloat16::round_bits(x[i]);
}

}  // namespace axle::cpu
