// Elementwise ops: unary, binary with broadcasting, where, cast, copy.
// Each op: shape rule (infer) and vjp, registered below against ops.def; the cpu kernels
// are in src/backend/cpu/kernels/elementwise.cpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/elementwise.h"
#include "ops/pointwise.h"

namespace axle::ops {

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    AXLE_CHECK(da == db || da == 1 || db == 1, "[", op, "] expected shapes that broadcast, got ", shape_str(a),
               " and ", shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  AXLE_CHECK(t.defined(), "[", op, "] expected a defined tensor for '", arg, "', got an undefined one");
}

namespace {

bool is_compare(OpKind k) { return op_info(k).has(kCompare); }

DType unary_dtype(OpKind k, DType in) {
  if (is_float_op(k) && !is_floating(in)) return kFloat32;
  return in;
}

template <OpKind K>
std::vector<Meta> unary_infer(const Tensors& in, const Attrs&) {
  check_defined(in[0], op_name(K), "input");
  AXLE_CHECK(K != OpKind::Neg || in[0].dtype() != kBool, "[neg] expected a numeric tensor, got bool; use logical ops");
  return {{in[0].shape(), unary_dtype(K, in[0].dtype())}};
}

}  // namespace

DType binary_compute_dtype(OpKind k, DType a, DType b) {
  DType t = promote(a, b);
  if (is_float_op(k) && !is_floating(t)) t = kFloat32;
  return t;
}

namespace {

template <OpKind K>
std::vector<Meta> binary_infer(const Tensors& in, const Attrs&) {
  check_defined(in[0], op_name(K), "self");
  check_defined(in[1], op_name(K), "other");
  Shape s = broadcast_shape(in[0].shape(), in[1].shape(), op_name(K));
  DType ct = binary_compute_dtype(K, in[0].dtype(), in[1].dtype());
  return {{s, is_compare(K) ? kBool : ct}};
}

// ------------------------------------------------------------------ where / cast / copy
std::vector<Meta> where_infer(const Tensors& in, const Attrs&) {
  check_defined(in[0], "where", "condition");
  check_defined(in[1], "where", "self");
  check_defined(in[2], "where", "other");
  AXLE_CHECK(in[0].dtype() == kBool, "[where] expected a bool condition, got ", in[0].dtype());
  Shape s = broadcast_shape(broadcast_shape(in[0].shape(), in[1].shape(), "where"), in[2].shape(), "where");
  return {{s, promote(in[1].dtype(), in[2].dtype())}};
}

std::vector<Meta> cast_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "cast", "input");
  AXLE_CHECK(a.ints.size() == 1, "[cast] expected the target dtype attribute");
  return {{in[0].shape(), DType(a.ints[0])}};
}

std::vector<Meta> copy_infer(const Tensors& in, const Attrs&) {
  check_defined(in[0], "copy", "input");
  return {{in[0].shape(), in[0].dtype()}};
}

// ------------------------------------------------------------------ vjps
Tensors vjp_neg(const VjpArgs& v) { return {neg(v.grad[0])}; }
Tensors vjp_exp(const VjpArgs& v) { return {mul(v.grad[0], v.out[0])}; }
Tensors vjp_log(const VjpArgs& v) { return {div(v.grad[0], v.in[0])}; }
Tensors vjp_sqrt(const VjpArgs& v) { return {div(v.grad[0], mul(v.out[0], 2.0))}; }
Tensors vjp_rsqrt(const VjpArgs& v) {
  const Tensor& y = v.out[0];
  return {mul(v.grad[0], mul(mul(y, mul(y, y)), -0.5))};
}
Tensors vjp_abs(const VjpArgs& v) {
  const Tensor& x = v.in[0];
  Tensor sign = sub(cast(gt(x, 0.0), x.dtype()), cast(lt(x, 0.0), x.dtype()));
  return {mul(v.grad[0], sign)};
}
Tensors vjp_relu(const VjpArgs& v) { return {call1(OpKind::ReluBackward, {v.grad[0], v.out[0]})}; }
Tensors vjp_gelu(const VjpArgs& v) { return {call1(OpKind::GeluBackward, {v.grad[0], v.in[0]}, v.attrs)}; }
Tensors vjp_sigmoid(const VjpArgs& v) {
  const Tensor& y = v.out[0];
  return {mul(v.grad[0], mul(y, 1.0 - y))};
}
Tensors vjp_tanh(const VjpArgs& v) {
  const Tensor& y = v.out[0];
  return {mul(v.grad[0], 1.0 - mul(y, y))};
}
Tensors vjp_cast(const VjpArgs& v) {
  DType src = v.in[0].dtype();
  return {is_floating(src) ? cast(v.grad[0], src) : Tensor()};
}
Tensors vjp_copy(const VjpArgs& v) { return {v.grad[0]}; }

Tensors vjp_add(const VjpArgs& v) {
  return {v.needs[0] ? sum_to(v.grad[0], v.in[0].shape()) : Tensor(),
          v.needs[1] ? sum_to(v.grad[0], v.in[1].shape()) : Tensor()};
}
Tensors vjp_sub(const VjpArgs& v) {
  return {v.needs[0] ? sum_to(v.grad[0], v.in[0].shape()) : Tensor(),
          v.needs[1] ? sum_to(neg(v.grad[0]), v.in[1].shape()) : Tensor()};
}
Tensors vjp_mul(const VjpArgs& v) {
  return {v.needs[0] ? sum_to(mul(v.grad[0], v.in[1]), v.in[0].shape()) : Tensor(),
          v.needs[1] ? sum_to(mul(v.grad[0], v.in[0]), v.in[1].shape()) : Tensor()};
}
Tensors vjp_div(const VjpArgs& v) {
  const Tensor& b = v.in[1];
  return {v.needs[0] ? sum_to(div(v.grad[0], b), v.in[0].shape()) : Tensor(),
          v.needs[1] ? sum_to(neg(div(mul(v.grad[0], v.out[0]), b)), b.shape()) : Tensor()};
}
// PyTorch's rule at the edges: d/da is 0 where b == 0 (so 0^0 gives 0, not 0 * inf); d/db =
// a^b log a is 0 where a == 0 and b >= 0, and NaN for a negative base (log of a negative).
Tensors vjp_pow(const VjpArgs& v) {
  const Tensor &a = v.in[0], &b = v.in[1], &g = v.grad[0];
  Tensor ga, gb;
  const Tensor z = zeros_like(v.out[0]);
  if (v.needs[0]) ga = sum_to(where(eq(b, 0.0), z, mul(g, mul(b, pow(a, sub(b, 1.0))))), a.shape());
  if (v.needs[1]) {
    Tensor t = mul(g, mul(v.out[0], log(a)));
    gb = sum_to(where(eq(a, 0.0), where(ge(b, 0.0), z, t), t), b.shape());
  }
  return {ga, gb};
}
// maximum / minimum (PyTorch's rule): the selected operand gets the gradient, each gets half
// where a == b; a NaN operand (neither a < b nor a == b) passes the whole gradient to both.
Tensors minmax_grads(const VjpArgs& v, bool is_max) {
  const Tensor &a = v.in[0], &b = v.in[1], &g = v.grad[0];
  Tensor z = zeros_like(g);
  Tensor split = where(eq(a, b), mul(g, 0.5), g);
  Tensor a_loses = is_max ? lt(a, b) : gt(a, b), b_loses = is_max ? gt(a, b) : lt(a, b);
  return {v.needs[0] ? sum_to(where(a_loses, z, split), a.shape()) : Tensor(),
          v.needs[1] ? sum_to(where(b_loses, z, split), b.shape()) : Tensor()};
}
Tensors vjp_maximum(const VjpArgs& v) { return minmax_grads(v, true); }
Tensors vjp_minimum(const VjpArgs& v) { return minmax_grads(v, false); }
Tensors vjp_where(const VjpArgs& v) {
  const Tensor &c = v.in[0], &g = v.grad[0];
  Tensor z = zeros_like(g);
  return {Tensor(), v.needs[1] ? sum_to(where(c, g, z), v.in[1].shape()) : Tensor(),
          v.needs[2] ? sum_to(where(c, z, g), v.in[2].shape()) : Tensor()};
}

Tensors vjp_sin(const VjpArgs& v) { return {mul(v.grad[0], cos(v.in[0]))}; }
Tensors vjp_cos(const VjpArgs& v) { return {neg(mul(v.grad[0], sin(v.in[0])))}; }
Tensors vjp_log1p(const VjpArgs& v) { return {div(v.grad[0], add(v.in[0], 1.0))}; }
Tensors vjp_expm1(const VjpArgs& v) { return {mul(v.grad[0], add(v.out[0], 1.0))}; }
Tensors vjp_erf(const VjpArgs& v) {  // 2/sqrt(pi) exp(-x^2)
  const Tensor& x = v.in[0];
  return {mul(v.grad[0], mul(exp(neg(mul(x, x))), 1.1283791670955126))};
}
Tensors vjp_silu(const VjpArgs& v) {  // s (1 + x (1 - s)), s = sigmoid(x)
  const Tensor& x = v.in[0];
  Tensor s = sigmoid(x);
  return {mul(v.grad[0], mul(s, add(mul(x, 1.0 - s), 1.0)))};
}
Tensors vjp_softplus(const VjpArgs& v) {  // sigmoid(beta x), 1 where beta x > threshold (linear)
  const attr::Softplus a = attr::Softplus::of(v.attrs);
  Tensor bx = mul(v.in[0], a.beta);
  return {mul(v.grad[0], where(gt(bx, a.threshold), ones_like(bx), sigmoid(bx)))};
}
// The gradient strictly inside (min, max), 0 at the bounds: PyTorch 2.x's rule for scalar bounds
// (checked against torch 2.15: clamp(x, -0.5, 0.7) has gradient 0 at -0.5 and at 0.7); an infinite
// bound is absent (clamp(x, max=m) passes the gradient at x = -inf). NaN gets none.
Tensors vjp_clamp(const VjpArgs& v) {
  const attr::Clamp a = attr::Clamp::of(v.attrs);
  const Tensor &x = v.in[0], &g = v.grad[0];
  Tensor z = zeros_like(g), r = g;
  if (a.max != std::numeric_limits<double>::infinity()) r = where(lt(x, a.max), r, z);
  if (a.min != -std::numeric_limits<double>::infinity()) r = where(gt(x, a.min), r, z);
  if (a.max == std::numeric_limits<double>::infinity() && a.min == -std::numeric_limits<double>::infinity())
    r = where(eq(x, x), g, z);  // clamp(x): the identity, but NaN still gets no gradient
  return {r};
}
Tensors vjp_leaky_relu(const VjpArgs& v) {
  const Tensor& x = v.in[0];
  Tensor slope = full_like(x, attr::LeakyRelu::of(v.attrs).negative_slope);
  return {mul(v.grad[0], where(gt(x, 0.0), ones_like(x), slope))};
}
Tensors vjp_hardtanh(const VjpArgs& v) {  // 0 where x <= min_val or x >= max_val (a NaN passes), as PyTorch
  const attr::Hardtanh a = attr::Hardtanh::of(v.attrs);
  const Tensor &x = v.in[0], &g = v.grad[0];
  Tensor z = zeros_like(g);
  return {where(le(x, a.min_val), z, where(ge(x, a.max_val), z, g))};
}
}  // namespace

DType elementwise_compute_dtype(OpKind k, const std::vector<DType>& in) {
  if (k == OpKind::Where) return promote(in[1], in[2]);
  if (k == OpKind::Cast) return in[0];
  if (in.size() == 1) return unary_dtype(k, in[0]);
  return binary_compute_dtype(k, in[0], in[1]);
}

// ------------------------------------------------------------------ scalar math
// Each UNARY / BINARY op's math, written once in its registration below: the backends'
// elementwise kernels run it (pointwise.h). Generic (`auto`) for the ops that compute in
// the operands' dtype; the op's typed attributes come as the last argument.
namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // GELU's tanh approximation: sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

}  // namespace

void register_elementwise_ops() {
#define AXLE_UNARY(K, VJP, ...) \
  register_op(OpKind::K, {.infer = unary_infer<OpKind::K>, .vjp = VJP, .pointwise = pointwise<OpKind::K>(__VA_ARGS__)})
  AXLE_UNARY(Neg, vjp_neg, [](auto x, const attr::Neg&) { return -x; });
  AXLE_UNARY(Exp, vjp_exp, [](float x, const attr::Exp&) { return std::exp(x); });
  AXLE_UNARY(Log, vjp_log, [](float x, const attr::Log&) { return std::log(x); });
  AXLE_UNARY(Sqrt, vjp_sqrt, [](float x, const attr::Sqrt&) { return std::sqrt(x); });
  AXLE_UNARY(Rsqrt, vjp_rsqrt, [](float x, const attr::Rsqrt&) { return 1.0f / std::sqrt(x); });
  AXLE_UNARY(Abs, vjp_abs, [](auto x, const attr::Abs&) { return x < decltype(x)(0) ? -x : x; });
  AXLE_UNARY(Relu, vjp_relu, [](auto x, const attr::Relu&) { return x <= decltype(x)(0) ? decltype(x)(0) : x; });  // NaN stays
  AXLE_UNARY(Gelu, vjp_gelu, [](float x, const attr::Gelu& a) {
    if (a.tanh) return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
    return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
  });
  AXLE_UNARY(Sigmoid, vjp_sigmoid, [](float x, const attr::Sigmoid&) { return 1.0f / (1.0f + std::exp(-x)); });
  AXLE_UNARY(Tanh, vjp_tanh, [](float x, const attr::Tanh&) { return std::tanh(x); });
  AXLE_UNARY(Sin, vjp_sin, [](float x, const attr::Sin&) { return std::sin(x); });
  AXLE_UNARY(Cos, vjp_cos, [](float x, const attr::Cos&) { return std::cos(x); });
  AXLE_UNARY(Log1p, vjp_log1p, [](float x, const attr::Log1p&) { return std::log1p(x); });
  AXLE_UNARY(Expm1, vjp_expm1, [](float x, const attr::Expm1&) { return std::expm1(x); });
  AXLE_UNARY(Erf, vjp_erf, [](float x, const attr::Erf&) { return std::erf(x); });
  AXLE_UNARY(Silu, vjp_silu, [](float x, const attr::Silu&) { return x / (1.0f + std::exp(-x)); });
  AXLE_UNARY(Softplus, vjp_softplus, [](float x, const attr::Softplus& a) {
    const float bx = float(a.beta) * x;
    return bx > float(a.threshold) ? x : std::log1p(std::exp(bx)) / float(a.beta);
  });
  AXLE_UNARY(Clamp, vjp_clamp, [](auto x, const attr::Clamp& a) {  // min(max(x, min), max): max if min > max
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      const T lo = T(a.min), hi = T(a.max);
      return x != x ? x : std::min(std::max(x, lo), hi);
    } else {  // integers: the integral part of the range (the bounds are whole here from the public clamp)
      if (double(x) < a.min) x = T(std::ceil(a.min));
      if (double(x) > a.max) x = T(std::floor(a.max));
      return x;
    }
  });
  AXLE_UNARY(LeakyRelu, vjp_leaky_relu,
             [](float x, const attr::LeakyRelu& a) { return x > 0.0f ? x : x * float(a.negative_slope); });
  AXLE_UNARY(Hardtanh, vjp_hardtanh, [](float x, const attr::Hardtanh& a) {
    const float lo = float(a.min_val), hi = float(a.max_val);
    return x < lo ? lo : x > hi ? hi : x;
  });
#undef AXLE_UNARY
  register_op(OpKind::Cast, {.infer = cast_infer, .vjp = vjp_cast});
  register_op(OpKind::Copy, {.infer = copy_infer, .vjp = vjp_copy});
#define AXLE_BINARY(K, VJP, ...) \
  register_op(OpKind::K, {.infer = binary_infer<OpKind::K>, .vjp = VJP, .pointwise = pointwise<OpKind::K>(__VA_ARGS__)})
  AXLE_BINARY(Add, vjp_add, [](auto x, auto y, const attr::Add&) { return x + y; });
  AXLE_BINARY(Sub, vjp_sub, [](auto x, auto y, const attr::Sub&) { return x - y; });
  AXLE_BINARY(Mul, vjp_mul, [](auto x, auto y, const attr::Mul&) { return x * y; });
  AXLE_BINARY(Div, vjp_div, [](float x, float y, const attr::Div&) { return x / y; });
  AXLE_BINARY(Pow, vjp_pow, [](float x, float y, const attr::Pow&) { return std::pow(x, y); });
  AXLE_BINARY(Maximum, vjp_maximum, [](auto x, auto y, const attr::Maximum&) { return x > y || x != x ? x : y; });
  AXLE_BINARY(Minimum, vjp_minimum, [](auto x, auto y, const attr::Minimum&) { return x < y || x != x ? x : y; });
  AXLE_BINARY(GeluBackward, nullptr, [](float g, float x, const attr::GeluBackward& a) {  // (grad, x)
    if (a.tanh) {  // d/dx 0.5 x (1 + t), t = tanh(u), u = c (x + k x^3)
      const float t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
      return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
    float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
    return g * (cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
  });
  AXLE_BINARY(ReluBackward, nullptr,  // (grad, y)
              [](auto g, auto y, const attr::ReluBackward&) { return y <= decltype(y)(0) ? decltype(g)(0) : g; });
  AXLE_BINARY(Eq, nullptr, [](auto x, auto y, const attr::Eq&) { return x == y; });
  AXLE_BINARY(Ne, nullptr, [](auto x, auto y, const attr::Ne&) { return x != y; });
  AXLE_BINARY(Lt, nullptr, [](auto x, auto y, const attr::Lt&) { return x < y; });
  AXLE_BINARY(Le, nullptr, [](auto x, auto y, const attr::Le&) { return x <= y; });
  AXLE_BINARY(Gt, nullptr, [](auto x, auto y, const attr::Gt&) { return x > y; });
  AXLE_BINARY(Ge, nullptr, [](auto x, auto y, const attr::Ge&) { return x >= y; });
#undef AXLE_BINARY
  register_op(OpKind::Where, {.infer = where_infer, .vjp = vjp_where});
}

}  // namespace axle::ops

// ------------------------------------------------------------------ public API
namespace axle {
using ops::call1;
using ops::OpKind;

namespace {
// A scalar operand: the tensor's dtype, or float32 when the tensor is integral and the value is not.
Tensor scalar_for(const Tensor& t, double v) {
  ops::check_defined(t, "scalar op", "self");
  DType dt = t.dtype();
  if (!is_floating(dt) && (v != std::floor(v) || dt == kBool)) dt = kFloat32;
  return scalar_tensor(v, {.dtype = dt});
}
}  // namespace

Tensor neg(const Tensor& x) { return call1(OpKind::Neg, {x}); }
Tensor exp(const Tensor& x) { return call1(OpKind::Exp, {x}); }
Tensor log(const Tensor& x) { return call1(OpKind::Log, {x}); }
Tensor sqrt(const Tensor& x) { return call1(OpKind::Sqrt, {x}); }
Tensor rsqrt(const Tensor& x) { return call1(OpKind::Rsqrt, {x}); }
Tensor abs(const Tensor& x) { return call1(OpKind::Abs, {x}); }
Tensor relu(const Tensor& x) { return call1(OpKind::Relu, {x}); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  AXLE_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu] expected approximate \"none\" or \"tanh\", got \"", approximate, "\"");
  return call1(OpKind::Gelu, {x}, ops::attr::Gelu{.tanh = approximate == "tanh"}.pack());
}
Tensor sigmoid(const Tensor& x) { return call1(OpKind::Sigmoid, {x}); }
Tensor tanh(const Tensor& x) { return call1(OpKind::Tanh, {x}); }
Tensor sin(const Tensor& x) { return call1(OpKind::Sin, {x}); }
Tensor cos(const Tensor& x) { return call1(OpKind::Cos, {x}); }
Tensor log1p(const Tensor& x) { return call1(OpKind::Log1p, {x}); }
Tensor expm1(const Tensor& x) { return call1(OpKind::Expm1, {x}); }
Tensor erf(const Tensor& x) { return call1(OpKind::Erf, {x}); }
Tensor silu(const Tensor& x) { return call1(OpKind::Silu, {x}); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return call1(OpKind::Softplus, {x}, ops::attr::Softplus{.beta = beta, .threshold = threshold}.pack());
}
Tensor clamp(const Tensor& x, double min, double max) {
  ops::check_defined(x, "clamp", "input");
  const DType dt = x.dtype();
  if (is_floating(dt)) return call1(OpKind::Clamp, {x}, ops::attr::Clamp{.min = min, .max = max}.pack());
  // PyTorch's promotion of an integer (or bool) tensor with a scalar: a float bound makes it
  // float32; a whole one keeps the dtype (bool: int64). A whole bound must fit the dtype.
  auto whole = [](double v) { return std::isinf(v) || v == std::floor(v); };
  if (!whole(min) || !whole(max)) return call1(OpKind::Clamp, {cast(x, kFloat32)}, ops::attr::Clamp{.min = min, .max = max}.pack());
  const DType rt = dt == kBool ? kInt64 : dt;
  const double lo = rt == kInt64 ? -9223372036854775808.0 : rt == kInt32 ? -2147483648.0 : 0.0;
  const double hi = rt == kInt64 ? 9223372036854775807.0 : rt == kInt32 ? 2147483647.0 : 255.0;
  for (double b : {min, max})
    AXLE_CHECK(std::isinf(b) || (b >= lo && b <= hi), "[clamp] expected a bound that fits ", rt, " (", lo, " to ", hi,
               "), got ", b);
  return call1(OpKind::Clamp, {rt == dt ? x : cast(x, rt)}, ops::attr::Clamp{.min = min, .max = max}.pack());
}
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  ops::check_defined(x, "clamp", "input");
  AXLE_CHECK(min.defined() || max.defined(), "[clamp] expected at least one of min and max, got neither");
  DType dt = x.dtype();
  if (min.defined()) dt = promote(dt, min.dtype());
  if (max.defined()) dt = promote(dt, max.dtype());
  auto as = [dt](const Tensor& t) { return !t.defined() || t.dtype() == dt ? t : cast(t, dt); };
  const Tensor xs = as(x), lo = as(min), hi = as(max);
  // One bound: PyTorch 2.15's clamp is maximum / minimum, their NaN and tie rules included.
  if (!hi.defined()) return maximum(xs, lo);
  if (!lo.defined()) return minimum(xs, hi);
  // The value (a NaN operand gives NaN, as PyTorch; min > max gives max).
  const Tensor v = minimum(maximum(xs, lo), hi);
  const bool grads = xs.requires_grad() || lo.requires_grad() || hi.requires_grad();
  if (!is_floating(dt) || !grads) return v;
  // Both bounds: the same value routed so that autograd gives PyTorch 2.15's gradients
  // (measured on its clamp.Tensor): x's where neither x < min nor x > max, min's where
  // x < min <= max, max's where x > max with min <= max, or where max < min; a tie of x with
  // one bound of min < max splits in half; x == min == max is x's. Without NaN these cases
  // partition the positions; where the value is NaN it is added (detached) to the routed
  // branch, which keeps PyTorch's gradient there (x NaN with max < min: x's and max's).
  const Tensor yes = scalar_tensor(1, {.dtype = kBool}), no = scalar_tensor(0, {.dtype = kBool});
  auto both = [&](const Tensor& a, const Tensor& b) { return where(a, b, no); };
  auto either = [&](const Tensor& a, const Tensor& b) { return where(a, yes, b); };
  auto negate = [&](const Tensor& a) { return where(a, no, yes); };
  const Tensor below = lt(xs, lo), above = gt(xs, hi), ordered = le(lo, hi), spread = lt(lo, hi);
  const Tensor in_x = both(negate(below), negate(above));
  const Tensor to_lo = both(below, ordered), to_hi = either(both(above, ordered), lt(hi, lo));
  const Tensor tie_lo = both(eq(xs, lo), spread), tie_hi = both(eq(xs, hi), spread);
  const Tensor vd = v.detach();
  Tensor r = where(to_hi, hi, vd);
  r = where(to_lo, lo, r);
  r = where(in_x, xs, r);
  r = where(tie_hi, add(mul(xs, 0.5), mul(hi, 0.5)), r);  // halves: exact, no overflow
  r = where(tie_lo, add(mul(xs, 0.5), mul(lo, 0.5)), r);
  r = where(both(in_x, to_hi), add(xs, hi), r);  // x NaN and max < min
  return where(ne(v, v), add(r, vd), r);
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return call1(OpKind::LeakyRelu, {x}, ops::attr::LeakyRelu{.negative_slope = negative_slope}.pack());
}
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  return call1(OpKind::Hardtanh, {x}, ops::attr::Hardtanh{.min_val = min_val, .max_val = max_val}.pack());
}
Tensor square(const Tensor& x) { return call1(OpKind::Mul, {x, x}); }
Tensor cast(const Tensor& x, DType t) { return call1(OpKind::Cast, {x}, {.ints = {int64_t(t)}}); }

Tensor add(const Tensor& a, const Tensor& b) { return call1(OpKind::Add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call1(OpKind::Sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call1(OpKind::Mul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return call1(OpKind::Div, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return call1(OpKind::Pow, {a, b}); }
Tensor pow(const Tensor& a, double e) {
  if (e == 1.0) return call1(OpKind::Copy, {a});
  if (e == 2.0) return square(a);
  return call1(OpKind::Pow, {a, scalar_for(a, e)});
}
Tensor maximum(const Tensor& a, const Tensor& b) { return call1(OpKind::Maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return call1(OpKind::Minimum, {a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { return call1(OpKind::Eq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return call1(OpKind::Ne, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return call1(OpKind::Lt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return call1(OpKind::Le, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return call1(OpKind::Gt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return call1(OpKind::Ge, {a, b}); }
Tensor add(const Tensor& a, double b) { return add(a, scalar_for(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_for(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_for(a, b)); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_for(a, b)); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_for(a, b)); }
Tensor ne(const Tensor& a, double b) { return ne(a, scalar_for(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_for(a, b)); }
Tensor le(const Tensor& a, double b) { return le(a, scalar_for(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_for(a, b)); }
Tensor ge(const Tensor& a, double b) { return ge(a, scalar_for(a, b)); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return call1(OpKind::Where, {c, a, b}); }

}  // namespace axle
