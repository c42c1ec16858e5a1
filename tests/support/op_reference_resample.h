// Plain references (double, index loops, no axle op) for the issue-16 index and resample
// rows of tests/ops/test_ops.cpp: scatter / scatter_add, one_hot, pad, interpolate, einsum.
// Semantics follow PyTorch 2.x.
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "op_reference.h"

namespace ref {

/// x with src written (add: added) at index along dim; src may be larger than index.
inline Arr scatter(const Arr& x, int64_t dim, const Arr& index, const Arr& src, bool add) {
  dim = wrap(dim, x.dim());
  Arr o = x;
  for (int64_t i = 0; i < index.numel(); ++i) {
    Index idx = unravel(i, index.shape);
    const double v = at(src, idx);
    idx[size_t(dim)] = int64_t(index.v[size_t(i)]);
    double& t = o.v[size_t(ravel(idx, x.shape))];
    t = add ? t + v : v;
  }
  return o;
}
inline Arr scatter_value(const Arr& x, int64_t dim, const Arr& index, double value) {
  Arr src = zeros(index.shape, x.dtype);
  for (double& v : src.v) v = value;
  return scatter(x, dim, index, src, false);
}

inline Arr one_hot(const Arr& x, int64_t classes) {
  Shape s = x.shape;
  s.push_back(classes);
  Arr o = zeros(s, axle::kInt64);
  for (int64_t i = 0; i < x.numel(); ++i) o.v[size_t(i * classes + int64_t(x.v[size_t(i)]))] = 1;
  return o;
}

/// torch.nn.functional.pad: pad = {last_left, last_right, ...}; mode 0 constant, 1 reflect, 2 replicate,
/// 3 circular (non-negative sizes: position k - left, modulo the dim's size).
inline Arr pad(const Arr& x, const std::vector<int64_t>& p, int mode, double value = 0) {
  Shape s = x.shape;
  const int64_t nd = x.dim();
  for (size_t i = 0; i < p.size() / 2; ++i) s[size_t(nd - 1 - int64_t(i))] += p[2 * i] + p[2 * i + 1];
  Arr o = zeros(s, x.dtype);
  for (int64_t f = 0; f < o.numel(); ++f) {
    Index idx = unravel(f, s);
    bool inside = true;
    for (size_t i = 0; i < p.size() / 2; ++i) {
      const size_t d = size_t(nd - 1 - int64_t(i));
      const int64_t n = x.shape[d];
      int64_t k = idx[d] - p[2 * i];
      if (mode == 1) {
        if (k < 0) k = -k;
        if (k >= n) k = 2 * (n - 1) - k;
      } else if (mode == 2) {
        k = std::min(std::max<int64_t>(k, 0), n - 1);
      } else if (mode == 3) {
        k = ((k % n) + n) % n;
      } else if (k < 0 || k >= n) {
        inside = false;
      }
      idx[d] = k;
    }
    o.v[size_t(f)] = inside ? at(x, idx) : value;
  }
  return o;
}

/// One dim of interpolate: output j as sum_t w_t * input[i_t] (PyTorch's float index rules).
struct Taps {
  std::vector<std::vector<std::pair<int64_t, double>>> at;
};
inline Taps nearest_taps(int64_t in, int64_t out, double sf) {
  Taps t;
  const float scale = sf > 0 ? float(1.0 / sf) : float(in) / float(out);
  for (int64_t j = 0; j < out; ++j) {
    int64_t k = out == in ? j : std::min(int64_t(std::floor(float(j) * scale)), in - 1);
    t.at.push_back({{k, 1.0}});
  }
  return t;
}
inline Taps linear_taps(int64_t in, int64_t out, bool align, double sf) {
  Taps t;
  float scale = align ? (out > 1 ? float(in - 1) / float(out - 1) : 0.f) : sf > 0 ? float(1.0 / sf) : float(in) / float(out);
  for (int64_t j = 0; j < out; ++j) {
    if (out == in) {
      t.at.push_back({{j, 1.0}});
      continue;
    }
    float real = align ? scale * float(j) : std::max(scale * (float(j) + 0.5f) - 0.5f, 0.f);
    int64_t k = std::min(int64_t(std::floor(real)), in - 1);
    float l = std::min(std::max(real - float(k), 0.f), 1.f);
    t.at.push_back({{k, 1.0 - double(l)}, {k + (k < in - 1 ? 1 : 0), double(l)}});
  }
  return t;
}
/// nearest-exact: output j reads floor((j + 1/2) * in / out) (no scale_factor), in double.
inline Taps nearest_exact_taps(int64_t in, int64_t out) {
  Taps t;
  for (int64_t j = 0; j < out; ++j)
    t.at.push_back({{std::min(int64_t(std::floor((double(j) + 0.5) * double(in) / double(out))), in - 1), 1.0}});
  return t;
}
/// bicubic (Keys, a = -0.75), half-pixel centres: the 4 inputs around (j + 1/2) in / out - 1/2,
/// indices clamped to [0, in), in double.
inline Taps cubic_taps(int64_t in, int64_t out) {
  auto kernel = [](double d) {
    const double a = -0.75;
    d = std::abs(d);
    return d <= 1 ? ((a + 2) * d - (a + 3)) * d * d + 1 : d < 2 ? ((a * d - 5 * a) * d + 8 * a) * d - 4 * a : 0.0;
  };
  Taps t;
  for (int64_t j = 0; j < out; ++j) {
    const double real = (double(j) + 0.5) * double(in) / double(out) - 0.5;
    const int64_t k = int64_t(std::floor(real));
    std::vector<std::pair<int64_t, double>> at;
    for (int64_t q = k - 1; q <= k + 2; ++q) at.push_back({std::min(std::max<int64_t>(q, 0), in - 1), kernel(real - double(q))});
    t.at.push_back(at);
  }
  return t;
}
/// area: output j averages inputs [floor(j in / out), ceil((j + 1) in / out)).
inline Taps area_taps(int64_t in, int64_t out) {
  Taps t;
  for (int64_t j = 0; j < out; ++j) {
    const int64_t a = j * in / out, b = ((j + 1) * in + out - 1) / out;
    std::vector<std::pair<int64_t, double>> at;
    for (int64_t q = a; q < b; ++q) at.push_back({q, 1.0 / double(b - a)});
    t.at.push_back(at);
  }
  return t;
}
/// x [N, C, spatial...] resampled along each spatial dim by its taps.
inline Arr resample(const Arr& x, const std::vector<Taps>& taps) {
  Arr y = x;
  for (size_t i = 0; i < taps.size(); ++i) {
    const size_t d = i + 2;
    Shape s = y.shape;
    s[d] = int64_t(taps[i].at.size());
    Arr o = zeros(s, y.dtype);
    for (int64_t f = 0; f < o.numel(); ++f) {
      Index idx = unravel(f, s);
      double acc = 0;
      for (auto [k, w] : taps[i].at[size_t(idx[d])]) {
        Index src = idx;
        src[d] = k;
        acc += w * at(y, src);
      }
      o.v[size_t(f)] = acc;
    }
    y = o;
  }
  return y;
}

/// einsum over letters only (write "..." out as letters in the reference); size-1 dims broadcast.
inline Arr einsum(const std::string& eq, const std::vector<Arr>& xs) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), cur;
  for (char c : lhs) {
    if (c == ',') terms.push_back(cur), cur.clear();
    else cur += c;
  }
  terms.push_back(cur);
  const std::string out = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t k = 0; k < terms[i].size(); ++k) {
      int64_t& s = size[terms[i][k]];
      s = std::max(s, xs[i].shape[k]);
    }
  std::vector<char> labels;
  for (auto& [c, n] : size) labels.push_back(c);
  Shape os;
  for (char c : out) os.push_back(size[c]);
  Arr o = zeros(os);
  Shape all;
  for (char c : labels) all.push_back(size[c]);
  for (int64_t f = 0; f < numel(all); ++f) {
    Index v = unravel(f, all);
    std::map<char, int64_t> val;
    for (size_t k = 0; k < labels.size(); ++k) val[labels[k]] = v[k];
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      Index idx;
      for (size_t k = 0; k < terms[i].size(); ++k) idx.push_back(xs[i].shape[k] == 1 ? 0 : val[terms[i][k]]);
      p *= at(xs[i], idx);
    }
    Index oi;
    for (char c : out) oi.push_back(val[c]);
    o.v[size_t(ravel(oi, os))] += p;
  }
  return o;
}

}  // namespace ref
