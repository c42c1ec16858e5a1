// Composites of the index and linear-algebra ops, with PyTorch's semantics: one_hot, pad,
// interpolate (nearest, bilinear) and einsum. Each is built only from existing ops (scatter,
// slice, cat, index_select, mul/add, permute, reshape, sum, matmul), so its gradient, lazy
// tracing and fusion come from theirs; no op table entry.
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
  AXLE_CHECK(mode == "reflect" || mode == "replicate", "[pad] expected mode \"constant\", \"reflect\" or \"replicate\", got \"",
             mode, "\"");
  AXLE_CHECK(value == 0, "[pad] mode \"", mode, "\" takes no value (only \"constant\" does), got ", value);
  AXLE_CHECK(np >= 1 && np <= 3 && (nd == np + 1 || nd == np + 2), "[pad] mode \"", mode,
             "\" pads the last 1, 2 or 3 dims of a 2-D/3-D, 3-D/4-D or 4-D/5-D input (the batch dim optional): expected ",
             "a ", np + 1, "-D or ", np + 2, "-D input for ", pad.size(), " padding sizes, got ", shape_str(x.shape()));
  // PyTorch: a batch of size 0 is allowed, every other dim must be non-empty.
  for (int64_t d = (nd == np + 2 ? 1 : 0); d < nd; ++d)
    AXLE_CHECK(x.shape()[size_t(d)] > 0, "[pad] mode \"", mode, "\" expected non-empty dims apart from the batch, got ",
               shape_str(x.shape()));
  const bool reflect = mode == "reflect";
  Tensor y = x;
  for (int64_t i = 0; i < np; ++i) {
    const int64_t d = nd - 1 - i, l = pad[size_t(2 * i)], r = pad[size_t(2 * i + 1)];
    if (l == 0 && r == 0) continue;
    const int64_t n = x.shape()[size_t(d)], out = n + l + r;
    if (reflect)
      AXLE_CHECK(l < n && r < n, "[pad] mode \"reflect\" expected padding smaller than dim ", d, " (size ", n,
                 "), got (", l, ", ", r, ")");
    AXLE_CHECK(out >= 1, "[pad] expected an output size >= 1 in dim ", d, ": size ", n, " with padding (", l, ", ", r,
               ") gives ", out);
    // Output position j reads input position j - l, reflected (without repeating the edge) or
    // clamped into [0, n); the gradient sums back through index_select's index_add.
    std::vector<int64_t> idx(static_cast<size_t>(out));
    for (int64_t j = 0; j < out; ++j) {
      int64_t k = j - l;
      if (reflect) {
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

/// Nearest: output j reads floor(j * scale) (PyTorch's nearest_idx: identity when out == in,
/// j / 2 when out == 2 in), clamped to in - 1.
std::vector<int64_t> nearest_index(int64_t in, int64_t out, double scale_factor) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float scale = sampling_scale(in, out, false, scale_factor);
  for (int64_t j = 0; j < out; ++j) {
    if (out == in) idx[size_t(j)] = j;
    else if (out == 2 * in) idx[size_t(j)] = j >> 1;
    else idx[size_t(j)] = std::min(int64_t(std::floor(float(j) * scale)), in - 1);
  }
  return idx;
}

/// Linear: output j = x[i0] * w0 + x[i1] * w1 (PyTorch's compute_source_index_and_lambda, in float).
void linear_weights(int64_t in, int64_t out, bool align_corners, double scale_factor, std::vector<int64_t>& i0,
                    std::vector<int64_t>& i1, std::vector<float>& w0, std::vector<float>& w1) {
  i0.resize(size_t(out)), i1.resize(size_t(out)), w0.resize(size_t(out)), w1.resize(size_t(out));
  const float scale = sampling_scale(in, out, align_corners, scale_factor);
  for (int64_t j = 0; j < out; ++j) {
    if (out == in) {
      i0[size_t(j)] = i1[size_t(j)] = j, w0[size_t(j)] = 1.f, w1[size_t(j)] = 0.f;
      continue;
    }
    float real = align_corners ? scale * float(j) : scale * (float(j) + 0.5f) - 0.5f;
    if (!align_corners && real < 0.f) real = 0.f;
    const int64_t k = std::min(int64_t(std::floor(real)), in - 1);
    const float lambda = std::min(std::max(real - float(k), 0.f), 1.f);
    i0[size_t(j)] = k;
    i1[size_t(j)] = k + (k < in - 1 ? 1 : 0);
    w1[size_t(j)] = lambda;
    w0[size_t(j)] = 1.f - lambda;
  }
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  ops::check_defined(x, "interpolate", "input");
  const bool bilinear = o.mode == "bilinear";
  AXLE_CHECK(o.mode == "nearest" || bilinear, "[interpolate] expected mode \"nearest\" or \"bilinear\", got \"", o.mode,
             "\"");
  AXLE_CHECK(!(o.align_corners.has_value() && !bilinear),
             "[interpolate] align_corners can only be set with mode \"bilinear\", got it with \"", o.mode, "\"");
  if (bilinear)
    AXLE_CHECK(x.dim() == 4, "[interpolate] mode \"bilinear\" expected a 4-D input [N, C, H, W], got ",
               shape_str(x.shape()));
  else
    AXLE_CHECK(x.dim() >= 3 && x.dim() <= 5, "[interpolate] mode \"nearest\" expected a 3-D, 4-D or 5-D input ",
               "[N, C, ...], got ", shape_str(x.shape()));
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
  const bool align = o.align_corners.value_or(false);
  Tensor y = x;
  // Dim by dim, the last first: bilinear's value is then (x[h0, w0] w0 + x[h0, w1] w1) h0 +
  // (x[h1, w0] w0 + x[h1, w1] w1) h1, PyTorch's grouping of the same products.
  for (int64_t i = ns - 1; i >= 0; --i) {
    const int64_t d = i + 2, in = xs[size_t(d)], n = out[size_t(i)];
    if (!bilinear) {
      if (n != in) y = index_select(y, d, index_on(nearest_index(in, n, scales[size_t(i)]), x.device()));
      continue;
    }
    std::vector<int64_t> i0, i1;
    std::vector<float> w0, w1;
    linear_weights(in, n, align, scales[size_t(i)], i0, i1, w0, w1);
    Shape ws(static_cast<size_t>(x.dim() - d), 1);
    ws[0] = n;
    y = add(mul(index_select(y, d, index_on(i0, x.device())), floats_on(w0, ws, x.device())),
            mul(index_select(y, d, index_on(i1, x.device())), floats_on(w1, ws, x.device())));
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
