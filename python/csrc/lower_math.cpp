// Lowered aten ops, part 2: elementwise math, comparisons, reductions and matrix products.
// Result dtypes follow PyTorch's type promotion (at::result_type), so an int64 tensor times
// 0.5 is float32 here as on cpu. A Python number (a wrapped 0-d cpu tensor) becomes axle's
// scalar operand: a graph input unless 0 or +-1, so a changing learning rate never recompiles.
#include <torch/library.h>

#include <cmath>

#include "axle/ops.h"
#include "bridge.h"

namespace axle_py {
namespace {

using at::Tensor;
using c10::IntArrayRef;
using std::optional;

bool is_number(const Tensor& t) { return !is_xla(t) && t.dim() == 0; }

/// Both operands of a binary op in PyTorch's result dtype `rt`.
std::pair<axle::Tensor, axle::Tensor> operands(const Tensor& a, const Tensor& b, at::ScalarType rt, const char* op) {
  return {cast_to(ax(a, op), rt), cast_to(ax(b, op), rt)};
}

template <class F>
Tensor binary(const Tensor& a, const Tensor& b, const char* op, F f, optional<at::ScalarType> out = {}) {
  at::ScalarType rt = at::result_type(a, b);
  auto [x, y] = operands(a, b, rt, op);
  axle::Tensor r = f(x, y);
  return wrap(out ? cast_to(r, *out) : r);
}

double num(const at::Scalar& s) { return s.toDouble(); }

// ---- add / sub / mul / div with scalars folded into axle's scalar forms ----
/// a + alpha * b (add.Tensor; sub.Tensor with -alpha): a number b folds into axle's scalar form.
Tensor add_alpha(const Tensor& a, const Tensor& b, double alpha, const char* op) {
  at::ScalarType rt = at::result_type(a, b);
  if (is_number(b)) {
    double v = b.item<double>() * alpha;
    axle::Tensor x = cast_to(ax(a, op), rt);
    return wrap(v == 0 ? x : axle::add(x, v));
  }
  auto [x, y] = operands(a, b, rt, op);
  if (alpha == -1) return wrap(axle::sub(x, y));
  if (alpha != 1) y = axle::mul(y, alpha);
  return wrap(axle::add(x, y));
}
Tensor add_tensor(const Tensor& a, const Tensor& b, const at::Scalar& alpha) {
  return add_alpha(a, b, num(alpha), "add");
}
Tensor add_scalar(const Tensor& a, const at::Scalar& b, const at::Scalar& alpha) {
  return add_tensor(a, at::scalar_to_tensor(b), alpha);
}
Tensor sub_tensor(const Tensor& a, const Tensor& b, const at::Scalar& alpha) {
  return add_alpha(a, b, -num(alpha), "sub");
}
Tensor sub_scalar(const Tensor& a, const at::Scalar& b, const at::Scalar& alpha) {
  return sub_tensor(a, at::scalar_to_tensor(b), alpha);
}
Tensor rsub_tensor(const Tensor& a, const Tensor& b, const at::Scalar& alpha) {  // b - alpha * a
  at::ScalarType rt = at::result_type(a, b);
  auto [x, y] = operands(a, b, rt, "rsub");
  if (num(alpha) != 1) x = axle::mul(x, num(alpha));
  return wrap(axle::sub(y, x));
}
Tensor rsub_scalar(const Tensor& a, const at::Scalar& b, const at::Scalar& alpha) {
  return rsub_tensor(a, at::scalar_to_tensor(b), alpha);
}
Tensor mul_tensor(const Tensor& a, const Tensor& b) {
  at::ScalarType rt = at::result_type(a, b);
  if (is_number(b)) return wrap(axle::mul(cast_to(ax(a, "mul"), rt), b.item<double>()));
  if (is_number(a)) return wrap(axle::mul(cast_to(ax(b, "mul"), rt), a.item<double>()));
  auto [x, y] = operands(a, b, rt, "mul");
  return wrap(axle::mul(x, y));
}
Tensor mul_scalar(const Tensor& a, const at::Scalar& b) { return mul_tensor(a, at::scalar_to_tensor(b)); }

at::ScalarType div_type(const Tensor& a, const Tensor& b) {
  at::ScalarType rt = at::result_type(a, b);
  return at::isIntegralType(rt, /*includeBool=*/true) ? at::get_default_dtype_as_scalartype() : rt;
}
Tensor div_tensor(const Tensor& a, const Tensor& b) {
  at::ScalarType rt = div_type(a, b);
  if (is_number(b)) return wrap(axle::div(cast_to(ax(a, "div"), rt), b.item<double>()));
  auto [x, y] = operands(a, b, rt, "div");
  return wrap(axle::div(x, y));
}
Tensor div_scalar(const Tensor& a, const at::Scalar& b) { return div_tensor(a, at::scalar_to_tensor(b)); }
/// floor of a float32 tensor: truncation through int64, one less where that rounded up.
axle::Tensor floor_f(const axle::Tensor& q) {
  axle::Tensor t = cast_to(cast_to(q, axle::kInt64), axle::kFloat32);
  return axle::sub(t, cast_to(axle::gt(t, q), axle::kFloat32));
}
Tensor div_mode(const Tensor& a, const Tensor& b, optional<c10::string_view> mode) {
  if (!mode) return div_tensor(a, b);
  at::ScalarType rt = at::result_type(a, b);
  auto [x, y] = operands(a, b, at::kFloat, "div");
  axle::Tensor q = axle::div(x, y);
  if (*mode == "trunc") {
    q = cast_to(cast_to(q, axle::kInt64), axle::kFloat32);
  } else {
    TORCH_CHECK(*mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
                *mode, "'");
    q = floor_f(q);
  }
  return wrap(cast_to(q, rt));
}

Tensor pow_scalar(const Tensor& a, const at::Scalar& e) {
  at::ScalarType rt = at::result_type(a, e);
  axle::Tensor x = cast_to(ax(a, "pow"), rt);
  double v = num(e);
  if (v == 1) return wrap(x);
  if (v == 2) return wrap(axle::mul(x, x));
  return wrap(axle::pow(x, v));
}
Tensor pow_tensor(const Tensor& a, const Tensor& e) {
  return binary(a, e, "pow", [](auto& x, auto& y) { return axle::pow(x, y); });
}
Tensor pow_scalar_base(const at::Scalar& base, const Tensor& e) {
  return binary(at::scalar_to_tensor(base), e, "pow", [](auto& x, auto& y) { return axle::pow(x, y); });
}

#define AXLE_BINARY(fname, axfn, label)                                                          \
  Tensor fname(const Tensor& a, const Tensor& b) {                                               \
    return binary(a, b, label, [](auto& x, auto& y) { return axle::axfn(x, y); });              \
  }
AXLE_BINARY(maximum, maximum, "maximum")
AXLE_BINARY(minimum, minimum, "minimum")
#undef AXLE_BINARY

#define AXLE_COMPARE(fname, axfn)                                                                \
  Tensor fname##_tensor(const Tensor& a, const Tensor& b) {                                       \
    return binary(a, b, #axfn, [](auto& x, auto& y) { return axle::axfn(x, y); });              \
  }                                                                                              \
  Tensor fname##_scalar(const Tensor& a, const at::Scalar& b) { return fname##_tensor(a, at::scalar_to_tensor(b)); }
AXLE_COMPARE(eq, eq)
AXLE_COMPARE(ne, ne)
AXLE_COMPARE(lt, lt)
AXLE_COMPARE(le, le)
AXLE_COMPARE(gt, gt)
AXLE_COMPARE(ge, ge)
#undef AXLE_COMPARE

Tensor where_self(const Tensor& c, const Tensor& a, const Tensor& b) {
  at::ScalarType rt = at::result_type(a, b);
  auto [x, y] = operands(a, b, rt, "where");
  return wrap(axle::where(cast_to(ax(c, "where"), axle::kBool), x, y));
}
Tensor masked_fill_scalar(const Tensor& self, const Tensor& mask, const at::Scalar& v) {
  axle::Tensor x = ax(self, "masked_fill");
  return wrap(axle::masked_fill(x, cast_to(ax(mask, "masked_fill"), axle::kBool), num(v)));
}
Tensor masked_fill_tensor(const Tensor& self, const Tensor& mask, const Tensor& v) {
  axle::Tensor x = ax(self, "masked_fill");
  axle::Tensor val = cast_to(ax(v, "masked_fill"), x.dtype());
  return wrap(axle::where(cast_to(ax(mask, "masked_fill"), axle::kBool), val, x));
}

Tensor clamp(const Tensor& self, const optional<at::Scalar>& lo, const optional<at::Scalar>& hi) {
  axle::Tensor x = ax(self, "clamp");
  if (x.dtype() == axle::kFloat32)
    return wrap(axle::clamp(x, lo ? num(*lo) : -INFINITY, hi ? num(*hi) : INFINITY));
  if (lo) x = axle::maximum(x, scalar(num(*lo), x.dtype()));
  if (hi) x = axle::minimum(x, scalar(num(*hi), x.dtype()));
  return wrap(x);
}
Tensor clamp_tensor(const Tensor& self, const optional<Tensor>& lo, const optional<Tensor>& hi) {
  at::ScalarType rt = self.scalar_type();
  axle::Tensor x = ax(self, "clamp");
  if (lo && lo->defined()) x = axle::maximum(x, cast_to(ax(*lo, "clamp"), rt));
  if (hi && hi->defined()) x = axle::minimum(x, cast_to(ax(*hi, "clamp"), rt));
  return wrap(x);
}
Tensor clamp_min(const Tensor& self, const at::Scalar& lo) { return axle_py::clamp(self, lo, std::nullopt); }
Tensor clamp_max(const Tensor& self, const at::Scalar& hi) { return axle_py::clamp(self, std::nullopt, hi); }
Tensor clamp_min_t(const Tensor& self, const Tensor& lo) { return axle_py::clamp_tensor(self, lo, std::nullopt); }
Tensor clamp_max_t(const Tensor& self, const Tensor& hi) { return axle_py::clamp_tensor(self, std::nullopt, hi); }

// lerp: self + weight * (end - self)
Tensor lerp_scalar(const Tensor& self, const Tensor& end, const at::Scalar& w) {
  axle::Tensor x = ax(self, "lerp"), e = ax(end, "lerp");
  return wrap(axle::add(x, axle::mul(axle::sub(e, x), num(w))));
}
Tensor lerp_tensor(const Tensor& self, const Tensor& end, const Tensor& w) {
  axle::Tensor x = ax(self, "lerp"), e = ax(end, "lerp"), wt = ax(w, "lerp");
  return wrap(axle::add(x, axle::mul(axle::sub(e, x), wt)));
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const at::Scalar& v) {
  axle::Tensor p = axle::mul(ax(t1, "addcmul"), ax(t2, "addcmul"));
  if (num(v) != 1) p = axle::mul(p, num(v));
  return wrap(axle::add(ax(self, "addcmul"), p));
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const at::Scalar& v) {
  axle::Tensor p = axle::div(ax(t1, "addcdiv"), ax(t2, "addcdiv"));
  if (num(v) != 1) p = axle::mul(p, num(v));
  return wrap(axle::add(ax(self, "addcdiv"), p));
}

// ---- unary ----
axle::Tensor floatish(const Tensor& self, const char* op) {
  axle::Tensor x = ax(self, op);
  return at::isIntegralType(self.scalar_type(), true) ? cast_to(x, axle::kFloat32) : x;
}
#define AXLE_UNARY_FLOAT(fname, axfn) \
  Tensor fname(const Tensor& self) { return wrap(axle::axfn(floatish(self, #axfn))); }
AXLE_UNARY_FLOAT(exp, exp)
AXLE_UNARY_FLOAT(log, log)
AXLE_UNARY_FLOAT(sqrt, sqrt)
AXLE_UNARY_FLOAT(rsqrt, rsqrt)
AXLE_UNARY_FLOAT(sigmoid, sigmoid)
AXLE_UNARY_FLOAT(tanh, tanh)
AXLE_UNARY_FLOAT(sin, sin)
AXLE_UNARY_FLOAT(cos, cos)
AXLE_UNARY_FLOAT(log1p, log1p)
AXLE_UNARY_FLOAT(expm1, expm1)
AXLE_UNARY_FLOAT(erf, erf)
AXLE_UNARY_FLOAT(silu, silu)
#undef AXLE_UNARY_FLOAT
Tensor neg(const Tensor& self) { return wrap(axle::neg(ax(self, "neg"))); }
Tensor abs(const Tensor& self) { return wrap(axle::abs(ax(self, "abs"))); }
Tensor relu(const Tensor& self) { return wrap(axle::relu(ax(self, "relu"))); }
Tensor reciprocal(const Tensor& self) { return wrap(axle::div(scalar(1, axle::kFloat32), floatish(self, "reciprocal"))); }
Tensor sign(const Tensor& self) {
  axle::Tensor x = ax(self, "sign");
  axle::Tensor zero = scalar(0, x.dtype());
  return wrap(axle::sub(cast_to(axle::gt(x, zero), x.dtype()), cast_to(axle::lt(x, zero), x.dtype())));
}
Tensor logical_not(const Tensor& self) { return wrap(axle::eq(cast_to(ax(self, "logical_not"), axle::kBool), scalar(0, axle::kBool))); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  axle::Tensor x = cast_to(ax(a, "logical_and"), axle::kFloat32), y = cast_to(ax(b, "logical_and"), axle::kFloat32);
  return wrap(axle::ne(axle::mul(axle::ne(x, 0.0), axle::ne(y, 0.0)), scalar(0, axle::kBool)));
}
Tensor isnan(const Tensor& self) {
  axle::Tensor x = ax(self, "isnan");
  return wrap(axle::ne(x, x));
}
Tensor gelu(const Tensor& self, c10::string_view approximate) {
  return wrap(axle::gelu(ax(self, "gelu"), std::string(approximate)));
}
Tensor tanh_backward(const Tensor& grad, const Tensor& y) {  // grad * (1 - y^2)
  axle::Tensor g = ax(grad, "tanh_backward"), t = ax(y, "tanh_backward");
  return wrap(axle::mul(g, axle::sub(scalar(1, t.dtype()), axle::mul(t, t))));
}
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {  // grad * y * (1 - y)
  axle::Tensor g = ax(grad, "sigmoid_backward"), s = ax(y, "sigmoid_backward");
  return wrap(axle::mul(g, axle::mul(s, axle::sub(scalar(1, s.dtype()), s))));
}

// ---- reductions ----
axle::Shape dims_of(at::OptionalIntArrayRef dim) {
  if (!dim) return {};
  return vec(*dim);
}
axle::Tensor sum_input(const Tensor& self, optional<at::ScalarType> dtype, const char* op) {
  axle::Tensor x = ax(self, op);
  if (dtype) return cast_to(x, *dtype);
  if (at::isIntegralType(self.scalar_type(), true)) return cast_to(x, axle::kInt64);
  return x;
}
Tensor sum_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, optional<at::ScalarType> dtype) {
  axle::Tensor x = sum_input(self, dtype, "sum");
  if (x.dim() == 0) return wrap(x);
  return wrap(axle::sum(x, dims_of(dim), keepdim));
}
Tensor sum(const Tensor& self, optional<at::ScalarType> dtype) { return sum_dim(self, std::nullopt, false, dtype); }
Tensor mean_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, optional<at::ScalarType> dtype) {
  axle::Tensor x = ax(self, "mean");
  TORCH_CHECK(dtype || at::isFloatingType(self.scalar_type()),
              "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ",
              c10::toString(self.scalar_type()));
  if (dtype) x = cast_to(x, *dtype);
  if (x.dim() == 0) return wrap(x);
  return wrap(axle::mean(x, dims_of(dim), keepdim));
}
Tensor mean(const Tensor& self, optional<at::ScalarType> dtype) { return mean_dim(self, std::nullopt, false, dtype); }
Tensor amax(const Tensor& self, IntArrayRef dim, bool keepdim) {
  axle::Tensor x = ax(self, "amax");
  return wrap(x.dim() == 0 ? x : axle::amax(x, vec(dim), keepdim));
}
Tensor amin(const Tensor& self, IntArrayRef dim, bool keepdim) {
  axle::Tensor x = ax(self, "amin");
  return wrap(x.dim() == 0 ? x : axle::amin(x, vec(dim), keepdim));
}
Tensor max_all(const Tensor& self) { return wrap(axle::max(ax(self, "max"))); }
Tensor min_all(const Tensor& self) { return wrap(axle::min(ax(self, "min"))); }
std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim) {
  auto [v, i] = axle::max(ax(self, "max"), dim, keepdim);
  return {wrap(v), wrap(i)};
}
std::tuple<Tensor, Tensor> min_dim(const Tensor& self, int64_t dim, bool keepdim) {
  auto [v, i] = axle::min(ax(self, "min"), dim, keepdim);
  return {wrap(v), wrap(i)};
}
Tensor argmax(const Tensor& self, optional<int64_t> dim, bool keepdim) {
  axle::Tensor x = ax(self, "argmax");
  if (!dim) return wrap(axle::argmax(axle::reshape(x, {x.numel()}), 0, false));
  return wrap(axle::argmax(x, *dim, keepdim));
}
Tensor argmin(const Tensor& self, optional<int64_t> dim, bool keepdim) {
  axle::Tensor x = ax(self, "argmin");
  if (!dim) return wrap(axle::argmin(axle::reshape(x, {x.numel()}), 0, false));
  return wrap(axle::argmin(x, *dim, keepdim));
}
Tensor var_correction(const Tensor& self, at::OptionalIntArrayRef dim, const optional<at::Scalar>& correction, bool keepdim) {
  return wrap(axle::var(ax(self, "var"), dims_of(dim), correction ? correction->toLong() : 1, keepdim));
}
Tensor std_correction(const Tensor& self, at::OptionalIntArrayRef dim, const optional<at::Scalar>& correction, bool keepdim) {
  return wrap(axle::std(ax(self, "std"), dims_of(dim), correction ? correction->toLong() : 1, keepdim));
}
Tensor all_dims(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  axle::Tensor x = cast_to(ax(self, "all"), axle::kInt64);
  axle::Tensor z = axle::eq(x, scalar(0, axle::kInt64));
  axle::Tensor cnt = x.dim() == 0 ? cast_to(z, axle::kInt64) : axle::sum(cast_to(z, axle::kInt64), dims_of(dim), keepdim);
  return wrap(axle::eq(cnt, scalar(0, axle::kInt64)));
}
Tensor all(const Tensor& self) { return all_dims(self, std::nullopt, false); }
Tensor all_dim(const Tensor& self, int64_t dim, bool keepdim) { return all_dims(self, IntArrayRef{dim}, keepdim); }
Tensor any_dims(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  axle::Tensor x = cast_to(ax(self, "any"), axle::kInt64);
  axle::Tensor nz = cast_to(axle::ne(x, scalar(0, axle::kInt64)), axle::kInt64);
  axle::Tensor cnt = x.dim() == 0 ? nz : axle::sum(nz, dims_of(dim), keepdim);
  return wrap(axle::ne(cnt, scalar(0, axle::kInt64)));
}
Tensor any(const Tensor& self) { return any_dims(self, std::nullopt, false); }
Tensor any_dim(const Tensor& self, int64_t dim, bool keepdim) { return any_dims(self, IntArrayRef{dim}, keepdim); }

Tensor vector_norm(const Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                   optional<at::ScalarType> dtype) {
  axle::Tensor x = ax(self, "linalg_vector_norm");
  if (dtype) x = cast_to(x, *dtype);
  double p = num(ord);
  axle::Shape ds = dims_of(dim);
  auto red = [&](const axle::Tensor& v) { return v.dim() == 0 ? v : axle::sum(v, ds, keepdim); };
  if (p == 2) return wrap(axle::sqrt(red(axle::mul(x, x))));
  if (p == 1) return wrap(red(axle::abs(x)));
  if (std::isinf(p)) {
    axle::Tensor a = axle::abs(x);
    if (a.dim() == 0) return wrap(a);
    return wrap(p > 0 ? axle::amax(a, ds, keepdim) : axle::amin(a, ds, keepdim));
  }
  TORCH_CHECK(p != 0, "[linalg_vector_norm] ord 0 is not lowered to axle");
  return wrap(axle::pow(red(axle::pow(axle::abs(x), p)), 1.0 / p));
}

// ---- matrix products ----
/// b's source when b is the transpose of a 2-D xla tensor (a weight in x @ w.t()), else undefined.
axle::Tensor transposed_source(const Tensor& b) {
  return is_xla(b) ? impl_of(b, "mm")->transposed_of : axle::Tensor();
}
void check_mm(const axle::Tensor& x, const axle::Tensor& y) {
  TORCH_CHECK(x.dim() == 2, "self must be a matrix");
  TORCH_CHECK(y.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(x.size(1) == y.size(0), "mat1 and mat2 shapes cannot be multiplied (", x.size(0), "x", x.size(1),
              " and ", y.size(0), "x", y.size(1), ")");
}
Tensor mm(const Tensor& a, const Tensor& b) {
  axle::Tensor x = ax(a, "mm"), y = ax(b, "mm");
  check_mm(x, y);
  axle::Tensor w = transposed_source(b);
  return wrap(w.defined() ? axle::linear(x, w) : axle::matmul(x, y));
}
Tensor bmm(const Tensor& a, const Tensor& b) {
  axle::Tensor x = ax(a, "bmm"), y = ax(b, "bmm");
  TORCH_CHECK(x.dim() == 3 && y.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(x.size(0) == y.size(0) && x.size(2) == y.size(1), "Expected size for first two dimensions of batch2 tensor to be: [",
              x.size(0), ", ", x.size(2), "] but got: [", y.size(0), ", ", y.size(1), "].");
  return wrap(axle::matmul(x, y));
}
axle::Tensor add_scaled(const axle::Tensor& self, const axle::Tensor& prod, double beta, double alpha) {
  axle::Tensor p = alpha == 1 ? prod : axle::mul(prod, alpha);
  if (beta == 0) return p;
  return axle::add(beta == 1 ? self : axle::mul(self, beta), p);
}
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const at::Scalar& beta, const at::Scalar& alpha) {
  // nn.Linear: addmm(bias, x, w.t()) is axle's linear (one oneDNN call, bias inside).
  axle::Tensor w = transposed_source(b), bias = ax(self, "addmm");
  if (w.defined() && num(beta) == 1 && num(alpha) == 1 && bias.dim() == 1 && bias.size(0) == w.size(0) &&
      bias.dtype() == w.dtype()) {
    axle::Tensor x = ax(a, "addmm");
    check_mm(x, ax(b, "addmm"));
    return wrap(axle::linear(x, w, bias));
  }
  return wrap(add_scaled(ax(self, "addmm"), ax(axle_py::mm(a, b)), num(beta), num(alpha)));
}
Tensor baddbmm(const Tensor& self, const Tensor& a, const Tensor& b, const at::Scalar& beta, const at::Scalar& alpha) {
  return wrap(add_scaled(ax(self, "baddbmm"), ax(axle_py::bmm(a, b)), num(beta), num(alpha)));
}

// ---- joining and indexing ----
Tensor cat(const at::ITensorListRef& ts, int64_t dim) {
  std::vector<axle::Tensor> xs;
  std::optional<at::ScalarType> rt;
  for (const Tensor& t : ts) rt = rt ? at::promote_types(*rt, t.scalar_type()) : t.scalar_type();
  TORCH_CHECK(rt, "torch.cat(): expected a non-empty list of Tensors");
  for (const Tensor& t : ts) xs.push_back(cast_to(ax(t, "cat"), *rt));
  return wrap(axle::cat(xs, dim));
}
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  return wrap(axle::index_select(ax(self, "index_select"), dim, cast_to(ax(index, "index_select"), axle::kInt64)));
}
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, bool) {
  return wrap(axle::gather(ax(self, "gather"), dim, cast_to(ax(index, "gather"), axle::kInt64)));
}
Tensor scatter_src(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  axle::Tensor x = ax(self, "scatter");
  return wrap(axle::scatter(x, dim, cast_to(ax(index, "scatter"), axle::kInt64), cast_to(ax(src, "scatter"), x.dtype())));
}
Tensor scatter_value(const Tensor& self, int64_t dim, const Tensor& index, const at::Scalar& v) {
  return wrap(axle::scatter(ax(self, "scatter"), dim, cast_to(ax(index, "scatter"), axle::kInt64), num(v)));
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  axle::Tensor x = ax(self, "scatter_add");
  return wrap(axle::scatter_add(x, dim, cast_to(ax(index, "scatter_add"), axle::kInt64),
                                cast_to(ax(src, "scatter_add"), x.dtype())));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, XLA, m) {
  m.impl("add.Tensor", TORCH_FN(add_tensor));
  m.impl("add.Scalar", TORCH_FN(add_scalar));
  m.impl("sub.Tensor", TORCH_FN(sub_tensor));
  m.impl("sub.Scalar", TORCH_FN(sub_scalar));
  m.impl("rsub.Tensor", TORCH_FN(rsub_tensor));
  m.impl("rsub.Scalar", TORCH_FN(rsub_scalar));
  m.impl("mul.Tensor", TORCH_FN(mul_tensor));
  m.impl("mul.Scalar", TORCH_FN(mul_scalar));
  m.impl("div.Tensor", TORCH_FN(div_tensor));
  m.impl("div.Scalar", TORCH_FN(div_scalar));
  m.impl("div.Tensor_mode", TORCH_FN(div_mode));
  m.impl("pow.Tensor_Scalar", TORCH_FN(pow_scalar));
  m.impl("pow.Tensor_Tensor", TORCH_FN(pow_tensor));
  m.impl("pow.Scalar", TORCH_FN(pow_scalar_base));
  m.impl("maximum", TORCH_FN(maximum));
  m.impl("minimum", TORCH_FN(minimum));
  m.impl("eq.Tensor", TORCH_FN(eq_tensor));
  m.impl("eq.Scalar", TORCH_FN(eq_scalar));
  m.impl("ne.Tensor", TORCH_FN(ne_tensor));
  m.impl("ne.Scalar", TORCH_FN(ne_scalar));
  m.impl("lt.Tensor", TORCH_FN(lt_tensor));
  m.impl("lt.Scalar", TORCH_FN(lt_scalar));
  m.impl("le.Tensor", TORCH_FN(le_tensor));
  m.impl("le.Scalar", TORCH_FN(le_scalar));
  m.impl("gt.Tensor", TORCH_FN(gt_tensor));
  m.impl("gt.Scalar", TORCH_FN(gt_scalar));
  m.impl("ge.Tensor", TORCH_FN(ge_tensor));
  m.impl("ge.Scalar", TORCH_FN(ge_scalar));
  m.impl("where.self", TORCH_FN(where_self));
  m.impl("masked_fill.Scalar", TORCH_FN(masked_fill_scalar));
  m.impl("masked_fill.Tensor", TORCH_FN(masked_fill_tensor));
  m.impl("clamp", TORCH_FN(clamp));
  m.impl("clamp.Tensor", TORCH_FN(clamp_tensor));
  m.impl("clamp_min", TORCH_FN(clamp_min));
  m.impl("clamp_max", TORCH_FN(clamp_max));
  m.impl("clamp_min.Tensor", TORCH_FN(clamp_min_t));
  m.impl("clamp_max.Tensor", TORCH_FN(clamp_max_t));
  m.impl("lerp.Scalar", TORCH_FN(lerp_scalar));
  m.impl("lerp.Tensor", TORCH_FN(lerp_tensor));
  m.impl("addcmul", TORCH_FN(addcmul));
  m.impl("addcdiv", TORCH_FN(addcdiv));
  m.impl("exp", TORCH_FN(exp));
  m.impl("log", TORCH_FN(log));
  m.impl("sqrt", TORCH_FN(sqrt));
  m.impl("rsqrt", TORCH_FN(rsqrt));
  m.impl("sigmoid", TORCH_FN(sigmoid));
  m.impl("tanh", TORCH_FN(tanh));
  m.impl("sin", TORCH_FN(sin));
  m.impl("cos", TORCH_FN(cos));
  m.impl("log1p", TORCH_FN(log1p));
  m.impl("expm1", TORCH_FN(expm1));
  m.impl("erf", TORCH_FN(erf));
  m.impl("silu", TORCH_FN(silu));
  m.impl("neg", TORCH_FN(neg));
  m.impl("abs", TORCH_FN(abs));
  m.impl("relu", TORCH_FN(relu));
  m.impl("reciprocal", TORCH_FN(reciprocal));
  m.impl("sign", TORCH_FN(sign));
  m.impl("logical_not", TORCH_FN(logical_not));
  m.impl("logical_and", TORCH_FN(logical_and));
  m.impl("isnan", TORCH_FN(isnan));
  m.impl("gelu", TORCH_FN(gelu));
  m.impl("tanh_backward", TORCH_FN(tanh_backward));
  m.impl("sigmoid_backward", TORCH_FN(sigmoid_backward));
  m.impl("sum.dim_IntList", TORCH_FN(sum_dim));
  m.impl("sum", TORCH_FN(sum));
  m.impl("mean.dim", TORCH_FN(mean_dim));
  m.impl("mean", TORCH_FN(mean));
  m.impl("amax", TORCH_FN(amax));
  m.impl("amin", TORCH_FN(amin));
  m.impl("max", TORCH_FN(max_all));
  m.impl("min", TORCH_FN(min_all));
  m.impl("max.dim", TORCH_FN(max_dim));
  m.impl("min.dim", TORCH_FN(min_dim));
  m.impl("argmax", TORCH_FN(argmax));
  m.impl("argmin", TORCH_FN(argmin));
  m.impl("var.correction", TORCH_FN(var_correction));
  m.impl("std.correction", TORCH_FN(std_correction));
  m.impl("all", TORCH_FN(all));
  m.impl("all.dim", TORCH_FN(all_dim));
  m.impl("all.dims", TORCH_FN(all_dims));
  m.impl("any", TORCH_FN(any));
  m.impl("any.dim", TORCH_FN(any_dim));
  m.impl("any.dims", TORCH_FN(any_dims));
  m.impl("linalg_vector_norm", TORCH_FN(vector_norm));
  m.impl("mm", TORCH_FN(mm));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("addmm", TORCH_FN(addmm));
  m.impl("baddbmm", TORCH_FN(baddbmm));
  m.impl("cat", TORCH_FN(cat));
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("gather", TORCH_FN(gather));
  m.impl("scatter.src", TORCH_FN(scatter_src));
  m.impl("scatter.value", TORCH_FN(scatter_value));
  m.impl("scatter_add", TORCH_FN(scatter_add));
}

}  // namespace axle_py
