// Plain reference implementations for tests/ops/test_ops.cpp.
//
// Everything here computes in double over row-major std::vector<double>, with
// simple index loops, and never calls an axle op: it is the independent side of
// the op test. Semantics follow PyTorch (torch 1.13) for every op.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "axle/dtype.h"

namespace ref {

using Shape = std::vector<int64_t>;
using Index = std::vector<int64_t>;
using axle::DType;

/// A dense row-major array of values, with the dtype the op should produce.
struct Arr {
  Shape shape;
  std::vector<double> v;
  DType dtype = axle::kFloat32;
  int64_t numel() const { return int64_t(v.size()); }
  int64_t dim() const { return int64_t(shape.size()); }
  int64_t size(int64_t d) const { return shape[size_t(d < 0 ? d + dim() : d)]; }
};

inline void fail(const char* what) { throw std::logic_error(std::string("[reference] ") + what); }

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline Arr zeros(const Shape& s, DType dt = axle::kFloat32) { return Arr{s, std::vector<double>(size_t(numel(s)), 0.0), dt}; }
inline Arr scalar(double v, DType dt = axle::kFloat32) { return Arr{{}, {v}, dt}; }
inline int64_t wrap(int64_t d, int64_t n) { return d < 0 ? d + n : d; }

/// Multi-index of flat position i.
inline Index unravel(int64_t i, const Shape& s) {
  Index idx(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = s[size_t(d)] == 0 ? 0 : i % s[size_t(d)];
    i = s[size_t(d)] == 0 ? 0 : i / s[size_t(d)];
  }
  return idx;
}
/// Flat position of a multi-index.
inline int64_t ravel(const Index& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}
inline double at(const Arr& a, const Index& idx) { return a.v[size_t(ravel(idx, a.shape))]; }

/// PyTorch's promotion for the dtypes axle has: float32 > int64 > int32 > uint8 > bool.
inline int rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::UInt8: return 1;
    case DType::Int32: return 2;
    case DType::Int64: return 3;
    default: return 4;
  }
}
inline DType promote(DType a, DType b) { return rank(a) >= rank(b) ? a : b; }
inline bool is_float(DType t) { return t == DType::Float32; }
/// The dtype of a float-valued op (exp, div, ...) on inputs of type t.
inline DType float_of(DType t) { return is_float(t) ? t : axle::kFloat32; }

/// Value after storing into dtype t (C conversion: truncation toward zero for ints).
inline double store_as(double v, DType t) {
  switch (t) {
    case DType::Float32: return double(float(v));
    case DType::Int64: return double(int64_t(v));
    case DType::Int32: return double(int32_t(v));
    case DType::UInt8: return double(uint8_t(int64_t(v)));
    case DType::Bool: return v != 0 ? 1.0 : 0.0;
    default: return v;
  }
}

// ------------------------------------------------------------------ elementwise
inline Arr map(const Arr& a, const std::function<double(double)>& f, DType dt) {
  Arr o{a.shape, std::vector<double>(a.v.size()), dt};
  for (size_t i = 0; i < a.v.size(); ++i) o.v[i] = f(a.v[i]);
  return o;
}
inline Arr map(const Arr& a, const std::function<double(double)>& f) { return map(a, f, a.dtype); }

inline Shape broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape o(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) fail("shapes do not broadcast");
    o[i] = da == 1 ? db : da;
  }
  return o;
}
/// a's element at a broadcast output index.
inline double bget(const Arr& a, const Index& out_idx) {
  const size_t off = out_idx.size() - a.shape.size();
  int64_t f = 0;
  for (size_t d = 0; d < a.shape.size(); ++d) f = f * a.shape[d] + (a.shape[d] == 1 ? 0 : out_idx[d + off]);
  return a.v[size_t(f)];
}
inline Arr zip(const Arr& a, const Arr& b, const std::function<double(double, double)>& f, DType dt) {
  Arr o = zeros(broadcast(a.shape, b.shape), dt);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, o.shape);
    o.v[size_t(i)] = f(bget(a, idx), bget(b, idx));
  }
  return o;
}
inline Arr zip3(const Arr& a, const Arr& b, const Arr& c, const std::function<double(double, double, double)>& f,
                DType dt) {
  Arr o = zeros(broadcast(broadcast(a.shape, b.shape), c.shape), dt);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, o.shape);
    o.v[size_t(i)] = f(bget(a, idx), bget(b, idx), bget(c, idx));
  }
  return o;
}
/// Arithmetic result dtype: promoted, then integral results of float ops become float32.
inline Arr arith(const Arr& a, const Arr& b, const std::function<double(double, double)>& f, bool float_op = false) {
  DType t = ref::promote(a.dtype, b.dtype);
  if (float_op) t = float_of(t);
  return zip(a, b, f, t);
}
inline Arr compare(const Arr& a, const Arr& b, const std::function<bool(double, double)>& f) {
  return zip(a, b, [&](double x, double y) { return f(x, y) ? 1.0 : 0.0; }, axle::kBool);
}
/// The scalar operand of the scalar op forms: the tensor's dtype, float32 if it is
/// integral and the value is fractional (or it is bool).
inline Arr scalar_for(const Arr& t, double v) {
  DType dt = t.dtype;
  if (!is_float(dt) && (v != std::floor(v) || dt == axle::kBool)) dt = axle::kFloat32;
  return scalar(v, dt);
}

inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ------------------------------------------------------------------ reductions
/// Normalised reduction dims (empty = all), sorted and unique.
inline std::vector<bool> reduced_mask(const Shape& s, const Shape& dims) {
  std::vector<bool> m(s.size(), dims.empty());
  for (int64_t d : dims) m[size_t(wrap(d, int64_t(s.size())))] = true;
  return m;
}
/// For each output position, f receives the reduced elements in row-major order.
inline Arr reduce(const Arr& a, const Shape& dims, bool keepdim, const std::function<double(const std::vector<double>&)>& f,
                  DType dt) {
  std::vector<bool> m = reduced_mask(a.shape, dims);
  Shape kept_shape, red_shape, out_shape;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (m[d]) {
      red_shape.push_back(a.shape[d]);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept_shape.push_back(a.shape[d]);
      out_shape.push_back(a.shape[d]);
    }
  }
  Arr o = zeros(out_shape, dt);
  const int64_t nk = numel(kept_shape), nr = numel(red_shape);
  std::vector<double> vals(static_cast<size_t>(nr));
  for (int64_t k = 0; k < nk; ++k) {
    Index ki = unravel(k, kept_shape);
    for (int64_t r = 0; r < nr; ++r) {
      Index ri = unravel(r, red_shape), full(a.shape.size());
      size_t pk = 0, pr = 0;
      for (size_t d = 0; d < a.shape.size(); ++d) full[d] = m[d] ? ri[pr++] : ki[pk++];
      vals[size_t(r)] = at(a, full);
    }
    o.v[size_t(k)] = f(vals);
  }
  return o;
}
/// Applies f to every 1-D line along `dim` (output lines have the same length).
inline Arr along(const Arr& a, int64_t dim, const std::function<std::vector<double>(const std::vector<double>&)>& f) {
  dim = wrap(dim, a.dim());
  Arr o = a;
  const int64_t n = a.shape[size_t(dim)];
  for (int64_t i = 0; i < a.numel(); ++i) {
    Index idx = unravel(i, a.shape);
    if (idx[size_t(dim)] != 0) continue;
    std::vector<double> line(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      idx[size_t(dim)] = j;
      line[size_t(j)] = at(a, idx);
    }
    std::vector<double> r = f(line);
    for (int64_t j = 0; j < n; ++j) {
      idx[size_t(dim)] = j;
      o.v[size_t(ravel(idx, a.shape))] = r[size_t(j)];
    }
  }
  return o;
}

inline double vsum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
inline double vmean(const std::vector<double>& v) { return vsum(v) / double(v.size()); }
inline double vmax(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
inline double vmin(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
/// Index of the first maximum / minimum.
inline double vargmax(const std::vector<double>& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); }
inline double vargmin(const std::vector<double>& v) { return double(std::min_element(v.begin(), v.end()) - v.begin()); }
inline double vvar(const std::vector<double>& v, int64_t correction) {
  double m = vmean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(int64_t(v.size()) - correction);
}
inline double vlogsumexp(const std::vector<double>& v) {
  double m = vmax(v), s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
inline std::vector<double> vsoftmax(const std::vector<double>& v) {
  double l = vlogsumexp(v);
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = std::exp(v[i] - l);
  return o;
}
inline std::vector<double> vlog_softmax(const std::vector<double>& v) {
  double l = vlogsumexp(v);
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] - l;
  return o;
}
/// Sum keeps the dtype for floats; integers and bool sum to int64 (as torch.sum).
inline DType sum_dtype(DType t) { return is_float(t) ? t : axle::kInt64; }

// ------------------------------------------------------------------ shape and indexing
inline Arr reshape(const Arr& a, const Shape& s) {
  Arr o = a;
  o.shape = s;
  if (numel(s) != a.numel()) fail("reshape size");
  return o;
}
inline Arr permute(const Arr& a, const Shape& p) {
  Shape s(p.size());
  for (size_t i = 0; i < p.size(); ++i) s[i] = a.shape[size_t(p[i])];
  Arr o = zeros(s, a.dtype);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index oi = unravel(i, s), ai(p.size());
    for (size_t d = 0; d < p.size(); ++d) ai[size_t(p[d])] = oi[d];
    o.v[size_t(i)] = at(a, ai);
  }
  return o;
}
inline Arr expand(const Arr& a, const Shape& s) {
  Arr o = zeros(s, a.dtype);
  for (int64_t i = 0; i < o.numel(); ++i) o.v[size_t(i)] = bget(a, unravel(i, s));
  return o;
}
/// Elements start, start+step, ... < end along dim (start/end already in range).
inline Arr slice(const Arr& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap(dim, a.dim());
  Shape s = a.shape;
  s[size_t(dim)] = end <= start ? 0 : (end - start + step - 1) / step;
  Arr o = zeros(s, a.dtype);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, s);
    idx[size_t(dim)] = start + idx[size_t(dim)] * step;
    o.v[size_t(i)] = at(a, idx);
  }
  return o;
}
inline Arr cat(const std::vector<Arr>& xs, int64_t dim) {
  dim = wrap(dim, xs[0].dim());
  Shape s = xs[0].shape;
  s[size_t(dim)] = 0;
  for (const Arr& x : xs) s[size_t(dim)] += x.shape[size_t(dim)];
  DType dt = xs[0].dtype;
  for (const Arr& x : xs) dt = ref::promote(dt, x.dtype);
  Arr o = zeros(s, dt);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, s);
    size_t k = 0;
    while (idx[size_t(dim)] >= xs[k].shape[size_t(dim)]) idx[size_t(dim)] -= xs[k++].shape[size_t(dim)];
    o.v[size_t(i)] = at(xs[k], idx);
  }
  return o;
}
inline Arr stack(const std::vector<Arr>& xs, int64_t dim) {
  dim = wrap(dim, xs[0].dim() + 1);
  std::vector<Arr> u;
  for (const Arr& x : xs) {
    Shape s = x.shape;
    s.insert(s.begin() + dim, 1);
    u.push_back(reshape(x, s));
  }
  return cat(u, dim);
}
inline Arr index_select(const Arr& x, int64_t dim, const Arr& index) {
  dim = wrap(dim, x.dim());
  Shape s = x.shape;
  s[size_t(dim)] = index.numel();
  Arr o = zeros(s, x.dtype);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, s);
    idx[size_t(dim)] = int64_t(index.v[size_t(idx[size_t(dim)])]);
    o.v[size_t(i)] = at(x, idx);
  }
  return o;
}
inline Arr gather(const Arr& x, int64_t dim, const Arr& index) {
  dim = wrap(dim, x.dim());
  Arr o = zeros(index.shape, x.dtype);
  for (int64_t i = 0; i < o.numel(); ++i) {
    Index idx = unravel(i, index.shape);
    idx[size_t(dim)] = int64_t(index.v[size_t(i)]);
    o.v[size_t(i)] = at(x, idx);
  }
  return o;
}

// ------------------------------------------------------------------ linear algebra
/// torch.matmul: 1-D operands get a dim prepended (a) / appended (b) and removed after;
/// batch dims broadcast.
inline Arr matmul(const Arr& a0, const Arr& b0) {
  Arr a = a0, b = b0;
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a.shape = {1, a.shape[0]};
  if (b1) b.shape = {b.shape[0], 1};
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (b.size(-2) != k) fail("matmul inner size");
  Shape ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast(ab, bb);
  Arr A = expand(a, [&] { Shape s = batch; s.push_back(m); s.push_back(k); return s; }());
  Arr B = expand(b, [&] { Shape s = batch; s.push_back(k); s.push_back(n); return s; }());
  const int64_t nb = numel(batch);
  Shape os = batch;
  if (!a1) os.push_back(m);
  if (!b1) os.push_back(n);
  Arr o = zeros(os, ref::promote(a.dtype, b.dtype));
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += A.v[size_t((p * m + i) * k + q)] * B.v[size_t((p * k + q) * n + j)];
        o.v[size_t((p * m + i) * n + j)] = s;
      }
  return o;
}
/// x [..., in] @ w[out, in]^T + b[out].
inline Arr linear(const Arr& x, const Arr& w, const Arr* b) {
  const int64_t in = w.shape[1], out = w.shape[0], rows = x.numel() / in;
  Shape s = x.shape;
  s.back() = out;
  Arr o = zeros(s, x.dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double acc = b ? b->v[size_t(j)] : 0.0;
      for (int64_t q = 0; q < in; ++q) acc += x.v[size_t(r * in + q)] * w.v[size_t(j * in + q)];
      o.v[size_t(r * out + j)] = acc;
    }
  return o;
}

// ------------------------------------------------------------------ convolution and pooling
struct Conv {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};
inline Arr conv2d(const Arr& x, const Arr& w, const Arr* b, const Conv& c) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], Cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const int64_t OH = (H + 2 * c.ph - c.dh * (kh - 1) - 1) / c.sh + 1;
  const int64_t OW = (W + 2 * c.pw - c.dw * (kw - 1) - 1) / c.sw + 1;
  const int64_t Og = O / c.groups;
  if (Cg * c.groups != C) fail("conv2d channels");
  Arr o = zeros({N, O, OH, OW}, x.dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc) {
      const int64_t g = oc / Og;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? b->v[size_t(oc)] : 0.0;
          for (int64_t ic = 0; ic < Cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t h = oh * c.sh - c.ph + i * c.dh, ww = ow * c.sw - c.pw + j * c.dw;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += at(x, {n, g * Cg + ic, h, ww}) * at(w, {oc, ic, i, j});
              }
          o.v[size_t(((n * O + oc) * OH + oh) * OW + ow)] = acc;
        }
    }
  return o;
}
/// torch.nn.functional.conv_transpose2d: x [N, C, H, W], w [C, O/groups, kh, kw]; every input
/// element scatters x * w into the output at (h*s - p + i*d, w*s - p + j*d).
struct ConvT {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, oph = 0, opw = 0, dh = 1, dw = 1, groups = 1;
};
inline Arr conv_transpose2d(const Arr& x, const Arr& w, const Arr* b, const ConvT& c) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t Og = w.shape[1], kh = w.shape[2], kw = w.shape[3], O = Og * c.groups, Cg = C / c.groups;
  if (w.shape[0] != C || Cg * c.groups != C) fail("conv_transpose2d channels");
  const int64_t OH = (H - 1) * c.sh - 2 * c.ph + c.dh * (kh - 1) + c.oph + 1;
  const int64_t OW = (W - 1) * c.sw - 2 * c.pw + c.dw * (kw - 1) + c.opw + 1;
  Arr o = zeros({N, O, OH, OW}, x.dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t i = 0; i < OH * OW; ++i) o.v[size_t((n * O + oc) * OH * OW + i)] = b ? b->v[size_t(oc)] : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ic = 0; ic < C; ++ic) {
      const int64_t g = ic / Cg;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww) {
          const double v = at(x, {n, ic, h, ww});
          for (int64_t oc = 0; oc < Og; ++oc)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t oh = h * c.sh - c.ph + i * c.dh, ow = ww * c.sw - c.pw + j * c.dw;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                o.v[size_t(((n * O + g * Og + oc) * OH + oh) * OW + ow)] += v * at(w, {ic, oc, i, j});
              }
        }
    }
  return o;
}
struct Pool {
  int64_t kh = 2, kw = 2, sh = 2, sw = 2, ph = 0, pw = 0;
  bool count_include_pad = true;
  int64_t dh = 1, dw = 1;  ///< max only
  bool ceil_mode = false;
};
/// PyTorch's pooling output size: floor or ceil, a last window starting past input + left pad dropped.
inline int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}
/// Max over each window; padding never wins (it is -inf).
inline Arr max_pool2d(const Arr& x, const Pool& p) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = pool_out(H, p.kh, p.sh, p.ph, p.dh, p.ceil_mode), OW = pool_out(W, p.kw, p.sw, p.pw, p.dw, p.ceil_mode);
  Arr o = zeros({N, C, OH, OW}, x.dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t i = 0; i < p.kh; ++i)
            for (int64_t j = 0; j < p.kw; ++j) {
              int64_t h = oh * p.sh - p.ph + i * p.dh, w = ow * p.sw - p.pw + j * p.dw;
              if (h >= 0 && h < H && w >= 0 && w < W) m = std::max(m, at(x, {n, c, h, w}));
            }
          o.v[size_t(((n * C + c) * OH + oh) * OW + ow)] = m;
        }
  return o;
}
/// Where each max_pool2d maximum came from (distinct values): its flat h * W + w in the plane, int64.
inline Arr max_pool2d_indices(const Arr& x, const Pool& p) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = pool_out(H, p.kh, p.sh, p.ph, p.dh, p.ceil_mode), OW = pool_out(W, p.kw, p.sw, p.pw, p.dw, p.ceil_mode);
  Arr o = zeros({N, C, OH, OW}, axle::kInt64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double m = -std::numeric_limits<double>::infinity();
          int64_t best = -1;
          for (int64_t i = 0; i < p.kh; ++i)
            for (int64_t j = 0; j < p.kw; ++j) {
              int64_t h = oh * p.sh - p.ph + i * p.dh, w = ow * p.sw - p.pw + j * p.dw;
              if (h >= 0 && h < H && w >= 0 && w < W && at(x, {n, c, h, w}) > m) m = at(x, {n, c, h, w}), best = h * W + w;
            }
          o.v[size_t(((n * C + c) * OH + oh) * OW + ow)] = double(best);
        }
  return o;
}
/// x [N, C, H, W] written at the flat indices of zero [OH, OW] planes (max_unpool2d).
inline Arr max_unpool2d(const Arr& x, const Arr& idx, int64_t OH, int64_t OW) {
  const int64_t N = x.shape[0], C = x.shape[1], HW = x.shape[2] * x.shape[3];
  Arr o = zeros({N, C, OH, OW}, x.dtype);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t k = 0; k < HW; ++k) o.v[size_t(nc * OH * OW + int64_t(idx.v[size_t(nc * HW + k)]))] = x.v[size_t(nc * HW + k)];
  return o;
}
/// Divisor: the window clipped to the padded input (count_include_pad), else its input elements.
inline Arr avg_pool2d(const Arr& x, const Pool& p) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = pool_out(H, p.kh, p.sh, p.ph, 1, p.ceil_mode), OW = pool_out(W, p.kw, p.sw, p.pw, 1, p.ceil_mode);
  Arr o = zeros({N, C, OH, OW}, x.dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          int64_t cnt = 0, padded = 0;
          for (int64_t i = 0; i < p.kh; ++i)
            for (int64_t j = 0; j < p.kw; ++j) {
              int64_t h = oh * p.sh - p.ph + i, w = ow * p.sw - p.pw + j;
              if (h < H + p.ph && w < W + p.pw) ++padded;
              if (h >= 0 && h < H && w >= 0 && w < W) {
                s += at(x, {n, c, h, w});
                ++cnt;
              }
            }
          o.v[size_t(((n * C + c) * OH + oh) * OW + ow)] = s / double(p.count_include_pad ? padded : cnt);
        }
  return o;
}
/// Window i covers [floor(i*H/OH), ceil((i+1)*H/OH)).
inline Arr adaptive_avg_pool2d(const Arr& x, int64_t OH, int64_t OW) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  Arr o = zeros({N, C, OH, OW}, x.dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
          int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += at(x, {n, c, h, w});
          o.v[size_t(((n * C + c) * OH + oh) * OW + ow)] = s / double((h1 - h0) * (w1 - w0));
        }
  return o;
}

// ------------------------------------------------------------------ normalization and losses
/// Returns {y, new running_mean, new running_var}. x is [N, C, ...]; weight/bias may be null.
inline std::vector<Arr> batch_norm(const Arr& x, const Arr* w, const Arr* b, const Arr& rm, const Arr& rv, bool training,
                                   double momentum, double eps) {
  const int64_t C = x.shape[1];
  Arr y = zeros(x.shape, x.dtype), nm = rm, nv = rv;
  std::vector<std::vector<double>> per(static_cast<size_t>(C));
  for (int64_t i = 0; i < x.numel(); ++i) per[size_t(unravel(i, x.shape)[1])].push_back(x.v[size_t(i)]);
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    if (training) {
      mean[size_t(c)] = vmean(per[size_t(c)]);
      var[size_t(c)] = vvar(per[size_t(c)], 0);
      nm.v[size_t(c)] = (1 - momentum) * rm.v[size_t(c)] + momentum * mean[size_t(c)];
      nv.v[size_t(c)] = (1 - momentum) * rv.v[size_t(c)] + momentum * vvar(per[size_t(c)], 1);
    } else {
      mean[size_t(c)] = rm.v[size_t(c)];
      var[size_t(c)] = rv.v[size_t(c)];
    }
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    size_t c = size_t(unravel(i, x.shape)[1]);
    double v = (x.v[size_t(i)] - mean[c]) / std::sqrt(var[c] + eps);
    y.v[size_t(i)] = v * (w ? w->v[c] : 1.0) + (b ? b->v[c] : 0.0);
  }
  return {y, nm, nv};
}
/// Normalises over the last `nd` dims; weight/bias (shape of those dims) may be null.
inline Arr layer_norm(const Arr& x, int64_t nd, const Arr* w, const Arr* b, double eps) {
  int64_t inner = 1;
  for (int64_t d = x.dim() - nd; d < x.dim(); ++d) inner *= x.shape[size_t(d)];
  Arr y = zeros(x.shape, x.dtype);
  for (int64_t r = 0; r < x.numel() / inner; ++r) {
    std::vector<double> v(x.v.begin() + r * inner, x.v.begin() + (r + 1) * inner);
    double m = vmean(v), s = std::sqrt(vvar(v, 0) + eps);
    for (int64_t j = 0; j < inner; ++j)
      y.v[size_t(r * inner + j)] = (v[size_t(j)] - m) / s * (w ? w->v[size_t(j)] : 1.0) + (b ? b->v[size_t(j)] : 0.0);
  }
  return y;
}

/// torch.nn.functional.group_norm: x [N, C, ...] normalised over each (sample, group of C/G
/// channels, spatial) block with the biased variance, then weight [C] and bias [C].
inline Arr group_norm(const Arr& x, int64_t G, const Arr* w, const Arr* b, double eps) {
  const int64_t N = x.shape[0], C = x.shape[1], inner = x.numel() / std::max<int64_t>(N * C, 1), block = C / G * inner;
  Arr y = zeros(x.shape, x.dtype);
  for (int64_t r = 0; r < N * G; ++r) {
    std::vector<double> v(x.v.begin() + r * block, x.v.begin() + (r + 1) * block);
    double m = vmean(v), s = std::sqrt(vvar(v, 0) + eps);
    for (int64_t j = 0; j < block; ++j) {
      const int64_t c = (r % G) * (C / G) + j / inner;
      y.v[size_t(r * block + j)] = (v[size_t(j)] - m) / s * (w ? w->v[size_t(c)] : 1.0) + (b ? b->v[size_t(c)] : 0.0);
    }
  }
  return y;
}

enum class Red { None, Mean, Sum };
/// Per-position losses `l` (shape of target) and a mask of counted positions -> reduced loss.
inline Arr reduce_loss(const Arr& l, const std::vector<double>& counted, Red r) {
  if (r == Red::None) return l;
  double s = 0, n = 0;
  for (size_t i = 0; i < l.v.size(); ++i) {
    s += l.v[i];
    n += counted[i];
  }
  return scalar(r == Red::Sum ? s : s / n, l.dtype);
}
/// logp [N, C, d...] (class dim 1), target [N, d...]; loss = -(1-ls) logp[t] - ls/C sum_c logp[c].
inline Arr nll_smooth(const Arr& logp, const Arr& target, Red r, int64_t ignore_index, double ls) {
  const int64_t C = logp.shape[1];
  Arr l = zeros(target.shape, logp.dtype);
  std::vector<double> counted(size_t(target.numel()), 0.0);
  for (int64_t i = 0; i < target.numel(); ++i) {
    int64_t t = int64_t(target.v[size_t(i)]);
    if (t == ignore_index) continue;
    counted[size_t(i)] = 1;
    Index ti = unravel(i, target.shape), li = ti;
    li.insert(li.begin() + 1, 0);
    double all = 0;
    for (int64_t c = 0; c < C; ++c) {
      li[1] = c;
      all += at(logp, li);
    }
    li[1] = t;
    l.v[size_t(i)] = -(1 - ls) * at(logp, li) - ls / double(C) * all;
  }
  return reduce_loss(l, counted, r);
}
inline Arr cross_entropy(const Arr& logits, const Arr& target, Red r, int64_t ignore_index, double ls) {
  Arr logp = along(logits, 1, vlog_softmax);
  return nll_smooth(logp, target, r, ignore_index, ls);
}
inline Arr mse_loss(const Arr& a, const Arr& b, Red r) {
  Arr l = zip(a, b, [](double x, double y) { return (x - y) * (x - y); }, a.dtype);
  return reduce_loss(l, std::vector<double>(l.v.size(), 1.0), r);
}
inline Arr embedding(const Arr& w, const Arr& idx) {
  const int64_t D = w.shape[1];
  Shape s = idx.shape;
  s.push_back(D);
  Arr o = zeros(s, w.dtype);
  for (int64_t i = 0; i < idx.numel(); ++i)
    for (int64_t j = 0; j < D; ++j) o.v[size_t(i * D + j)] = w.v[size_t(int64_t(idx.v[size_t(i)]) * D + j)];
  return o;
}

}  // namespace ref
