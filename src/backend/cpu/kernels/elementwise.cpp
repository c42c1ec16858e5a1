// Elementwise kernels on cpu: unary, binary with broadcasting, where, cast, copy. Each op's
// loop body runs either over a TensorIter (eager) or on one raw run of pointers
// (elementwise_raw: the fused-elementwise kernel's tiles). Unary and binary ops bring their
// own scalar math (OpDef::pointwise), so a new one needs no edit here.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "axle/ops.h"
#include "backend/cpu/bf16.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/vexp.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/elementwise.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

#define AXLE_SWITCH_TYPES(dt, opname, ...)                                             \
  switch (dt) {                                                                        \
    case DType::Float32: { using T = float; __VA_ARGS__; break; }                      \
    case DType::BFloat16: { using T = bfloat16; __VA_ARGS__; break; }                  \
    case DType::Int64: { using T = int64_t; __VA_ARGS__; break; }                      \
    case DType::Int32: { using T = int32_t; __VA_ARGS__; break; }                      \
    case DType::Bool:                                                                  \
    case DType::UInt8: { using T = uint8_t; __VA_ARGS__; break; }                      \
    default: AXLE_FAIL("[", opname, "] dtype ", dt, " is not supported on cpu yet");   \
  }

// A kernel body runs either over a TensorIter (eager) or on one raw run of
// pointers (the fused-elementwise kernel's tiles).
struct IterExec {
  const cpu::TensorIter& it;
  template <class K> void operator()(K&& k) const { it.run(k); }
};

struct RawExec {
  char** p;
  const int64_t* s;
  int64_t n;
  template <class K> void operator()(K&& k) const { k(p, s, n); }
};

// ------------------------------------------------------------------ unary and binary
// The loops are here; each op's scalar math is its own (OpDef::pointwise, written in
// src/ops/elementwise.cpp), run once per 1-D run of elements.
// GELU's tanh approximation, vectorised: libm's tanhf is one scalar call per element, and
// gelu + gelu_backward over GPT's [B*T, 4C] MLP activations took a fifth of its training step.
// tanh(u) = 1 - 2 / (exp(2u) + 1) with an exp the compiler vectorises: 2^n * e^r, n = round(x /
// ln 2), |r| <= ln(2)/2, e^r by its Taylor polynomial to r^7 (truncation < 6e-9 relative).
// u is clamped to [-9, 9] (tanh(9) is 1 in float32). GELU needs tanh's absolute error, which
// is at most half exp's relative error: within 1e-7 of libm's.
// The compiler vectorises these loops only without -ftrapping-math (its FP-exception model
// keeps the clamp's compares and floor scalar); values are the same either way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
inline float exp_vec(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723e-6f;
  const float n = __builtin_floorf(x * kLog2e + 0.5f);  // builtins: std:: wrappers, compiled outside the pragma, would not inline
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  return q * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
}

inline float tanh_vec(float u) {
  u = u > 9.0f ? 9.0f : (u < -9.0f ? -9.0f : u);
  return 1.0f - 2.0f / (exp_vec(2.0f * u) + 1.0f);
}

constexpr float kSqrt2OverPi = 0.79788456080286536f, kGeluCubic = 0.044715f;

AXLE_SIMD_CLONES void gelu_tanh_fast(DType ct, char** p, const int64_t* s, int64_t n, const Attrs& a) {
  if (ct != DType::Float32 || !attr::Gelu::of(a).tanh || s[0] != 4 || s[1] != 4)
    return op_def(OpKind::Gelu).pointwise(ct, p, s, n, a);
  float* __restrict o = reinterpret_cast<float*>(p[0]);
  const float* __restrict x = reinterpret_cast<const float*>(p[1]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    o[i] = 0.5f * v * (1.0f + tanh_vec(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
}

AXLE_SIMD_CLONES void gelu_tanh_backward_fast(DType ct, char** p, const int64_t* s, int64_t n, const Attrs& a) {  // (grad, x)
  if (ct != DType::Float32 || !attr::GeluBackward::of(a).tanh || s[0] != 4 || s[1] != 4 || s[2] != 4)
    return op_def(OpKind::GeluBackward).pointwise(ct, p, s, n, a);
  float* __restrict o = reinterpret_cast<float*>(p[0]);
  const float* __restrict g = reinterpret_cast<const float*>(p[1]);
  const float* __restrict x = reinterpret_cast<const float*>(p[2]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_vec(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    o[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

/// bfloat16's conversions written again inside this no-trapping-math region: GCC inlines no
/// function compiled with other optimisation options (bfloat16's own), and a call per element
/// keeps a loop scalar. Same rules: exact widening; rounding to nearest even, NaN kept.
inline float bf16_wide(bfloat16 x) { return __builtin_bit_cast(float, uint32_t(x.bits) << 16); }
inline uint16_t bf16_round(float f) {
  const uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x0040u) : r);
}

/// GELU (tanh) and its gradient over contiguous bf16 runs, each value widened and rounded in
/// registers: one pass, where the generic bf16 path (pointwise_bf16: widen into a float32
/// buffer, the float32 loop, round back) took 1.5x float32's time on [2048, 768]. Returns
/// whether it took the run.
AXLE_SIMD_CLONES bool gelu_tanh_bf16(OpKind k, char** p, const int64_t* s, int64_t n, const Attrs& a) {
  bfloat16* __restrict o = reinterpret_cast<bfloat16*>(p[0]);
  const bfloat16* __restrict x = reinterpret_cast<const bfloat16*>(p[k == OpKind::Gelu ? 1 : 2]);
  if (k == OpKind::Gelu) {
    if (!attr::Gelu::of(a).tanh || s[0] != 2 || s[1] != 2) return false;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = bf16_wide(x[i]);
      o[i].bits = bf16_round(0.5f * v * (1.0f + tanh_vec(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
    }
    return true;
  }
  if (!attr::GeluBackward::of(a).tanh || s[0] != 2 || s[1] != 2 || s[2] != 2) return false;
  const bfloat16* __restrict g = reinterpret_cast<const bfloat16*>(p[1]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_wide(x[i]);
    const float t = tanh_vec(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    o[i].bits = bf16_round(bf16_wide(g[i]) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
  }
  return true;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

PointwiseFn math_of(OpKind k) {
  if (k == OpKind::Gelu) return gelu_tanh_fast;
  if (k == OpKind::GeluBackward) return gelu_tanh_backward_fast;
  const PointwiseFn f = op_def(k).pointwise;
  AXLE_CHECK(f, "[", op_name(k), "] has no pointwise math registered");
  return f;
}

// bfloat16 operands: each block of kBf16Block elements is widened into float32 on the stack,
// the op's float32 math runs on it, and its result is rounded back to bf16 (a compare writes
// its bools directly). So each op rounds once, as PyTorch's bf16 kernels do, and the fused
// kernel's tiles give the same bits as the eager loops.
constexpr int64_t kBf16Block = 1024;

void widen_run(const char* p, int64_t s, int64_t n, float* out) {
  if (s == 2) return widen_bf16(reinterpret_cast<const bfloat16*>(p), out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = float(*reinterpret_cast<const bfloat16*>(p + i * s));
}

void pointwise_bf16(OpKind k, char** p, const int64_t* s, int64_t n, const Attrs& a) {
  if ((k == OpKind::Gelu || k == OpKind::GeluBackward) && gelu_tanh_bf16(k, p, s, n, a)) return;
  const PointwiseFn f = math_of(k);
  const bool cmp = op_info(k).has(kCompare);
  const int nin = op_info(k).has(kUnary) ? 1 : 2;
  alignas(64) float buf[3][kBf16Block];
  for (int64_t b = 0; b < n; b += kBf16Block) {
    const int64_t m = std::min(kBf16Block, n - b);
    char* q[3];
    int64_t qs[3];
    for (int j = 1; j <= nin; ++j) {
      if (s[j] == 0) {
        buf[j][0] = float(*reinterpret_cast<const bfloat16*>(p[j]));
        qs[j] = 0;
      } else {
        widen_run(p[j] + b * s[j], s[j], m, buf[j]);
        qs[j] = 4;
      }
      q[j] = reinterpret_cast<char*>(buf[j]);
    }
    if (cmp) {
      q[0] = p[0] + b * s[0];
      qs[0] = s[0];
      f(DType::Float32, q, qs, m, a);
      continue;
    }
    q[0] = reinterpret_cast<char*>(buf[0]);
    qs[0] = 4;
    f(DType::Float32, q, qs, m, a);
    char* o = p[0] + b * s[0];
    if (s[0] == 2) {
      round_bf16(buf[0], reinterpret_cast<bfloat16*>(o), m);
    } else {
      for (int64_t i = 0; i < m; ++i) *reinterpret_cast<bfloat16*>(o + i * s[0]) = bfloat16(buf[0][i]);
    }
  }
}

template <OpKind K>
Tensors unary_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  Tensor x = in[0].dtype() == m[0].dtype ? in[0] : cpu::cast_cpu(in[0], m[0].dtype);
  Tensor out = cpu::empty_like_dense(m[0].shape, m[0].dtype, {&x});
  cpu::TensorIter it(out, {&x});
  const PointwiseFn f = math_of(K);
  const DType ct = m[0].dtype;
  if (ct == DType::BFloat16) it.run([&a](char** p, const int64_t* s, int64_t n) { pointwise_bf16(K, p, s, n, a); });
  else it.run([f, ct, &a](char** p, const int64_t* s, int64_t n) { f(ct, p, s, n, a); });
  return {out};
}

template <OpKind K>
Tensors binary_cpu(const Tensors& in, const Attrs& attrs, const std::vector<Meta>& m) {
  DType ct = binary_compute_dtype(K, in[0].dtype(), in[1].dtype());
  Tensor a = in[0].dtype() == ct ? in[0] : cpu::cast_cpu(in[0], ct);
  Tensor b = in[1].dtype() == ct ? in[1] : cpu::cast_cpu(in[1], ct);
  Tensor out = cpu::empty_like_dense(m[0].shape, m[0].dtype, {&a, &b});
  cpu::TensorIter it(out, {&a, &b});
  const PointwiseFn f = math_of(K);
  if (ct == DType::BFloat16) it.run([&attrs](char** p, const int64_t* s, int64_t n) { pointwise_bf16(K, p, s, n, attrs); });
  else it.run([f, ct, &attrs](char** p, const int64_t* s, int64_t n) { f(ct, p, s, n, attrs); });
  return {out};
}

template <class T, class Exec>
void where_typed(const Exec& ex) {
  ex([](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const uint8_t*>(p[1] + i * s[1])
                                                  ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                  : *reinterpret_cast<const T*>(p[3] + i * s[3]);
  });
}

Tensors where_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  DType ct = m[0].dtype;
  Tensor c = in[0], a = in[1].dtype() == ct ? in[1] : cpu::cast_cpu(in[1], ct);
  Tensor b = in[2].dtype() == ct ? in[2] : cpu::cast_cpu(in[2], ct);
  Tensor out = cpu::empty_like_dense(m[0].shape, ct, {&a, &b, &c});
  cpu::TensorIter it(out, {&c, &a, &b});
  AXLE_SWITCH_TYPES(ct, "where", where_typed<T>(IterExec{it}));
  return {out};
}

Tensors cast_cpu_op(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  return {cpu::cast_cpu(in[0], m[0].dtype)};
}

Tensors copy_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  cpu::copy_into(out, in[0]);
  return {out};
}

}  // namespace

void elementwise_raw(OpKind k, DType ct, char** p, const int64_t* s, int64_t n, const Attrs& a) {
  if (k == OpKind::Where) {
    RawExec ex{p, s, n};
    AXLE_SWITCH_TYPES(ct, "where", where_typed<T>(ex));
  } else if (k == OpKind::Cast) {
    AXLE_FAIL("[fused] internal: casts run through cpu::cast_raw");
  } else if (ct == DType::BFloat16) {
    pointwise_bf16(k, p, s, n, a);
  } else {
    math_of(k)(ct, p, s, n, a);
  }
}

void register_cpu_elementwise_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  // Every UNARY and BINARY op of the table: these loops over its own math.
#define AXLE_OP(Name, ...)                                                \
  if (op_info(OpKind::Name).has(kUnary)) reg(OpKind::Name, unary_cpu<OpKind::Name>); \
  if (op_info(OpKind::Name).has(kBinary)) reg(OpKind::Name, binary_cpu<OpKind::Name>);
#include "ops/ops.def"
#undef AXLE_OP
  reg(OpKind::Cast, cast_cpu_op);
  reg(OpKind::Copy, copy_cpu);
  reg(OpKind::Where, where_cpu);
}

}  // namespace axle::cpu
