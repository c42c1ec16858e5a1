// Elementwise kernels on cpu: unary, binary with broadcasting, where, cast, copy. Each op's
// loop body runs either over a TensorIter (eager) or on one raw run of pointers
// (elementwise_raw: the fused-elementwise kernel's tiles). Unary and binary ops bring their
// own scalar math (OpDef::pointwise), so a new one needs no edit here.
#include <cmath>

#include "axle/ops.h"
#include "backend/cpu/kernels/kernels.h"
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
PointwiseFn math_of(OpKind k) {
  const PointwiseFn f = op_def(k).pointwise;
  AXLE_CHECK(f, "[", op_name(k), "] has no pointwise math registered");
  return f;
}

template <OpKind K>
Tensors unary_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  Tensor x = in[0].dtype() == m[0].dtype ? in[0] : cpu::cast_cpu(in[0], m[0].dtype);
  Tensor out = cpu::empty_like_dense(m[0].shape, m[0].dtype, {&x});
  cpu::TensorIter it(out, {&x});
  const PointwiseFn f = math_of(K);
  const DType ct = m[0].dtype;
  it.run([f, ct, &a](char** p, const int64_t* s, int64_t n) { f(ct, p, s, n, a); });
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
  it.run([f, ct, &attrs](char** p, const int64_t* s, int64_t n) { f(ct, p, s, n, attrs); });
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
  } else {
    math_of(k)(ct, p, s, n, a);
  }
}

void register_cpu_elementwise_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel(DeviceType::CPU, k, f); };
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
