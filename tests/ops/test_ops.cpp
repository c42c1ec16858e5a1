// The table-driven op test: one row per public op function (include/axle/ops.h).
//
// Each row names its inputs (shape, dtype, value range), the axle call, and an
// independent double-precision reference (tests/support/op_reference.h, plain loops).
// For every row:
//   Forward               axle == reference (1e-5 rel/abs for float32, exact for ints/bool),
//                         on every device in devices_to_check();
//   ForwardNonContiguous  the same with every input a strided, permuted view (NaN in the gaps),
//                         made on the device itself: on `xla` the slice and permute are ops of
//                         the lazy graph, so compiled graphs get strided operands;
//   Gradient              (differentiable rows) backward of sum(out0 * R) for a fixed random R
//                         equals central finite differences of the reference in double, for
//                         every floating input, from contiguous and from non-contiguous leaves
//                         (large rows: at sampled elements, plus one random directional derivative
//                         over all of them).
// Large rows (an input above cpu::kParallelGrain elements, odd sizes) run the kernels' OpenMP
// paths; the test process runs at least 2 OpenMP threads (LargeRowsRunOnATeam checks it).
// Zero-size rows check empty tensors. OpTable.EveryOpHasARow fails when an ops.def entry is
// run by no row, forward or backward, eager or compiled.
// Adding an op: a line in src/ops/ops.def, its family file, and ONE ROW in op_table() below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "axle/axle.h"
#include "axle/runtime.h"
#include "backend/backend.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "compiler/program.h"
#include "lazy/graph.h"
#include "op_reference.h"
#include "op_reference_resample.h"
#include "ops/op.h"
#include "ops/spmd.h"

// Rows and inputs use designated initializers that leave the other fields at their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

using namespace axle;
using ref::Arr;

// ======================================================================== devices
/// Devices whose results must equal the reference: eager cpu and the lazy `xla` device
/// (traced, compiled and run as a graph when the results are read).
std::vector<Device> devices_to_check() { return {kCPU, axle::device()}; }

/// The large rows must run the kernels' OpenMP paths: with one thread every loop runs inline
/// (cpu::use_team), so the process runs at least 2 threads whatever OMP_NUM_THREADS says.
const bool g_two_threads = [] {
  if (omp_get_max_threads() < 2) omp_set_num_threads(2);
  return true;
}();

// ======================================================================== inputs
/// How one input of a row is generated.
struct InSpec {
  Shape shape;
  DType dtype = kFloat32;
  double lo = -1, hi = 1;       ///< uniform range (integers: inclusive)
  double min_abs = 0;           ///< keep |x| >= min_abs (away from kinks at 0)
  std::vector<double> values;   ///< explicit row-major values (override random)
  std::vector<double> choices;  ///< random picks from this set (ties for eq / argmax)
  bool distinct = false;        ///< well-separated values in [lo, hi] (max, min, pooling)
  bool grad = true;             ///< gradient-checked when floating and the row is differentiable
};

InSpec F(Shape s, double lo = -1, double hi = 1) { return {.shape = std::move(s), .lo = lo, .hi = hi}; }
/// Floats with |x| in [0.1, 1]: for abs, relu and other kinks at 0.
InSpec Nz(Shape s) { return {.shape = std::move(s), .lo = -1, .hi = 1, .min_abs = 0.1}; }
/// Floats in [0.2, 2]: for log, sqrt, pow bases, divisors.
InSpec Pos(Shape s) { return {.shape = std::move(s), .lo = 0.2, .hi = 2}; }
/// Distinct, well separated floats: for max/min and pooling (gradients go to one element).
InSpec D(Shape s, double lo = -1, double hi = 1) { return {.shape = std::move(s), .lo = lo, .hi = hi, .distinct = true}; }
/// A float input that is not gradient-checked (running statistics, ...).
InSpec Fng(Shape s, double lo = -1, double hi = 1) { return {.shape = std::move(s), .lo = lo, .hi = hi, .grad = false}; }
InSpec I(Shape s, double lo, double hi, DType dt = kInt64) { return {.shape = std::move(s), .dtype = dt, .lo = lo, .hi = hi}; }
InSpec Idx(Shape s, std::vector<double> v) { return {.shape = std::move(s), .dtype = kInt64, .values = std::move(v)}; }
InSpec Bool(Shape s) { return {.shape = std::move(s), .dtype = kBool, .choices = {0, 1}}; }
InSpec Pick(Shape s, std::vector<double> c, DType dt = kFloat32) {
  return {.shape = std::move(s), .dtype = dt, .choices = std::move(c)};
}

/// splitmix64: deterministic on every platform.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};
uint64_t seed_of(const std::string& name, size_t k) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h + 7919 * k;
}

/// The values of one input, already representable in its dtype.
Arr generate(const InSpec& sp, uint64_t seed) {
  Arr a = ref::zeros(sp.shape, sp.dtype);
  Rng r(seed);
  const size_t n = a.v.size();
  if (!sp.values.empty()) {
    if (sp.values.size() != n) throw std::logic_error("row input: wrong number of explicit values");
    a.v = sp.values;
  } else if (!sp.choices.empty()) {
    for (double& x : a.v) x = sp.choices[size_t(r.next() % sp.choices.size())];
  } else if (sp.distinct) {
    std::vector<size_t> perm(n);
    std::iota(perm.begin(), perm.end(), size_t(0));
    for (size_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[size_t(r.next() % i)]);
    for (size_t i = 0; i < n; ++i) a.v[i] = sp.lo + (sp.hi - sp.lo) * (double(perm[i]) + 0.5) / double(n);
  } else if (ref::is_float(sp.dtype)) {
    for (double& x : a.v) {
      do x = sp.lo + (sp.hi - sp.lo) * r.uniform();
      while (std::abs(x) < sp.min_abs);
    }
  } else {
    const int64_t lo = int64_t(sp.lo), span = int64_t(sp.hi) - lo + 1;
    for (double& x : a.v) x = double(lo + int64_t(r.next() % uint64_t(span)));
  }
  for (double& x : a.v) x = ref::store_as(x, sp.dtype);
  return a;
}

Tensor to_tensor(const Arr& a) { return from_vector(a.v, a.shape, {.dtype = a.dtype}); }

/// The same logical values as `a`, laid out as a non-contiguous view on `dev`: the storage
/// holds the dims in reverse order with the last dim of size > 1 doubled (gaps filled with NaN,
/// or a large int), and the view is slice(step 2) + permute, taken on `dev` (on `xla`: ops of
/// the lazy graph over the storage). Inputs of one element stay contiguous.
Tensor to_noncontiguous(const Arr& a, Device dev = kCPU) {
  const int64_t n = a.dim();
  int64_t dd = -1;  // logical dim that gets the gaps
  for (int64_t d = 0; d < n; ++d)
    if (a.shape[size_t(d)] > 1) dd = d;
  if (dd < 0) return to_tensor(a).to(dev);
  const int64_t bd = n - 1 - dd;  // its position in the (reversed) storage
  Shape bs(a.shape.rbegin(), a.shape.rend());
  bs[size_t(bd)] *= 2;
  const double junk = ref::is_float(a.dtype) ? std::numeric_limits<double>::quiet_NaN()
                      : a.dtype == kBool    ? 1.0
                                            : 1e9;
  std::vector<double> base(size_t(ref::numel(bs)), junk);
  for (int64_t i = 0; i < a.numel(); ++i) {
    ref::Index idx = ref::unravel(i, a.shape), bi(idx.rbegin(), idx.rend());
    bi[size_t(bd)] *= 2;
    base[size_t(ref::ravel(bi, bs))] = a.v[size_t(i)];
  }
  Tensor b = from_vector(base, bs, {.dtype = a.dtype}).to(dev);
  Tensor v = slice(b, bd, 0, bs[size_t(bd)], 2);
  Shape p(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) p[size_t(d)] = n - 1 - d;
  return permute(v, p);
}

// ======================================================================== rows
using Outs = std::vector<Tensor>;
using AxleFn = std::function<Outs(const std::vector<Tensor>&)>;
using RefFn = std::function<std::vector<Arr>(const std::vector<Arr>&)>;

Outs to_outs(Tensor t) { return {std::move(t)}; }
Outs to_outs(std::pair<Tensor, Tensor> p) { return {std::move(p.first), std::move(p.second)}; }
std::vector<Arr> to_arrs(Arr a) { return {std::move(a)}; }
std::vector<Arr> to_arrs(std::vector<Arr> v) { return v; }

/// `AX(expr)`: the axle call, inputs in `x`. `RF(expr)`: the reference, inputs in `a`.
#define AX(...) [](const std::vector<Tensor>& x) -> Outs { return to_outs(__VA_ARGS__); }
#define RF(...) [](const std::vector<Arr>& a) -> std::vector<Arr> { return to_arrs(__VA_ARGS__); }

struct OpCase {
  std::string name;
  std::vector<InSpec> in;
  AxleFn fn;
  RefFn ref;
  bool diff = true;        ///< check gradients of output 0 w.r.t. floating inputs
  bool noncontig = true;   ///< also run on non-contiguous views (false only for view())
  double tol = 1e-5;       ///< forward: |got - want| <= tol * (1 + |want|)
  double grad_atol = 1e-4, grad_rtol = 1e-3;
};
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

using ref::Red;
Reduction to_axle(Red r) { return r == Red::None ? Reduction::None : r == Red::Sum ? Reduction::Sum : Reduction::Mean; }

double pow_d(double u, double v) { return std::pow(u, v); }

/// softmax(q k^T * scale, causal: keys j > i masked) v over the last two dims (batch dims equal).
ref::Arr ref_attention(const ref::Arr& q, const ref::Arr& k, const ref::Arr& v, bool causal, double scale) {
  const int64_t r = q.dim(), L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const int64_t B = q.numel() / (L * E);
  ref::Shape os = q.shape;
  os.back() = Ev;
  ref::Arr o = ref::zeros(os);
  (void)r;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(size_t(S), -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > i) continue;
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += q.v[size_t((b * L + i) * E + e)] * k.v[size_t((b * S + j) * E + e)];
        s[size_t(j)] = d * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) o.v[size_t((b * L + i) * Ev + e)] += s[size_t(j)] / z * v.v[size_t((b * S + j) * Ev + e)];
    }
  return o;
}
/// tril (lower) or triu of the last two dims, keeping j - i <= d (tril) or >= d (triu).
ref::Arr ref_tri(const ref::Arr& x, int64_t d, bool lower) {
  ref::Arr o = x;
  const int64_t R = x.size(-2), C = x.size(-1);
  for (int64_t t = 0; t < x.numel(); ++t) {
    const int64_t i = (t / C) % R, j = t % C;
    if (lower ? j - i > d : j - i < d) o.v[size_t(t)] = 0;
  }
  return o;
}
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

std::vector<OpCase> build_table() {
  using namespace ref;
  std::vector<OpCase> t;
  auto row = [&](OpCase c) { t.push_back(std::move(c)); };

  // ---------------------------------------------------------------- unary
  row({"neg", {F({2, 3, 4})}, AX(neg(x[0])), RF(map(a[0], [](double v) { return -v; }))});
  row({"neg_operator", {F({2, 3})}, AX(-x[0]), RF(map(a[0], [](double v) { return -v; }))});
  row({"neg_int64", {I({2, 3}, -5, 5)}, AX(neg(x[0])), RF(map(a[0], [](double v) { return -v; })), false});
  row({"exp", {F({2, 3, 4}, -2, 2)}, AX(exp(x[0])), RF(map(a[0], [](double v) { return std::exp(v); }))});
  row({"exp_int64", {I({5}, -3, 3)}, AX(exp(x[0])),
       RF(map(a[0], [](double v) { return std::exp(v); }, kFloat32)), false});
  row({"log", {Pos({2, 3, 4})}, AX(log(x[0])), RF(map(a[0], [](double v) { return std::log(v); }))});
  row({"sqrt", {Pos({2, 3, 4})}, AX(sqrt(x[0])), RF(map(a[0], [](double v) { return std::sqrt(v); }))});
  row({"rsqrt", {Pos({2, 3, 4})}, AX(rsqrt(x[0])), RF(map(a[0], [](double v) { return 1 / std::sqrt(v); }))});
  row({"abs", {Nz({2, 3, 4})}, AX(abs(x[0])), RF(map(a[0], [](double v) { return std::abs(v); }))});
  row({"abs_int32", {I({7}, -9, 9, kInt32)}, AX(abs(x[0])), RF(map(a[0], [](double v) { return std::abs(v); })), false});
  row({"relu", {Nz({2, 3, 4})}, AX(relu(x[0])), RF(map(a[0], [](double v) { return v > 0 ? v : 0.0; }))});
  row({"relu_int64", {I({9}, -4, 4)}, AX(relu(x[0])), RF(map(a[0], [](double v) { return v > 0 ? v : 0.0; })), false});
  row({"gelu", {F({2, 3, 4}, -3, 3)}, AX(gelu(x[0])), RF(map(a[0], ref::gelu))});
  // The tanh approximation (GPT's MLP): the cpu kernel's vectorised tanh, inputs past its
  // clamp at |u| = 9 included.
  row({"gelu_tanh", {F({2, 3, 5}, -7, 7)}, AX(gelu(x[0], "tanh")), RF(map(a[0], [](double v) {
         return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
       }))});
  row({"sigmoid", {F({2, 3, 4}, -4, 4)}, AX(sigmoid(x[0])), RF(map(a[0], ref::sigmoid))});
  row({"tanh", {F({2, 3, 4}, -3, 3)}, AX(tanh(x[0])), RF(map(a[0], [](double v) { return std::tanh(v); }))});
  row({"sin", {F({2, 3, 4}, -3, 3)}, AX(sin(x[0])), RF(map(a[0], [](double v) { return std::sin(v); }))});
  row({"cos", {F({2, 3, 4}, -3, 3)}, AX(cos(x[0])), RF(map(a[0], [](double v) { return std::cos(v); }))});
  row({"log1p", {F({2, 3, 4}, -0.9, 3)}, AX(log1p(x[0])), RF(map(a[0], [](double v) { return std::log1p(v); }))});
  row({"expm1", {F({2, 3, 4}, -2, 2)}, AX(expm1(x[0])), RF(map(a[0], [](double v) { return std::expm1(v); }))});
  row({"erf", {F({2, 3, 4}, -2.5, 2.5)}, AX(erf(x[0])), RF(map(a[0], [](double v) { return std::erf(v); }))});
  row({"silu", {F({2, 3, 4}, -4, 4)}, AX(silu(x[0])), RF(map(a[0], [](double v) { return v / (1 + std::exp(-v)); }))});
  row({"softplus", {F({2, 3, 4}, -4, 4)}, AX(softplus(x[0])), RF(map(a[0], [](double v) { return std::log1p(std::exp(v)); }))});
  row({"softplus_beta_threshold", {F({2, 3, 4}, -2, 2)}, AX(softplus(x[0], 2.0, 1.5)),
       RF(map(a[0], [](double v) { return 2 * v > 1.5 ? v : std::log1p(std::exp(2 * v)) / 2; }))});
  row({"clamp", {F({2, 3, 4}, -1, 1)}, AX(clamp(x[0], -0.4, 0.5)),
       RF(map(a[0], [](double v) { return std::min(std::max(v, -0.4), 0.5); }))});
  row({"clamp_min_only", {F({2, 3, 4}, -1, 1)}, AX(clamp(x[0], 0.1)), RF(map(a[0], [](double v) { return std::max(v, 0.1); }))});
  // clamp keeps an integer dtype; tensor bounds broadcast (random values: no ties, so the
  // gradient is the selected operand's).
  row({"clamp_int64", {I({2, 5}, -9, 9)}, AX(clamp(x[0], -2, 5)), RF(map(a[0], [](double v) { return std::min(std::max(v, -2.0), 5.0); })),
       false});
  row({"clamp_tensor_bounds", {F({3, 4}), F({4}, -1, -0.2), F({3, 1}, 0.2, 1)}, AX(clamp(x[0], x[1], x[2])),
       RF(arith(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }), a[2],
                [](double u, double v) { return std::min(u, v); }))});
  row({"clamp_tensor_min_only", {F({2, 3}), F({3})}, AX(clamp(x[0], x[1], Tensor())),
       RF(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }))});
  row({"leaky_relu", {Nz({2, 3, 4})}, AX(leaky_relu(x[0])), RF(map(a[0], [](double v) { return v > 0 ? v : 0.01 * v; }))});
  row({"leaky_relu_slope", {Nz({2, 3, 4})}, AX(leaky_relu(x[0], 0.2)), RF(map(a[0], [](double v) { return v > 0 ? v : 0.2 * v; }))});
  row({"hardtanh", {F({2, 3, 4}, -2, 2)}, AX(hardtanh(x[0])), RF(map(a[0], [](double v) { return std::min(std::max(v, -1.0), 1.0); }))});
  row({"hardtanh_bounds", {F({2, 3, 4}, -1, 1)}, AX(hardtanh(x[0], -0.3, 0.6)),
       RF(map(a[0], [](double v) { return std::min(std::max(v, -0.3), 0.6); }))});
  row({"square", {F({2, 3, 4}, -2, 2)}, AX(square(x[0])), RF(map(a[0], [](double v) { return v * v; }))});
  row({"exp_method", {F({3, 4}, -2, 2)}, AX(x[0].exp()), RF(map(a[0], [](double v) { return std::exp(v); }))});
  row({"log_method", {Pos({3, 4})}, AX(x[0].log()), RF(map(a[0], [](double v) { return std::log(v); }))});
  row({"relu_method", {Nz({3, 4})}, AX(x[0].relu()), RF(map(a[0], [](double v) { return v > 0 ? v : 0.0; }))});
  // Copy (clone / contiguous).
  row({"clone", {F({2, 3, 4})}, AX(x[0].clone()), RF(a[0])});
  row({"contiguous_of_transposed", {F({3, 4})}, AX(x[0].t().contiguous()), RF(permute(a[0], {1, 0}))});
  // A unary op on a stride-0 (expanded) input.
  row({"relu_of_expanded", {Nz({3, 1})}, AX(relu(expand(x[0], {2, 3, 4}))),
       RF(map(expand(a[0], {2, 3, 4}), [](double v) { return v > 0 ? v : 0.0; }))});

  // ---------------------------------------------------------------- binary, same shape and broadcast
  row({"add", {F({2, 3, 4}), F({2, 3, 4})}, AX(add(x[0], x[1])), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"add_broadcast", {F({2, 1, 4}), F({3, 1})}, AX(add(x[0], x[1])), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"add_operator", {F({3, 4}), F({4})}, AX(x[0] + x[1]), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"add_0d", {F({3, 4}), F({})}, AX(add(x[0], x[1])), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"add_int64", {I({2, 3}, -50, 50), I({3}, -50, 50)}, AX(add(x[0], x[1])),
       RF(arith(a[0], a[1], std::plus<double>())), false});
  row({"add_int32_int64", {I({4}, -50, 50, kInt32), I({4}, -50, 50)}, AX(add(x[0], x[1])),
       RF(arith(a[0], a[1], std::plus<double>())), false});
  row({"add_int64_float", {I({2, 3}, -5, 5), F({2, 3})}, AX(add(x[0], x[1])),
       RF(arith(a[0], a[1], std::plus<double>()))});
  row({"sub", {F({2, 3, 4}), F({2, 3, 4})}, AX(sub(x[0], x[1])), RF(arith(a[0], a[1], std::minus<double>()))});
  row({"sub_broadcast", {F({4}), F({3, 1})}, AX(x[0] - x[1]), RF(arith(a[0], a[1], std::minus<double>()))});
  row({"mul", {F({2, 3, 4}), F({2, 3, 4})}, AX(mul(x[0], x[1])), RF(arith(a[0], a[1], std::multiplies<double>()))});
  row({"mul_broadcast", {F({2, 1, 4}), F({1, 3, 1})}, AX(x[0] * x[1]),
       RF(arith(a[0], a[1], std::multiplies<double>()))});
  row({"mul_int32", {I({5}, -9, 9, kInt32), I({5}, -9, 9, kInt32)}, AX(mul(x[0], x[1])),
       RF(arith(a[0], a[1], std::multiplies<double>())), false});
  row({"div", {F({2, 3, 4}), Pos({2, 3, 4})}, AX(div(x[0], x[1])), RF(arith(a[0], a[1], std::divides<double>()))});
  row({"div_broadcast", {F({3, 4}), Pos({3, 1})}, AX(x[0] / x[1]), RF(arith(a[0], a[1], std::divides<double>()))});
  row({"div_int64", {I({6}, -9, 9), I({6}, 1, 4)}, AX(div(x[0], x[1])),
       RF(arith(a[0], a[1], std::divides<double>(), true)), false});
  row({"pow", {Pos({2, 3, 4}), F({2, 3, 4}, -2, 2)}, AX(pow(x[0], x[1])), RF(arith(a[0], a[1], pow_d, true))});
  row({"pow_broadcast", {Pos({3, 4}), F({4}, -2, 2)}, AX(pow(x[0], x[1])), RF(arith(a[0], a[1], pow_d, true))});
  row({"maximum", {F({2, 3, 4}), F({2, 3, 4})}, AX(maximum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }))});
  row({"maximum_broadcast", {F({3, 4}), F({4})}, AX(maximum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }))});
  row({"minimum", {F({2, 3, 4}), F({2, 3, 4})}, AX(minimum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::min(u, v); }))});
  row({"minimum_broadcast", {F({2, 1}), F({2, 5})}, AX(minimum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::min(u, v); }))});
  row({"minimum_int64", {I({8}, -3, 3), I({8}, -3, 3)}, AX(minimum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::min(u, v); })), false});

  // ---------------------------------------------------------------- comparisons (ties on purpose)
  const std::vector<double> few{-1, -0.5, 0, 0.5, 1};
  row({"eq", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(eq(x[0], x[1])), RF(compare(a[0], a[1], std::equal_to<double>())), false});
  row({"ne", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(ne(x[0], x[1])), RF(compare(a[0], a[1], std::not_equal_to<double>())), false});
  row({"lt", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(lt(x[0], x[1])), RF(compare(a[0], a[1], std::less<double>())), false});
  row({"le", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(le(x[0], x[1])), RF(compare(a[0], a[1], std::less_equal<double>())), false});
  row({"gt", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(gt(x[0], x[1])), RF(compare(a[0], a[1], std::greater<double>())), false});
  row({"ge", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(ge(x[0], x[1])), RF(compare(a[0], a[1], std::greater_equal<double>())), false});
  row({"lt_broadcast", {Pick({2, 1, 4}, few), Pick({3, 1}, few)}, AX(lt(x[0], x[1])),
       RF(compare(a[0], a[1], std::less<double>())), false});
  row({"eq_int64", {I({3, 4}, 0, 2), I({4}, 0, 2)}, AX(eq(x[0], x[1])), RF(compare(a[0], a[1], std::equal_to<double>())), false});
  row({"ge_int64_float", {I({6}, -2, 2), Pick({6}, few)}, AX(ge(x[0], x[1])),
       RF(compare(a[0], a[1], std::greater_equal<double>())), false});

  // ---------------------------------------------------------------- scalar forms and operators with a double
  row({"add_scalar", {F({2, 3})}, AX(add(x[0], 1.5)), RF(arith(a[0], scalar_for(a[0], 1.5), std::plus<double>()))});
  row({"sub_scalar", {F({2, 3})}, AX(sub(x[0], 0.25)), RF(arith(a[0], scalar_for(a[0], 0.25), std::minus<double>()))});
  row({"mul_scalar", {F({2, 3})}, AX(mul(x[0], -3.0)), RF(arith(a[0], scalar_for(a[0], -3.0), std::multiplies<double>()))});
  row({"div_scalar", {F({2, 3})}, AX(div(x[0], 4.0)), RF(arith(a[0], scalar_for(a[0], 4.0), std::divides<double>()))});
  row({"add_scalar_int64", {I({5}, -9, 9)}, AX(add(x[0], 3.0)), RF(arith(a[0], scalar_for(a[0], 3.0), std::plus<double>())), false});
  row({"add_scalar_int64_fraction", {I({5}, -9, 9)}, AX(add(x[0], 0.5)),
       RF(arith(a[0], scalar_for(a[0], 0.5), std::plus<double>())), false});
  row({"mul_scalar_int64", {I({5}, -9, 9)}, AX(mul(x[0], 2.0)),
       RF(arith(a[0], scalar_for(a[0], 2.0), std::multiplies<double>())), false});
  row({"div_scalar_int64", {I({5}, -9, 9)}, AX(div(x[0], 2.0)),
       RF(arith(a[0], scalar_for(a[0], 2.0), std::divides<double>(), true)), false});
  row({"eq_scalar", {Pick({3, 4}, few)}, AX(eq(x[0], 0.5)), RF(compare(a[0], scalar(0.5), std::equal_to<double>())), false});
  row({"ne_scalar", {Pick({3, 4}, few)}, AX(ne(x[0], 0.5)), RF(compare(a[0], scalar(0.5), std::not_equal_to<double>())), false});
  row({"lt_scalar", {Pick({3, 4}, few)}, AX(lt(x[0], 0.0)), RF(compare(a[0], scalar(0.0), std::less<double>())), false});
  row({"le_scalar", {Pick({3, 4}, few)}, AX(le(x[0], 0.0)), RF(compare(a[0], scalar(0.0), std::less_equal<double>())), false});
  row({"gt_scalar", {Pick({3, 4}, few)}, AX(gt(x[0], -0.5)), RF(compare(a[0], scalar(-0.5), std::greater<double>())), false});
  row({"ge_scalar", {Pick({3, 4}, few)}, AX(ge(x[0], -0.5)), RF(compare(a[0], scalar(-0.5), std::greater_equal<double>())), false});
  row({"lt_scalar_int64_fraction", {I({7}, -3, 3)}, AX(lt(x[0], 0.5)),
       RF(compare(a[0], scalar(0.5), std::less<double>())), false});
  row({"scalar_operators", {F({2, 3})}, AX((x[0] + 1.0) * 2.0 - x[0] / 4.0),
       RF(map(a[0], [](double v) { return (v + 1) * 2 - v / 4; }))});
  row({"scalar_left_operators", {Pos({2, 3})}, AX((2.0 - x[0]) + (3.0 / x[0]) + (1.0 + x[0]) * (0.5 * x[0])),
       RF(map(a[0], [](double v) { return (2 - v) + 3 / v + (1 + v) * (0.5 * v); }))});
  row({"pow_scalar_3", {F({2, 3, 4}, -2, 2)}, AX(pow(x[0], 3.0)), RF(map(a[0], [](double v) { return v * v * v; }))});
  row({"pow_scalar_2", {F({2, 3, 4}, -2, 2)}, AX(pow(x[0], 2.0)), RF(map(a[0], [](double v) { return v * v; }))});
  row({"pow_scalar_1", {F({2, 3, 4}, -2, 2)}, AX(pow(x[0], 1.0)), RF(map(a[0], [](double v) { return v; }))});
  row({"pow_scalar_half", {Pos({2, 3, 4})}, AX(pow(x[0], 0.5)), RF(map(a[0], [](double v) { return std::sqrt(v); }))});
  row({"pow_scalar_negative", {Pos({2, 3, 4})}, AX(pow(x[0], -1.5)), RF(map(a[0], [](double v) { return std::pow(v, -1.5); }))});

  // ---------------------------------------------------------------- where, cast
  row({"where", {Bool({3, 4}), F({3, 4}), F({3, 4})}, AX(where(x[0], x[1], x[2])),
       RF(zip3(a[0], a[1], a[2], [](double c, double u, double v) { return c != 0 ? u : v; }, kFloat32))});
  row({"where_broadcast", {Bool({3, 1}), F({4}), F({2, 1, 1})}, AX(where(x[0], x[1], x[2])),
       RF(zip3(a[0], a[1], a[2], [](double c, double u, double v) { return c != 0 ? u : v; }, kFloat32))});
  row({"where_int64", {Bool({6}), I({6}, -9, 9), I({6}, -9, 9)}, AX(where(x[0], x[1], x[2])),
       RF(zip3(a[0], a[1], a[2], [](double c, double u, double v) { return c != 0 ? u : v; }, kInt64)), false});
  row({"cast_float_to_float", {F({2, 3})}, AX(cast(x[0], kFloat32)), RF(a[0])});
  row({"cast_float_to_int64", {F({2, 5}, -5, 5)}, AX(cast(x[0], kInt64)),
       RF(map(a[0], [](double v) { return std::trunc(v); }, kInt64)), false});
  row({"cast_float_to_int32", {F({2, 5}, -5, 5)}, AX(cast(x[0], kInt32)),
       RF(map(a[0], [](double v) { return std::trunc(v); }, kInt32)), false});
  row({"cast_float_to_bool", {Pick({3, 4}, few)}, AX(cast(x[0], kBool)),
       RF(map(a[0], [](double v) { return v != 0 ? 1.0 : 0.0; }, kBool)), false});
  row({"cast_int64_to_float", {I({6}, -100, 100)}, AX(cast(x[0], kFloat32)), RF(map(a[0], [](double v) { return v; }, kFloat32)), false});
  row({"cast_bool_to_float", {Bool({6})}, AX(cast(x[0], kFloat32)), RF(map(a[0], [](double v) { return v; }, kFloat32)), false});
  row({"cast_int64_to_int32", {I({6}, -100, 100)}, AX(cast(x[0], kInt32)), RF(map(a[0], [](double v) { return v; }, kInt32)), false});
  row({"cast_int32_to_bool", {I({6}, -1, 1, kInt32)}, AX(cast(x[0], kBool)),
       RF(map(a[0], [](double v) { return v != 0 ? 1.0 : 0.0; }, kBool)), false});
  row({"to_dtype_method", {F({4}, -3, 3)}, AX(x[0].to(kInt64)), RF(map(a[0], [](double v) { return std::trunc(v); }, kInt64)), false});

  // ---------------------------------------------------------------- reductions
  row({"sum_all", {F({2, 3, 4})}, AX(sum(x[0])), RF(reduce(a[0], {}, false, vsum, kFloat32))});
  row({"sum_dim", {F({2, 3, 4})}, AX(sum(x[0], {1})), RF(reduce(a[0], {1}, false, vsum, kFloat32))});
  row({"sum_dims_keepdim", {F({2, 3, 4})}, AX(sum(x[0], {0, 2}, true)), RF(reduce(a[0], {0, 2}, true, vsum, kFloat32))});
  row({"sum_negative_dim", {F({2, 3, 4})}, AX(x[0].sum({-1})), RF(reduce(a[0], {-1}, false, vsum, kFloat32))});
  row({"sum_all_keepdim", {F({2, 3})}, AX(sum(x[0], {}, true)), RF(reduce(a[0], {}, true, vsum, kFloat32))});
  row({"sum_int64", {I({3, 4}, -9, 9)}, AX(sum(x[0], {1})), RF(reduce(a[0], {1}, false, vsum, kInt64)), false});
  row({"sum_int32", {I({3, 4}, -9, 9, kInt32)}, AX(sum(x[0])), RF(reduce(a[0], {}, false, vsum, sum_dtype(kInt32))), false});
  row({"sum_bool", {Bool({3, 4})}, AX(sum(x[0], {0})), RF(reduce(a[0], {0}, false, vsum, sum_dtype(kBool))), false});
  row({"mean_all", {F({2, 3, 4})}, AX(mean(x[0])), RF(reduce(a[0], {}, false, vmean, kFloat32))});
  row({"mean_method", {F({2, 3, 4})}, AX(x[0].mean({2}, true)), RF(reduce(a[0], {2}, true, vmean, kFloat32))});
  row({"mean_dim_keepdim", {F({2, 3, 4})}, AX(mean(x[0], {1}, true)), RF(reduce(a[0], {1}, true, vmean, kFloat32))});
  row({"mean_dims", {F({2, 3, 4})}, AX(x[0].mean({0, -1})), RF(reduce(a[0], {0, -1}, false, vmean, kFloat32))});
  row({"amax_all", {D({2, 3, 4})}, AX(amax(x[0])), RF(reduce(a[0], {}, false, vmax, kFloat32))});
  row({"amax_dim", {D({2, 3, 4})}, AX(amax(x[0], {1})), RF(reduce(a[0], {1}, false, vmax, kFloat32))});
  row({"amax_dims_keepdim", {D({2, 3, 4})}, AX(amax(x[0], {0, 2}, true)), RF(reduce(a[0], {0, 2}, true, vmax, kFloat32))});
  row({"amin_all", {D({2, 3, 4})}, AX(amin(x[0])), RF(reduce(a[0], {}, false, vmin, kFloat32))});
  row({"amin_dims", {D({2, 3, 4})}, AX(amin(x[0], {-1, 0})), RF(reduce(a[0], {-1, 0}, false, vmin, kFloat32))});
  row({"amax_int64", {I({3, 4}, -9, 9)}, AX(amax(x[0], {1})), RF(reduce(a[0], {1}, false, vmax, kInt64)), false});
  row({"max_all", {D({3, 4})}, AX(max(x[0])), RF(reduce(a[0], {}, false, vmax, kFloat32))});
  row({"min_all", {D({3, 4})}, AX(min(x[0])), RF(reduce(a[0], {}, false, vmin, kFloat32))});
  row({"max_dim", {D({2, 3, 4})}, AX(max(x[0], 1)),
       RF(std::vector<Arr>{reduce(a[0], {1}, false, vmax, kFloat32), reduce(a[0], {1}, false, vargmax, kInt64)})});
  row({"max_dim_keepdim", {D({2, 3, 4})}, AX(max(x[0], -1, true)),
       RF(std::vector<Arr>{reduce(a[0], {-1}, true, vmax, kFloat32), reduce(a[0], {-1}, true, vargmax, kInt64)})});
  row({"min_dim", {D({2, 3, 4})}, AX(min(x[0], 0)),
       RF(std::vector<Arr>{reduce(a[0], {0}, false, vmin, kFloat32), reduce(a[0], {0}, false, vargmin, kInt64)})});
  row({"min_dim_keepdim", {D({2, 3, 4})}, AX(min(x[0], 2, true)),
       RF(std::vector<Arr>{reduce(a[0], {2}, true, vmin, kFloat32), reduce(a[0], {2}, true, vargmin, kInt64)})});
  row({"argmax", {D({2, 3, 4})}, AX(argmax(x[0], 1)), RF(reduce(a[0], {1}, false, vargmax, kInt64)), false});
  row({"argmax_keepdim_method", {D({2, 3, 4})}, AX(x[0].argmax(-1, true)), RF(reduce(a[0], {-1}, true, vargmax, kInt64)), false});
  row({"argmax_ties_first", {Pick({4, 6}, {0, 1, 2})}, AX(argmax(x[0], 1)), RF(reduce(a[0], {1}, false, vargmax, kInt64)), false});
  row({"argmin", {D({2, 3, 4})}, AX(argmin(x[0], 0)), RF(reduce(a[0], {0}, false, vargmin, kInt64)), false});
  row({"argmin_ties_first", {Pick({6, 4}, {0, 1, 2})}, AX(argmin(x[0], 0, true)), RF(reduce(a[0], {0}, true, vargmin, kInt64)), false});
  row({"argmax_int64", {I({3, 5}, -2, 2)}, AX(argmax(x[0], 1)), RF(reduce(a[0], {1}, false, vargmax, kInt64)), false});
  row({"logsumexp", {F({2, 3, 4}, -3, 3)}, AX(logsumexp(x[0], {1})), RF(reduce(a[0], {1}, false, vlogsumexp, kFloat32))});
  row({"logsumexp_dims_keepdim", {F({2, 3, 4}, -3, 3)}, AX(logsumexp(x[0], {0, 2}, true)),
       RF(reduce(a[0], {0, 2}, true, vlogsumexp, kFloat32))});
  row({"logsumexp_large", {F({3, 5}, 80, 100)}, AX(logsumexp(x[0], {1})), RF(reduce(a[0], {1}, false, vlogsumexp, kFloat32))});
  row({"logsumexp_very_negative", {F({3, 5}, -120, -100)}, AX(logsumexp(x[0], {-1})),
       RF(reduce(a[0], {-1}, false, vlogsumexp, kFloat32))});
  row({"var_all", {F({2, 3, 4})}, AX(var(x[0])), RF(reduce(a[0], {}, false, [](auto& v) { return vvar(v, 1); }, kFloat32))});
  row({"var_dim_biased", {F({2, 3, 4})}, AX(var(x[0], {1}, 0)),
       RF(reduce(a[0], {1}, false, [](auto& v) { return vvar(v, 0); }, kFloat32))});
  row({"var_dims_keepdim", {F({2, 3, 4})}, AX(var(x[0], {0, 2}, 1, true)),
       RF(reduce(a[0], {0, 2}, true, [](auto& v) { return vvar(v, 1); }, kFloat32))});
  row({"var_offset_values", {F({4, 6}, 100, 101)}, AX(var(x[0], {1})),
       RF(reduce(a[0], {1}, false, [](auto& v) { return vvar(v, 1); }, kFloat32)), true, true, 1e-4, 1e-3, 1e-2});
  // std, cumsum, prod, sort / argsort / topk (issue 16): references as plain loops over lines.
  static const auto vstd = [](int64_t corr) {
    return [corr](const std::vector<double>& v) { return std::sqrt(vvar(v, corr)); };
  };
  static const auto vcumsum = [](const std::vector<double>& v) {
    std::vector<double> o(v.size());
    double acc = 0;
    for (size_t i = 0; i < v.size(); ++i) o[i] = acc += v[i];
    return o;
  };
  static const auto vprod = [](const std::vector<double>& v) {
    double p = 1;
    for (double x : v) p *= x;
    return p;
  };
  static const auto as_int64 = [](Arr o) { o.dtype = kInt64; return o; };
  // The stable order of a line (descending: larger first, equal elements in their order).
  static const auto stable_perm = [](const std::vector<double>& v, bool desc) {
    std::vector<double> p(v.size());
    std::iota(p.begin(), p.end(), 0.0);
    std::stable_sort(p.begin(), p.end(), [&](double i, double j) { return desc ? v[size_t(j)] < v[size_t(i)] : v[size_t(i)] < v[size_t(j)]; });
    return p;
  };
  static const auto sorted = [](const Arr& x, int64_t dim, bool desc) {
    Arr vals = along(x, dim, [desc](const std::vector<double>& v) {
      std::vector<double> p = stable_perm(v, desc), o(v.size());
      for (size_t i = 0; i < v.size(); ++i) o[i] = v[size_t(p[i])];
      return o;
    });
    Arr idx = as_int64(along(x, dim, [desc](const std::vector<double>& v) { return stable_perm(v, desc); }));
    return std::vector<Arr>{vals, idx};
  };
  static const auto first_k = [](std::vector<Arr> r, int64_t dim, int64_t k) {
    return std::vector<Arr>{slice(r[0], dim, 0, k, 1), slice(r[1], dim, 0, k, 1)};
  };
  row({"std_all", {F({2, 3, 4})}, AX(axle::std(x[0])), RF(reduce(a[0], {}, false, vstd(1), kFloat32))});
  row({"std_dims_keepdim_biased", {F({2, 3, 4})}, AX(axle::std(x[0], {0, 2}, 0, true)), RF(reduce(a[0], {0, 2}, true, vstd(0), kFloat32))});
  row({"cumsum_dim1", {F({2, 3, 4})}, AX(cumsum(x[0], 1)), RF(along(a[0], 1, vcumsum))});
  row({"cumsum_last_dim", {F({3, 5})}, AX(cumsum(x[0], -1)), RF(along(a[0], 1, vcumsum))});
  row({"cumsum_0d", {F({})}, AX(cumsum(x[0], 0)), RF(a[0])});
  row({"cumsum_int32", {I({3, 4}, -9, 9, kInt32)}, AX(cumsum(x[0], 0)), RF(as_int64(along(a[0], 0, vcumsum))), false});
  row({"cumsum_bool", {Bool({2, 5})}, AX(cumsum(x[0], 1)), RF(as_int64(along(a[0], 1, vcumsum))), false});
  row({"prod_all", {F({2, 3}, 0.5, 1.5)}, AX(prod(x[0])), RF(reduce(a[0], {}, false, vprod, kFloat32))});
  row({"prod_dim", {F({2, 3, 4})}, AX(prod(x[0], 1)), RF(reduce(a[0], {1}, false, vprod, kFloat32))});
  row({"prod_dim_keepdim", {F({2, 3, 4})}, AX(prod(x[0], -1, true)), RF(reduce(a[0], {-1}, true, vprod, kFloat32))});
  // Zeros (one or two per line): the gradient is the product of the others, not out / x.
  row({"prod_with_zeros", {Pick({4, 3}, {0, 0.5, -1.5, 2})}, AX(prod(x[0], 1)), RF(reduce(a[0], {1}, false, vprod, kFloat32))});
  row({"prod_int64", {I({3, 4}, -3, 3)}, AX(prod(x[0], 0)), RF(reduce(a[0], {0}, false, vprod, kInt64)), false});
  row({"prod_bool_all", {Bool({5})}, AX(prod(x[0])), RF(reduce(a[0], {}, false, vprod, kInt64)), false});
  row({"sort", {D({3, 5})}, AX(sort(x[0])), RF(sorted(a[0], 1, false))});
  row({"sort_dim0_descending", {D({4, 3, 2})}, AX(sort(x[0], 0, true)), RF(sorted(a[0], 0, true))});
  // Ties: equal elements keep their order in both directions (stable); not differentiable there.
  row({"sort_ties_stable", {Pick({4, 6}, {0, 1, 2})}, AX(sort(x[0], 1, false, true)), RF(sorted(a[0], 1, false)), false});
  row({"sort_ties_descending", {Pick({6, 4}, {0, 1, 2})}, AX(sort(x[0], 0, true)), RF(sorted(a[0], 0, true)), false});
  row({"sort_int64", {I({3, 7}, -3, 3)}, AX(sort(x[0], 1)), RF(sorted(a[0], 1, false)), false});
  row({"argsort", {D({2, 3, 4})}, AX(argsort(x[0], 1)), RF(sorted(a[0], 1, false)[1]), false});
  row({"argsort_descending_ties", {Pick({3, 6}, {0, 1})}, AX(argsort(x[0], -1, true)), RF(sorted(a[0], 1, true)[1]), false});
  row({"topk", {D({3, 6})}, AX(topk(x[0], 3)), RF(first_k(sorted(a[0], 1, true), 1, 3))});
  row({"topk_smallest_dim0", {D({5, 4})}, AX(topk(x[0], 2, 0, false)), RF(first_k(sorted(a[0], 0, false), 0, 2))});
  // Ties at the maximum / minimum: half of the gradient to each operand (PyTorch); the central
  // finite difference of max(a, b) at a == b is 1/2 too.
  row({"maximum_ties", {Pick({3, 4}, few), Pick({4}, few)}, AX(maximum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }))});
  row({"minimum_ties", {Pick({3, 4}, few), Pick({3, 4}, few)}, AX(minimum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::min(u, v); }))});

  // ---------------------------------------------------------------- shape
  row({"reshape", {F({2, 3, 4})}, AX(reshape(x[0], {4, 6})), RF(reshape(a[0], {4, 6}))});
  row({"reshape_infer", {F({2, 3, 4})}, AX(x[0].reshape({3, -1})), RF(reshape(a[0], {3, 8}))});
  row({"reshape_to_0d", {F({1, 1})}, AX(reshape(x[0], {})), RF(reshape(a[0], {}))});
  row({"reshape_int64", {I({2, 6}, -9, 9)}, AX(reshape(x[0], {3, 2, 2})), RF(reshape(a[0], {3, 2, 2})), false});
  // view() must not copy, so it only runs on contiguous inputs.
  row({"view", {F({2, 3, 4})}, AX(view(x[0], {6, -1})), RF(reshape(a[0], {6, 4})), true, false});
  row({"view_method", {F({2, 3, 4})}, AX(x[0].view({24})), RF(reshape(a[0], {24})), true, false});
  row({"permute", {F({2, 3, 4})}, AX(permute(x[0], {2, 0, 1})), RF(permute(a[0], {2, 0, 1}))});
  row({"permute_negative", {F({2, 3, 4})}, AX(x[0].permute({-1, -3, -2})), RF(permute(a[0], {2, 0, 1}))});
  row({"transpose", {F({2, 3, 4})}, AX(transpose(x[0], 0, 2)), RF(permute(a[0], {2, 1, 0}))});
  row({"transpose_negative", {F({2, 3, 4})}, AX(x[0].transpose(-1, 1)), RF(permute(a[0], {0, 2, 1}))});
  row({"t_method", {F({3, 5})}, AX(x[0].t()), RF(permute(a[0], {1, 0}))});
  row({"expand", {F({3, 1})}, AX(expand(x[0], {2, 3, 4})), RF(expand(a[0], {2, 3, 4}))});
  row({"expand_keep", {F({1, 4})}, AX(x[0].expand({3, -1})), RF(expand(a[0], {3, 4}))});
  row({"expand_0d", {F({})}, AX(expand(x[0], {2, 3})), RF(expand(a[0], {2, 3}))});
  row({"squeeze_dim", {F({2, 1, 3})}, AX(squeeze(x[0], 1)), RF(reshape(a[0], {2, 3}))});
  row({"squeeze_dim_not_one", {F({2, 1, 3})}, AX(squeeze(x[0], 0)), RF(reshape(a[0], {2, 1, 3}))});
  row({"squeeze_negative", {F({2, 3, 1})}, AX(x[0].squeeze(-1)), RF(reshape(a[0], {2, 3}))});
  row({"squeeze_all", {F({1, 2, 1, 3, 1})}, AX(squeeze(x[0])), RF(reshape(a[0], {2, 3}))});
  row({"unsqueeze", {F({2, 3})}, AX(unsqueeze(x[0], 1)), RF(reshape(a[0], {2, 1, 3}))});
  row({"unsqueeze_end", {F({2, 3})}, AX(x[0].unsqueeze(-1)), RF(reshape(a[0], {2, 3, 1}))});
  row({"flatten", {F({2, 3, 4})}, AX(flatten(x[0])), RF(reshape(a[0], {24}))});
  row({"flatten_range", {F({2, 3, 4, 2})}, AX(x[0].flatten(1, 2)), RF(reshape(a[0], {2, 12, 2}))});
  row({"flatten_negative", {F({2, 3, 4})}, AX(flatten(x[0], -2)), RF(reshape(a[0], {2, 12}))});
  row({"slice", {F({4, 6})}, AX(slice(x[0], 1, 1, 5)), RF(slice(a[0], 1, 1, 5, 1))});
  row({"slice_step", {F({7, 3})}, AX(slice(x[0], 0, 1, 7, 3)), RF(slice(a[0], 0, 1, 7, 3))});
  row({"slice_negative", {F({3, 8})}, AX(slice(x[0], -1, -6, -1, 2)), RF(slice(a[0], 1, 2, 7, 2))});
  row({"slice_clamped", {F({3, 5})}, AX(slice(x[0], 1, 2, 100)), RF(slice(a[0], 1, 2, 5, 1))});
  row({"narrow", {F({4, 6})}, AX(narrow(x[0], 1, 2, 3)), RF(slice(a[0], 1, 2, 5, 1))});
  row({"narrow_method", {F({5, 3})}, AX(x[0].narrow(0, -3, 2)), RF(slice(a[0], 0, 2, 4, 1))});
  row({"cat_dim0", {F({2, 3}), F({1, 3}), F({3, 3})}, AX(cat({x[0], x[1], x[2]}, 0)), RF(cat({a[0], a[1], a[2]}, 0))});
  row({"cat_dim1", {F({2, 2, 3}), F({2, 4, 3})}, AX(cat({x[0], x[1]}, 1)), RF(cat({a[0], a[1]}, 1))});
  row({"cat_negative_dim", {F({2, 3}), F({2, 1})}, AX(cat({x[0], x[1]}, -1)), RF(cat({a[0], a[1]}, -1))});
  row({"cat_single", {F({2, 3})}, AX(cat({x[0]}, 0)), RF(cat({a[0]}, 0))});
  row({"cat_int64", {I({2, 2}, -9, 9), I({1, 2}, -9, 9)}, AX(cat({x[0], x[1]}, 0)), RF(cat({a[0], a[1]}, 0)), false});
  row({"stack", {F({2, 3}), F({2, 3}), F({2, 3})}, AX(stack({x[0], x[1], x[2]}, 0)), RF(stack({a[0], a[1], a[2]}, 0))});
  row({"stack_last", {F({2, 3}), F({2, 3})}, AX(stack({x[0], x[1]}, -1)), RF(stack({a[0], a[1]}, -1))});
  row({"index_select_dim0", {F({5, 3}), Idx({4}, {4, 0, 4, 2})}, AX(index_select(x[0], 0, x[1])),
       RF(index_select(a[0], 0, a[1]))});
  row({"index_select_dim1", {F({2, 4, 3}), Idx({5}, {3, 3, 0, 1, 3})}, AX(index_select(x[0], 1, x[1])),
       RF(index_select(a[0], 1, a[1]))});
  row({"index_select_negative_dim", {F({3, 4}), Idx({2}, {1, 1})}, AX(index_select(x[0], -1, x[1])),
       RF(index_select(a[0], 1, a[1]))});
  row({"index_select_int64", {I({4, 2}, -9, 9), Idx({3}, {3, 0, 3})}, AX(index_select(x[0], 0, x[1])),
       RF(index_select(a[0], 0, a[1])), false});
  row({"gather_dim0", {F({3, 4}), Idx({2, 4}, {2, 0, 1, 2, 0, 0, 2, 1})}, AX(gather(x[0], 0, x[1])),
       RF(gather(a[0], 0, a[1]))});
  row({"gather_dim1", {F({3, 4}), Idx({3, 5}, {3, 0, 0, 1, 2, 1, 1, 1, 3, 0, 2, 3, 2, 0, 0})}, AX(gather(x[0], 1, x[1])),
       RF(gather(a[0], 1, a[1]))});
  row({"gather_3d_smaller_index", {F({2, 3, 4}), Idx({2, 2, 3}, {0, 2, 1, 1, 1, 0, 2, 0, 2, 2, 2, 1})},
       AX(gather(x[0], 1, x[1])), RF(gather(a[0], 1, a[1]))});

  // ---------------------------------------------------------------- scatter, one_hot, pad, interpolate, einsum (issue 16)
  // scatter (overwrite) rows use indices unique along dim: with repeats the written value is
  // unspecified (PyTorch), and src's gradient goes to every repeat (gather) unlike a difference.
  row({"scatter_dim0", {F({3, 4}), Idx({2, 4}, {0, 2, 1, 0, 2, 1, 0, 1}), F({2, 4})}, AX(scatter(x[0], 0, x[1], x[2])),
       RF(ref::scatter(a[0], 0, a[1], a[2], false))});
  row({"scatter_dim1_src_larger", {F({3, 5}), Idx({2, 3}, {4, 0, 2, 1, 3, 0}), F({3, 4})},
       AX(scatter(x[0], -1, x[1], x[2])), RF(ref::scatter(a[0], 1, a[1], a[2], false))});
  row({"scatter_value", {F({3, 4}), Idx({1, 4}, {2, 0, 1, 2})}, AX(scatter(x[0], 0, x[1], 2.5)),
       RF(ref::scatter_value(a[0], 0, a[1], 2.5))});
  row({"scatter_int64", {I({2, 5}, -9, 9), Idx({2, 2}, {4, 1, 0, 3}), I({2, 2}, -9, 9)}, AX(scatter(x[0], 1, x[1], x[2])),
       RF(ref::scatter(a[0], 1, a[1], a[2], false)), false});
  row({"scatter_0d", {F({}), Idx({1}, {0}), F({1})}, AX(scatter(x[0], 0, x[1], x[2])), RF(reshape(a[2], {}))});
  // scatter_add: repeated indices accumulate (index taller than x along dim, as PyTorch allows).
  row({"scatter_add_repeated", {F({3, 4}), Idx({4, 4}, {0, 2, 2, 1, 0, 2, 2, 1, 1, 0, 2, 1, 0, 0, 0, 1}), F({4, 4})},
       AX(scatter_add(x[0], 0, x[1], x[2])), RF(ref::scatter(a[0], 0, a[1], a[2], true))});
  row({"scatter_add_dim1_src_larger", {F({2, 3, 4}), Idx({2, 2, 3}, {0, 3, 3, 1, 1, 1, 2, 0, 3, 3, 0, 2}), F({2, 3, 3})},
       AX(scatter_add(x[0], 2, x[1], x[2])), RF(ref::scatter(a[0], 2, a[1], a[2], true))});
  row({"scatter_add_int64", {I({4}, -9, 9), Idx({5}, {3, 3, 0, 1, 3}), I({5}, -9, 9)}, AX(scatter_add(x[0], 0, x[1], x[2])),
       RF(ref::scatter(a[0], 0, a[1], a[2], true)), false});
  row({"scatter_add_empty_index", {F({3, 4}), Idx({0, 4}, {}), F({2, 4})}, AX(scatter_add(x[0], 0, x[1], x[2])),
       RF(a[0])});
  row({"one_hot", {I({2, 5}, 0, 3)}, AX(one_hot(x[0], 6)), RF(ref::one_hot(a[0], 6)), false});
  row({"one_hot_inferred", {Idx({4}, {1, 3, 0, 3})}, AX(one_hot(x[0])), RF(ref::one_hot(a[0], 4)), false});
  row({"one_hot_empty", {Idx({0}, {})}, AX(one_hot(x[0], 3)), RF(ref::one_hot(a[0], 3)), false});
  row({"pad_constant", {F({2, 3, 4})}, AX(pad(x[0], {1, 2}, "constant", 0.5)), RF(ref::pad(a[0], {1, 2}, 0, 0.5))});
  row({"pad_constant_negative", {F({2, 3, 4})}, AX(pad(x[0], {-1, 2, 1, -2})),
       RF(slice(slice(ref::pad(a[0], {0, 2, 1, 0}, 0), 2, 1, 6, 1), 1, 0, 2, 1))});
  row({"pad_constant_three_dims", {F({2, 3, 2})}, AX(pad(x[0], {1, 0, 0, 1, 2, 1}, "constant", -1)),
       RF(ref::pad(a[0], {1, 0, 0, 1, 2, 1}, 0, -1))});
  row({"pad_constant_int64", {I({2, 3}, -9, 9)}, AX(pad(x[0], {2, 1}, "constant", 7)), RF(ref::pad(a[0], {2, 1}, 0, 7)), false});
  row({"pad_reflect_1d", {F({2, 3, 5})}, AX(pad(x[0], {2, 4}, "reflect")), RF(ref::pad(a[0], {2, 4}, 1))});
  row({"pad_reflect_2d_unbatched", {F({2, 4, 5})}, AX(pad(x[0], {1, 3, 3, 2}, "reflect")), RF(ref::pad(a[0], {1, 3, 3, 2}, 1))});
  row({"pad_reflect_negative", {F({1, 2, 5})}, AX(pad(x[0], {-1, 3}, "reflect")),
       RF(slice(ref::pad(a[0], {0, 3}, 1), 2, 1, 8, 1))});
  row({"pad_replicate_2d", {F({2, 2, 3, 4})}, AX(pad(x[0], {2, 1, 1, 3}, "replicate")), RF(ref::pad(a[0], {2, 1, 1, 3}, 2))});
  row({"pad_replicate_3d", {F({1, 2, 2, 3, 2})}, AX(pad(x[0], {1, 1, 0, 2, 1, 0}, "replicate")),
       RF(ref::pad(a[0], {1, 1, 0, 2, 1, 0}, 2))});
  row({"pad_circular_2d", {F({2, 2, 3, 4})}, AX(pad(x[0], {2, 1, 1, 3}, "circular")), RF(ref::pad(a[0], {2, 1, 1, 3}, 3))});
  row({"interpolate_nearest_exact", {F({1, 2, 5, 4})}, AX(interpolate(x[0], {.size = {7, 3}, .mode = "nearest-exact"})),
       RF(ref::resample(a[0], {ref::nearest_exact_taps(5, 7), ref::nearest_exact_taps(4, 3)}))});
  row({"interpolate_linear", {F({2, 3, 4})}, AX(interpolate(x[0], {.size = {7}, .mode = "linear"})),
       RF(ref::resample(a[0], {ref::linear_taps(4, 7, false, 0)}))});
  row({"interpolate_bicubic", {F({1, 2, 3, 5})}, AX(interpolate(x[0], {.size = {5, 4}, .mode = "bicubic"})),
       RF(ref::resample(a[0], {ref::cubic_taps(3, 5), ref::cubic_taps(5, 4)}))});
  row({"interpolate_area_2d", {F({1, 2, 5, 7})}, AX(interpolate(x[0], {.size = {3, 4}, .mode = "area"})),
       RF(ref::resample(a[0], {ref::area_taps(5, 3), ref::area_taps(7, 4)}))});
  row({"interpolate_area_3d", {F({1, 2, 3, 5, 4})}, AX(interpolate(x[0], {.size = {2, 3, 2}, .mode = "area"})),
       RF(ref::resample(a[0], {ref::area_taps(3, 2), ref::area_taps(5, 3), ref::area_taps(4, 2)}))});
  row({"interpolate_nearest_size", {F({2, 3, 5})}, AX(interpolate(x[0], {.size = {7}})),
       RF(ref::resample(a[0], {ref::nearest_taps(5, 7, 0)}))});
  // 1 / scale_factor, not in / out: 4 * 1.7 -> 6 rows read 0 0 1 1 2 2 (4 / 6 would read 0 0 1 2 2 3).
  row({"interpolate_nearest_scale", {F({1, 2, 4, 5})}, AX(interpolate(x[0], {.scale_factor = {1.7, 1.3}})),
       RF(ref::resample(a[0], {ref::nearest_taps(4, 6, 1.7), ref::nearest_taps(5, 6, 1.3)}))});
  row({"interpolate_nearest_scale_recompute", {F({1, 2, 4, 5})},
       AX(interpolate(x[0], {.scale_factor = {1.7, 1.3}, .recompute_scale_factor = true})),
       RF(ref::resample(a[0], {ref::nearest_taps(4, 6, 0), ref::nearest_taps(5, 6, 0)}))});
  row({"interpolate_nearest_down_5d", {F({1, 2, 2, 5, 4})}, AX(interpolate(x[0], {.size = {3, 2, 4}})),
       RF(ref::resample(a[0], {ref::nearest_taps(2, 3, 0), ref::nearest_taps(5, 2, 0), ref::nearest_taps(4, 4, 0)}))});
  row({"interpolate_bilinear", {F({2, 2, 3, 4})}, AX(interpolate(x[0], {.size = {5, 7}, .mode = "bilinear"})),
       RF(ref::resample(a[0], {ref::linear_taps(3, 5, false, 0), ref::linear_taps(4, 7, false, 0)}))});
  row({"interpolate_bilinear_align_corners", {F({2, 2, 3, 4})},
       AX(interpolate(x[0], {.size = {5, 7}, .mode = "bilinear", .align_corners = true})),
       RF(ref::resample(a[0], {ref::linear_taps(3, 5, true, 0), ref::linear_taps(4, 7, true, 0)}))});
  row({"interpolate_bilinear_scale_down", {F({1, 2, 6, 5})},
       AX(interpolate(x[0], {.scale_factor = {0.6}, .mode = "bilinear"})),
       RF(ref::resample(a[0], {ref::linear_taps(6, 3, false, 0.6), ref::linear_taps(5, 3, false, 0.6)}))});
  row({"interpolate_bilinear_recompute", {F({1, 2, 6, 5})},
       AX(interpolate(x[0], {.scale_factor = {0.6}, .mode = "bilinear", .recompute_scale_factor = true})),
       RF(ref::resample(a[0], {ref::linear_taps(6, 3, false, 0), ref::linear_taps(5, 3, false, 0)}))});
  row({"einsum_matmul", {F({3, 4}), F({4, 5})}, AX(einsum("ij,jk->ik", {x[0], x[1]})), RF(ref::einsum("ij,jk->ik", {a[0], a[1]}))});
  row({"einsum_implicit", {F({3, 4}), F({4, 2})}, AX(einsum("ij,jk", {x[0], x[1]})), RF(ref::einsum("ij,jk->ik", {a[0], a[1]}))});
  row({"einsum_implicit_ascii_order", {F({2, 3})}, AX(einsum("bA", {x[0]})), RF(ref::einsum("bA->Ab", {a[0]}))});
  row({"einsum_batched", {F({2, 3, 4}), F({2, 4, 5})}, AX(einsum("bij,bjk->bik", {x[0], x[1]})),
       RF(ref::einsum("bij,bjk->bik", {a[0], a[1]}))});
  row({"einsum_ellipsis_broadcast", {F({2, 1, 3, 4}), F({3, 4, 2})}, AX(einsum("...ij,...jk->...ik", {x[0], x[1]})),
       RF(ref::einsum("abij,bjk->abik", {a[0], a[1]}))});
  row({"einsum_diagonal", {F({4, 4})}, AX(einsum("ii->i", {x[0]})), RF(ref::einsum("ii->i", {a[0]}))});
  row({"einsum_trace", {F({2, 3, 3})}, AX(einsum("bii", {x[0]})), RF(ref::einsum("bii->b", {a[0]}))});
  row({"einsum_outer", {F({3}), F({4})}, AX(einsum("i,j->ij", {x[0], x[1]})), RF(ref::einsum("i,j->ij", {a[0], a[1]}))});
  row({"einsum_dot", {F({5}), F({5})}, AX(einsum("i,i", {x[0], x[1]})), RF(ref::einsum("i,i->", {a[0], a[1]}))});
  row({"einsum_sum_permute", {F({2, 3, 4})}, AX(einsum("ijk->kj", {x[0]})), RF(ref::einsum("ijk->kj", {a[0]}))});
  row({"einsum_three", {F({2, 3}), F({3, 4}), F({4, 2})}, AX(einsum("ij,jk,kl->il", {x[0], x[1], x[2]})),
       RF(ref::einsum("ij,jk,kl->il", {a[0], a[1], a[2]}))});
  row({"einsum_bilinear", {F({2, 3}), F({4, 3, 5}), F({2, 5})}, AX(einsum("bn,anm,bm->ba", {x[0], x[1], x[2]})),
       RF(ref::einsum("bn,anm,bm->ba", {a[0], a[1], a[2]}))});
  row({"einsum_broadcast_label", {F({2, 1}), F({3})}, AX(einsum("ij,j->i", {x[0], x[1]})),
       RF(ref::einsum("ij,j->i", {a[0], a[1]}))});
  row({"einsum_diagonal_with_other", {F({3, 2, 3}), F({2})}, AX(einsum("iji,j->ij", {x[0], x[1]})),
       RF(ref::einsum("iji,j->ij", {a[0], a[1]}))});
  // A batched column of every 4th element: batch stride 9 < 3 rows * stride 4 (interleaved dims
  // without overlap, which oneDNN cannot describe: the kernel copies it; einsum's diagonals make such views).
  row({"matmul_interleaved_strided_column", {F({2, 9}), F({2, 1, 2})},
       AX(matmul(unsqueeze(slice(x[0], 1, 0, 9, 4), -1), x[1])),
       RF(matmul(reshape(slice(a[0], 1, 0, 9, 4), {2, 3, 1}), a[1]))});

  // ---------------------------------------------------------------- linear algebra
  row({"matmul_2d", {F({3, 4}), F({4, 5})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_dot", {F({6}), F({6})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_vec_mat", {F({4}), F({4, 3})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_mat_vec", {F({3, 4}), F({4})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_batched", {F({2, 3, 4}), F({2, 4, 5})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_batched_2d", {F({2, 3, 4}), F({4, 5})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_2d_batched", {F({3, 4}), F({2, 4, 5})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_broadcast_batch", {F({2, 1, 3, 4}), F({3, 4, 2})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"matmul_vec_batched", {F({4}), F({2, 4, 3})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"linear", {F({3, 4}), F({5, 4}), F({5})}, AX(linear(x[0], x[1], x[2])), RF(linear(a[0], a[1], &a[2]))});
  row({"linear_no_bias", {F({3, 4}), F({5, 4})}, AX(linear(x[0], x[1])), RF(linear(a[0], a[1], nullptr))});
  row({"linear_3d", {F({2, 3, 4}), F({2, 4}), F({2})}, AX(linear(x[0], x[1], x[2])), RF(linear(a[0], a[1], &a[2]))});
  row({"linear_1d", {F({4}), F({3, 4}), F({3})}, AX(linear(x[0], x[1], x[2])), RF(linear(a[0], a[1], &a[2]))});

  // ---------------------------------------------------------------- convolution
  row({"conv2d", {F({2, 3, 6, 6}), F({4, 3, 3, 3}), F({4})}, AX(conv2d(x[0], x[1], x[2])),
       RF(conv2d(a[0], a[1], &a[2], {}))});
  row({"conv2d_stride_padding_no_bias", {F({2, 2, 7, 6}), F({3, 2, 3, 3})},
       AX(conv2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}})),
       RF(conv2d(a[0], a[1], nullptr, {.sh = 2, .sw = 2, .ph = 1, .pw = 1}))});
  row({"conv2d_dilation", {F({1, 2, 7, 7}), F({2, 2, 3, 3}), F({2})},
       AX(conv2d(x[0], x[1], x[2], {.padding = {2, 2}, .dilation = {2, 2}})),
       RF(conv2d(a[0], a[1], &a[2], {.ph = 2, .pw = 2, .dh = 2, .dw = 2}))});
  row({"conv2d_groups", {F({2, 4, 5, 5}), F({6, 2, 3, 3}), F({6})}, AX(conv2d(x[0], x[1], x[2], {.groups = 2})),
       RF(conv2d(a[0], a[1], &a[2], {.groups = 2}))});
  row({"conv2d_depthwise", {F({1, 3, 5, 5}), F({3, 1, 3, 3})}, AX(conv2d(x[0], x[1], {}, {.padding = {1, 1}, .groups = 3})),
       RF(conv2d(a[0], a[1], nullptr, {.ph = 1, .pw = 1, .groups = 3}))});
  row({"conv2d_asymmetric", {F({2, 2, 5, 8}), F({3, 2, 2, 3}), F({3})},
       AX(conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}})),
       RF(conv2d(a[0], a[1], &a[2], {.sh = 2, .sw = 1, .ph = 0, .pw = 1, .dh = 1, .dw = 2}))});
  row({"conv2d_1x1", {F({2, 4, 3, 3}), F({5, 4, 1, 1})}, AX(conv2d(x[0], x[1])), RF(conv2d(a[0], a[1], nullptr, {}))});
  // conv_transpose2d: weight [in, out/groups, kh, kw]; output_padding >= stride only when < dilation
  row({"conv_transpose2d", {F({2, 3, 4, 4}), F({3, 2, 3, 3}), F({2})}, AX(conv_transpose2d(x[0], x[1], x[2])),
       RF(conv_transpose2d(a[0], a[1], &a[2], {}))});
  row({"conv_transpose2d_stride_padding_output_padding", {F({1, 2, 3, 4}), F({2, 3, 3, 3})},
       AX(conv_transpose2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}})),
       RF(conv_transpose2d(a[0], a[1], nullptr, {.sh = 2, .sw = 2, .ph = 1, .pw = 1, .oph = 1, .opw = 1}))});
  row({"conv_transpose2d_groups_dilation", {F({2, 4, 3, 3}), F({4, 3, 2, 2}), F({6})},
       AX(conv_transpose2d(x[0], x[1], x[2], {.groups = 2, .dilation = {2, 2}})),
       RF(conv_transpose2d(a[0], a[1], &a[2], {.dh = 2, .dw = 2, .groups = 2}))});
  row({"conv_transpose2d_output_padding_past_stride", {F({1, 2, 3, 3}), F({2, 2, 3, 3}), F({2})},
       AX(conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 1}, .output_padding = {2, 0}, .dilation = {3, 1}})),
       RF(conv_transpose2d(a[0], a[1], &a[2], {.sh = 2, .sw = 1, .oph = 2, .opw = 0, .dh = 3, .dw = 1}))});
  row({"conv_transpose2d_asymmetric", {F({2, 2, 3, 4}), F({2, 3, 2, 3}), F({3})},
       AX(conv_transpose2d(x[0], x[1], x[2], {.stride = {1, 2}, .padding = {1, 0}, .output_padding = {0, 1}})),
       RF(conv_transpose2d(a[0], a[1], &a[2], {.sh = 1, .sw = 2, .ph = 1, .pw = 0, .oph = 0, .opw = 1}))});
  row({"conv_transpose2d_depthwise", {F({1, 3, 4, 4}), F({3, 1, 3, 3})},
       AX(conv_transpose2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 3})),
       RF(conv_transpose2d(a[0], a[1], nullptr, {.sh = 2, .sw = 2, .ph = 1, .pw = 1, .groups = 3}))});

  // ---------------------------------------------------------------- pooling
  row({"max_pool2d", {D({2, 2, 4, 6})}, AX(max_pool2d(x[0])), RF(max_pool2d(a[0], {}))});
  row({"max_pool2d_with_indices", {D({2, 2, 5, 6})},
       AX(max_pool2d_with_indices(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})),
       RF(std::vector<Arr>{max_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1}),
                           max_pool2d_indices(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1})})});
  row({"max_unpool2d", {F({1, 2, 2, 3}), Idx({1, 2, 2, 3}, {0, 3, 5, 13, 14, 23, 1, 2, 11, 12, 15, 22})},
       AX(max_unpool2d(x[0], x[1], {})), RF(max_unpool2d(a[0], a[1], 4, 6))});
  row({"max_pool2d_floor", {D({1, 2, 5, 7})}, AX(max_pool2d(x[0])), RF(max_pool2d(a[0], {}))});
  row({"max_pool2d_stride_padding", {D({1, 2, 5, 5})}, AX(max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})),
       RF(max_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1}))});
  row({"max_pool2d_negative_padded", {D({1, 2, 4, 4}, -2, -1)},
       AX(max_pool2d(x[0], {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}})),
       RF(max_pool2d(a[0], {.kh = 2, .kw = 2, .sh = 1, .sw = 1, .ph = 1, .pw = 1}))});
  row({"max_pool2d_overlap_asymmetric", {D({2, 1, 5, 7})}, AX(max_pool2d(x[0], {.kernel = {3, 2}, .stride = {1, 2}})),
       RF(max_pool2d(a[0], {.kh = 3, .kw = 2, .sh = 1, .sw = 2}))});
  // ceil_mode (a last window may overhang the padded input, never start past it) and dilation
  row({"max_pool2d_ceil", {D({1, 2, 5, 7})}, AX(max_pool2d(x[0], {.ceil_mode = true})),
       RF(max_pool2d(a[0], {.ceil_mode = true}))});
  row({"max_pool2d_ceil_padding", {D({1, 2, 6, 6})},
       AX(max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})),
       RF(max_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .ceil_mode = true}))});
  row({"max_pool2d_ceil_dropped_window", {D({1, 2, 4, 5})},  // a last column window would start in the padding: dropped
       AX(max_pool2d(x[0], {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})),
       RF(max_pool2d(a[0], {.kh = 2, .kw = 2, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .ceil_mode = true}))});
  row({"max_pool2d_dilation", {D({1, 2, 7, 7})},
       AX(max_pool2d(x[0], {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {2, 2}})),
       RF(max_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 2, .dw = 2}))});
  row({"max_pool2d_dilation_ceil_asymmetric", {D({2, 1, 8, 9})},
       AX(max_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 1}, .ceil_mode = true})),
       RF(max_pool2d(a[0], {.kh = 2, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .dh = 2, .dw = 1, .ceil_mode = true}))});
  row({"avg_pool2d", {F({2, 2, 4, 6})}, AX(avg_pool2d(x[0])), RF(avg_pool2d(a[0], {}))});
  // ceil_mode averages: count_include_pad counts the explicit padding, never the overhang past it
  row({"avg_pool2d_ceil_pad_included", {F({1, 2, 6, 6})},
       AX(avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})),
       RF(avg_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .ceil_mode = true}))});
  row({"avg_pool2d_ceil_pad_excluded", {F({1, 2, 6, 6})},
       AX(avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false})),
       RF(avg_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .count_include_pad = false, .ceil_mode = true}))});
  row({"avg_pool2d_ceil_no_padding", {F({2, 2, 5, 7})}, AX(avg_pool2d(x[0], {.ceil_mode = true})),
       RF(avg_pool2d(a[0], {.ceil_mode = true}))});
  row({"avg_pool2d_pad_included", {F({1, 2, 5, 5})}, AX(avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})),
       RF(avg_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1}))});
  row({"avg_pool2d_pad_excluded", {F({1, 2, 5, 5})},
       AX(avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false})),
       RF(avg_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .count_include_pad = false}))});
  row({"avg_pool2d_asymmetric", {F({2, 1, 6, 5})}, AX(avg_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 1}})),
       RF(avg_pool2d(a[0], {.kh = 2, .kw = 3, .sh = 2, .sw = 1}))});
  row({"adaptive_avg_pool2d_even", {F({2, 2, 6, 6})}, AX(adaptive_avg_pool2d(x[0], {3, 3})), RF(adaptive_avg_pool2d(a[0], 3, 3))});
  row({"adaptive_avg_pool2d_uneven", {F({1, 2, 5, 7})}, AX(adaptive_avg_pool2d(x[0], {3, 4})), RF(adaptive_avg_pool2d(a[0], 3, 4))});
  row({"adaptive_avg_pool2d_global", {F({2, 3, 4, 5})}, AX(adaptive_avg_pool2d(x[0], {1, 1})), RF(adaptive_avg_pool2d(a[0], 1, 1))});

  // ---------------------------------------------------------------- attention (fused op)
  row({"scaled_dot_product_attention", {F({2, 3, 5, 4}, -2, 2), F({2, 3, 7, 4}, -2, 2), F({2, 3, 7, 3})},
       AX(scaled_dot_product_attention(x[0], x[1], x[2])), RF(ref_attention(a[0], a[1], a[2], false, 0.5))});
  row({"scaled_dot_product_attention_causal", {F({2, 6, 4}, -2, 2), F({2, 6, 4}, -2, 2), F({2, 6, 5})},
       AX(scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true})), RF(ref_attention(a[0], a[1], a[2], true, 0.5))});
  row({"scaled_dot_product_attention_long", {F({1, 2, 70, 8}), F({1, 2, 70, 8}), F({1, 2, 70, 8})},
       AX(scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true, .scale = 0.9})),
       RF(ref_attention(a[0], a[1], a[2], true, 0.9))});
  // ---------------------------------------------------------------- composites of issue 15
  row({"masked_fill", {F({2, 3, 4}), Bool({3, 4})}, AX(masked_fill(x[0], x[1], -2.5)),
       RF(zip(a[0], expand(a[1], {2, 3, 4}), [](double u, double m) { return m != 0 ? -2.5 : u; }, kFloat32))});
  row({"tril", {F({2, 4, 5})}, AX(tril(x[0])), RF(ref_tri(a[0], 0, true))});
  row({"tril_diagonal", {F({3, 4})}, AX(tril(x[0], -1)), RF(ref_tri(a[0], -1, true))});
  row({"triu", {F({2, 4, 5})}, AX(triu(x[0])), RF(ref_tri(a[0], 0, false))});
  row({"triu_diagonal", {F({4, 3})}, AX(triu(x[0], 2)), RF(ref_tri(a[0], 2, false))});
  row({"gelu_tanh_ref", {F({2, 3, 4}, -3, 3)}, AX(gelu(x[0], "tanh")), RF(map(a[0], gelu_tanh))});

  // ---------------------------------------------------------------- normalization
  // Inputs: x, weight, bias, running_mean, running_var. Outputs: y, then the running stats after the call.
  auto bn = [](bool training, double momentum, double eps) {
    return [=](const std::vector<Tensor>& x) -> Outs {
      Tensor y = batch_norm(x[0], x[1], x[2], x[3], x[4], training, momentum, eps);
      return {y, x[3], x[4]};
    };
  };
  auto bn_ref = [](bool training, double momentum, double eps) {
    return [=](const std::vector<Arr>& a) -> std::vector<Arr> {
      return ref::batch_norm(a[0], &a[1], &a[2], a[3], a[4], training, momentum, eps);
    };
  };
  row({"batch_norm_train", {F({4, 3, 2, 2}, -2, 2), F({3}, 0.5, 1.5), F({3}), Fng({3}), Fng({3}, 0.5, 2)}, bn(true, 0.1, 1e-5),
       bn_ref(true, 0.1, 1e-5)});
  row({"batch_norm_train_2d_momentum", {F({6, 4}), F({4}, 0.5, 1.5), F({4}), Fng({4}), Fng({4}, 0.5, 2)}, bn(true, 0.3, 1e-3),
       bn_ref(true, 0.3, 1e-3)});
  row({"batch_norm_eval", {F({3, 3, 2, 2}, -2, 2), F({3}, 0.5, 1.5), F({3}), Fng({3}), Fng({3}, 0.5, 2)}, bn(false, 0.1, 1e-5),
       bn_ref(false, 0.1, 1e-5)});
  row({"layer_norm", {F({2, 3, 4}, -2, 2), F({4}, 0.5, 1.5), F({4})}, AX(layer_norm(x[0], {4}, x[1], x[2])),
       RF(ref::layer_norm(a[0], 1, &a[1], &a[2], 1e-5))});
  row({"layer_norm_2dims", {F({2, 3, 4}, -2, 2), F({3, 4}, 0.5, 1.5), F({3, 4})}, AX(layer_norm(x[0], {3, 4}, x[1], x[2], 1e-3)),
       RF(ref::layer_norm(a[0], 2, &a[1], &a[2], 1e-3))});
  row({"layer_norm_no_affine", {F({3, 5}, -2, 2)}, AX(layer_norm(x[0], {5})), RF(ref::layer_norm(a[0], 1, nullptr, nullptr, 1e-5))});
  row({"group_norm", {F({2, 6, 3, 3}, -2, 2), F({6}, 0.5, 1.5), F({6})}, AX(group_norm(x[0], 3, x[1], x[2])),
       RF(ref::group_norm(a[0], 3, &a[1], &a[2], 1e-5))});
  row({"group_norm_no_affine_3d", {F({3, 4, 5}, -2, 2)}, AX(group_norm(x[0], 2, {}, {}, 1e-3)),
       RF(ref::group_norm(a[0], 2, nullptr, nullptr, 1e-3))});
  row({"group_norm_2d_one_group", {F({4, 6}, -2, 2), F({6}, 0.5, 1.5), F({6})}, AX(group_norm(x[0], 1, x[1], x[2])),
       RF(ref::group_norm(a[0], 1, &a[1], &a[2], 1e-5))});

  // ---------------------------------------------------------------- dropout (deterministic forms; training mode has its own tests)
  row({"dropout_eval", {F({3, 4})}, AX(dropout(x[0], 0.5, false)), RF(a[0])});
  row({"dropout_p0", {F({3, 4})}, AX(dropout(x[0], 0.0, true)), RF(a[0])});

  // ---------------------------------------------------------------- softmax
  row({"softmax", {F({3, 5}, -3, 3)}, AX(softmax(x[0], 1)), RF(along(a[0], 1, vsoftmax))});
  row({"softmax_dim0", {F({4, 3, 2}, -3, 3)}, AX(softmax(x[0], 0)), RF(along(a[0], 0, vsoftmax))});
  row({"softmax_negative_dim", {F({2, 3, 4}, -3, 3)}, AX(softmax(x[0], -2)), RF(along(a[0], 1, vsoftmax))});
  row({"softmax_large", {F({2, 6}, 50, 100)}, AX(softmax(x[0], -1)), RF(along(a[0], 1, vsoftmax)), true, true, 1e-5, 1e-4,
       1e-2});
  row({"log_softmax", {F({3, 5}, -3, 3)}, AX(log_softmax(x[0], 1)), RF(along(a[0], 1, vlog_softmax))});
  row({"log_softmax_dim0", {F({4, 3, 2}, -3, 3)}, AX(log_softmax(x[0], 0)), RF(along(a[0], 0, vlog_softmax))});
  row({"log_softmax_large", {F({2, 6}, -100, 100)}, AX(log_softmax(x[0], -1)), RF(along(a[0], 1, vlog_softmax)), true,
       true, 1e-5, 1e-4, 1e-2});

  // ---------------------------------------------------------------- losses
  auto ce = [](Red r, int64_t ignore, double ls) {
    return [=](const std::vector<Tensor>& x) -> Outs {
      return {cross_entropy(x[0], x[1], {.reduction = to_axle(r), .ignore_index = ignore, .label_smoothing = ls})};
    };
  };
  auto ce_ref = [](Red r, int64_t ignore, double ls) {
    return [=](const std::vector<Arr>& a) -> std::vector<Arr> { return {ref::cross_entropy(a[0], a[1], r, ignore, ls)}; };
  };
  row({"cross_entropy_mean", {F({4, 5}, -3, 3), Idx({4}, {1, 0, 4, 1})}, ce(Red::Mean, -100, 0), ce_ref(Red::Mean, -100, 0)});
  row({"cross_entropy_sum", {F({4, 5}, -3, 3), Idx({4}, {1, 0, 4, 1})}, ce(Red::Sum, -100, 0), ce_ref(Red::Sum, -100, 0)});
  row({"cross_entropy_none", {F({4, 5}, -3, 3), Idx({4}, {1, 0, 4, 1})}, ce(Red::None, -100, 0), ce_ref(Red::None, -100, 0)});
  row({"cross_entropy_default_options", {F({3, 4}, -3, 3), Idx({3}, {3, 2, 0})}, AX(cross_entropy(x[0], x[1])),
       RF(ref::cross_entropy(a[0], a[1], Red::Mean, -100, 0))});
  row({"cross_entropy_ignore_default", {F({5, 3}, -3, 3), Idx({5}, {2, -100, 0, -100, 1})}, ce(Red::Mean, -100, 0),
       ce_ref(Red::Mean, -100, 0)});
  row({"cross_entropy_ignore_index", {F({5, 3}, -3, 3), Idx({5}, {2, 1, 0, 1, 1})}, ce(Red::Mean, 1, 0), ce_ref(Red::Mean, 1, 0)});
  row({"cross_entropy_ignore_none", {F({5, 3}, -3, 3), Idx({5}, {2, 1, 0, 1, 1})}, ce(Red::None, 1, 0), ce_ref(Red::None, 1, 0)});
  row({"cross_entropy_label_smoothing", {F({4, 5}, -3, 3), Idx({4}, {1, 0, 4, 1})}, ce(Red::Mean, -100, 0.1),
       ce_ref(Red::Mean, -100, 0.1)});
  row({"cross_entropy_label_smoothing_sum", {F({4, 5}, -3, 3), Idx({4}, {1, 0, 4, 1})}, ce(Red::Sum, -100, 0.2),
       ce_ref(Red::Sum, -100, 0.2)});
  row({"cross_entropy_label_smoothing_ignore", {F({5, 3}, -3, 3), Idx({5}, {2, -100, 0, 1, -100})}, ce(Red::Mean, -100, 0.3),
       ce_ref(Red::Mean, -100, 0.3)});
  row({"cross_entropy_spatial", {F({2, 3, 4}, -3, 3), Idx({2, 4}, {0, 2, 1, 1, 2, 2, 0, 1})}, ce(Red::Mean, -100, 0),
       ce_ref(Red::Mean, -100, 0)});
  row({"cross_entropy_spatial_none", {F({2, 3, 2, 2}, -3, 3), Idx({2, 2, 2}, {0, 2, 1, 1, 2, 2, 0, 1})}, ce(Red::None, -100, 0),
       ce_ref(Red::None, -100, 0)});
  auto nll = [](Red r, int64_t ignore) {
    return [=](const std::vector<Tensor>& x) -> Outs { return {nll_loss(x[0], x[1], to_axle(r), ignore)}; };
  };
  auto nll_ref = [](Red r, int64_t ignore) {
    return [=](const std::vector<Arr>& a) -> std::vector<Arr> { return {ref::nll_smooth(a[0], a[1], r, ignore, 0)}; };
  };
  row({"nll_loss_mean", {F({4, 5}, -3, 0), Idx({4}, {4, 0, 2, 2})}, nll(Red::Mean, -100), nll_ref(Red::Mean, -100)});
  row({"nll_loss_sum", {F({4, 5}, -3, 0), Idx({4}, {4, 0, 2, 2})}, nll(Red::Sum, -100), nll_ref(Red::Sum, -100)});
  row({"nll_loss_none", {F({4, 5}, -3, 0), Idx({4}, {4, 0, 2, 2})}, nll(Red::None, -100), nll_ref(Red::None, -100)});
  row({"nll_loss_ignore_index", {F({4, 5}, -3, 0), Idx({4}, {4, 3, 2, 3})}, nll(Red::Mean, 3), nll_ref(Red::Mean, 3)});
  row({"nll_loss_default", {F({3, 4}, -3, 0), Idx({3}, {3, -100, 1})}, AX(nll_loss(x[0], x[1])),
       RF(ref::nll_smooth(a[0], a[1], Red::Mean, -100, 0))});
  row({"mse_loss_mean", {F({3, 4}), F({3, 4})}, AX(mse_loss(x[0], x[1])), RF(ref::mse_loss(a[0], a[1], Red::Mean))});
  row({"mse_loss_sum", {F({3, 4}), F({3, 4})}, AX(mse_loss(x[0], x[1], Reduction::Sum)), RF(ref::mse_loss(a[0], a[1], Red::Sum))});
  row({"mse_loss_none", {F({2, 3, 2}), F({2, 3, 2})}, AX(mse_loss(x[0], x[1], Reduction::None)),
       RF(ref::mse_loss(a[0], a[1], Red::None))});
  row({"embedding", {F({5, 3}), Idx({2, 4}, {4, 0, 1, 4, 4, 2, 0, 3})}, AX(embedding(x[0], x[1])), RF(ref::embedding(a[0], a[1]))});
  row({"embedding_1d", {F({4, 2}), Idx({3}, {3, 3, 1})}, AX(embedding(x[0], x[1])), RF(ref::embedding(a[0], a[1]))});
  row({"embedding_int32_indices", {F({4, 2}), {.shape = {3}, .dtype = kInt32, .values = {2, 0, 2}}}, AX(embedding(x[0], x[1])),
       RF(ref::embedding(a[0], a[1]))});

  // ---------------------------------------------------------------- collectives on a group of one
  // The default group outside launch() has one rank: all_to_all and collective_permute are
  // identities there (shape rules, kernels and vjps run). Several devices: test_spmd_comm.cpp.
  row({"all_to_all_group_of_one", {F({2, 3, 4})},
       AX(ops::call1(ops::OpKind::AllToAll, {x[0]}, ops::attr::AllToAll{.split_dim = 1, .concat_dim = 2, .group = 0,
                                                                           .world = 1}.pack())),
       RF(a[0])});
  row({"collective_permute_group_of_one", {F({3, 2})},
       AX(ops::call1(ops::OpKind::CollectivePermute, {x[0]},
                     ops::attr::CollectivePermute{.group = 0, .source_of = {0}}.pack())),
       RF(a[0])});

  // ---------------------------------------------------------------- large, odd-sized: the OpenMP paths
  // Each has an input above cpu::kParallelGrain elements (LargeRowsRunOnATeam checks it), in
  // odd sizes, so the split between threads has ragged ends; the non-contiguous runs also
  // take the strided (outer-loop) split. Gradients are checked at sampled elements.
  const Shape wide{3, 65537}, sq{257, 257};
  row({"relu_big", {Nz(sq)}, AX(relu(x[0])), RF(map(a[0], [](double v) { return v > 0 ? v : 0.0; }))});
  row({"gelu_big", {F(wide, -3, 3)}, AX(gelu(x[0])), RF(map(a[0], ref::gelu))});
  row({"gelu_tanh_big", {F(wide, -4, 4)}, AX(gelu(x[0], "tanh")), RF(map(a[0], [](double v) {
         return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
       }))});
  row({"exp_big", {F(sq, -2, 2)}, AX(exp(x[0])), RF(map(a[0], [](double v) { return std::exp(v); }))});
  row({"add_broadcast_big", {F(wide), F({65537})}, AX(add(x[0], x[1])), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"mul_broadcast_big", {F(sq), F({257, 1})}, AX(mul(x[0], x[1])), RF(arith(a[0], a[1], std::multiplies<double>()))});
  row({"div_big", {F(sq), Pos(sq)}, AX(div(x[0], x[1])), RF(arith(a[0], a[1], std::divides<double>()))});
  row({"maximum_big", {F(wide), F(wide)}, AX(maximum(x[0], x[1])),
       RF(arith(a[0], a[1], [](double u, double v) { return std::max(u, v); }))});
  row({"where_big", {Bool(sq), F(sq), F(sq)}, AX(where(x[0], x[1], x[2])),
       RF(zip3(a[0], a[1], a[2], [](double c, double u, double v) { return c != 0 ? u : v; }, kFloat32))});
  row({"lt_big", {Pick(sq, few), Pick({257}, few)}, AX(lt(x[0], x[1])), RF(compare(a[0], a[1], std::less<double>())), false});
  row({"cast_float_to_int64_big", {F(wide, -5, 5)}, AX(cast(x[0], kInt64)),
       RF(map(a[0], [](double v) { return std::trunc(v); }, kInt64)), false});
  row({"contiguous_of_transposed_big", {F(sq)}, AX(x[0].t().contiguous()), RF(permute(a[0], {1, 0}))});
  row({"sum_all_big", {F(wide)}, AX(sum(x[0])), RF(reduce(a[0], {}, false, vsum, kFloat32)), true, true, 1e-4});
  row({"sum_dim0_big", {F(sq)}, AX(sum(x[0], {0})), RF(reduce(a[0], {0}, false, vsum, kFloat32))});
  row({"sum_dim1_big", {F(wide)}, AX(sum(x[0], {1}, true)), RF(reduce(a[0], {1}, true, vsum, kFloat32)), true, true, 1e-4});
  row({"sum_int64_big", {I(sq, -9, 9)}, AX(sum(x[0], {1})), RF(reduce(a[0], {1}, false, vsum, kInt64)), false});
  row({"mean_dim_big", {F(sq)}, AX(mean(x[0], {1})), RF(reduce(a[0], {1}, false, vmean, kFloat32))});
  row({"amax_dim0_big", {D(sq)}, AX(amax(x[0], {0})), RF(reduce(a[0], {0}, false, vmax, kFloat32))});
  row({"argmax_big", {D(wide)}, AX(argmax(x[0], 1)), RF(reduce(a[0], {1}, false, vargmax, kInt64)), false});
  row({"logsumexp_big", {F(sq, -3, 3)}, AX(logsumexp(x[0], {1})), RF(reduce(a[0], {1}, false, vlogsumexp, kFloat32))});
  row({"var_big", {F(wide)}, AX(var(x[0], {1})), RF(reduce(a[0], {1}, false, [](auto& v) { return vvar(v, 1); }, kFloat32))});
  row({"cumsum_big", {F(wide)}, AX(cumsum(x[0], 1)), RF(along(a[0], 1, vcumsum)), true, true, 1e-4});
  row({"prod_dim0_big", {F(sq, 0.9, 1.1)}, AX(prod(x[0], 0)), RF(reduce(a[0], {0}, false, vprod, kFloat32))});
  row({"sort_big", {D(sq)}, AX(sort(x[0], 0, true)), RF(sorted(a[0], 0, true))});
  row({"softmax_big", {F(sq, -3, 3)}, AX(softmax(x[0], 1)), RF(along(a[0], 1, vsoftmax))});
  row({"softmax_dim0_big", {F(sq, -3, 3)}, AX(softmax(x[0], 0)), RF(along(a[0], 0, vsoftmax))});
  row({"log_softmax_big", {F(wide, -3, 3)}, AX(log_softmax(x[0], -1)), RF(along(a[0], 1, vlog_softmax))});
  row({"cross_entropy_big", {F({257, 129}, -3, 3), I({257}, 0, 128)}, ce(Red::Mean, -100, 0), ce_ref(Red::Mean, -100, 0)});
  row({"nll_loss_none_big", {F({257, 129}, -3, 0), I({257}, 0, 128)}, nll(Red::None, -100), nll_ref(Red::None, -100)});
  row({"index_select_big", {F(sq), I({300}, 0, 256)}, AX(index_select(x[0], 0, x[1])), RF(index_select(a[0], 0, a[1]))});
  row({"gather_big", {F(sq), I(sq, 0, 256)}, AX(gather(x[0], 1, x[1])), RF(gather(a[0], 1, a[1]))});
  row({"embedding_big", {F({300, 129}), I({2, 257}, 0, 299)}, AX(embedding(x[0], x[1])), RF(ref::embedding(a[0], a[1]))});
  row({"cat_big", {F({257, 129}), F({257, 128})}, AX(cat({x[0], x[1]}, 1)), RF(cat({a[0], a[1]}, 1))});
  row({"slice_big", {F(sq)}, AX(slice(x[0], 1, 1, 256, 2)), RF(slice(a[0], 1, 1, 256, 2))});
  row({"matmul_big", {F({129, 257}), F({257, 131})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1])), true, true, 1e-4});
  row({"max_pool2d_big", {D({2, 8, 64, 65})}, AX(max_pool2d(x[0])), RF(max_pool2d(a[0], {}))});
  // a large input (sampled and directional finite differences) with few channels: each of
  // the weights checked one by one costs two runs of the slow double reference (864 weights
  // over 16 channels took 85 s, beyond ctest's limit under ASan)
  row({"conv_transpose2d_big", {F({1, 4, 96, 96}), F({4, 2, 3, 3}), F({2})},
       AX(conv_transpose2d(x[0], x[1], x[2], {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}})),
       RF(conv_transpose2d(a[0], a[1], &a[2], {.sh = 2, .sw = 2, .ph = 1, .pw = 1, .oph = 1, .opw = 0})), true, true, 1e-4});
  row({"avg_pool2d_ceil_big", {F({2, 8, 64, 65})}, AX(avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})),
       RF(avg_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .ceil_mode = true}))});
  row({"max_pool2d_dilation_big", {D({2, 8, 64, 65})}, AX(max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .dilation = {2, 2}, .ceil_mode = true})),
       RF(max_pool2d(a[0], {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .dh = 2, .dw = 2, .ceil_mode = true}))});
  row({"avg_pool2d_big", {F({2, 8, 64, 65})}, AX(avg_pool2d(x[0])), RF(avg_pool2d(a[0], {}))});
  row({"adaptive_avg_pool2d_big", {F({2, 8, 48, 48})}, AX(adaptive_avg_pool2d(x[0], {5, 7})), RF(adaptive_avg_pool2d(a[0], 5, 7))});
  row({"batch_norm_train_big", {F({64, 8, 9, 9}, -2, 2), F({8}, 0.5, 1.5), F({8}), Fng({8}), Fng({8}, 0.5, 2)},
       bn(true, 0.1, 1e-5), bn_ref(true, 0.1, 1e-5)});
  row({"layer_norm_big", {F(sq, -2, 2), F({257}, 0.5, 1.5), F({257})}, AX(layer_norm(x[0], {257}, x[1], x[2])),
       RF(ref::layer_norm(a[0], 1, &a[1], &a[2], 1e-5))});

  // ---------------------------------------------------------------- zero-size tensors
  row({"relu_zero_size", {Nz({0})}, AX(relu(x[0])), RF(map(a[0], [](double v) { return v > 0 ? v : 0.0; }))});
  row({"add_zero_size", {F({0, 3}), F({3})}, AX(add(x[0], x[1])), RF(arith(a[0], a[1], std::plus<double>()))});
  row({"sum_dim_zero_size", {F({0, 4})}, AX(sum(x[0], {0})), RF(reduce(a[0], {0}, false, vsum, kFloat32))});
  row({"sum_all_zero_size", {F({2, 0})}, AX(sum(x[0])), RF(reduce(a[0], {}, false, vsum, kFloat32))});
  row({"amax_zero_rows", {D({0, 4})}, AX(amax(x[0], {1})), RF(reduce(a[0], {1}, false, vmax, kFloat32))});
  row({"matmul_zero_inner", {F({2, 0}), F({0, 3})}, AX(matmul(x[0], x[1])), RF(matmul(a[0], a[1]))});
  row({"cat_zero_size", {F({0, 3}), F({2, 3})}, AX(cat({x[0], x[1]}, 0)), RF(cat({a[0], a[1]}, 0))});
  row({"reshape_zero_size", {F({0, 4})}, AX(reshape(x[0], {2, 0, 2})), RF(reshape(a[0], {2, 0, 2}))});
  row({"softmax_zero_size", {F({0, 5})}, AX(softmax(x[0], 1)), RF(along(a[0], 1, vsoftmax))});
  row({"cumsum_zero_size", {F({0, 3})}, AX(cumsum(x[0], 0)), RF(along(a[0], 0, vcumsum))});
  row({"prod_zero_size", {F({2, 0})}, AX(prod(x[0], 1)), RF(reduce(a[0], {1}, false, vprod, kFloat32))});
  row({"sort_zero_size", {F({3, 0})}, AX(sort(x[0], 1)), RF(sorted(a[0], 1, false))});
  row({"index_select_empty_index", {F({3, 2}), Idx({0}, {})}, AX(index_select(x[0], 0, x[1])), RF(index_select(a[0], 0, a[1]))});

  // ---------------------------------------------------------------- spmd (src/ops/spmd.h): off a device thread
  // the device is 0; tests/spmd/test_spmd_rules_nn.cpp runs every device.
  row({"sharding_constraint", {F({2, 3})}, AX(ops::sharding_constraint(x[0], {7, 1, 2}, false)), RF(a[0])});
  row({"sharding_constraint_on_grad", {F({2, 3})}, AX(ops::sharding_constraint(x[0], {7, 1, 2}, true) * 2.0),
       RF(map(a[0], [](double v) { return 2 * v; }))});
  // dim 0 in 2 tiles of 3 rows: device 0 holds tile 0 (rows 0..2), or tile 1 (rows 3, 4 and a zero row).
  row({"shard_slice", {F({5, 3})}, AX(ops::shard_slice(x[0], {2, 2, 1, 0, 0, 1, 0})), RF(slice(a[0], 0, 0, 3, 1)), false});
  row({"shard_slice_padded", {F({5, 3})}, AX(ops::shard_slice(x[0], {2, 2, 3, 1, 2, 0, 0})),
       RF(cat({slice(slice(a[0], 0, 3, 5, 1), 1, 2, 3, 1), ref::zeros(Shape{1, 1})}, 0)), false});
  // device 0 holds tile 1 of a dim of global size 5 in shards of 3: its last row is padding.
  row({"mask_padding", {F({3, 4})}, AX(ops::mask_padding(x[0], 0, 5, -7, {1, 0})),
       RF(cat({slice(a[0], 0, 0, 2, 1), map(slice(a[0], 0, 2, 3, 1), [](double) { return -7.0; })}, 0)), false});
  row({"mask_padding_int64", {I({2, 4}, 0, 3)}, AX(ops::mask_padding(x[0], -1, 6, -100, {1, 0})),
       RF(cat({slice(a[0], 1, 0, 2, 1), map(slice(a[0], 1, 2, 4, 1), [](double) { return -100.0; })}, 1)), false});

  // ---------------------------------------------------------------- compiler barriers (the identity)
  row({"optimization_barrier", {F({2, 3})}, AX(optimization_barrier({x[0]})[0]), RF(a[0])});
  // Two operands through one barrier, both outputs used: each gets its own gradient.
  row({"optimization_barrier_two", {F({2, 3}), F({3})},
       [](const std::vector<Tensor>& x) -> Outs {
         std::vector<Tensor> y = optimization_barrier({x[0], x[1]});
         return {mul(y[0], y[1])};
       },
       RF(arith(a[0], a[1], std::multiplies<double>()))});

  // ---------------------------------------------------------------- composites (several ops in one graph)
  row({"mlp_block", {F({4, 6}), F({5, 6}), F({5}), F({3, 5}), Idx({4}, {2, 0, 1, 2})},
       AX(cross_entropy(linear(relu(linear(x[0], x[1], x[2])), x[3]), x[4])),
       RF(ref::cross_entropy(linear(map(linear(a[0], a[1], &a[2]), [](double v) { return v > 0 ? v : 0.0; }), a[3], nullptr),
                             a[4], Red::Mean, -100, 0))});
  return t;
}

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> t = build_table();
  return t;
}
std::vector<OpCase> differentiable_rows() {
  std::vector<OpCase> d;
  for (const OpCase& c : op_table())
    if (c.diff) d.push_back(c);
  return d;
}

// ======================================================================== checks
std::vector<Arr> make_inputs(const OpCase& c) {
  std::vector<Arr> in;
  for (size_t k = 0; k < c.in.size(); ++k) in.push_back(generate(c.in[k], seed_of(c.name, k)));
  return in;
}

/// Shape, dtype and values of `got` against the reference `want`.
void expect_matches(const Arr& want, const Tensor& got, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined result";
  ASSERT_EQ(got.shape(), want.shape) << what << ": shape";
  ASSERT_EQ(got.dtype(), want.dtype) << what << ": dtype";
  std::vector<double> g = got.to_vector<double>();
  const bool exact = !ref::is_float(want.dtype);
  int bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want.v[i];
    const bool ok = exact ? g[i] == w : std::abs(g[i] - w) <= tol * (1 + std::abs(w));
    if (!ok && bad++ < 5) msg << "\n  at " << i << ": got " << g[i] << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " values differ" << msg.str();
}

class OpForward : public ::testing::TestWithParam<OpCase> {};
class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpForward, MatchesReference) {
  const OpCase& c = GetParam();
  std::vector<Arr> in = make_inputs(c);
  std::vector<Arr> want = c.ref(in);
  for (const Device& dev : devices_to_check()) {
    SCOPED_TRACE(::testing::Message() << "device " << dev);
    std::vector<Tensor> x;
    for (const Arr& a : in) x.push_back(to_tensor(a).to(dev));
    Outs out = c.fn(x);
    ASSERT_EQ(out.size(), want.size()) << "number of outputs";
    for (size_t k = 0; k < out.size(); ++k)
      expect_matches(want[k], out[k].cpu(), c.tol, "output " + std::to_string(k));
  }
}

TEST_P(OpForward, NonContiguousInputs) {
  const OpCase& c = GetParam();
  if (!c.noncontig) GTEST_SKIP() << c.name << " requires contiguous inputs";
  std::vector<Arr> in = make_inputs(c);
  std::vector<Arr> want = c.ref(in);
  for (const Device& dev : devices_to_check()) {
    SCOPED_TRACE(::testing::Message() << "device " << dev);
    std::vector<Tensor> x;
    for (const Arr& a : in) {
      Tensor t = to_noncontiguous(a, dev);
      if (a.numel() > 1) {
        if (dev.is_cpu()) {
          ASSERT_FALSE(t.is_contiguous()) << "harness: layout is contiguous";
        } else {
          // Not copied to a dense buffer first: the view is pending IR (slice, permute) that
          // the graph of the op under test takes in.
          ASSERT_TRUE(lazy::lazy_of(t) && lazy::lazy_of(t)->ir) << "harness: the lazy view is already materialised";
          ASSERT_EQ(lazy::lazy_of(t)->ir.node->kind, lazy::NodeKind::Op) << "harness: the lazy view is not an op";
        }
        // Read a second view, so that `t` stays pending.
        ASSERT_EQ(to_noncontiguous(a, dev).cpu().to_vector<double>(), a.v) << "harness: non-contiguous copy differs";
      }
      x.push_back(t);
    }
    Outs out = c.fn(x);
    ASSERT_EQ(out.size(), want.size()) << "number of outputs";
    for (size_t k = 0; k < out.size(); ++k)
      expect_matches(want[k], out[k].cpu(), c.tol, "output " + std::to_string(k));
  }
}

/// L(inputs) = sum(ref(inputs)[0] * R), in double.
double weighted_ref(const OpCase& c, const std::vector<Arr>& in, const std::vector<double>& R) {
  Arr y = c.ref(in)[0];
  double s = 0;
  for (size_t i = 0; i < R.size(); ++i) s += y.v[i] * R[i];
  return s;
}

/// Inputs up to this size are checked at every element; larger ones at sampled elements (the
/// first and last, both sides of each split of 2, 3 and 4 threads, random ones) and along one
/// random direction over all elements.
constexpr int64_t kFullCheck = 4096;
std::vector<size_t> checked_elements(int64_t n, uint64_t seed) {
  std::set<size_t> s;
  if (n <= kFullCheck) {
    for (int64_t i = 0; i < n; ++i) s.insert(size_t(i));
  } else {
    for (int64_t parts : {2, 3, 4})
      for (int64_t p = 1; p < parts; ++p)
        for (int64_t d : {-1, 0}) s.insert(size_t(n * p / parts + d));
    s.insert(0);
    s.insert(size_t(n - 1));
    Rng r(seed);
    while (s.size() < 20) s.insert(size_t(r.next() % uint64_t(n)));
  }
  return {s.begin(), s.end()};
}

TEST_P(OpGradient, MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  std::vector<Arr> in = make_inputs(c);
  Arr y = c.ref(in)[0];
  ASSERT_TRUE(ref::is_float(y.dtype)) << "a differentiable row needs a floating output 0";
  Arr R = generate(F(y.shape), seed_of(c.name, 1000));

  // Central differences of the double reference (exact up to O(eps^2)).
  std::vector<size_t> checked;
  std::vector<std::vector<size_t>> at(in.size());    // elements checked one by one
  std::vector<std::vector<double>> fd(in.size());    // finite differences there
  std::vector<std::vector<double>> dir(in.size());   // large inputs: a random direction V
  std::vector<double> fd_dir(in.size());             //   and the directional derivative along it
  const double eps = 1e-6;
  for (size_t k = 0; k < in.size(); ++k) {
    if (!ref::is_float(in[k].dtype) || !c.in[k].grad) continue;
    checked.push_back(k);
    at[k] = checked_elements(in[k].numel(), seed_of(c.name, 2000 + k));
    std::vector<Arr> p = in;
    for (size_t i : at[k]) {
      p[k].v[i] = in[k].v[i] + eps;
      double lp = weighted_ref(c, p, R.v);
      p[k].v[i] = in[k].v[i] - eps;
      double lm = weighted_ref(c, p, R.v);
      p[k].v[i] = in[k].v[i];
      fd[k].push_back((lp - lm) / (2 * eps));
    }
    if (in[k].numel() > kFullCheck) {
      dir[k] = generate(F(in[k].shape), seed_of(c.name, 3000 + k)).v;
      for (size_t i = 0; i < dir[k].size(); ++i) p[k].v[i] = in[k].v[i] + eps * dir[k][i];
      double lp = weighted_ref(c, p, R.v);
      for (size_t i = 0; i < dir[k].size(); ++i) p[k].v[i] = in[k].v[i] - eps * dir[k][i];
      double lm = weighted_ref(c, p, R.v);
      fd_dir[k] = (lp - lm) / (2 * eps);
    }
  }
  ASSERT_FALSE(checked.empty()) << "no floating input to check";

  for (const Device& dev : devices_to_check()) {
    for (bool noncontig : {false, true}) {
      if (noncontig && !c.noncontig) continue;
      SCOPED_TRACE(::testing::Message() << "device " << dev << (noncontig ? ", non-contiguous leaves" : ", contiguous leaves"));
      std::vector<Tensor> x;
      for (size_t k = 0; k < in.size(); ++k) {
        Tensor t = noncontig ? to_noncontiguous(in[k], dev) : to_tensor(in[k]).to(dev);
        if (std::find(checked.begin(), checked.end(), k) != checked.end()) t.set_requires_grad(true);
        x.push_back(t);
      }
      Outs out = c.fn(x);
      ASSERT_FALSE(out.empty());
      ASSERT_TRUE(out[0].requires_grad()) << "output 0 does not require grad";
      out[0].backward(to_tensor(R).to(dev));
      for (size_t k : checked) {
        Tensor g = x[k].grad();
        double gmax = 0;
        for (double v : fd[k]) gmax = std::max(gmax, std::abs(v));
        if (!g.defined()) {
          EXPECT_LE(gmax, c.grad_atol) << "input " << k << ": no gradient reached it, finite differences give up to " << gmax;
          EXPECT_LE(std::abs(fd_dir[k]), c.grad_atol) << "input " << k << ": no gradient reached it";
          continue;
        }
        ASSERT_EQ(g.shape(), in[k].shape) << "input " << k << ": gradient shape";
        std::vector<double> gv = g.cpu().to_vector<double>();
        int bad = 0;
        std::ostringstream msg;
        for (size_t j = 0; j < at[k].size(); ++j) {
          const size_t i = at[k][j];
          if (std::abs(gv[i] - fd[k][j]) <= c.grad_atol + c.grad_rtol * std::abs(fd[k][j])) continue;
          if (bad++ < 5) msg << "\n  at " << i << ": autograd " << gv[i] << ", finite differences " << fd[k][j];
        }
        EXPECT_EQ(bad, 0) << "input " << k << ": " << bad << " of " << at[k].size() << " checked gradient values differ"
                          << msg.str();
        if (!dir[k].empty()) {
          // sum(g * V) against the finite difference along V. float32 rounding of g adds up
          // like a random walk, far below 1e-6 of sum(|g * V|); a wrong element (unless V is
          // near 0 there) or a wrong block of them shows.
          double dot = 0, scale = 0;
          for (size_t i = 0; i < gv.size(); ++i) {
            dot += gv[i] * dir[k][i];
            scale += std::abs(gv[i] * dir[k][i]);
          }
          EXPECT_NEAR(dot, fd_dir[k], c.grad_atol + 1e-6 * scale)
              << "input " << k << ": directional derivative over all " << gv.size() << " elements";
        }
      }
    }
  }
}

std::string row_name(const ::testing::TestParamInfo<OpCase>& i) { return i.param.name; }
INSTANTIATE_TEST_SUITE_P(Ops, OpForward, ::testing::ValuesIn(op_table()), row_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpGradient, ::testing::ValuesIn(differentiable_rows()), row_name);

TEST(OpTable, NamesAreUnique) {
  std::set<std::string> seen;
  for (const OpCase& c : op_table()) EXPECT_TRUE(seen.insert(c.name).second) << c.name;
}

// The "_big" rows exist to run the OpenMP paths: each has an input above the grain, and this
// process has a team to give them.
TEST(OpTable, LargeRowsRunOnATeam) {
  EXPECT_GE(omp_get_max_threads(), 2) << "one OpenMP thread: every kernel loop runs inline";
  int big = 0;
  for (const OpCase& c : op_table()) {
    if (c.name.size() < 4 || c.name.compare(c.name.size() - 4, 4, "_big") != 0) continue;
    ++big;
    int64_t most = 0;
    for (const InSpec& in : c.in) most = std::max(most, ref::numel(in.shape));
    EXPECT_TRUE(cpu::use_team(most)) << c.name << ": largest input has " << most << " elements, the grain is "
                                     << cpu::kParallelGrain;
  }
  EXPECT_GE(big, 20);
}

// attr::<Op>::of(a).pack() for op k: the typed view's read and write.
ops::Attrs repack(ops::OpKind k, const ops::Attrs& a) {
  switch (k) {
#define AXLE_OP(Name, ...) \
  case ops::OpKind::Name: return ops::attr::Name::of(a).pack();
#include "ops/ops.def"
#undef AXLE_OP
    default: return {};
  }
}

// Every ops.def entry is run by some row: forward or backward, eager or in a compiled graph
// (the fused ops exist only there). Each row is traced on the lazy device, backward included,
// and the ops of its graph are collected before and after the standard passes.
TEST(OpTable, EveryOpHasARow) {
  // Entries no row can run, with where they are tested instead:
  const std::set<ops::OpKind> elsewhere = {
      // collectives need a process group of several processes: tests/dist/test_dist.cpp.
      ops::OpKind::AllReduce, ops::OpKind::AllGather, ops::OpKind::ReduceScatter, ops::OpKind::Broadcast};
  std::set<ops::OpKind> seen;
  const Device xla = axle::device();
  for (const OpCase& c : op_table()) {
    std::vector<Arr> in = make_inputs(c);
    std::vector<Tensor> x;
    for (size_t k = 0; k < in.size(); ++k) {
      Tensor t = to_tensor(in[k]).to(xla);
      if (c.diff && ref::is_float(in[k].dtype) && c.in[k].grad) t.set_requires_grad(true);
      x.push_back(t);
    }
    Outs out = c.fn(x);
    std::vector<Tensor> roots = out;
    if (c.diff) {
      out[0].backward(to_tensor(generate(F(out[0].shape()), 1)).to(xla));
      for (const Tensor& t : x)
        if (t.requires_grad() && t.grad().defined()) roots.push_back(t.grad());
    }
    std::vector<lazy::Value> vals;
    for (const Tensor& t : roots)
      if (const lazy::LazyTensor* lt = lazy::lazy_of(t); lt && lt->ir) vals.push_back(lt->ir);
    if (vals.empty()) continue;
    compiler::Program p = lazy::to_program(lazy::build_graph(vals));
    // Each node, traced or made by a pass, fits its op's schema in ops.def.
    auto collect = [&] {
      for (const compiler::PNode& n : p.nodes) {
        if (n.dead || n.kind != compiler::NodeKind::Op) continue;
        seen.insert(n.op);
        const ops::OpInfo& info = ops::op_info(n.op);
        std::string why;
        EXPECT_TRUE(ops::attrs_match(n.op, n.attrs, &why)) << c.name << ": " << why;
        EXPECT_TRUE(info.inputs.accepts(n.operands.size())) << c.name << ": " << info.name << " with " << n.operands.size() << " inputs";
        EXPECT_TRUE(info.outputs.accepts(n.outs.size())) << c.name << ": " << info.name << " with " << n.outs.size() << " outputs";
        EXPECT_EQ(repack(n.op, n.attrs), n.attrs) << c.name << ": " << info.name << "'s typed attributes do not round-trip";
      }
    };
    collect();
    backend::backend_for(kCPU).pipeline().run(p);  // the cpu backend adds the fused ops
    collect();
  }
  for (size_t i = 0; i < size_t(ops::OpKind::kNumOps); ++i) {
    const auto k = ops::OpKind(i);
    if (elsewhere.count(k)) {
      EXPECT_FALSE(seen.count(k)) << ops::op_name(k) << " is run by a row: take it off the allow-list";
    } else {
      EXPECT_TRUE(seen.count(k)) << "ops.def entry '" << ops::op_name(k) << "' is run by no row of op_table()";
    }
  }
}

// The ops with a gradient are exactly the ones ops.def marks DIFF (and the README names), and
// every other op says why it has none: a bool or index output, a backward op (vjps run
// without grad mode: first order only), or one the compiler makes after autograd has run.
TEST(OpTable, GradientsAsDocumented) {
  int without = 0;
  for (const ops::OpInfo* i = ops::op_infos_begin(); i != ops::op_infos_end(); ++i) {
    EXPECT_EQ(ops::op_def(i->kind).vjp != nullptr, i->has(ops::kDifferentiable))
        << i->name << (ops::op_def(i->kind).vjp ? " has a vjp" : " has no vjp") << " but ops.def says otherwise";
    if (i->has(ops::kDifferentiable)) continue;
    ++without;
    EXPECT_TRUE(i->traits & (ops::kCompare | ops::kIndex | ops::kBackward | ops::kCompilerMade))
        << i->name << " has no gradient and no reason for it in ops.def";
  }
  EXPECT_EQ(without, 28);  // the README's list: 6 comparisons, argmax/argmin, 16 backward ops (prod_backward: issue 16), 2 fused ops, 2 SPMD device ops
}

// The schema's traits agree with what the ops do: arities of unary/binary ops, the dtypes of
// COMPARE / INDEX / FLOAT_MATH outputs, and every op has a shape rule.
TEST(OpTable, TraitsMatchBehaviour) {
  const Tensor i64 = from_vector(std::vector<double>{1, 2, 3}, {3}, {.dtype = kInt64});
  for (const ops::OpInfo* i = ops::op_infos_begin(); i != ops::op_infos_end(); ++i) {
    SCOPED_TRACE(i->name);
    EXPECT_NE(ops::op_def(i->kind).infer, nullptr);
    EXPECT_EQ(ops::op_from_name(i->name), i->kind);
    EXPECT_EQ(std::string(ops::op_name(i->kind)), i->name);
    if (i->has(ops::kUnary) || i->has(ops::kBinary)) {
      EXPECT_TRUE(i->has(ops::kElementwise));
      EXPECT_FALSE(i->has(ops::kUnary) && i->has(ops::kBinary));
      EXPECT_EQ(i->inputs.lo, i->has(ops::kUnary) ? 1 : 2);
      EXPECT_FALSE(i->inputs.variadic());
      // Integer operands: float32 out exactly for FLOAT_MATH ops, bool for comparisons.
      std::vector<Tensor> in(size_t(i->inputs.lo), i64);
      ops::Attrs a;  // the ops' default attributes: zeros of the declared fields
      for (size_t f = 0; f < i->num_attrs; ++f)
        if (i->attrs[f].type == ops::AttrType::Float) a.floats.push_back(0);
        else a.ints.push_back(0);
      const DType want = i->has(ops::kCompare) ? kBool : i->has(ops::kFloatMath) ? kFloat32 : kInt64;
      EXPECT_EQ(ops::op_def(i->kind).infer(in, a)[0].dtype, want);
    }
    if (i->has(ops::kElementwise)) {
      EXPECT_EQ(i->outputs.lo, 1);
    }
  }
}

// Every op has a shape rule and a cpu kernel, found through the op table and the cpu
// backend's kernel table (both filled by explicit calls on first use, never by static
// initialisers). Kernels are keyed by backend: the xla device type resolves to the table of
// the backend serving it (the cpu's today), not to a table of its own.
TEST(OpTable, EveryOpHasAShapeRuleAndACpuKernel) {
  for (size_t i = 0; i < size_t(ops::OpKind::kNumOps); ++i) {
    const auto k = ops::OpKind(i);
    EXPECT_NE(ops::op_def(k).infer, nullptr) << ops::op_name(k) << " has no shape rule";
    EXPECT_TRUE(ops::supports("cpu", k)) << ops::op_name(k) << " has no cpu kernel";
    EXPECT_NE(ops::kernel("cpu", k), nullptr) << ops::op_name(k);
  }
  EXPECT_EQ(&ops::kernels_for(DeviceType::CPU), &ops::kernels("cpu"));
  EXPECT_EQ(&ops::kernels_for(DeviceType::XLA), &ops::kernels("cpu"));
}

// Asking a backend for a kernel it does not have throws, naming the op and the backend.
TEST(KernelRegistry, MissingKernelNamesTheOpAndTheBackend) {
  try {
    ops::kernel("test-empty", ops::OpKind::MaxPool2d);
    FAIL() << "expected an axle::Error";
  } catch (const axle::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[max_pool2d]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no kernel registered"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test-empty backend"), std::string::npos) << msg;
  }
}

// A registered kernel is what supports() reports and kernel() returns, in its backend's
// table only; registering null takes it away again.
TEST(KernelRegistry, RegisterThenLookUp) {
  const ops::OpKind k = ops::OpKind::Relu;
  ASSERT_FALSE(ops::supports("test-registry", k));
  const ops::KernelFn cpu_relu = ops::kernel("cpu", k);
  ops::register_kernel("test-registry", k, cpu_relu);
  EXPECT_TRUE(ops::supports("test-registry", k));
  EXPECT_EQ(ops::kernel("test-registry", k), cpu_relu);
  EXPECT_FALSE(ops::supports("test-registry", ops::OpKind::Exp));  // the cpu's other kernels are not its
  ops::register_kernel("test-registry", k, nullptr);
  EXPECT_FALSE(ops::supports("test-registry", k));
  EXPECT_THROW(ops::kernel("test-registry", k), axle::Error);
  EXPECT_EQ(ops::kernel("cpu", k), cpu_relu);
}


// ======================================================================== dropout in training mode
// Random, so not a reference row: mask statistics, scaling, seeding and the gradient.

TEST(Dropout, MaskStatisticsAndScale) {
  Generator g(1234);
  const double p = 0.3;
  Tensor x = uniform({200, 500}, 1, 2, {}, &g);  // never 0, so a 0 in y means dropped
  Tensor y = dropout(x, p, true, &g);
  ASSERT_EQ(y.shape(), x.shape());
  ASSERT_EQ(y.dtype(), kFloat32);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const size_t n = xv.size();
  size_t dropped = 0, dropped_first_half = 0, both = 0, bad_scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool d = yv[i] == 0;
    dropped += d;
    if (i < n / 2) dropped_first_half += d;
    if (i + 1 < n && d && yv[i + 1] == 0) ++both;
    if (!d && std::abs(yv[i] - xv[i] / (1 - p)) > 1e-6 * std::abs(yv[i])) ++bad_scale;
  }
  EXPECT_EQ(bad_scale, 0u) << "kept values must be x / (1 - p)";
  // Binomial(1e5, 0.3): sigma = 0.00145; 0.01 is about 7 sigma.
  EXPECT_NEAR(double(dropped) / double(n), p, 0.01);
  EXPECT_NEAR(double(dropped_first_half) / double(n / 2), p, 0.015);
  // Neighbours are independent: P(both dropped) = p^2.
  EXPECT_NEAR(double(both) / double(n - 1), p * p, 0.01);
}

TEST(Dropout, SeededIsReproducible) {
  Tensor x = ones({4096});
  Generator g1(7), g2(7), g3(8);
  std::vector<float> a = dropout(x, 0.5, true, &g1).to_vector<float>();
  std::vector<float> b = dropout(x, 0.5, true, &g2).to_vector<float>();
  std::vector<float> c = dropout(x, 0.5, true, &g3).to_vector<float>();
  std::vector<float> a2 = dropout(x, 0.5, true, &g1).to_vector<float>();
  EXPECT_EQ(a, b) << "same seed, same mask";
  EXPECT_NE(a, c) << "another seed, another mask";
  EXPECT_NE(a, a2) << "the generator advances between calls";
  manual_seed(99);
  std::vector<float> d1 = dropout(x, 0.5, true).to_vector<float>();
  manual_seed(99);
  std::vector<float> d2 = dropout(x, 0.5, true).to_vector<float>();
  EXPECT_EQ(d1, d2) << "the default generator follows manual_seed";
}

TEST(Dropout, GradientIsMaskTimesScale) {
  Generator g(3);
  const double p = 0.25;
  Tensor x = uniform({50, 40}, 1, 2, {}, &g).set_requires_grad(true);
  Tensor y = dropout(x, p, true, &g);
  Tensor r = uniform({50, 40}, -1, 1, {}, &g);
  y.backward(r);
  ASSERT_TRUE(x.grad().defined());
  std::vector<double> yv = y.to_vector<double>(), rv = r.to_vector<double>(), gv = x.grad().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    const double want = yv[i] == 0 ? 0.0 : rv[i] / (1 - p);
    if (std::abs(gv[i] - want) > 1e-6 * (1 + std::abs(want))) ++bad;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Dropout, NonContiguousInput) {
  Generator g(5);
  Tensor base = uniform({30, 20}, 1, 2, {}, &g);
  Tensor x = base.t();
  Tensor y = dropout(x, 0.5, true, &g);
  ASSERT_EQ(y.shape(), (Shape{20, 30}));
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < xv.size(); ++i)
    if (yv[i] != 0 && std::abs(yv[i] - 2 * xv[i]) > 1e-6 * yv[i]) ++bad;
  EXPECT_EQ(bad, 0);
}

TEST(Dropout, AllDroppedWhenPIsOne) {
  Tensor x = full({3, 4}, 2.0).set_requires_grad(true);
  Tensor y = dropout(x, 1.0, true);
  for (double v : y.to_vector<double>()) EXPECT_EQ(v, 0.0);
  y.backward(ones({3, 4}));
  for (double v : x.grad().to_vector<double>()) EXPECT_EQ(v, 0.0);
}

// ======================================================================== error paths
// Bad input throws axle::Error whose message starts with "[op]" (the function the user called).

struct ErrCase {
  std::string name;
  std::string op;  ///< the expected message prefix, e.g. "[matmul]"
  std::function<void()> fn;
};
void PrintTo(const ErrCase& c, std::ostream* os) { *os << c.name; }

std::vector<ErrCase> error_table() {
  auto i64 = [](std::vector<int64_t> v) { Shape s{int64_t(v.size())}; return from_vector(v, s); };
  std::vector<ErrCase> t = {
      {"add_shapes", "[add]", [] { add(zeros({2, 3}), zeros({4})); }},
      {"mul_shapes", "[mul]", [] { mul(zeros({2, 3}), zeros({3, 2})); }},
      {"where_condition_dtype", "[where]", [] { where(zeros({2}), ones({2}), ones({2})); }},
      {"where_shapes", "[where]", [] { where(ones({2}, {.dtype = kBool}), ones({3}), ones({2})); }},
      {"reshape_numel", "[reshape]", [] { reshape(zeros({2, 3}), {4}); }},
      {"view_needs_copy", "[view]", [] { view(zeros({2, 3}).t(), {6}); }},
      {"permute_not_a_permutation", "[permute]", [] { permute(zeros({2, 3}), {0, 0}); }},
      {"transpose_dim_range", "[transpose]", [] { transpose(zeros({2, 3}), 0, 2); }},
      {"expand_incompatible", "[expand]", [] { expand(zeros({2, 3}), {4, 3}); }},
      {"squeeze_dim_range", "[squeeze]", [] { squeeze(zeros({2, 1}), 2); }},
      {"unsqueeze_dim_range", "[unsqueeze]", [] { unsqueeze(zeros({2, 3}), 4); }},
      {"flatten_start_after_end", "[flatten]", [] { flatten(zeros({2, 3, 4}), 2, 1); }},
      {"slice_zero_step", "[slice]", [] { slice(zeros({4}), 0, 0, 4, 0); }},
      {"narrow_out_of_range", "[narrow]", [] { narrow(zeros({4, 3}), 0, 2, 3); }},
      {"cat_shapes", "[cat]", [] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }},
      {"cat_empty", "[cat]", [] { cat({}, 0); }},
      {"cat_dim_range", "[cat]", [] { cat({zeros({2, 3}), zeros({2, 3})}, 2); }},
      {"stack_shapes", "[stack]", [] { stack({zeros({2, 3}), zeros({3, 2})}); }},
      {"index_select_out_of_range", "[index_select]", [=] { index_select(zeros({3, 2}), 0, i64({0, 3})); }},
      {"index_select_negative_index", "[index_select]", [=] { index_select(zeros({3, 2}), 0, i64({-1})); }},
      {"index_select_float_index", "[index_select]", [] { index_select(zeros({3, 2}), 0, zeros({2})); }},
      {"index_select_dim_range", "[index_select]", [=] { index_select(zeros({3, 2}), 2, i64({0})); }},
      {"gather_out_of_range", "[gather]",
       [] { gather(zeros({2, 3}), 1, from_vector(std::vector<int64_t>{0, 3, 1, 1}, {2, 2})); }},
      {"gather_float_index", "[gather]", [] { gather(zeros({2, 3}), 1, zeros({2, 2})); }},
      {"gather_rank_mismatch", "[gather]", [=] { gather(zeros({2, 3}), 1, i64({0, 1})); }},
      {"scatter_rank_mismatch", "[scatter]", [=] { scatter(zeros({2, 3}), 1, i64({0, 1}), zeros({2})); }},
      {"scatter_src_dtype", "[scatter]", [=] { scatter(zeros({3}), 0, i64({0, 1}), zeros({2}, {.dtype = kInt64})); }},
      {"scatter_index_larger_than_src", "[scatter]", [=] { scatter(zeros({3}), 0, i64({0, 1}), zeros({1})); }},
      {"scatter_index_larger_than_input", "[scatter_add]",
       [] { scatter_add(zeros({2, 3}), 0, from_vector(std::vector<int64_t>{0, 1, 0, 1}, {1, 4}), zeros({1, 4})); }},
      {"scatter_out_of_range", "[scatter]", [=] { scatter(zeros({3}), 0, i64({3}), 1.0); }},
      {"scatter_add_negative_index", "[scatter_add]", [=] { scatter_add(zeros({3}), 0, i64({-1}), ones({1})); }},
      {"scatter_float_index", "[scatter]", [] { scatter(zeros({3}), 0, zeros({1}), 1.0); }},
      {"scatter_dim_range", "[scatter]", [=] { scatter(zeros({3}), 1, i64({0}), 1.0); }},
      {"one_hot_negative", "[one_hot]", [=] { one_hot(i64({0, -1}), 3); }},
      {"one_hot_too_large", "[one_hot]", [=] { one_hot(i64({0, 3}), 3); }},
      {"one_hot_float", "[one_hot]", [] { one_hot(zeros({2}), 3); }},
      {"one_hot_empty_inferred", "[one_hot]", [=] { one_hot(i64({})); }},
      {"pad_odd_length", "[pad]", [] { pad(zeros({2, 3}), {1}); }},
      {"pad_too_many", "[pad]", [] { pad(zeros({2, 3}), {1, 1, 1, 1, 1, 1}); }},
      {"pad_negative_too_large", "[pad]", [] { pad(zeros({2, 3}), {-2, -2}); }},
      {"pad_unknown_mode", "[pad]", [] { pad(zeros({2, 3}), {1, 1}, "wrap"); }},
      // The cpu backend's limit (oneDNN's), checked by its kernel, not by the op table's shape rule.
      {"matmul_rank_on_cpu", "[matmul]", [] {
         const Shape s(13, 1);
         matmul(zeros(s), zeros(s));
       }},
      {"pad_circular_wraps_twice", "[pad]", [] { pad(zeros({1, 2, 3}), {4, 0}, "circular"); }},
      {"pad_circular_wraps_cropped", "[pad]", [] { pad(zeros({1, 2, 5}), {4, -2}, "circular"); }},
      {"clamp_no_bounds", "[clamp]", [] { clamp(zeros({2}), Tensor(), Tensor()); }},
      {"clamp_int32_bound_range", "[clamp]", [] { clamp(zeros({2}, {.dtype = kInt32}), 0, 1e10); }},
      {"interpolate_antialias_nearest", "[interpolate]",
       [] { interpolate(zeros({1, 1, 4, 4}), {.size = {2, 2}, .antialias = true}); }},
      {"interpolate_bicubic_3d", "[interpolate]", [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .mode = "bicubic"}); }},
      {"max_unpool2d_float_indices", "[max_unpool2d]", [] { max_unpool2d(zeros({1, 1, 2, 2}), zeros({1, 1, 2, 2}), {}); }},
      {"max_unpool2d_output_size", "[max_unpool2d]",
       [=] { max_unpool2d(zeros({1, 1, 1, 1}), i64({0}).reshape({1, 1, 1, 1}), {}, {5, 2}); }},
      {"pad_reflect_too_large", "[pad]", [] { pad(zeros({1, 2, 3}), {3, 0}, "reflect"); }},
      {"pad_reflect_rank", "[pad]", [] { pad(zeros({4}), {1, 1}, "reflect"); }},
      {"pad_reflect_2d_of_2d", "[pad]", [] { pad(zeros({3, 4}), {1, 1, 1, 1}, "replicate"); }},
      {"pad_replicate_value", "[pad]", [] { pad(zeros({1, 3, 4}), {1, 1}, "replicate", 2.0); }},
      {"pad_replicate_empty_dim", "[pad]", [] { pad(zeros({1, 3, 0}), {1, 1}, "replicate"); }},
      {"interpolate_size_and_scale", "[interpolate]",
       [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .scale_factor = {2.0}}); }},
      {"interpolate_no_size", "[interpolate]", [] { interpolate(zeros({1, 1, 4}), {}); }},
      {"interpolate_bilinear_3d", "[interpolate]", [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .mode = "bilinear"}); }},
      {"interpolate_nearest_align_corners", "[interpolate]",
       [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .align_corners = false}); }},
      {"interpolate_size_length", "[interpolate]", [] { interpolate(zeros({1, 1, 4, 4}), {.size = {2, 2, 2}}); }},
      {"interpolate_recompute_with_size", "[interpolate]",
       [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .recompute_scale_factor = true}); }},
      {"interpolate_zero_output", "[interpolate]", [] { interpolate(zeros({1, 1, 4}), {.scale_factor = {0.1}}); }},
      {"interpolate_2d_input", "[interpolate]", [] { interpolate(zeros({4, 4}), {.size = {2}}); }},
      {"interpolate_unknown_mode", "[interpolate]", [] { interpolate(zeros({1, 1, 4}), {.size = {2}, .mode = "cubic"}); }},
      {"einsum_operand_count", "[einsum]", [] { einsum("ij,jk->ik", {zeros({2, 3})}); }},
      {"einsum_dims", "[einsum]", [] { einsum("ij->i", {zeros({2, 3, 4})}); }},
      {"einsum_sizes", "[einsum]", [] { einsum("ij,jk->ik", {zeros({2, 3}), zeros({4, 2})}); }},
      {"einsum_output_not_in_input", "[einsum]", [] { einsum("ij->k", {zeros({2, 3})}); }},
      {"einsum_output_repeated", "[einsum]", [] { einsum("ij->ii", {zeros({2, 3})}); }},
      {"einsum_bad_character", "[einsum]", [] { einsum("i1->i", {zeros({2, 3})}); }},
      {"einsum_diagonal_sizes", "[einsum]", [] { einsum("ii->i", {zeros({2, 3})}); }},
      {"einsum_int64_operands", "[einsum]",
       [] { einsum("i,i", {zeros({2}, {.dtype = kInt64}), zeros({2}, {.dtype = kInt64})}); }},
      {"sum_dim_range", "[sum]", [] { sum(zeros({2, 3}), {2}); }},
      {"mean_dim_range", "[mean]", [] { mean(zeros({2, 3}), {-3}); }},
      {"amax_dim_range", "[amax]", [] { amax(zeros({2, 3}), {5}); }},
      {"max_dim_range", "[max]", [] { max(zeros({2, 3}), 2); }},
      {"argmax_dim_range", "[argmax]", [] { argmax(zeros({2, 3}), 3); }},
      {"logsumexp_dim_range", "[logsumexp]", [] { logsumexp(zeros({2, 3}), {4}); }},
      {"var_dim_range", "[var]", [] { var(zeros({2, 3}), {2}); }},
      {"std_dim_range", "[std]", [] { axle::std(zeros({2, 3}), {2}); }},
      {"cumsum_dim_range", "[cumsum]", [] { cumsum(zeros({2, 3}), 2); }},
      {"prod_dim_range", "[prod]", [] { prod(zeros({2, 3}), -3); }},
      {"sort_dim_range", "[sort]", [] { sort(zeros({2, 3}), 2); }},
      {"argsort_dim_range", "[argsort]", [] { argsort(zeros({2, 3}), -3); }},
      {"topk_k_above_size", "[topk]", [] { topk(zeros({2, 3}), 4); }},
      {"topk_negative_k", "[topk]", [] { topk(zeros({2, 3}), -1); }},
      {"topk_dim_range", "[topk]", [] { topk(zeros({2, 3}), 1, 2); }},
      {"softmax_dim_range", "[softmax]", [] { softmax(zeros({2, 3}), 2); }},
      {"log_softmax_dim_range", "[log_softmax]", [] { log_softmax(zeros({2, 3}), -3); }},
      {"matmul_inner_size", "[matmul]", [] { matmul(zeros({2, 3}), zeros({4, 5})); }},
      {"matmul_batch_shapes", "[matmul]", [] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); }},
      {"matmul_0d", "[matmul]", [] { matmul(scalar_tensor(1.0), zeros({3})); }},
      {"matmul_int64", "[matmul]", [] { matmul(zeros({2, 2}, {.dtype = kInt64}), zeros({2, 2})); }},
      {"linear_in_features", "[linear]", [] { linear(zeros({2, 3}), zeros({4, 5})); }},
      {"linear_bias_size", "[linear]", [] { linear(zeros({2, 3}), zeros({4, 3}), zeros({5})); }},
      {"conv2d_channels", "[conv2d]", [] { conv2d(zeros({1, 3, 5, 5}), zeros({2, 4, 3, 3})); }},
      {"conv2d_rank", "[conv2d]", [] { conv2d(zeros({5, 5}), zeros({2, 1, 3, 3})); }},
      {"conv2d_groups", "[conv2d]", [] { conv2d(zeros({1, 3, 5, 5}), zeros({2, 1, 3, 3}), {}, {.groups = 2}); }},
      {"conv2d_kernel_too_large", "[conv2d]", [] { conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})); }},
      {"conv2d_bias_size", "[conv2d]", [] { conv2d(zeros({1, 1, 4, 4}), zeros({2, 1, 3, 3}), zeros({3})); }},
      {"max_pool2d_kernel_too_large", "[max_pool2d]", [] { max_pool2d(zeros({1, 1, 2, 2}), {.kernel = {3, 3}}); }},
      {"max_pool2d_rank", "[max_pool2d]", [] { max_pool2d(zeros({4, 4})); }},
      {"avg_pool2d_kernel_too_large", "[avg_pool2d]", [] { avg_pool2d(zeros({1, 1, 2, 2}), {.kernel = {3, 3}}); }},
      {"adaptive_avg_pool2d_output_size", "[adaptive_avg_pool2d]", [] { adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {2}); }},
      {"conv_transpose2d_weight_channels", "[conv_transpose2d]", [] { conv_transpose2d(zeros({1, 3, 4, 4}), zeros({2, 3, 3, 3})); }},
      {"conv_transpose2d_output_padding", "[conv_transpose2d]",
       [] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), {}, {.stride = {2, 2}, .output_padding = {2, 0}}); }},
      {"conv_transpose2d_output_too_small", "[conv_transpose2d]",
       [] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), {}, {.padding = {3, 3}}); }},
      {"conv_transpose2d_groups", "[conv_transpose2d]",
       [] { conv_transpose2d(zeros({1, 3, 3, 3}), zeros({3, 2, 3, 3}), {}, {.groups = 2}); }},
      {"conv_transpose2d_bias_size", "[conv_transpose2d]",
       [] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 4, 3, 3}), zeros({2})); }},
      {"max_pool2d_padding_over_half", "[max_pool2d]", [] { max_pool2d(zeros({1, 1, 8, 8}), {.kernel = {3, 3}, .padding = {2, 2}}); }},
      {"max_pool2d_dilated_too_large", "[max_pool2d]",
       [] { max_pool2d(zeros({1, 1, 4, 4}), {.kernel = {3, 3}, .stride = {1, 1}, .dilation = {2, 2}}); }},
      {"avg_pool2d_dilation", "[avg_pool2d]", [] { avg_pool2d(zeros({1, 1, 8, 8}), {.dilation = {2, 2}}); }},
      {"group_norm_groups", "[group_norm]", [] { group_norm(zeros({2, 6, 3}), 4); }},
      {"group_norm_weight_size", "[group_norm]", [] { group_norm(zeros({2, 6, 3}), 3, zeros({3})); }},
      {"batch_norm_channels", "[batch_norm]",
       [] { batch_norm(zeros({2, 3, 2, 2}), ones({4}), zeros({4}), zeros({4}), ones({4}), true); }},
      {"layer_norm_shape", "[layer_norm]", [] { layer_norm(zeros({2, 3}), {4}); }},
      {"dropout_probability_above_one", "[dropout]", [] { dropout(zeros({3}), 1.5, true); }},
      {"dropout_negative_probability", "[dropout]", [] { dropout(zeros({3}), -0.1, true); }},
      {"cross_entropy_target_dtype", "[cross_entropy]", [] { cross_entropy(zeros({2, 3}), zeros({2})); }},
      {"cross_entropy_target_shape", "[cross_entropy]", [=] { cross_entropy(zeros({2, 3}), i64({0, 1, 2})); }},
      {"cross_entropy_class_out_of_range", "[cross_entropy]", [=] { cross_entropy(zeros({2, 3}), i64({0, 3})); }},
      {"nll_loss_target_shape", "[nll_loss]", [=] { nll_loss(zeros({2, 3}), i64({0, 1, 2})); }},
      {"nll_loss_class_out_of_range", "[nll_loss]", [=] { nll_loss(zeros({2, 3}), i64({0, -2})); }},
      {"mse_loss_shapes", "[mse_loss]", [] { mse_loss(zeros({2, 3}), zeros({3, 2})); }},
      {"embedding_out_of_range", "[embedding]", [=] { embedding(zeros({4, 2}), i64({1, 4})); }},
      {"embedding_float_indices", "[embedding]", [] { embedding(zeros({4, 2}), zeros({2})); }},
      {"embedding_weight_rank", "[embedding]", [=] { embedding(zeros({4}), i64({1})); }},
  };
  return t;
}

class OpErrors : public ::testing::TestWithParam<ErrCase> {};

TEST_P(OpErrors, ThrowsNamingTheOp) {
  const ErrCase& c = GetParam();
  try {
    c.fn();
    ADD_FAILURE() << "expected axle::Error starting with " << c.op << ", nothing was thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(c.op, 0), 0u) << "expected a message starting with " << c.op << ", got: " << msg;
    EXPECT_GT(msg.size(), c.op.size() + 10) << "the message should say what was expected and what was found: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected axle::Error, got another exception: " << e.what();
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, OpErrors, ::testing::ValuesIn(error_table()),
                         [](const ::testing::TestParamInfo<ErrCase>& i) { return i.param.name; });

// On xla the index values are data of the graph: scatter (and one_hot, which is a scatter)
// checks them when the graph runs, and reading the result throws axle::Error naming the op.
TEST(OpErrorsWhenRun, ScatterIndexOutOfRangeOnXla) {
  const Device xla = axle::device();
  const Tensor bad = from_vector(std::vector<int64_t>{0, 3}, {2}).to(xla);
  for (const auto& [name, fn] : std::vector<std::pair<std::string, std::function<Tensor()>>>{
           {"scatter", [&] { return scatter(zeros({3}, {.device = xla}), 0, bad, 1.0); }},
           {"scatter_add", [&] { return scatter_add(zeros({3}, {.device = xla}), 0, bad, ones({2}, {.device = xla})); }},
           {"one_hot", [&] { return one_hot(bad, 3); }}}) {
    SCOPED_TRACE(name);
    try {
      fn().cpu();
      ADD_FAILURE() << "expected axle::Error for index 3 of a dim of size 3";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[0, 3)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
