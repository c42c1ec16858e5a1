// Reductions (sum, amax, amin, argmax, argmin), softmax / log_softmax and nll_loss:
// shape rules and vjps, plus the public composites (mean, var, max, ...). The cpu kernels
// are in src/backend/cpu/kernels/reduce.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "axle/autograd.h"
#include "axle/ops.h"
#include "ops/op.h"
#include "ops/reduce.h"

namespace axle::ops {

/// Reduced-dim mask from ints[first..]; an empty list means all dims.
std::vector<bool> reduce_mask(const Shape& shape, const std::vector<int64_t>& ints, size_t first, const char* op) {
  const int64_t nd = int64_t(shape.size());
  std::vector<bool> m(shape.size(), ints.size() <= first);
  for (size_t i = first; i < ints.size(); ++i) {
    if (nd == 0) {
      AXLE_CHECK(ints[i] == 0 || ints[i] == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ", ints[i]);
      continue;
    }
    int64_t d = wrap_dim(ints[i], nd, op);
    AXLE_CHECK(!m[size_t(d)], "[", op, "] dim ", d, " appears more than once in the reduced dims");
    m[size_t(d)] = true;
  }
  return m;
}

namespace {

DType sum_dtype(DType t) { return is_floating(t) ? t : kInt64; }

template <RK K>
std::vector<Meta> reduce_infer(const Tensors& in, const Attrs& a) {
  const char* op = rk_name<K>();
  check_defined(in[0], op, "input");
  AXLE_CHECK(!a.ints.empty(), "[", op, "] expected attributes {keepdim, dims...}");
  auto m = reduce_mask(in[0].shape(), a.ints, 1, op);
  DType t = in[0].dtype();
  if constexpr (K == RK::Sum) {
    t = sum_dtype(t);
  } else {
    AXLE_CHECK(t == kFloat32 || t == kBFloat16 || t == kInt64 || t == kInt32 || t == kUInt8 || t == kBool, "[", op,
               "] dtype ", t, " is not supported");
    for (size_t i = 0; i < m.size(); ++i)
      AXLE_CHECK(!m[i] || in[0].shape()[i] > 0, "[", op, "] expected a non-empty reduced dim, got size 0 at dim ",
                 i, " of ", shape_str(in[0].shape()));
  }
  return {{reduced_shape(in[0].shape(), m, a.ints[0] != 0), t}};
}

/// Reshapes a reduced gradient back to keepdim form so it broadcasts against the input.
Tensor keepdim_view(const Tensor& gr, const Shape& in_shape, const Attrs& a, const char* op) {
  auto m = reduce_mask(in_shape, a.ints, 1, op);
  if (a.ints[0] != 0) return gr;
  return reshape(gr, reduced_shape(in_shape, m, true));
}

Tensors sum_vjp(const VjpArgs& v) {
  Tensor g = keepdim_view(v.grad[0], v.in[0].shape(), v.attrs, "sum");
  return {expand(g, v.in[0].shape())};
}

// amax/amin: the gradient is split evenly between tied extremes (as torch.amax).
Tensors minmax_vjp(const VjpArgs& v) {
  const Tensor& x = v.in[0];
  Tensor g = keepdim_view(v.grad[0], x.shape(), v.attrs, "amax");
  Tensor y = keepdim_view(v.out[0], x.shape(), v.attrs, "amax");
  Tensor mask = cast(eq(x, y), x.dtype());
  Shape dims(v.attrs.ints.begin() + 1, v.attrs.ints.end());
  Tensor cnt = sum(mask, dims, true);
  return {mul(mask, div(g, cnt))};
}

template <bool IsMax>
std::vector<Meta> arg_infer(const Tensors& in, const Attrs& a) {
  const char* op = IsMax ? "argmax" : "argmin";
  check_defined(in[0], op, "input");
  AXLE_CHECK(a.ints.size() == 2, "[", op, "] expected attributes {dim, keepdim}");
  auto m = reduce_mask(in[0].shape(), {a.ints[0]}, 0, op);
  for (size_t i = 0; i < m.size(); ++i)
    AXLE_CHECK(!m[i] || in[0].shape()[i] > 0, "[", op, "] expected a non-empty dim, got size 0 at dim ", i, " of ",
               shape_str(in[0].shape()));
  AXLE_CHECK(in[0].numel() > 0 || in[0].dim() > 0, "[", op, "] expected a non-empty tensor");
  return {{reduced_shape(in[0].shape(), m, a.ints[1] != 0), kInt64}};
}

}  // namespace

int64_t softmax_dim(const Tensor& x, const Attrs& a, const char* op) {
  AXLE_CHECK(a.ints.size() == 1, "[", op, "] expected the dim attribute");
  if (x.dim() == 0) {
    AXLE_CHECK(a.ints[0] == 0 || a.ints[0] == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ",
               a.ints[0]);
    return 0;
  }
  return wrap_dim(a.ints[0], x.dim(), op);
}

namespace {

template <bool Log>
std::vector<Meta> softmax_infer(const Tensors& in, const Attrs& a) {
  const char* op = Log ? "log_softmax" : "softmax";
  check_defined(in[0], op, "input");
  AXLE_CHECK(is_float_kernel_dtype(in[0].dtype()), "[", op, "] expected a float32 or bfloat16 tensor, got ", in[0].dtype());
  softmax_dim(in[0], a, op);
  return {{in[0].shape(), in[0].dtype()}};
}

template <bool Log>
Tensors softmax_vjp(const VjpArgs& v) {
  return {call1(Log ? OpKind::LogSoftmaxBackward : OpKind::SoftmaxBackward, {v.grad[0], v.out[0]}, v.attrs)};
}

// Backward: (grad, y) -> dx. log: g - exp(y) * sum(g); softmax: y * (g - sum(g * y)).
template <bool Log>
std::vector<Meta> softmax_bwd_infer(const Tensors& in, const Attrs& a) {
  const char* op = Log ? "log_softmax_backward" : "softmax_backward";
  check_defined(in[0], op, "grad");
  check_defined(in[1], op, "output");
  AXLE_CHECK(in[0].shape() == in[1].shape(), "[", op, "] expected grad and output of one shape, got ",
             shape_str(in[0].shape()), " and ", shape_str(in[1].shape()));
  AXLE_CHECK(same_float(in[0], in[1]), "[", op, "] expected float32 or bfloat16 tensors of one dtype, got ",
             in[0].dtype(), " and ", in[1].dtype());
  softmax_dim(in[1], a, op);
  return {{in[1].shape(), in[1].dtype()}};
}

// ------------------------------------------------------------------ cumsum / prod / sort
/// dim of a dim-carrying op on x (0-d: 0 or -1), wrapped.
int64_t along_dim(const Tensor& x, int64_t dim, const char* op) {
  if (x.dim() == 0) {
    AXLE_CHECK(dim == 0 || dim == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ", dim);
    return 0;
  }
  return wrap_dim(dim, x.dim(), op);
}

/// cumsum and prod: float32 and bfloat16 stay, integers and bool widen to int64 (as PyTorch).
DType widened_dtype(const Tensor& x, const char* op) {
  const DType t = x.dtype();
  AXLE_CHECK(t == kFloat32 || t == kBFloat16 || t == kInt64 || t == kInt32 || t == kUInt8 || t == kBool, "[", op,
             "] dtype ", t, " is not supported");
  return is_float_kernel_dtype(t) ? t : kInt64;
}

std::vector<Meta> cumsum_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "cumsum", "input");
  AXLE_CHECK(a.ints.size() == 2, "[cumsum] expected attributes {dim, reverse}");
  along_dim(in[0], a.ints[0], "cumsum");
  return {{in[0].shape(), widened_dtype(in[0], "cumsum")}};
}

// The vjp of a running sum is the running sum the other way (the gradient at i sums the
// output gradients at every j >= i).
Tensors cumsum_vjp(const VjpArgs& v) {
  attr::Cumsum a = attr::Cumsum::of(v.attrs);
  a.reverse = !a.reverse;
  return {call1(OpKind::Cumsum, {v.grad[0]}, a.pack())};
}

std::vector<Meta> prod_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "prod", "input");
  AXLE_CHECK(!a.ints.empty(), "[prod] expected attributes {keepdim, dims...}");
  auto m = reduce_mask(in[0].shape(), a.ints, 1, "prod");
  return {{reduced_shape(in[0].shape(), m, a.ints[0] != 0), widened_dtype(in[0], "prod")}};
}

Tensors prod_vjp(const VjpArgs& v) { return {call1(OpKind::ProdBackward, {v.grad[0], v.in[0]}, v.attrs)}; }

// (grad, x) -> dx: grad times the product of the other reduced elements.
std::vector<Meta> prod_bwd_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "prod_backward", "grad");
  check_defined(in[1], "prod_backward", "input");
  AXLE_CHECK(!a.ints.empty(), "[prod_backward] expected attributes {keepdim, dims...}");
  AXLE_CHECK(same_float(in[0], in[1]), "[prod_backward] expected float32 or bfloat16 tensors of one dtype, got ",
             in[0].dtype(), " and ", in[1].dtype());
  auto m = reduce_mask(in[1].shape(), a.ints, 1, "prod_backward");
  const Shape want = reduced_shape(in[1].shape(), m, a.ints[0] != 0);
  AXLE_CHECK(in[0].shape() == want, "[prod_backward] expected grad of shape ", shape_str(want), ", got ",
             shape_str(in[0].shape()));
  return {{in[1].shape(), in[1].dtype()}};
}

std::vector<Meta> sort_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "sort", "input");
  AXLE_CHECK(a.ints.size() == 2, "[sort] expected attributes {dim, descending}");
  along_dim(in[0], a.ints[0], "sort");
  const DType t = in[0].dtype();
  AXLE_CHECK(t == kFloat32 || t == kBFloat16 || t == kInt64 || t == kInt32 || t == kUInt8 || t == kBool, "[sort] dtype ", t,
             " is not supported");
  return {{in[0].shape(), t}, {in[0].shape(), kInt64}};
}

// The values' gradient goes back to where each value came from: zeros(x).scatter_add(dim,
// indices, grad) (the indices are a permutation along dim, so nothing accumulates).
Tensors sort_vjp(const VjpArgs& v) {
  if (!v.grad[0].defined()) return {Tensor()};
  if (v.in[0].dim() == 0) return {v.grad[0]};
  Attrs b{.ints = {attr::Sort::of(v.attrs).dim}, .floats = {}};
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::ScatterAdd, {v.grad[0], v.out[1]}, b)};
}

}  // namespace

NllGeom nll_check(const Tensor& logp, const Tensor& target, const char* op) {
  check_defined(logp, op, "input");
  check_defined(target, op, "target");
  AXLE_CHECK(logp.dim() >= 2, "[", op, "] expected input of shape [N, C] or [N, C, d...], got ",
             shape_str(logp.shape()));
  AXLE_CHECK(is_float_kernel_dtype(logp.dtype()), "[", op, "] expected a float32 or bfloat16 input, got ", logp.dtype());
  AXLE_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, "[", op,
             "] expected an int64 target of class indices, got ", target.dtype());
  Shape ts = logp.shape();
  ts.erase(ts.begin() + 1);
  AXLE_CHECK(target.shape() == ts, "[", op, "] expected target of shape ", shape_str(ts), " for input ",
             shape_str(logp.shape()), ", got ", shape_str(target.shape()));
  NllGeom g{logp.shape()[0], logp.shape()[1], 1};
  for (int64_t i = 2; i < logp.dim(); ++i) g.S *= logp.shape()[size_t(i)];
  return g;
}

namespace {

Reduction nll_reduction(const Attrs& a, const char* op) {
  AXLE_CHECK(a.ints.size() == 2 && a.ints[0] >= 0 && a.ints[0] <= 2, "[", op,
             "] expected attributes {reduction (0 none, 1 mean, 2 sum), ignore_index}");
  return Reduction(a.ints[0]);
}

std::vector<Meta> nll_infer(const Tensors& in, const Attrs& a) {
  Reduction r = nll_reduction(a, "nll_loss");
  nll_check(in[0], in[1], "nll_loss");
  if (r != Reduction::None) return {{Shape{}, in[0].dtype()}};
  return {{in[1].shape(), in[0].dtype()}};
}

Tensors nll_vjp(const VjpArgs& v) {
  if (!v.needs[0]) return {Tensor(), Tensor()};
  return {call1(OpKind::NllLossBackward, {v.grad[0], v.in[1], v.in[0]}, v.attrs), Tensor()};
}

// (grad, target, logp) -> d logp: -grad (scaled by 1/count for mean) at each target, 0 elsewhere.
std::vector<Meta> nll_bwd_infer(const Tensors& in, const Attrs& a) {
  Reduction r = nll_reduction(a, "nll_loss_backward");
  nll_check(in[2], in[1], "nll_loss_backward");
  check_defined(in[0], "nll_loss_backward", "grad");
  const Shape want = r == Reduction::None ? in[1].shape() : Shape{};
  AXLE_CHECK(in[0].shape() == want, "[nll_loss_backward] expected grad of shape ", shape_str(want), ", got ",
             shape_str(in[0].shape()));
  return {{in[2].shape(), in[2].dtype()}};
}

}  // namespace

Shape reduced_shape(const Shape& s, const std::vector<bool>& m, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!m[i]) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void register_reduce_ops() {
  register_op(OpKind::Sum, {.infer = reduce_infer<RK::Sum>, .vjp = sum_vjp});
  register_op(OpKind::Amax, {.infer = reduce_infer<RK::Max>, .vjp = minmax_vjp});
  register_op(OpKind::Amin, {.infer = reduce_infer<RK::Min>, .vjp = minmax_vjp});
  register_op(OpKind::Argmax, {.infer = arg_infer<true>, .vjp = nullptr});
  register_op(OpKind::Argmin, {.infer = arg_infer<false>, .vjp = nullptr});
  register_op(OpKind::Softmax, {.infer = softmax_infer<false>, .vjp = softmax_vjp<false>});
  register_op(OpKind::LogSoftmax, {.infer = softmax_infer<true>, .vjp = softmax_vjp<true>});
  register_op(OpKind::SoftmaxBackward, {.infer = softmax_bwd_infer<false>});
  register_op(OpKind::LogSoftmaxBackward, {.infer = softmax_bwd_infer<true>});
  register_op(OpKind::NllLoss, {.infer = nll_infer, .vjp = nll_vjp});
  register_op(OpKind::NllLossBackward, {.infer = nll_bwd_infer});
  register_op(OpKind::Cumsum, {.infer = cumsum_infer, .vjp = cumsum_vjp});
  register_op(OpKind::Prod, {.infer = prod_infer, .vjp = prod_vjp});
  register_op(OpKind::ProdBackward, {.infer = prod_bwd_infer});
  register_op(OpKind::Sort, {.infer = sort_infer, .vjp = sort_vjp});
}

}  // namespace axle::ops

// ------------------------------------------------------------------ public API
namespace axle {
using ops::call1;
using ops::OpKind;

namespace {
/// {keepdim, wrapped dims...}; validates dims against x.
ops::Attrs reduce_attrs(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  ops::check_defined(x, op, "input");
  ops::Attrs a;
  a.ints.push_back(keepdim ? 1 : 0);
  for (int64_t d : dims) {
    if (x.dim() == 0) {
      AXLE_CHECK(d == 0 || d == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ", d);
      continue;
    }
    a.ints.push_back(wrap_dim(d, x.dim(), op));
  }
  return a;
}
/// Validates `dims` against x, naming the public op in errors.
void check_dims(const Tensor& x, const Shape& dims, const char* op) {
  ops::check_defined(x, op, "input");
  std::vector<bool> seen(size_t(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t d : dims) {
    if (x.dim() == 0) {
      AXLE_CHECK(d == 0 || d == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ", d);
      continue;
    }
    const int64_t w = wrap_dim(d, x.dim(), op);
    AXLE_CHECK(!seen[size_t(w)], "[", op, "] dim ", w, " appears more than once in the reduced dims");
    seen[size_t(w)] = true;
  }
}
/// Number of elements reduced over `dims` (all if empty).
int64_t reduced_count(const Tensor& x, const Shape& dims) {
  if (dims.empty() || x.dim() == 0) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[size_t(wrap_dim(d, x.dim(), "reduce"))];
  return n;
}
std::pair<Tensor, Tensor> select_extreme(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  check_dims(x, {dim}, op);
  Tensor idx = is_max ? argmax(x, dim, true) : argmin(x, dim, true);
  if (x.dim() == 0) return {x.clone(), idx};
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor vals = gather(x, d, idx);
  if (!keepdim) return {squeeze(vals, d), squeeze(idx, d)};
  return {vals, idx};
}
}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return call1(OpKind::Sum, {x}, reduce_attrs(x, dims, keepdim, "sum"));
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_dims(x, dims, "mean");
  Tensor xf = is_floating(x.dtype()) ? x : cast(x, kFloat32);
  Tensor s = sum(xf, dims, keepdim);
  return div(s, double(reduced_count(x, dims)));
}
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return call1(OpKind::Amax, {x}, reduce_attrs(x, dims, keepdim, "amax"));
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return call1(OpKind::Amin, {x}, reduce_attrs(x, dims, keepdim, "amin"));
}
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return select_extreme(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return select_extreme(x, dim, keepdim, false);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  ops::check_defined(x, "argmax", "input");
  return call1(OpKind::Argmax, {x}, {.ints = {x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "argmax"), keepdim}, .floats = {}});
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  ops::check_defined(x, "argmin", "input");
  return call1(OpKind::Argmin, {x}, {.ints = {x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "argmin"), keepdim}, .floats = {}});
}
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  check_dims(x, dims, "logsumexp");
  Tensor xf = is_floating(x.dtype()) ? x : cast(x, kFloat32);
  Tensor m = amax(xf, dims, true).detach();
  // An infinite max (all -inf, or +inf present) would give inf - inf; shift by 0 there.
  m = where(eq(abs(m), std::numeric_limits<double>::infinity()), zeros_like(m), m);
  Tensor r = add(log(sum(exp(sub(xf, m)), dims, true)), m);
  if (keepdim) return r;
  Shape out;
  if (x.dim() > 0 && !dims.empty()) {
    std::vector<bool> red(size_t(x.dim()), false);
    for (int64_t d : dims) red[size_t(wrap_dim(d, x.dim(), "logsumexp"))] = true;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (!red[size_t(i)]) out.push_back(x.shape()[size_t(i)]);
  }
  return reshape(r, out);
}
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  check_dims(x, dims, "var");
  Tensor xf = is_floating(x.dtype()) ? x : cast(x, kFloat32);
  Tensor d = sub(xf, mean(xf, dims, true));
  const int64_t n = reduced_count(x, dims);
  return div(sum(mul(d, d), dims, keepdim), double(std::max<int64_t>(0, n - correction)));
}
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  check_dims(x, dims, "std");
  Tensor v = var(x, dims, correction, keepdim);
  // sqrt(var), with PyTorch's gradient 0 where the std is 0 (not 0 / 0): the sqrt sees 1 there.
  Tensor zero = eq(v, 0.0);
  return where(zero, zeros_like(v), sqrt(where(zero, ones_like(v), v)));
}
Tensor prod(const Tensor& x) { return call1(OpKind::Prod, {x}, reduce_attrs(x, {}, false, "prod")); }
Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpKind::Prod, {x}, reduce_attrs(x, {dim}, keepdim, "prod"));
}
Tensor cumsum(const Tensor& x, int64_t dim) {
  ops::check_defined(x, "cumsum", "input");
  return call1(OpKind::Cumsum, {x}, ops::attr::Cumsum{.dim = ops::along_dim(x, dim, "cumsum"), .reverse = false}.pack());
}
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool /*stable: always*/) {
  ops::check_defined(x, "sort", "input");
  ops::Tensors r =
      ops::call(OpKind::Sort, {x}, ops::attr::Sort{.dim = ops::along_dim(x, dim, "sort"), .descending = descending}.pack());
  return {r[0], r[1]};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  ops::check_defined(x, "argsort", "input");
  return sort(x, ops::along_dim(x, dim, "argsort"), descending, stable).second;
}
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted: always*/) {
  ops::check_defined(x, "topk", "input");
  const int64_t d = ops::along_dim(x, dim, "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[size_t(d)];
  AXLE_CHECK(k >= 0 && k <= n, "[topk] expected k in [0, ", n, "] (the size of dim ", d, "), got ", k);
  auto [v, i] = sort(x, d, largest, true);
  if (x.dim() == 0) return {v, i};
  return {slice(v, d, 0, k), slice(i, d, 0, k)};
}
Tensor softmax(const Tensor& x, int64_t dim) {
  ops::check_defined(x, "softmax", "input");
  return call1(OpKind::Softmax, {is_floating(x.dtype()) ? x : cast(x, kFloat32)}, {.ints = {x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "softmax")}, .floats = {}});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  ops::check_defined(x, "log_softmax", "input");
  return call1(OpKind::LogSoftmax, {is_floating(x.dtype()) ? x : cast(x, kFloat32)}, {.ints = {x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "log_softmax")}, .floats = {}});
}
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction r, int64_t ignore_index) {
  return call1(OpKind::NllLoss, {log_probs, target}, {.ints = {int64_t(r), ignore_index}, .floats = {}});
}

}  // namespace axle
