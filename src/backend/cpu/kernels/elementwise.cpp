// Elementwise kernels on cpu: unary, binary with broadcasting, where, cast, copy. Each op's
// loop body runs either over a TensorIter (eager) or on one raw run of pointers
// (elementwise_raw: the fused-elementwise kernel's tiles).
#include <cmath>

#include "axle/ops.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "backend/kernels.h"
#include "ops/op.h"
#include "ops/elementwise.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

#define AXLE_SWITCH_TYPES(dt, opname, ...)                                             \
  switch (dt) {                                                                        \
    case DType::Float32: { using T = float; __VA_ARGS__; break; }                      \
    case DType::Int64: { using T = int64_t; __VA_ARGS__; break; }                      \
    case DType::Int32: { using T = int32_t; __VA_ARGS__; break; }                      \
    case DType::Bool:                                                                  \
    case DType::UInt8: { using T = uint8_t; __VA_ARGS__; break; }                      \
    default: AXLE_FAIL("[", opname, "] dtype ", dt, " is not supported on cpu yet");   \
  }

// ------------------------------------------------------------------ unary
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

template <class T, class R, class Exec, class F>
void unary_run(const Exec& ex, F f) {
  ex([f](char** p, const int64_t* s, int64_t n) {
    R* o = reinterpret_cast<R*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    if (s[0] == sizeof(R) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<R*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
    }
  });
}

constexpr float kInvSqrt2 = 0.70710678118654752f;

constexpr float kInvSqrt2Pi = 0.39894228040143268f;

template <class T, class Exec>
void unary_typed(OpKind k, const Exec& it) {
  switch (k) {
    case OpKind::Neg: unary_run<T, T>(it, [](T x) { return T(-x); }); return;
    case OpKind::Abs: unary_run<T, T>(it, [](T x) { return x < T(0) ? T(-x) : x; }); return;
    case OpKind::Relu: unary_run<T, T>(it, [](T x) { return x > T(0) ? x : T(0); }); return;
    default: break;
  }
  if constexpr (std::is_same_v<T, float>) {
    switch (k) {
      case OpKind::Exp: unary_run<T, T>(it, [](float x) { return std::exp(x); }); return;
      case OpKind::Log: unary_run<T, T>(it, [](float x) { return std::log(x); }); return;
      case OpKind::Sqrt: unary_run<T, T>(it, [](float x) { return std::sqrt(x); }); return;
      case OpKind::Rsqrt: unary_run<T, T>(it, [](float x) { return 1.0f / std::sqrt(x); }); return;
      case OpKind::Sigmoid: unary_run<T, T>(it, [](float x) { return 1.0f / (1.0f + std::exp(-x)); }); return;
      case OpKind::Tanh: unary_run<T, T>(it, [](float x) { return std::tanh(x); }); return;
      case OpKind::Gelu:
        unary_run<T, T>(it, [](float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); });
        return;
      default: break;
    }
  }
  AXLE_FAIL("[", op_name(k), "] not supported for this dtype");
}

template <OpKind K>
Tensors unary_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  Tensor x = in[0].dtype() == m[0].dtype ? in[0] : cpu::cast_cpu(in[0], m[0].dtype);
  Tensor out = cpu::empty_like_dense(m[0].shape, m[0].dtype, {&x});
  cpu::TensorIter it(out, {&x});
  AXLE_SWITCH_TYPES(m[0].dtype, op_name(K), unary_typed<T>(K, IterExec{it}));
  return {out};
}

// ------------------------------------------------------------------ binary
template <class T, class R, class Exec, class F>
void binary_run(const Exec& ex, F f) {
  ex([f](char** p, const int64_t* s, int64_t n) {
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
  });
}

template <class T, class Exec>
void binary_typed(OpKind k, const Exec& it) {
  switch (k) {
    case OpKind::Add: binary_run<T, T>(it, [](T x, T y) { return T(x + y); }); return;
    case OpKind::Sub: binary_run<T, T>(it, [](T x, T y) { return T(x - y); }); return;
    case OpKind::Mul: binary_run<T, T>(it, [](T x, T y) { return T(x * y); }); return;
    case OpKind::ReluBackward: binary_run<T, T>(it, [](T g, T y) { return y > T(0) ? g : T(0); }); return;
    case OpKind::Maximum: binary_run<T, T>(it, [](T x, T y) { return x > y || x != x ? x : y; }); return;
    case OpKind::Minimum: binary_run<T, T>(it, [](T x, T y) { return x < y || x != x ? x : y; }); return;
    case OpKind::Eq: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x == y); }); return;
    case OpKind::Ne: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x != y); }); return;
    case OpKind::Lt: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x < y); }); return;
    case OpKind::Le: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x <= y); }); return;
    case OpKind::Gt: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x > y); }); return;
    case OpKind::Ge: binary_run<T, uint8_t>(it, [](T x, T y) { return uint8_t(x >= y); }); return;
    default: break;
  }
  if constexpr (std::is_same_v<T, float>) {
    switch (k) {
      case OpKind::Div: binary_run<T, T>(it, [](float x, float y) { return x / y; }); return;
      case OpKind::Pow: binary_run<T, T>(it, [](float x, float y) { return std::pow(x, y); }); return;
      case OpKind::GeluBackward:  // (grad, x)
        binary_run<T, T>(it, [](float g, float x) {
          float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
          return g * (cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
        });
        return;
      default: break;
    }
  }
  AXLE_FAIL("[", op_name(k), "] not supported for this dtype");
}

template <OpKind K>
Tensors binary_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  DType ct = binary_compute_dtype(K, in[0].dtype(), in[1].dtype());
  Tensor a = in[0].dtype() == ct ? in[0] : cpu::cast_cpu(in[0], ct);
  Tensor b = in[1].dtype() == ct ? in[1] : cpu::cast_cpu(in[1], ct);
  Tensor out = cpu::empty_like_dense(m[0].shape, m[0].dtype, {&a, &b});
  cpu::TensorIter it(out, {&a, &b});
  AXLE_SWITCH_TYPES(ct, op_name(K), binary_typed<T>(K, IterExec{it}));
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

void elementwise_raw(OpKind k, DType ct, char** p, const int64_t* s, int64_t n) {
  RawExec ex{p, s, n};
  if (k == OpKind::Where) {
    AXLE_SWITCH_TYPES(ct, "where", where_typed<T>(ex));
  } else if (k == OpKind::Cast) {
    AXLE_FAIL("[fused] internal: casts run through cpu::cast_raw");
  } else {
    if (op_info(k).has(kUnary)) {
      AXLE_SWITCH_TYPES(ct, op_name(k), unary_typed<T>(k, ex));
    } else {
      AXLE_SWITCH_TYPES(ct, op_name(k), binary_typed<T>(k, ex));
    }
  }
}

void register_cpu_elementwise_kernels() {
  auto reg = [](OpKind k, backend::KernelFn f) { backend::register_kernel(DeviceType::CPU, k, f); };
  reg(OpKind::Neg, unary_cpu<OpKind::Neg>);
  reg(OpKind::Exp, unary_cpu<OpKind::Exp>);
  reg(OpKind::Log, unary_cpu<OpKind::Log>);
  reg(OpKind::Sqrt, unary_cpu<OpKind::Sqrt>);
  reg(OpKind::Rsqrt, unary_cpu<OpKind::Rsqrt>);
  reg(OpKind::Abs, unary_cpu<OpKind::Abs>);
  reg(OpKind::Relu, unary_cpu<OpKind::Relu>);
  reg(OpKind::Gelu, unary_cpu<OpKind::Gelu>);
  reg(OpKind::Sigmoid, unary_cpu<OpKind::Sigmoid>);
  reg(OpKind::Tanh, unary_cpu<OpKind::Tanh>);
  reg(OpKind::Cast, cast_cpu_op);
  reg(OpKind::Copy, copy_cpu);
  reg(OpKind::Add, binary_cpu<OpKind::Add>);
  reg(OpKind::Sub, binary_cpu<OpKind::Sub>);
  reg(OpKind::Mul, binary_cpu<OpKind::Mul>);
  reg(OpKind::Div, binary_cpu<OpKind::Div>);
  reg(OpKind::Pow, binary_cpu<OpKind::Pow>);
  reg(OpKind::Maximum, binary_cpu<OpKind::Maximum>);
  reg(OpKind::Minimum, binary_cpu<OpKind::Minimum>);
  reg(OpKind::GeluBackward, binary_cpu<OpKind::GeluBackward>);
  reg(OpKind::ReluBackward, binary_cpu<OpKind::ReluBackward>);
  reg(OpKind::Eq, binary_cpu<OpKind::Eq>);
  reg(OpKind::Ne, binary_cpu<OpKind::Ne>);
  reg(OpKind::Lt, binary_cpu<OpKind::Lt>);
  reg(OpKind::Le, binary_cpu<OpKind::Le>);
  reg(OpKind::Gt, binary_cpu<OpKind::Gt>);
  reg(OpKind::Ge, binary_cpu<OpKind::Ge>);
  reg(OpKind::Where, where_cpu);
}

}  // namespace axle::cpu
