// Indexing ops: cat, index_select / index_add, gather / scatter_add (its backward), scatter
// (the public scatter and scatter_add).
// Shape rules and vjps (cpu kernels: src/backend/cpu/kernels/index.cpp); indices are
// bounds-checked with errors naming the op.
#include <algorithm>
#include <cstring>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/index.h"

namespace axle::ops {
namespace {

void check_index_dtype(const Tensor& idx, const char* op) {
  AXLE_CHECK(idx.dtype() == kInt64 || idx.dtype() == kInt32, "[", op, "] expected an int64 or int32 index, got ",
             idx.dtype());
}

}  // namespace

// ------------------------------------------------------------------ cat
/// PyTorch's legacy rule: 1-D empty tensors are skipped when the others have more dims.
bool cat_skip(const Tensor& t, int64_t ndim) { return t.dim() == 1 && t.numel() == 0 && ndim != 1; }

namespace {

std::vector<Meta> cat_infer(const Tensors& in, const Attrs& a) {
  AXLE_CHECK(!in.empty(), "[cat] expected at least one tensor, got none");
  AXLE_CHECK(a.ints.size() == 1, "[cat] expected the dim attribute");
  const Tensor* ref = nullptr;
  for (size_t i = 0; i < in.size(); ++i) {
    AXLE_CHECK(in[i].defined(), "[cat] expected defined tensors, got an undefined one at index ", i);
    if (!ref && !(in[i].dim() == 1 && in[i].numel() == 0)) ref = &in[i];
  }
  if (!ref) ref = &in[0];
  const int64_t nd = ref->dim();
  AXLE_CHECK(nd > 0, "[cat] expected tensors with at least one dimension, got a 0-d tensor");
  const int64_t d = wrap_dim(a.ints[0], nd, "cat");
  Shape s = ref->shape();
  s[size_t(d)] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    AXLE_CHECK(t.dtype() == ref->dtype(), "[cat] expected all tensors of dtype ", ref->dtype(), ", got ", t.dtype(),
               " at index ", i);
    if (cat_skip(t, nd)) continue;
    AXLE_CHECK(t.dim() == nd, "[cat] expected all tensors with ", nd, " dims, got ", shape_str(t.shape()),
               " at index ", i);
    for (int64_t k = 0; k < nd; ++k)
      AXLE_CHECK(k == d || t.shape()[size_t(k)] == ref->shape()[size_t(k)], "[cat] expected sizes ",
                 shape_str(ref->shape()), " except in dim ", d, ", got ", shape_str(t.shape()), " at index ", i);
    s[size_t(d)] += t.shape()[size_t(d)];
  }
  return {{s, ref->dtype()}};
}

Tensors cat_vjp(const VjpArgs& v) {
  const int64_t nd = v.grad[0].dim();
  const int64_t d = wrap_dim(v.attrs.ints[0], nd, "cat");
  Tensors g(v.in.size());
  int64_t off = 0;
  for (size_t i = 0; i < v.in.size(); ++i) {
    if (cat_skip(v.in[i], nd)) continue;
    const int64_t len = v.in[i].shape()[size_t(d)];
    if (v.needs[i]) g[i] = narrow(v.grad[0], d, off, len);
    off += len;
  }
  return g;
}

}  // namespace

// ------------------------------------------------------------------ index_select / index_add
int64_t index_dim(const Tensor& x, const Attrs& a, const char* op) {
  AXLE_CHECK(!a.ints.empty(), "[", op, "] expected the dim attribute");
  if (x.dim() == 0) {
    AXLE_CHECK(a.ints[0] == 0 || a.ints[0] == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor, got ",
               a.ints[0]);
    return 0;
  }
  return wrap_dim(a.ints[0], x.dim(), op);
}

namespace {

void check_index_1d(const Tensor& idx, const char* op) {
  check_index_dtype(idx, op);
  AXLE_CHECK(idx.dim() <= 1, "[", op, "] expected a 1-D index, got shape ", shape_str(idx.shape()));
}

std::vector<Meta> index_select_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "index_select", "input");
  check_defined(in[1], "index_select", "index");
  check_index_1d(in[1], "index_select");
  const int64_t d = index_dim(in[0], a, "index_select");
  Shape s = in[0].shape();
  if (!s.empty()) s[size_t(d)] = in[1].numel();
  return {{s, in[0].dtype()}};
}

Tensors index_select_vjp(const VjpArgs& v) {
  if (!v.needs[0]) return {Tensor(), Tensor()};
  const int64_t d = index_dim(v.in[0], v.attrs, "index_select");
  Attrs b{.ints = {d}, .floats = {}};
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::IndexAdd, {v.grad[0], v.in[1]}, b), Tensor()};
}

// (grad, index) ints {dim, shape...}: zeros(shape) with grad's slices added at the indexed rows.
std::vector<Meta> index_add_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "index_add", "source");
  check_defined(in[1], "index_add", "index");
  check_index_1d(in[1], "index_add");
  AXLE_CHECK(a.ints.size() >= 1, "[index_add] expected attributes {dim, shape...}");
  Shape s(a.ints.begin() + 1, a.ints.end());
  const int64_t d = a.ints[0];
  AXLE_CHECK((s.empty() && (d == 0 || d == -1)) || (d >= 0 && d < int64_t(s.size())), "[index_add] dim ", d,
             " out of range for shape ", shape_str(s));
  Shape want = s;
  if (!want.empty()) want[size_t(d)] = in[1].numel();
  AXLE_CHECK(in[0].shape() == want || (s.empty() && in[0].numel() == in[1].numel()), "[index_add] expected source of shape ",
             shape_str(want), ", got ", shape_str(in[0].shape()));
  return {{s, in[0].dtype()}};
}

}  // namespace

// ------------------------------------------------------------------ gather / scatter_add
/// Checks index against x for gather/scatter (same ndim; index.size(k) <= x.size(k) for k != dim).
int64_t gather_check(const Shape& xs, const Tensor& idx, const Attrs& a, const char* op) {
  check_index_dtype(idx, op);
  AXLE_CHECK(!a.ints.empty(), "[", op, "] expected the dim attribute");
  const int64_t nd = int64_t(xs.size());
  AXLE_CHECK(idx.dim() == nd, "[", op, "] expected an index with ", nd, " dims like the input ", shape_str(xs),
             ", got ", shape_str(idx.shape()));
  if (nd == 0) {
    AXLE_CHECK(a.ints[0] == 0 || a.ints[0] == -1, "[", op, "] expected dim 0 or -1 for a 0-d tensor");
    return 0;
  }
  const int64_t d = wrap_dim(a.ints[0], nd, op);
  for (int64_t k = 0; k < nd; ++k)
    AXLE_CHECK(k == d || idx.shape()[size_t(k)] <= xs[size_t(k)], "[", op, "] expected index size ",
               idx.shape()[size_t(k)], " <= input size ", xs[size_t(k)], " in dim ", k, " (index ",
               shape_str(idx.shape()), ", input ", shape_str(xs), ")");
  return d;
}

namespace {

std::vector<Meta> gather_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "gather", "input");
  check_defined(in[1], "gather", "index");
  gather_check(in[0].shape(), in[1], a, "gather");
  return {{in[1].shape(), in[0].dtype()}};
}

Tensors gather_vjp(const VjpArgs& v) {
  if (!v.needs[0]) return {Tensor(), Tensor()};
  Attrs b{.ints = {v.attrs.ints[0]}, .floats = {}};
  for (int64_t s : v.in[0].shape()) b.ints.push_back(s);
  return {call1(OpKind::ScatterAdd, {v.grad[0], v.in[1]}, b), Tensor()};
}

// (src, index) ints {dim, shape...}: zeros(shape), then out[... index ...] += src (src has index's shape).
std::vector<Meta> scatter_add_infer(const Tensors& in, const Attrs& a) {
  check_defined(in[0], "scatter_add", "source");
  check_defined(in[1], "scatter_add", "index");
  AXLE_CHECK(!a.ints.empty(), "[scatter_add] expected attributes {dim, shape...}");
  Shape s(a.ints.begin() + 1, a.ints.end());
  gather_check(s, in[1], a, "scatter_add");
  AXLE_CHECK(in[0].shape() == in[1].shape(), "[scatter_add] expected source of the index's shape ",
             shape_str(in[1].shape()), ", got ", shape_str(in[0].shape()));
  return {{s, in[0].dtype()}};
}

// (x, index, src) ints {dim, add}: x with src (index's shape) written or added at index along
// dim. The public wrappers check PyTorch's rules first (rank, sizes, dtypes) and narrow src.
std::vector<Meta> scatter_infer(const Tensors& in, const Attrs& a) {
  const attr::Scatter at = attr::Scatter::of(a);
  const char* op = at.add ? "scatter_add" : "scatter";
  check_defined(in[0], op, "input");
  check_defined(in[1], op, "index");
  check_defined(in[2], op, "src");
  AXLE_CHECK(in[2].dtype() == in[0].dtype(), "[", op, "] expected src of the input's dtype ", in[0].dtype(), ", got ",
             in[2].dtype());
  AXLE_CHECK(in[2].shape() == in[1].shape(), "[", op, "] expected src of the index's shape ", shape_str(in[1].shape()),
             ", got ", shape_str(in[2].shape()));
  gather_check(in[0].shape(), in[1], a, op);
  return {{in[0].shape(), in[0].dtype()}};
}

Tensors scatter_vjp(const VjpArgs& v) {
  const attr::Scatter at = attr::Scatter::of(v.attrs);
  Tensors g(3);
  if (v.needs[0]) g[0] = at.add ? v.grad[0] : scatter(v.grad[0], at.dim, v.in[1], 0.0);
  if (v.needs[2]) g[2] = gather(v.grad[0], at.dim, v.in[1]);
  return g;
}

}  // namespace

void register_index_ops() {
  register_op(OpKind::Cat, {.infer = cat_infer, .vjp = cat_vjp});
  register_op(OpKind::IndexSelect, {.infer = index_select_infer, .vjp = index_select_vjp});
  register_op(OpKind::IndexAdd, {.infer = index_add_infer});
  register_op(OpKind::Gather, {.infer = gather_infer, .vjp = gather_vjp});
  register_op(OpKind::ScatterAdd, {.infer = scatter_add_infer});
  register_op(OpKind::Scatter, {.infer = scatter_infer, .vjp = scatter_vjp});
}

}  // namespace axle::ops

// ------------------------------------------------------------------ public API
namespace axle {
using ops::call1;
using ops::OpKind;

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  AXLE_CHECK(!xs.empty(), "[cat] expected at least one tensor, got none");
  for (size_t i = 0; i < xs.size(); ++i)
    AXLE_CHECK(xs[i].defined(), "[cat] expected defined tensors, got an undefined one at index ", i);
  // Canonical (non-negative) dim in the attributes, so equal calls hash equally.
  int64_t nd = 0;
  for (const Tensor& t : xs)
    if (!(t.dim() == 1 && t.numel() == 0)) { nd = t.dim(); break; }
  if (nd == 0) nd = xs[0].dim();
  AXLE_CHECK(nd > 0, "[cat] expected tensors with at least one dimension, got a 0-d tensor");
  return call1(OpKind::Cat, xs, {.ints = {wrap_dim(dim, nd, "cat")}, .floats = {}});
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(x, "index_select", "input");
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "index_select");
  return call1(OpKind::IndexSelect, {x, index}, {.ints = {d}, .floats = {}});
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(x, "gather", "input");
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "gather");
  return call1(OpKind::Gather, {x, index}, {.ints = {d}, .floats = {}});
}

namespace {

/// scatter / scatter_add: PyTorch's checks (a 0-d tensor counts as 1-D; an empty index skips
/// them and returns a copy of x), then the op on src narrowed to the index's shape.
Tensor scatter_impl(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  const char* op = add ? "scatter_add" : "scatter";
  ops::check_defined(x, op, "input");
  ops::check_defined(index, op, "index");
  ops::check_defined(src, op, "src");
  AXLE_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "[", op, "] expected an int64 index, got ",
             index.dtype());
  AXLE_CHECK(src.dtype() == x.dtype(), "[", op, "] expected src of the input's dtype ", x.dtype(), ", got ",
             src.dtype());
  auto nonempty_dim = [](const Tensor& t) { return std::max<int64_t>(t.dim(), 1); };
  const int64_t nd = nonempty_dim(x);
  const int64_t d = wrap_dim(dim, nd, op);
  if (index.numel() == 0) return x.clone();
  AXLE_CHECK(nonempty_dim(index) == nd, "[", op, "] expected an index with as many dims as the input ",
             shape_str(x.shape()), ", got ", shape_str(index.shape()));
  AXLE_CHECK(nonempty_dim(src) == nd, "[", op, "] expected src with as many dims as the input ", shape_str(x.shape()),
             ", got ", shape_str(src.shape()));
  auto one_d = [](const Tensor& t) { return t.dim() == 0 ? reshape(t, {1}) : t; };
  const Tensor x1 = one_d(x), i1 = one_d(index);
  Tensor s1 = one_d(src);
  for (int64_t k = 0; k < nd; ++k) {
    const int64_t n = i1.shape()[size_t(k)];
    AXLE_CHECK(n <= s1.shape()[size_t(k)] && (k == d || n <= x1.shape()[size_t(k)]), "[", op, "] expected index ",
               shape_str(index.shape()), " no larger than src ", shape_str(src.shape()), " and, apart from dim ", d,
               ", than the input ", shape_str(x.shape()), "; dim ", k, " is ", n);
    if (n != s1.shape()[size_t(k)]) s1 = narrow(s1, k, 0, n);
  }
  Tensor out = call1(OpKind::Scatter, {x1, i1, s1}, {.ints = {d, add ? 1 : 0}, .floats = {}});
  return x.dim() == 0 ? reshape(out, {}) : out;
}

}  // namespace

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl(x, dim, index, src, false);
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  ops::check_defined(x, "scatter", "input");
  ops::check_defined(index, "scatter", "index");
  return scatter_impl(x, dim, index, full(index.shape(), value, {.dtype = x.dtype(), .device = x.device()}), false);
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl(x, dim, index, src, true);
}

}  // namespace axle
