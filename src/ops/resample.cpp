// Composites of the index and linear-algebra ops, with PyTorch's semantics: one_hot, pad,
// interpolate (every mode, as index_select taps per dim; area on 3-D/4-D inputs is
// adaptive_avg_pool2d) and einsum. Each is built only from existing ops (scatter, slice, cat,
// index_select, mul/add, permute, reshape, sum, matmul, adaptive_avg_pool2d), so its gradient,
// lazy tracing and fusion come from theirs; no op table entry.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "axle/ops.h"
#include "ops/op.h"

namespace axle {
namespace {

/// A constant int64 / float32 vector on `dev`.
Tensor index_on(const std::vector<int64_t>& v, Device dev) {
  return from_vector(v, {int64_t(v.size())}).to(dev);
}
Tensor floats_on(const std::vector<float>& v, const Shape& shape, Device dev) {
  return from_vector(v, shape).to(dev);
}

std::string list_str(const std::vector<int64_t>& v) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  return o.str() + ")";
}

}  // namespace

// ------------------------------------------------------------------ one_hot
Tensor one_hot(const Tensor& x, int64_t num_classes) {
  ops::check_defined(x, "one_hot", "input");
  AXLE_CHECK(x.dtype() == kInt64, "[one_hot] expected an int64 tensor of class indices, got ", x.dtype());
  AXLE_CHECK(num_classes >= -1, "[one_hot] expected num_classes >= 0 (or -1: inferred), got ", num_classes);
  if (num_classes == -1) {
    AXLE_CHECK(x.numel() > 0, "[one_hot] expected a non-empty input to infer num_classes from, got shape ",
               shape_str(x.shape()), "; pass num_classes");
    num_classes = int64_t(amax(x).item()) + 1;  // reads the values (on xla: runs the graph), as PyTorch
  }
  // Eager inputs are checked here; on xla the scatter kernel checks the range when the graph runs.
  if (x.device().is_cpu() && x.numel() > 0) {
    const int64_t lo = int64_t(amin(x).item()), hi = int64_t(amax(x).item());
    AXLE_CHECK(lo >= 0, "[one_hot] expected non-negative class values, got ", lo);
    AXLE_CHECK(hi < num_classes, "[one_hot] expected class values < num_classes = ", num_classes, ", got ", hi);
  }
  Shape s = x.shape();
  s.push_back(num_classes);
  return scatter(zeros(s, {.dtype = kInt64, .device = x.device()}), -1, unsqueeze(x, -1), 1.0);
}

// ------------------------------------------------------------------ pad
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode, double value) {
  ops::check_defined(x, "pad", "input");
  AXLE_CHECK(pad.size() % 2 == 0, "[pad] expected an even number of padding sizes, got ", pad.size(), " ",
             list_str(pad));
  const int64_t np = int64_t(pad.size()) / 2, nd = x.dim();
  AXLE_CHECK(np <= nd, "[pad] expected at most 2 * ", nd, " = ", 2 * nd, " padding sizes for a ", nd,
             "-D input, got ", pad.size(), " ", list_str(pad));
  if (mode == "constant") {
    Tensor y = x;
    for (int64_t i = 0; i < np; ++i) {
      const int64_t d = nd - 1 - i, l = pad[size_t(2 * i)], r = pad[size_t(2 * i + 1)];
      const int64_t n = y.shape()[size_t(d)];
      // Negative sizes crop first (PyTorch narrows the input), then the positive ones pad.
      const int64_t start = std::max<int64_t>(-l, 0), stop = n - std::max<int64_t>(-r, 0);
      AXLE_CHECK(stop >= start, "[pad] expected negative padding no larger than dim ", d, " (size ", n, "), got (", l,
                 ", ", r, ")");
      if (start > 0 || stop < n) y = narrow(y, d, start, stop - start);
      std::vector<Tensor> parts;
      auto filler = [&](int64_t len) {
        Shape s = y.shape();
        s[size_t(d)] = len;
        return full(s, value, {.dtype = x.dtype(), .device = x.device()});
      };
      if (l > 0) parts.push_back(filler(l));
      parts.push_back(y);
      if (r > 0) parts.push_back(filler(r));
      if (parts.size() > 1) y = cat(parts, d);
    }
    return y;
  }
  AXLE_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular",
             "[pad] expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"", mode, "\"");
  AXLE_CHECK(value == 0, "[pad] mode \"", mode, "\" takes no value (only \"constant\" does), got ", value);
  AXLE_CHECK(np >= 1 && np <= 3 && (nd == np + 1 || nd == np + 2), "[pad] mode \"", mode,
             "\" pads the last 1, 2 or 3 dims of a 2-D/3-D, 3-D/4-D or 4-D/5-D input (the batch dim optional): expected ",
             "a ", np + 1, "-D or ", np + 2, "-D input for ", pad.size(), " padding sizes, got ", shape_str(x.shape()));
  // PyTorch: a batch of size 0 is allowed, every other dim must be non-empty.
  for (int64_t d = (nd == np + 2 ? 1 : 0); d < nd; ++d)
    AXLE_CHECK(x.shape()[size_t(d)] > 0, "[pad] mode \"", mode, "\" expected non-empty dims apart from the batch, got ",
               shape_str(x.shape()));
  const bool reflect = mode == "reflect", circular = mode == "circular";
  Tensor y = x;
  for (int64_t i = 0; i < np; ++i) {
    const int64_t d = nd - 1 - i, l = pad[size_t(2 * i)], r = pad[size_t(2 * i + 1)];
    if (l == 0 && r == 0) continue;
    const int64_t n = x.shape()[size_t(d)], out = n + l + r;
    if (reflect)
      AXLE_CHECK(l < n && r < n, "[pad] mode \"reflect\" expected padding smaller than dim ", d, " (size ", n,
                 "), got (", l, ", ", r, ")");
    // circular: a negative side crops first (PyTorch), then each positive side copies the kept
    // part's other end, wrapping around it at most once.
    const int64_t skip = std::max<int64_t>(-l, 0), kept = n - skip - std::max<int64_t>(-r, 0);
    if (circular)
      AXLE_CHECK(kept >= 1 && l <= kept && r <= kept, "[pad] mode \"circular\" expected padding no larger than dim ", d,
                 " (size ", n, ", ", kept, " after cropping) so it wraps around at most once, got (", l, ", ", r, ")");
    AXLE_CHECK(out >= 1, "[pad] expected an output size >= 1 in dim ", d, ": size ", n, " with padding (", l, ", ", r,
               ") gives ", out);
    // Output position j reads input position j - l, reflected (without repeating the edge),
    // wrapped around (circular) or clamped into [0, n); the gradient sums back through
    // index_select's index_add.
    std::vector<int64_t> idx(static_cast<size_t>(out));
    for (int64_t j = 0; j < out; ++j) {
      int64_t k = j - l;
      if (circular) {
        k = skip + (((j - std::max<int64_t>(l, 0)) % kept) + kept) % kept;
      } else if (reflect) {
        if (k < 0) k = -k;
        if (k >= n) k = 2 * (n - 1) - k;
      } else {
        k = std::clamp<int64_t>(k, 0, n - 1);
      }
      idx[size_t(j)] = k;
    }
    y = index_select(y, d, index_on(idx, x.device()));
  }
  return y;
}

// ------------------------------------------------------------------ interpolate
namespace {

/// One value per spatial dim: `v` as given (one each) or its one value repeated.
template <class T>
std::vector<T> per_dim(const std::vector<T>& v, int64_t n, const char* what, const Shape& xs) {
  if (v.size() == 1) return std::vector<T>(size_t(n), v[0]);
  AXLE_CHECK(int64_t(v.size()) == n, "[interpolate] expected ", what, " with one value or one per spatial dim (", n,
             " for input ", shape_str(xs), "), got ", v.size(), " values");
  return v;
}

/// PyTorch's sampling scale of one dim (area_pixel_compute_scale / compute_scales_value), in float.
float sampling_scale(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  if (align_corners) return out > 1 ? float(in - 1) / float(out - 1) : 0.f;
  return scale_factor > 0 ? float(1.0 / scale_factor) : float(in) / float(out);
}

/// One dim's resampling as taps: output j = sum_k w[k][j] * x[idx[k][j]] (k in taps' order,
/// PyTorch's order of the sum); `w` empty: one tap read as is (nearest).
struct Taps {
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<float>> w;
};

Taps make_taps(size_t k, int64_t out, bool weighted) {
  Taps t;
  t.idx.assign(k, std::vector<int64_t>(size_t(out)));
  if (weighted) t.w.assign(k, std::vector<float>(size_t(out)));
  return t;
}

/// Nearest: output j reads floor(j * scale) (PyTorch's nearest_idx: identity when out == in,
/// j / 2 when out == 2 in), clamped to in - 1; nearest-exact reads floor((j + 0.5) * scale)
/// (the product in double, rounded to float, as PyTorch's floorf of it).
Taps nearest_taps(int64_t in, int64_t out, double scale_factor, bool exact) {
  Taps t = make_taps(1, out, false);
  const float scale = sampling_scale(in, out, false, scale_factor);
  for (int64_t j = 0; j < out; ++j) {
    int64_t& i = t.idx[0][size_t(j)];
    if (exact) i = std::min(int64_t(std::floor(float((double(j) + 0.5) * double(scale)))), in - 1);
    else if (out == in) i = j;
    else if (out == 2 * in) i = j >> 1;
    else i = std::min(int64_t(std::floor(float(j) * scale)), in - 1);
  }
  return t;
}

/// Linear: output j = x[i0] * w0 + x[i1] * w1 (PyTorch's compute_source_index_and_lambda, in float).
Taps linear_taps(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  Taps t = make_taps(2, out, true);
  const float scale = sampling_scale(in, out, align_corners, scale_factor);
  for (int64_t j = 0; j < out; ++j) {
    const size_t u = size_t(j);
    if (out == in) {
      t.idx[0][u] = t.idx[1][u] = j, t.w[0][u] = 1.f, t.w[1][u] = 0.f;
      continue;
    }
    float real = align_corners ? scale * float(j) : scale * (float(j) + 0.5f) - 0.5f;
    if (!align_corners && real < 0.f) real = 0.f;
    const int64_t k = std::min(int64_t(std::floor(real)), in - 1);
    const float lambda = std::min(std::max(real - float(k), 0.f), 1.f);
    t.idx[0][u] = k;
    t.idx[1][u] = k + (k < in - 1 ? 1 : 0);
    t.w[1][u] = lambda;
    t.w[0][u] = 1.f - lambda;
  }
  return t;
}

// Keys' cubic convolution kernel (PyTorch's cubic_convolution1 for |x| <= 1, 2 for 1 < |x| < 2).
float cubic1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
float cubic2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/// Bicubic: 4 taps around floor(real) with A = -0.75, indices clamped to the border (PyTorch's
/// HelperInterpCubic: the source index unclamped, guard_index_and_lambda, the coefficients).
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  Taps t = make_taps(4, out, true);
  const float scale = sampling_scale(in, out, align_corners, scale_factor), A = -0.75f;
  for (int64_t j = 0; j < out; ++j) {
    const size_t u = size_t(j);
    const float real = align_corners ? scale * float(j) : scale * (float(j) + 0.5f) - 0.5f;
    const int64_t k = std::min(int64_t(std::floor(real)), in - 1);
    const float lambda = std::min(std::max(real - float(k), 0.f), 1.f);
    const float w[4] = {cubic2(lambda + 1, A), cubic1(lambda, A), cubic1(1 - lambda, A), cubic2(2 - lambda, A)};
    for (size_t q = 0; q < 4; ++q) {
      t.idx[q][u] = std::clamp<int64_t>(k - 1 + int64_t(q), 0, in - 1);
      t.w[q][u] = w[q];
    }
  }
  return t;
}

/// Antialiased bilinear / bicubic (PyTorch's _compute_weights_aa, Pillow's resampling): output
/// j reads [xmin, xmin + xsize) around centre scale * (j + 0.5), weighted by the filter (a tent,
/// or a cubic with a = -0.5) stretched by the scale when downsampling, normalised to sum 1.
Taps antialias_taps(int64_t in, int64_t out, bool align_corners, double scale_factor, bool cubic) {
  const float scale = sampling_scale(in, out, align_corners, scale_factor);
  const float interp = cubic ? 4.f : 2.f;
  const float support = scale >= 1.f ? interp * 0.5f * scale : interp * 0.5f;
  const size_t kmax = size_t(std::ceil(support)) * 2 + 1;
  const float invscale = scale >= 1.f ? 1.f / scale : 1.f;
  auto filter = [cubic](float x) {
    x = std::abs(x);
    if (!cubic) return x < 1.f ? 1.f - x : 0.f;
    return x < 1.f ? cubic1(x, -0.5f) : x < 2.f ? cubic2(x, -0.5f) : 0.f;
  };
  Taps t = make_taps(kmax, out, true);
  for (int64_t j = 0; j < out; ++j) {
    const size_t u = size_t(j);
    const float center = scale * (float(j) + 0.5f);
    const int64_t xmin = std::max<int64_t>(int64_t(center - support + 0.5f), 0);
    const int64_t xsize = std::min<int64_t>(int64_t(center + support + 0.5f), in) - xmin;
    float total = 0.f;
    for (size_t q = 0; q < kmax; ++q) {
      const bool inside = int64_t(q) < xsize;
      const float w = inside ? filter((float(int64_t(q) + xmin) - center + 0.5f) * invscale) : 0.f;
      t.idx[q][u] = inside ? xmin + int64_t(q) : std::min(xmin, in - 1);  // outside: any valid index, weight 0
      t.w[q][u] = w;
      total += w;
    }
    if (total != 0.f)
      for (size_t q = 0; q < kmax; ++q) t.w[q][u] /= total;
  }
  return t;
}

/// Area (adaptive average pooling's windows): output j averages [floor(j in / out), ceil((j + 1) in / out)).
Taps area_taps(int64_t in, int64_t out) {
  auto start = [&](int64_t j) { return (j * in) / out; };
  auto stop = [&](int64_t j) { return ((j + 1) * in + out - 1) / out; };
  size_t kmax = 1;
  for (int64_t j = 0; j < out; ++j) kmax = std::max(kmax, size_t(stop(j) - start(j)));
  Taps t = make_taps(kmax, out, true);
  for (int64_t j = 0; j < out; ++j) {
    const int64_t a = start(j), len = stop(j) - a;
    for (size_t q = 0; q < kmax; ++q) {
      const bool inside = int64_t(q) < len;
      t.idx[q][size_t(j)] = inside ? a + int64_t(q) : a;
      t.w[q][size_t(j)] = inside ? 1.f / float(len) : 0.f;
    }
  }
  return t;
}

/// x resampled along dim d by the taps: sum_k index_select(x, d, idx_k) * w_k, left to right.
Tensor apply_taps(const Tensor& x, int64_t d, const Taps& t) {
  const int64_t n = int64_t(t.idx[0].size());
  Shape ws(static_cast<size_t>(x.dim() - d), 1);
  ws[0] = n;
  Tensor y;
  for (size_t k = 0; k < t.idx.size(); ++k) {
    Tensor r = index_select(x, d, index_on(t.idx[k], x.device()));
    if (!t.w.empty()) r = mul(r, floats_on(t.w[k], ws, x.device()));
    y = y.defined() ? add(y, r) : r;
  }
  return y;
}

/// Whether PyTorch accepts `mode` for an input of `dim` dims.
bool mode_takes_rank(const std::string& mode, int64_t dim) {
  if (mode == "nearest" || mode == "nearest-exact" || mode == "area") return dim >= 3 && dim <= 5;
  if (mode == "linear") return dim == 3;
  if (mode == "bilinear" || mode == "bicubic") return dim == 4;
  if (mode == "trilinear") return dim == 5;
  return false;
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  ops::check_defined(x, "interpolate", "input");
  const std::string& m = o.mode;
  const bool nearest = m == "nearest" || m == "nearest-exact", area = m == "area";
  const bool linear = m == "linear" || m == "bilinear" || m == "trilinear", cubic = m == "bicubic";
  AXLE_CHECK(nearest || area || linear || cubic,
             "[interpolate] expected mode \"nearest\", \"nearest-exact\", \"area\", \"linear\", \"bilinear\", ",
             "\"bicubic\" or \"trilinear\", got \"", m, "\"");
  AXLE_CHECK(!(o.align_corners.has_value() && !(linear || cubic)),
             "[interpolate] align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, ",
             "trilinear), got it with \"", m, "\"");
  AXLE_CHECK(!o.antialias || ((m == "bilinear" || cubic) && x.dim() == 4),
             "[interpolate] antialias needs mode \"bilinear\" or \"bicubic\" and a 4-D input, got \"", m, "\" and ",
             shape_str(x.shape()));
  AXLE_CHECK(mode_takes_rank(m, x.dim()), "[interpolate] mode \"", m, "\" expected a ",
             nearest || area ? "3-D, 4-D or 5-D input [N, C, ...]"
             : m == "linear" ? "3-D input [N, C, W]"
             : m == "trilinear" ? "5-D input [N, C, D, H, W]"
                                : "4-D input [N, C, H, W]",
             ", got ", shape_str(x.shape()));
  AXLE_CHECK(x.dtype() == kFloat32, "[interpolate] expected a float32 input, got ", x.dtype());
  AXLE_CHECK(o.size.empty() != o.scale_factor.empty(), "[interpolate] expected exactly one of size and scale_factor, got ",
             o.size.empty() ? "neither" : "both");
  AXLE_CHECK(!(o.recompute_scale_factor.value_or(false) && !o.size.empty()),
             "[interpolate] recompute_scale_factor needs scale_factor, got an explicit size");
  const int64_t ns = x.dim() - 2;
  const Shape& xs = x.shape();
  Shape out(static_cast<size_t>(ns));
  std::vector<double> scales(size_t(ns), 0.0);  // 0: none, the sampling scale is in / out
  if (!o.size.empty()) {
    out = per_dim(o.size, ns, "size", xs);
  } else {
    const std::vector<double> sf = per_dim(o.scale_factor, ns, "scale_factor", xs);
    for (int64_t i = 0; i < ns; ++i) {
      AXLE_CHECK(sf[size_t(i)] > 0, "[interpolate] expected positive scale factors, got ", sf[size_t(i)]);
      out[size_t(i)] = int64_t(std::floor(double(xs[size_t(i + 2)]) * sf[size_t(i)]));
      if (!o.recompute_scale_factor.value_or(false)) scales[size_t(i)] = sf[size_t(i)];
    }
  }
  for (int64_t i = 0; i < ns; ++i)
    AXLE_CHECK(xs[size_t(i + 2)] > 0 && out[size_t(i)] > 0,
               "[interpolate] expected input and output sizes > 0, got input ", shape_str(xs), " and output size ",
               shape_str(out));
  // area on 1-D and 2-D inputs is adaptive_avg_pool2d itself (PyTorch's definition): its kernel's sums.
  if (area && ns == 1) return squeeze(adaptive_avg_pool2d(unsqueeze(x, 2), {1, out[0]}), 2);
  if (area && ns == 2) return adaptive_avg_pool2d(x, {out[0], out[1]});
  const bool align = o.align_corners.value_or(false);
  Tensor y = x;
  // Dim by dim, the last first: bilinear's value is then (x[h0, w0] w0 + x[h0, w1] w1) h0 +
  // (x[h1, w0] w0 + x[h1, w1] w1) h1, PyTorch's grouping of the same products (bicubic's and
  // the antialiased passes' likewise).
  for (int64_t i = ns - 1; i >= 0; --i) {
    const int64_t d = i + 2, in = xs[size_t(d)], n = out[size_t(i)];
    const double sf = scales[size_t(i)];
    if (m == "nearest" && n == in) continue;  // PyTorch's nearest_idx: the identity
    if (o.antialias && n == in) continue;     // PyTorch's antialiased kernel skips a dim that keeps its size
    const Taps t = o.antialias ? antialias_taps(in, n, align, sf, cubic)
                   : nearest   ? nearest_taps(in, n, sf, m == "nearest-exact")
                   : area      ? area_taps(in, n)
                   : cubic     ? cubic_taps(in, n, align, sf)
                               : linear_taps(in, n, align, sf);
    y = apply_taps(y, d, t);
  }
  return y;
}

// ------------------------------------------------------------------ einsum
namespace {

// Labels: 0-25 'a'-'z', 26-51 'A'-'Z', 52 + k the k-th broadcast ("...") dim, right-aligned.
constexpr int kEll = 52;

int letter_label(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c - 'A' + 26; }
char label_char(int l) { return l < 26 ? char('a' + l) : char('A' + l - 26); }

/// One operand's subscripts: labels, with -1 where its "..." stands.
struct Term {
  std::vector<int> labels;
  bool ellipsis = false;
};

Term parse_term(const std::string& s, const std::string& eq, const char* where) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      AXLE_CHECK(!t.ellipsis && s.compare(i, 3, "...") == 0, "[einsum] expected at most one \"...\" per ", where,
                 " and only as three dots, got \"", eq, "\"");
      t.ellipsis = true;
      t.labels.push_back(-1);
      i += 2;
    } else {
      AXLE_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), "[einsum] expected subscripts in [a-zA-Z] or \"...\", got '",
                 c, "' in \"", eq, "\"");
      t.labels.push_back(letter_label(c));
    }
  }
  return t;
}

/// A tensor and the label of each of its dims.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

int64_t find(const std::vector<int>& v, int l) {
  auto it = std::find(v.begin(), v.end(), l);
  return it == v.end() ? -1 : int64_t(it - v.begin());
}

/// Takes the diagonal of every label repeated in x (flatten the two dims, every (n+1)-th element).
void take_diagonals(Labeled& x, size_t which) {
  for (;;) {
    int64_t p = -1, q = -1;
    for (size_t i = 0; i < x.labels.size() && p < 0; ++i)
      for (size_t j = i + 1; j < x.labels.size(); ++j)
        if (x.labels[i] == x.labels[j]) {
          p = int64_t(i), q = int64_t(j);
          break;
        }
    if (p < 0) return;
    const int64_t n = x.t.shape()[size_t(p)];
    AXLE_CHECK(x.t.shape()[size_t(q)] == n, "[einsum] expected the dims of subscript '", label_char(x.labels[size_t(p)]),
               "' repeated in operand ", which, " to have one size, got ", n, " and ", x.t.shape()[size_t(q)]);
    Shape perm;
    std::vector<int> labels;
    for (int64_t k = 0; k < x.t.dim(); ++k)
      if (k != p && k != q) perm.push_back(k), labels.push_back(x.labels[size_t(k)]);
    perm.push_back(p), perm.push_back(q);
    Tensor t = permute(x.t, perm);
    Shape s(t.shape().begin(), t.shape().end() - 2);
    s.push_back(n * n);
    t = slice(reshape(t, s), -1, 0, n * n, n + 1);
    labels.push_back(x.labels[size_t(p)]);
    x = {t, labels};
  }
}

/// Sums the dims whose labels `keep` does not hold.
void sum_unkept(Labeled& x, const std::vector<bool>& keep) {
  Shape dims;
  std::vector<int> labels;
  for (size_t k = 0; k < x.labels.size(); ++k)
    if (keep[size_t(x.labels[k])]) labels.push_back(x.labels[k]);
    else dims.push_back(int64_t(k));
  if (dims.empty()) return;
  x = {sum(x.t, dims), labels};
}

/// a * b summed over the labels both have and `keep` does not, as one batched matmul: a to
/// [batch, a's own, contracted], b to [batch, contracted, b's own]. Labels of size 1 on one side
/// broadcast.
Labeled contract(Labeled a, Labeled b, const std::vector<bool>& keep) {
  std::vector<int> batch, own_a, own_b, con;
  for (int l : a.labels) {
    if (find(b.labels, l) < 0) own_a.push_back(l);
    else if (keep[size_t(l)]) batch.push_back(l);
    else con.push_back(l);
  }
  for (int l : b.labels)
    if (find(a.labels, l) < 0) own_b.push_back(l);
  // Sizes of shared labels agree or broadcast from 1.
  Shape sa = a.t.shape(), sb = b.t.shape();
  // label l's positions in a and b, its sizes there checked to agree or broadcast from 1
  auto shared = [&](int l) {
    const int64_t ia = find(a.labels, l), ib = find(b.labels, l);
    const int64_t na = sa[size_t(ia)], nb = sb[size_t(ib)];
    AXLE_CHECK(na == nb || na == 1 || nb == 1, "[einsum] expected subscript ",
               l >= kEll ? std::string("...") : std::string(1, label_char(l)),
               " of one size (or 1) in every operand, got ", na, " and ", nb);
    return std::array<int64_t, 4>{ia, ib, na, nb};
  };
  for (int l : batch) shared(l);
  for (int l : con) {
    const auto [ia, ib, na, nb] = shared(l);
    if (na != nb) {  // a size-1 side is expanded to the other's size
      if (na == 1) sa[size_t(ia)] = nb;
      else sb[size_t(ib)] = na;
    }
  }
  if (sa != a.t.shape()) a.t = expand(a.t, sa);
  if (sb != b.t.shape()) b.t = expand(b.t, sb);
  // Batch sizes: broadcast in the matmul (each side keeps its own, 1 or n).
  Shape bat_a, bat_b, out_sizes;
  std::vector<int> out_labels;
  for (int l : batch) {
    const int64_t na = a.t.shape()[size_t(find(a.labels, l))], nb = b.t.shape()[size_t(find(b.labels, l))];
    bat_a.push_back(na), bat_b.push_back(nb);
    out_sizes.push_back(std::max(na, nb) == 1 ? 1 : (na == 1 ? nb : na));
    out_labels.push_back(l);
  }
  auto prod = [&](const Labeled& x, const std::vector<int>& g) {
    int64_t p = 1;
    for (int l : g) p *= x.t.shape()[size_t(find(x.labels, l))];
    return p;
  };
  const int64_t M = prod(a, own_a), K = prod(a, con), N = prod(b, own_b);
  // a -> [batch..., M, K], b -> [batch..., K, N] (batch dims kept apart: they broadcast).
  Shape pa, pb;
  for (int l : batch) pa.push_back(find(a.labels, l)), pb.push_back(find(b.labels, l));
  for (int l : own_a) pa.push_back(find(a.labels, l));
  for (int l : con) pa.push_back(find(a.labels, l)), pb.push_back(find(b.labels, l));
  for (int l : own_b) pb.push_back(find(b.labels, l));
  Shape ra = bat_a, rb = bat_b;
  ra.push_back(M), ra.push_back(K);
  rb.push_back(K), rb.push_back(N);
  Tensor ta = reshape(permute(a.t, pa), ra), tb = reshape(permute(b.t, pb), rb);
  Tensor r = matmul(ta, tb);
  for (int l : own_a) out_sizes.push_back(a.t.shape()[size_t(find(a.labels, l))]), out_labels.push_back(l);
  for (int l : own_b) out_sizes.push_back(b.t.shape()[size_t(find(b.labels, l))]), out_labels.push_back(l);
  return {reshape(r, out_sizes), out_labels};
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  AXLE_CHECK(!operands.empty(), "[einsum] expected at least one operand, got none");
  for (size_t i = 0; i < operands.size(); ++i) {
    ops::check_defined(operands[i], "einsum", "operand");
    AXLE_CHECK(operands.size() == 1 || operands[i].dtype() == kFloat32,
               "[einsum] expected float32 operands (contracted by matmul), got ", operands[i].dtype(), " for operand ", i);
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), eq,
                               "operand"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  AXLE_CHECK(terms.size() == operands.size(), "[einsum] expected ", terms.size(), " operands for \"", equation, "\", got ",
             operands.size());
  // Each operand's labels, its "..." expanded to the broadcast dims it covers (right-aligned).
  int64_t ell = 0;  // the number of broadcast dims
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t named = int64_t(terms[i].labels.size()) - (terms[i].ellipsis ? 1 : 0);
    const int64_t nd = operands[i].dim();
    if (terms[i].ellipsis)
      AXLE_CHECK(nd >= named, "[einsum] expected operand ", i, " to have at least the ", named, " dims its subscripts name, got ",
                 shape_str(operands[i].shape()));
    else
      AXLE_CHECK(nd == named, "[einsum] expected operand ", i, " to have ", named, " dims, as its subscripts, got ",
                 shape_str(operands[i].shape()), " (no \"...\" given)");
    if (terms[i].ellipsis) ell = std::max(ell, nd - named);
  }
  std::vector<Labeled> xs;
  std::vector<int> count(size_t(kEll + ell), 0);  // operands holding each label
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> labels;
    const int64_t named = int64_t(terms[i].labels.size()) - (terms[i].ellipsis ? 1 : 0);
    const int64_t mine = operands[i].dim() - named;
    for (int l : terms[i].labels) {
      if (l >= 0) labels.push_back(l);
      else
        for (int64_t k = 0; k < mine; ++k) labels.push_back(int(kEll + ell - mine + k));
    }
    std::vector<int> uniq = labels;
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (int l : uniq) ++count[size_t(l)];
    xs.push_back({operands[i], labels});
  }
  // The output's labels: given, or "..." then the letters used once, in ASCII order (as PyTorch).
  std::vector<int> out;
  if (arrow != std::string::npos) {
    const Term t = parse_term(eq.substr(arrow + 2), eq, "output");
    for (int l : t.labels) {
      if (l < 0) {
        for (int64_t k = 0; k < ell; ++k) out.push_back(int(kEll + k));
        continue;
      }
      AXLE_CHECK(count[size_t(l)] > 0, "[einsum] expected output subscript '", label_char(l),
                 "' to appear in an operand, got \"", equation, "\"");
      AXLE_CHECK(find(out, l) < 0, "[einsum] expected output subscript '", label_char(l), "' at most once, got \"",
                 equation, "\"");
      out.push_back(l);
    }
  } else {
    for (int64_t k = 0; k < ell; ++k) out.push_back(int(kEll + k));
    std::vector<int> once(size_t(kEll), 0);
    for (const Term& t : terms)
      for (int l : t.labels)
        if (l >= 0) ++once[size_t(l)];
    for (char c = 'A'; c <= 'Z'; ++c)
      if (once[size_t(letter_label(c))] == 1) out.push_back(letter_label(c));
    for (char c = 'a'; c <= 'z'; ++c)
      if (once[size_t(letter_label(c))] == 1) out.push_back(letter_label(c));
  }
  // Left to right (as PyTorch without opt_einsum): diagonals, then every label no later
  // operand or the output needs is summed as soon as possible.
  const size_t nl = size_t(kEll + ell);
  auto kept_after = [&](size_t i) {  // labels of the output and of operands i+1, ...
    std::vector<bool> keep(nl, false);
    for (int l : out) keep[size_t(l)] = true;
    for (size_t j = i + 1; j < xs.size(); ++j)
      for (int l : xs[j].labels) keep[size_t(l)] = true;
    return keep;
  };
  for (size_t i = 0; i < xs.size(); ++i) take_diagonals(xs[i], i);
  Labeled acc = xs[0];
  sum_unkept(acc, kept_after(0));
  for (size_t i = 1; i < xs.size(); ++i) {
    Labeled b = xs[i];
    const std::vector<bool> keep = kept_after(i);
    std::vector<bool> keep_a = keep, keep_b = keep;  // a label both hold is contracted in the matmul
    for (int l : b.labels) keep_a[size_t(l)] = true;
    for (int l : acc.labels) keep_b[size_t(l)] = true;
    sum_unkept(acc, keep_a);
    sum_unkept(b, keep_b);
    acc = contract(acc, b, keep);
  }
  sum_unkept(acc, kept_after(xs.size()));
  // Output labels of size-1 operand dims stay; permute to the output's order.
  Shape perm;
  for (int l : out) {
    const int64_t k = find(acc.labels, l);
    AXLE_CHECK(k >= 0, "[einsum] internal: output subscript lost");
    perm.push_back(k);
  }
  return perm.empty() ? acc.t : permute(acc.t, perm);
}

}  // namespace axle
