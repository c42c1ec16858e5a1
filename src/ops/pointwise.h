// Pointwise math: how an elementwise op's family file gives its scalar function to the
// backends' loops. The family writes the math once, as a captureless lambda of the operands
// and the op's typed attributes:
//
//   .pointwise = pointwise<OpKind::Clamp>([](float x, const attr::Clamp& a) { ... })
//
// pointwise<K>(f) instantiates f over one run of strided elements, for every dtype the op
// computes in (float32 only for FLOAT_MATH ops; uint8 results for COMPARE ops), and the
// cpu backend's elementwise kernels (eager iteration and the fused kernel's tiles) call it
// per run. So a new elementwise op needs no case in any kernel's list.
#pragma once
#include <cstdint>
#include <type_traits>

#include "axle/error.h"
#include "ops/schema.h"

namespace axle::ops {

/// Runs an elementwise op's math on one run of n elements that are in dtype `compute`:
/// p[0] = out, p[1..] = operands, s = byte strides (0 broadcasts one element).
using PointwiseFn = void (*)(DType compute, char** p, const int64_t* s, int64_t n, const Attrs& a);

namespace pointwise_detail {

template <class R, class T, class F>
inline void run1(char** p, const int64_t* s, int64_t n, F f) {
  R* o = reinterpret_cast<R*>(p[0]);
  const T* a = reinterpret_cast<const T*>(p[1]);
  if (s[0] == sizeof(R) && s[1] == sizeof(T)) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<R*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
  }
}

template <class R, class T, class F>
inline void run2(char** p, const int64_t* s, int64_t n, F f) {
  R* o = reinterpret_cast<R*>(p[0]);
  const T* a = reinterpret_cast<const T*>(p[1]);
  const T* b = reinterpret_cast<const T*>(p[2]);
  constexpr int64_t sr = sizeof(R), st = sizeof(T);
  if (s[0] == sr && s[1] == st && s[2] == st) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (s[0] == sr && s[1] == st && s[2] == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (s[0] == sr && s[1] == 0 && s[2] == st) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<R*>(p[0] + i * s[0]) =
          f(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
  }
}

template <OpKind K, class F, class T>
void run_typed(char** p, const int64_t* s, int64_t n, const Attrs& attrs) {
  using A = typename attr::AttrOf<K>::type;
  using R = std::conditional_t<op_info(K).has(kCompare), uint8_t, T>;
  A at{};
  if constexpr (op_info(K).num_attrs > 0) at = A::of(attrs);  // once per run
  if constexpr (op_info(K).has(kUnary)) {
    run1<R, T>(p, s, n, [&at](T x) { return R(F{}(x, at)); });
  } else {
    static_assert(op_info(K).has(kBinary), "pointwise math is for UNARY and BINARY ops");
    run2<R, T>(p, s, n, [&at](T x, T y) { return R(F{}(x, y, at)); });
  }
}

template <OpKind K, class F>
void run(DType ct, char** p, const int64_t* s, int64_t n, const Attrs& a) {
  if constexpr (op_info(K).has(kFloatMath)) {
    AXLE_CHECK(ct == DType::Float32, "[", op_info(K).name, "] computes in float32, got ", ct);
    run_typed<K, F, float>(p, s, n, a);
  } else {
    switch (ct) {
      case DType::Float32: run_typed<K, F, float>(p, s, n, a); break;
      case DType::Int64: run_typed<K, F, int64_t>(p, s, n, a); break;
      case DType::Int32: run_typed<K, F, int32_t>(p, s, n, a); break;
      case DType::Bool:
      case DType::UInt8: run_typed<K, F, uint8_t>(p, s, n, a); break;
      default: AXLE_FAIL("[", op_info(K).name, "] dtype ", ct, " is not supported on cpu yet");
    }
  }
}

}  // namespace pointwise_detail

/// The pointwise function of UNARY or BINARY op K whose scalar math is `f`: a captureless
/// lambda of the operands (generic, `auto`, unless the op is FLOAT_MATH) and the op's typed
/// attributes, attr::AttrOf<K>::type.
template <OpKind K, class F>
constexpr PointwiseFn pointwise(F) {
  static_assert(std::is_empty_v<F>, "pointwise math must be a captureless lambda");
  return &pointwise_detail::run<K, F>;
}

}  // namespace axle::ops
