// The cpu kernels' vectorisable exp: Cephes' polynomial, about 1 ulp. One core, shared by the
// kernels that differ only in how they clamp (reduce.cpp's softmax/logsumexp, attention.cpp).
#pragma once
#include <cstdint>

/// On a function whose loops vectorise: one copy compiled for AVX-512 (x86-64-v4) besides the
/// build's baseline, picked once at load time from what the processor has (GCC's target_clones,
/// an ifunc), so a loop runs 16 lanes wide where the processor can and 8 where it cannot.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define AXLE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define AXLE_SIMD_CLONES
#endif

namespace axle::cpu {

/// e^x for x already clamped to [-87.5, 88.5]: 2^n e^r with n = round(x / ln 2), e^r by the
/// polynomial. No branches, so loops over it vectorise.
inline float exp_clamped(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to nearest
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  return y * __builtin_bit_cast(float, (int32_t(n) + 127) << 23);
}

}  // namespace axle::cpu
