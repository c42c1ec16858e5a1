// Reduction kernels on cpu: sum, amax, amin, argmax, argmin, softmax / log_softmax and
// their backward, nll_loss and its backward, cumsum, prod and its backward, sort.
//
// Every reduction kernel works on a contiguous input viewed as [O, R, I] and reduces R:
// I == 1 is a row reduction (contiguous rows, SIMD + pairwise), O == 1 is a reduction over
// leading dims (whole rows accumulated, no transpose). Inputs whose reduced dims are not
// one contiguous group are permuted (kept dims first) and copied once into [O, R, 1].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "axle/ops.h"
#include "backend/cpu/bf16.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/vexp.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/reduce.h"

// Float compares/selects in the SIMD loops below only if-convert (vectorize) without
// trapping-math; axle never inspects floating-point exception flags.
#pragma GCC optimize("no-trapping-math")

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr int64_t kGrain = cpu::kParallelGrain;

// ------------------------------------------------------------------ geometry
struct Geom {
  int64_t O = 1, R = 1, I = 1;
};

/// Makes `x` (cast to `t`) contiguous and describes the reduction over mask `m` as [O, R, I].
/// Permutes and copies when the reduced dims are not one contiguous block.
Tensor prepare(const Tensor& x0, DType t, const std::vector<bool>& m, Geom& g) {
  Tensor x = cpu::contiguous_as(x0, t);
  const Shape& s = x.shape();
  // Groups of consecutive non-trivial dims with the same status.
  std::vector<std::pair<int64_t, bool>> groups;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 1) continue;
    if (!groups.empty() && groups.back().second == m[i]) groups.back().first *= s[i];
    else groups.push_back({s[i], bool(m[i])});
  }
  g = Geom{};
  int nred = 0;
  for (auto& gr : groups) nred += gr.second;
  if (nred == 0) {  // nothing non-trivial reduced: R = 1
    g.O = x.numel();
    return x;
  }
  if (nred == 1) {
    size_t k = 0;
    while (!groups[k].second) ++k;
    for (size_t i = 0; i < k; ++i) g.O *= groups[i].first;
    g.R = groups[k].first;
    for (size_t i = k + 1; i < groups.size(); ++i) g.I *= groups[i].first;
    return x;
  }
  // General: kept dims first, reduced dims last, one copy.
  Shape perm;
  for (size_t i = 0; i < s.size(); ++i)
    if (!m[i]) perm.push_back(int64_t(i));
  for (size_t i = 0; i < s.size(); ++i)
    if (m[i]) perm.push_back(int64_t(i));
  Shape ps, pst;
  for (int64_t p : perm) {
    ps.push_back(s[size_t(p)]);
    pst.push_back(x.strides()[size_t(p)]);
  }
  Tensor view = make_view(x, ps, pst, x.storage_offset());
  Tensor c = make_tensor(ps, t);
  cpu::copy_into(c, view);
  for (size_t i = 0; i < s.size(); ++i) (m[i] ? g.R : g.O) *= s[i];
  return c;
}

// ------------------------------------------------------------------ float helpers
/// Sum of a contiguous run: SIMD blocks combined pairwise (error ~ (64 + log n) eps).
float sum_block(const float* p, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

float pairwise_sum(const float* p, int64_t n) {
  if (n <= 512) return sum_block(p, n);
  int64_t h = (n / 2 + 15) & ~int64_t(15);
  return pairwise_sum(p, h) + pairwise_sum(p + h, n - h);
}

/// exp that vectorizes (Cephes polynomial, about 1 ulp); 0 below -87.5, inf above 88.5, NaN kept.
inline float vexp(float x) {
  float xc = x < -87.5f ? -87.5f : x;
  xc = xc > 88.5f ? 88.5f : xc;
  float y = exp_clamped(xc);
  y = x < -87.5f ? 0.f : y;
  y = x > 88.5f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

/// log that vectorizes (Cephes logf polynomial, about 1 ulp) for x > 0; inf and NaN kept, 0 gives -inf.
inline float vlog(float x) {
  const int32_t b = __builtin_bit_cast(int32_t, x);
  float e = float(((b >> 23) & 0xff) - 126);
  float m = __builtin_bit_cast(float, (b & 0x807fffff) | 0x3f000000);  // [0.5, 1)
  const bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1.f : e;
  m = lo ? m + m - 1.f : m - 1.f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * e;
  r = x == 0.f ? -std::numeric_limits<float>::infinity() : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  return x != x ? x : r;
}

/// Max (or min) of a contiguous float run in 8 lanes; NaN if any element is NaN.
template <bool IsMax>
float row_extreme(const float* p, int64_t n) {
  if (n < 16) {  // short rows: plain compare chain, NaN wins
    float m = p[0];
    for (int64_t i = 1; i < n; ++i) m = (m != m || (IsMax ? m >= p[i] : m <= p[i])) ? m : p[i];
    return m;
  }
  float acc[8], chk[8];
  for (int j = 0; j < 8; ++j) { acc[j] = p[0]; chk[j] = 0.f; }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float v = p[i + j];
      acc[j] = (IsMax ? v > acc[j] : v < acc[j]) ? v : acc[j];
      chk[j] += v * 0.f;  // NaN (or inf * 0) marks a row to rescan for NaN
    }
  float m = acc[0], c = chk[0];
  for (int j = 1; j < 8; ++j) { m = (IsMax ? acc[j] > m : acc[j] < m) ? acc[j] : m; c += chk[j]; }
  for (; i < n; ++i) { m = (IsMax ? p[i] > m : p[i] < m) ? p[i] : m; c += p[i] * 0.f; }
  if (c != c)
    for (int64_t k = 0; k < n; ++k)
      if (p[k] != p[k]) return p[k];
  return m;
}

template <class T, RK K>
inline T combine(T a, T b) {
  if constexpr (K == RK::Sum) return T(a + b);
  else if constexpr (K == RK::Max) {
    if constexpr (std::is_floating_point_v<T>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  } else {
    if constexpr (std::is_floating_point_v<T>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
}

template <class T, RK K>
T reduce_row(const T* p, int64_t n) {
  if constexpr (K == RK::Sum && std::is_same_v<T, float>) {
    return pairwise_sum(p, n);
  } else if constexpr (K == RK::Sum) {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += p[i];
    return s;
  } else if constexpr (std::is_same_v<T, float>) {
    return row_extreme<K == RK::Max>(p, n);
  } else {
    T m = p[0];
    for (int64_t i = 1; i < n; ++i) m = combine<T, K>(m, p[i]);
    return m;
  }
}

/// out[o, i] = reduce_r x[o, r, i] for I > 1: whole rows accumulated in column tiles. In: the
/// input's element type, T's or (float sums only) bf16, widened as it is read.
template <class T, RK K, class In = T>
void reduce_cols(const In* x, T* out, const Geom& g) {
  constexpr int64_t TW = 256;
  const int64_t tiles = (g.I + TW - 1) / TW;
  const int64_t tasks = g.O * tiles;
#pragma omp parallel for schedule(static) if (g.O * g.R * g.I >= kGrain && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / tiles, c0 = (t % tiles) * TW, w = std::min(TW, g.I - c0);
    const In* base = x + o * g.R * g.I + c0;
    T* dst = out + o * g.I + c0;
    if constexpr (K == RK::Sum && std::is_same_v<T, float>) {
      // Three-level cascade (blocks of 64 rows) keeps float error ~ (200 + R/2^18) eps.
      float l0[TW], l1[TW], l2[TW], wide[TW];
      for (int64_t j = 0; j < w; ++j) l0[j] = l1[j] = l2[j] = 0.f;
      for (int64_t r = 0; r < g.R; ++r) {
        const float* row;
        if constexpr (std::is_same_v<In, float>) {
          row = base + r * g.I;
        } else {  // bf16: the tile's row widened first (a loop that vectorises), then added
          widen_bf16(base + r * g.I, wide, w);
          row = wide;
        }
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) l0[j] += row[j];
        if ((r + 1) % 64 == 0) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) { l1[j] += l0[j]; l0[j] = 0.f; }
          if ((r + 1) % 4096 == 0) {
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) { l2[j] += l1[j]; l1[j] = 0.f; }
          }
        }
      }
      for (int64_t j = 0; j < w; ++j) dst[j] = l2[j] + (l1[j] + l0[j]);
    } else {
      T acc[TW];
      for (int64_t j = 0; j < w; ++j) acc[j] = base[j];
      for (int64_t r = 1; r < g.R; ++r) {
        const T* row = base + r * g.I;
        if constexpr (std::is_same_v<T, float> && K != RK::Sum) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) acc[j] = combine<T, K>(acc[j], row[j]);
        } else {
          for (int64_t j = 0; j < w; ++j) acc[j] = combine<T, K>(acc[j], row[j]);
        }
      }
      for (int64_t j = 0; j < w; ++j) dst[j] = acc[j];
    }
  }
}

/// reduce_cols for I > 1, R > 0, with row chunks when there are few column tiles.
template <class T, RK K, class In = T>
void reduce_cols_chunked(const In* x, T* out, const Geom& g) {
  const int64_t tiles = (g.I + 255) / 256;
  constexpr int64_t CR = 512;
  if (g.O * tiles < 64 && g.R >= 2 * CR && g.O * g.R * g.I >= 4 * kGrain) {
    // Few column tiles but many rows (e.g. a big bias gradient): reduce row chunks in parallel,
    // then reduce the partial results. The choice and the chunks depend on the shape only, so
    // the result does not depend on the thread count.
    const int64_t nc = (g.R + CR - 1) / CR;
    std::vector<T> part(static_cast<size_t>(g.O * nc * g.I));
#pragma omp parallel for schedule(static) collapse(2) if (omp_get_max_threads() > 1)
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t c = 0; c < nc; ++c) {
        Geom gc{1, std::min(CR, g.R - c * CR), g.I};
        reduce_cols<T, K, In>(x + (o * g.R + c * CR) * g.I, part.data() + (o * nc + c) * g.I, gc);
      }
    reduce_cols<T, K>(part.data(), out, Geom{g.O, nc, g.I});
    return;
  }
  reduce_cols<T, K, In>(x, out, g);
}

template <class T, RK K>
void reduce_kernel(const T* x, T* out, const Geom& g) {
  if (g.R == 0) {  // empty sum
    std::fill(out, out + g.O * g.I, T(0));
    return;
  }
  if (g.I > 1) {
    reduce_cols_chunked<T, K>(x, out, g);
    return;
  }
  if (g.O == 1 && g.R >= 2 * kGrain) {
    // One long row: fixed-size chunks (deterministic whatever the thread count), then combined.
    constexpr int64_t CH = 1 << 16;
    const int64_t nc = (g.R + CH - 1) / CH;
    std::vector<T> part(static_cast<size_t>(nc));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; ++c) part[size_t(c)] = reduce_row<T, K>(x + c * CH, std::min(CH, g.R - c * CH));
    out[0] = reduce_row<T, K>(part.data(), nc);
    return;
  }
#pragma omp parallel for schedule(static) if (g.O * g.R >= kGrain && g.O > 1)
  for (int64_t o = 0; o < g.O; ++o) out[o] = reduce_row<T, K>(x + o * g.R, g.R);
}

template <RK K>
Tensors reduce_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  auto m = reduce_mask(in[0].shape(), a.ints, 1, rk_name<K>());
  const DType t = mt[0].dtype;
  Geom g;
  if (t == kBFloat16) {
    // bf16 result: float32 sums rounded once. Summing bf16 columns (a bias gradient of a bf16
    // product: x [rows, C] over the rows) widens each element as it is read, in the float32
    // kernel's order (the same bits as widening x first); anything else (a strided x too) widens x first.
    Tensor out32 = make_tensor(mt[0].shape, kFloat32);
    if (out32.numel() == 0) return {make_tensor(mt[0].shape, t)};
    if constexpr (K == RK::Sum) {
      if (in[0].dtype() == kBFloat16 && in[0].is_contiguous()) {
        Tensor x = prepare(in[0], kBFloat16, m, g);
        if (g.I > 1 && g.R > 0) {
          reduce_cols_chunked<float, K, bfloat16>(x.data<bfloat16>(), out32.data<float>(), g);
          return {cpu::cast_cpu(out32, t)};
        }
      }
    }
    Tensor x = prepare(in[0], kFloat32, m, g);
    reduce_kernel<float, K>(x.data<float>(), out32.data<float>(), g);
    return {cpu::cast_cpu(out32, t)};
  }
  Tensor x = prepare(in[0], t, m, g);
  Tensor out = make_tensor(mt[0].shape, t);
  if (out.numel() == 0) return {out};
  switch (t) {
    case DType::Float32: reduce_kernel<float, K>(x.data<float>(), out.data<float>(), g); break;
    case DType::Int64: reduce_kernel<int64_t, K>(x.data<int64_t>(), out.data<int64_t>(), g); break;
    case DType::Int32: reduce_kernel<int32_t, K>(x.data<int32_t>(), out.data<int32_t>(), g); break;
    case DType::Bool:
    case DType::UInt8:
      reduce_kernel<uint8_t, K>(static_cast<uint8_t*>(x.data_ptr()), static_cast<uint8_t*>(out.data_ptr()), g);
      break;
    default: AXLE_FAIL("[", rk_name<K>(), "] dtype ", t, " is not supported on cpu");
  }
  return {out};
}

// ------------------------------------------------------------------ argmax / argmin
template <class T, bool IsMax>
inline bool better(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (best != best) return false;  // NaN wins and stays
    if (v != v) return true;
  }
  return IsMax ? v > best : v < best;
}

template <class T, bool IsMax>
void arg_kernel(const T* x, int64_t* out, const Geom& g) {
  if (g.I == 1) {
#pragma omp parallel for schedule(static) if (g.O * g.R >= kGrain && g.O > 1)
    for (int64_t o = 0; o < g.O; ++o) {
      const T* p = x + o * g.R;
      T best = p[0];
      int64_t bi = 0;
      for (int64_t r = 1; r < g.R; ++r)
        if (better<T, IsMax>(p[r], best)) { best = p[r]; bi = r; }
      out[o] = bi;
    }
    return;
  }
  constexpr int64_t TW = 256;
  const int64_t tiles = (g.I + TW - 1) / TW, tasks = g.O * tiles;
#pragma omp parallel for schedule(static) if (g.O * g.R * g.I >= kGrain && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / tiles, c0 = (t % tiles) * TW, w = std::min(TW, g.I - c0);
    const T* base = x + o * g.R * g.I + c0;
    T best[TW];
    int64_t bi[TW];
    for (int64_t j = 0; j < w; ++j) { best[j] = base[j]; bi[j] = 0; }
    for (int64_t r = 1; r < g.R; ++r) {
      const T* row = base + r * g.I;
      for (int64_t j = 0; j < w; ++j)
        if (better<T, IsMax>(row[j], best[j])) { best[j] = row[j]; bi[j] = r; }
    }
    std::memcpy(out + o * g.I + c0, bi, size_t(w) * sizeof(int64_t));
  }
}

template <bool IsMax>
Tensors arg_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const char* op = IsMax ? "argmax" : "argmin";
  auto m = reduce_mask(in[0].shape(), {a.ints[0]}, 0, op);
  DType t = in[0].dtype() == kBool ? kUInt8 : in[0].dtype();
  Geom g;
  Tensor x = prepare(in[0], in[0].dtype(), m, g);
  Tensor out = make_tensor(mt[0].shape, kInt64);
  if (out.numel() == 0) return {out};
  int64_t* o = out.data<int64_t>();
  switch (t) {
    case DType::Float32: arg_kernel<float, IsMax>(x.data<float>(), o, g); break;
    case DType::Int64: arg_kernel<int64_t, IsMax>(x.data<int64_t>(), o, g); break;
    case DType::Int32: arg_kernel<int32_t, IsMax>(x.data<int32_t>(), o, g); break;
    case DType::UInt8: arg_kernel<uint8_t, IsMax>(static_cast<const uint8_t*>(x.data_ptr()), o, g); break;
    default: AXLE_FAIL("[", op, "] dtype ", in[0].dtype(), " is not supported on cpu");
  }
  return {out};
}

// ------------------------------------------------------------------ softmax family
/// [O, R, I] geometry of a contiguous tensor for dim `d`.
Geom dim_geom(const Shape& s, int64_t d) {
  Geom g;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) (i < d ? g.O : i == d ? g.R : g.I) *= s[size_t(i)];
  return g;
}

// One row (I == 1): max, sum of exp, write — two reads, one write.
template <bool Log>
void softmax_row(const float* x, float* y, int64_t n) {
  float m = row_extreme<true>(x, n);  // NaN rows stay NaN through exp
  if (m == -std::numeric_limits<float>::infinity()) m = 0.f;  // all -inf: keep exp(x - m) defined
  float s = 0.f;
  if constexpr (Log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += vexp(x[i] - m);
    const float lse = m + std::log(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      y[i] = vexp(x[i] - m);
      s += y[i];
    }
    const float inv = 1.f / s;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// Strided dim (I > 1): the same on column tiles.
template <bool Log>
void softmax_cols(const float* x, float* y, const Geom& g) {
  constexpr int64_t TW = 128;
  const int64_t tiles = (g.I + TW - 1) / TW, tasks = g.O * tiles;
#pragma omp parallel for schedule(static) if (g.O * g.R * g.I >= kGrain && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / tiles, c0 = (t % tiles) * TW, w = std::min(TW, g.I - c0);
    const float* xb = x + o * g.R * g.I + c0;
    float* yb = y + o * g.R * g.I + c0;
    float m[TW], s[TW];
    for (int64_t j = 0; j < w; ++j) { m[j] = -std::numeric_limits<float>::infinity(); s[j] = 0.f; }
    for (int64_t r = 0; r < g.R; ++r)
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) m[j] = xb[r * g.I + j] > m[j] ? xb[r * g.I + j] : m[j];
    for (int64_t j = 0; j < w; ++j)
      if (m[j] == -std::numeric_limits<float>::infinity()) m[j] = 0.f;
    for (int64_t r = 0; r < g.R; ++r) {
      if constexpr (Log) {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) s[j] += vexp(xb[r * g.I + j] - m[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) {
          float e = vexp(xb[r * g.I + j] - m[j]);
          yb[r * g.I + j] = e;
          s[j] += e;
        }
      }
    }
    if constexpr (Log) {
      for (int64_t j = 0; j < w; ++j) s[j] = m[j] + vlog(s[j]);
      for (int64_t r = 0; r < g.R; ++r)
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) yb[r * g.I + j] = xb[r * g.I + j] - s[j];
    } else {
      for (int64_t j = 0; j < w; ++j) s[j] = 1.f / s[j];
      for (int64_t r = 0; r < g.R; ++r)
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) yb[r * g.I + j] *= s[j];
    }
  }
}

template <bool Log>
Tensors softmax_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const int64_t d = softmax_dim(in[0], a, "softmax");
  Tensor x = cpu::contiguous_as(in[0], kFloat32);
  Tensor y = make_tensor(mt[0].shape, kFloat32);
  if (y.numel() == 0) return {y};
  Geom g = in[0].dim() == 0 ? Geom{} : dim_geom(x.shape(), d);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (g.I == 1 && Log && g.R < 256) {
    // Short rows (logits [128, 10]): blocks of rows; exp and log each run as one flat vector loop
    // per block, so short rows pay no scalar remainder of the polynomial.
    constexpr int64_t B = 64, kTmp = 4096;
    const int64_t rows_per = std::max<int64_t>(1, std::min<int64_t>(B, kTmp / g.R));
    const int64_t nb = (g.O + rows_per - 1) / rows_per;
#pragma omp parallel for schedule(static) if (g.O * g.R >= kGrain && nb > 1)
    for (int64_t blk = 0; blk < nb; ++blk) {
      const int64_t o0 = blk * rows_per, nr = std::min(rows_per, g.O - o0);
      float mx[B], lse[B], tmp[kTmp];
      const float* xb = xp + o0 * g.R;
      for (int64_t k = 0; k < nr; ++k) {
        float m = row_extreme<true>(xb + k * g.R, g.R);
        if (m == -std::numeric_limits<float>::infinity()) m = 0.f;
        mx[k] = m;
        for (int64_t i = 0; i < g.R; ++i) tmp[k * g.R + i] = xb[k * g.R + i] - m;
      }
      const int64_t n = nr * g.R;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) tmp[j] = vexp(tmp[j]);
      for (int64_t k = 0; k < nr; ++k) {
        float s = 0.f;
        for (int64_t i = 0; i < g.R; ++i) s += tmp[k * g.R + i];
        lse[k] = s;
      }
#pragma omp simd
      for (int64_t k = 0; k < nr; ++k) lse[k] = mx[k] + vlog(lse[k]);
      for (int64_t k = 0; k < nr; ++k) {
        const float* xr = xp + (o0 + k) * g.R;
        float* yr = yp + (o0 + k) * g.R;
        const float l = lse[k];
#pragma omp simd
        for (int64_t i = 0; i < g.R; ++i) yr[i] = xr[i] - l;
      }
    }
  } else if (g.I == 1) {
#pragma omp parallel for schedule(static) if (g.O * g.R >= kGrain && g.O > 1)
    for (int64_t o = 0; o < g.O; ++o) softmax_row<Log>(xp + o * g.R, yp + o * g.R, g.R);
  } else {
    softmax_cols<Log>(xp, yp, g);
  }
  return {y};
}

template <bool Log>
void softmax_bwd_row(const float* g, const float* y, float* dx, int64_t n) {
  float s = 0.f;
  if constexpr (Log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += g[i];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] - vexp(y[i]) * s;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += g[i] * y[i];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

template <bool Log>
Tensors softmax_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const int64_t d = softmax_dim(in[1], a, "softmax_backward");
  Tensor g = cpu::contiguous_as(in[0], kFloat32), y = cpu::contiguous_as(in[1], kFloat32);
  Tensor dx = make_tensor(mt[0].shape, kFloat32);
  if (dx.numel() == 0) return {dx};
  Geom ge = in[1].dim() == 0 ? Geom{} : dim_geom(y.shape(), d);
  const float *gp = g.data<float>(), *yp = y.data<float>();
  float* dp = dx.data<float>();
  if (ge.I == 1) {
#pragma omp parallel for schedule(static) if (ge.O * ge.R >= kGrain && ge.O > 1)
    for (int64_t o = 0; o < ge.O; ++o) softmax_bwd_row<Log>(gp + o * ge.R, yp + o * ge.R, dp + o * ge.R, ge.R);
    return {dx};
  }
  constexpr int64_t TW = 128;
  const int64_t tiles = (ge.I + TW - 1) / TW, tasks = ge.O * tiles;
#pragma omp parallel for schedule(static) if (ge.O * ge.R * ge.I >= kGrain && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / tiles, c0 = (t % tiles) * TW, w = std::min(TW, ge.I - c0);
    const int64_t base = o * ge.R * ge.I + c0;
    float s[TW];
    for (int64_t j = 0; j < w; ++j) s[j] = 0.f;
    for (int64_t r = 0; r < ge.R; ++r) {
      const float *gr = gp + base + r * ge.I, *yr = yp + base + r * ge.I;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) s[j] += Log ? gr[j] : gr[j] * yr[j];
    }
    for (int64_t r = 0; r < ge.R; ++r) {
      const float *gr = gp + base + r * ge.I, *yr = yp + base + r * ge.I;
      float* dr = dp + base + r * ge.I;
      if constexpr (Log) {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) dr[j] = gr[j] - vexp(yr[j]) * s[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) dr[j] = yr[j] * (gr[j] - s[j]);
      }
    }
  }
  return {dx};
}

/// Validates the targets once and returns the count of non-ignored ones.
int64_t nll_targets(const int64_t* t, int64_t n, int64_t C, int64_t ignore, const char* op) {
  int64_t cnt = 0, bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    if (t[i] < 0 || t[i] >= C) { bad = i; break; }
    ++cnt;
  }
  AXLE_CHECK(bad < 0, "[", op, "] expected target values in [0, ", C, ") or ignore_index ", ignore, ", got ",
             bad < 0 ? 0 : t[bad], " at position ", bad);
  return cnt;
}

Tensors nll_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const Reduction r = Reduction(a.ints[0]);
  const int64_t ignore = a.ints[1];
  const NllGeom g = nll_check(in[0], in[1], "nll_loss");
  Tensor lp = cpu::contiguous_as(in[0], kFloat32), tg = cpu::contiguous_as(in[1], kInt64);
  const float* x = lp.data<float>();
  const int64_t* t = tg.data<int64_t>();
  const int64_t n = g.N * g.S;
  const int64_t cnt = nll_targets(t, n, g.C, ignore, "nll_loss");
  Tensor out = make_tensor(mt[0].shape, kFloat32);
  float* o = out.data<float>();
  auto at = [&](int64_t i) -> float {  // i = n * S + s
    if (t[i] == ignore) return 0.f;
    const int64_t nn = i / g.S, s = i % g.S;
    return -x[(nn * g.C + t[i]) * g.S + s];
  };
  if (r == Reduction::None) {
#pragma omp parallel for schedule(static) if (n >= kGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = at(i);
    return {out};
  }
  double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= kGrain)
  for (int64_t i = 0; i < n; ++i) s += at(i);
  o[0] = r == Reduction::Sum ? float(s) : float(s / double(cnt));  // mean of no targets: NaN, as PyTorch
  return {out};
}

Tensors nll_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const Reduction r = Reduction(a.ints[0]);
  const int64_t ignore = a.ints[1];
  const NllGeom g = nll_check(in[2], in[1], "nll_loss_backward");
  Tensor gr = cpu::contiguous_as(in[0], kFloat32), tg = cpu::contiguous_as(in[1], kInt64);
  const int64_t* t = tg.data<int64_t>();
  const int64_t n = g.N * g.S;
  const int64_t cnt = nll_targets(t, n, g.C, ignore, "nll_loss_backward");
  Tensor dx = zeros(mt[0].shape);
  float* d = dx.data<float>();
  const float* gp = gr.data<float>();
  const float scalar = r == Reduction::None ? 0.f : r == Reduction::Sum ? -gp[0] : -gp[0] / float(cnt);
#pragma omp parallel for schedule(static) if (n >= kGrain)
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    const int64_t nn = i / g.S, s = i % g.S;
    d[(nn * g.C + t[i]) * g.S + s] = r == Reduction::None ? -gp[i] : scalar;
  }
  return {dx};
}

// ------------------------------------------------------------------ cumsum / prod / sort
/// Element offsets of a contiguous tensor of shape s split by mask m: `kept` lists the kept
/// dims' combinations (row-major, the reduced output's order), `red` the reduced dims'
/// combinations; element (o, r) is at kept[o] + red[r].
struct SplitOffsets {
  std::vector<int64_t> kept{0}, red{0};
};
SplitOffsets split_offsets(const Shape& s, const std::vector<bool>& m) {
  SplitOffsets so;
  int64_t stride = 1;
  std::vector<int64_t> st(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    st[d] = stride;
    stride *= s[d];
  }
  for (size_t d = 0; d < s.size(); ++d) {
    std::vector<int64_t>& v = m[d] ? so.red : so.kept;
    std::vector<int64_t> nv;
    nv.reserve(v.size() * size_t(s[d]));
    for (int64_t e : v)
      for (int64_t i = 0; i < s[d]; ++i) nv.push_back(e + i * st[d]);
    v = std::move(nv);
  }
  return so;
}

template <class T, class Acc>
void cumsum_kernel(const T* x, Acc* out, const Geom& g, bool reverse) {
#pragma omp parallel for schedule(static) if (g.O * g.R * g.I >= kGrain && g.O * g.I > 1)
  for (int64_t t = 0; t < g.O * g.I; ++t) {
    const int64_t o = t / g.I, i = t % g.I;
    const int64_t base = o * g.R * g.I + i;
    // float32 accumulates in double and rounds each output, as PyTorch's cpu kernel; int64
    // in uint64 (wrapping on overflow as PyTorch's, without signed overflow's undefined behaviour).
    std::conditional_t<std::is_same_v<Acc, float>, double, uint64_t> acc = 0;
    for (int64_t k = 0; k < g.R; ++k) {
      const int64_t r = reverse ? g.R - 1 - k : k;
      acc += static_cast<decltype(acc)>(x[base + r * g.I]);
      out[base + r * g.I] = Acc(acc);
    }
  }
}

Tensors cumsum_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::Cumsum c = attr::Cumsum::of(a);
  const DType t = mt[0].dtype;
  Tensor x = cpu::contiguous_as(in[0], t);
  Tensor out = make_tensor(mt[0].shape, t);
  if (out.numel() == 0) return {out};
  const Geom g = in[0].dim() == 0 ? Geom{} : dim_geom(x.shape(), c.dim);
  if (t == kFloat32) cumsum_kernel<float, float>(x.data<float>(), out.data<float>(), g, c.reverse);
  else cumsum_kernel<int64_t, int64_t>(x.data<int64_t>(), out.data<int64_t>(), g, c.reverse);
  return {out};
}

template <class T>
T prod_of(const T* x, int64_t base, const std::vector<int64_t>& red) {
  if constexpr (std::is_same_v<T, float>) {  // in float32, as PyTorch's (1e30 * 1e30 * 1e-30 is inf)
    float p = 1;
    for (int64_t r : red) p *= x[base + r];
    return p;
  } else {  // wraps on overflow (two's complement), as PyTorch's int64 product
    uint64_t p = 1;
    for (int64_t r : red) p *= uint64_t(x[base + r]);
    return T(p);
  }
}

Tensors prod_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const DType t = mt[0].dtype;
  Tensor x = cpu::contiguous_as(in[0], t);
  Tensor out = make_tensor(mt[0].shape, t);
  if (out.numel() == 0) return {out};
  const SplitOffsets so = split_offsets(x.shape(), reduce_mask(x.shape(), a.ints, 1, "prod"));
  const int64_t O = int64_t(so.kept.size());
#pragma omp parallel for schedule(static) if (x.numel() >= kGrain && O > 1)
  for (int64_t o = 0; o < O; ++o) {
    if (t == kFloat32) out.data<float>()[o] = prod_of(x.data<float>(), so.kept[size_t(o)], so.red);
    else out.data<int64_t>()[o] = prod_of(x.data<int64_t>(), so.kept[size_t(o)], so.red);
  }
  return {out};
}

// dx[r] = grad * prod_{j < r} x[j] * prod_{j > r} x[j] along each reduced group: exact with
// zeros (no division by x).
Tensors prod_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  Tensor g = cpu::contiguous_as(in[0], kFloat32), x = cpu::contiguous_as(in[1], kFloat32);
  Tensor dx = make_tensor(mt[0].shape, kFloat32);
  if (dx.numel() == 0) return {dx};
  const SplitOffsets so = split_offsets(x.shape(), reduce_mask(x.shape(), a.ints, 1, "prod_backward"));
  const int64_t O = int64_t(so.kept.size()), R = int64_t(so.red.size());
  const float *gp = g.data<float>(), *xp = x.data<float>();
  float* dp = dx.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() >= kGrain && O > 1)
  for (int64_t o = 0; o < O; ++o) {
    const int64_t base = so.kept[size_t(o)];
    std::vector<double> pre(size_t(R) + 1, 1.0);
    for (int64_t r = 0; r < R; ++r) pre[size_t(r) + 1] = pre[size_t(r)] * double(xp[base + so.red[size_t(r)]]);
    double suf = 1.0;
    for (int64_t r = R; r-- > 0;) {
      const int64_t at = base + so.red[size_t(r)];
      dp[at] = float(double(gp[o]) * pre[size_t(r)] * suf);
      suf *= double(xp[at]);
    }
  }
  return {dx};
}

/// a before b in ascending order, NaN the largest (PyTorch's order); descending is the mirror.
template <class T>
inline bool sort_less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b != b) return a == a;
  }
  return a < b;
}

template <class T>
void sort_kernel(const T* x, T* vals, int64_t* idx, const Geom& g, bool descending) {
#pragma omp parallel for schedule(static) if (g.O * g.R * g.I >= kGrain && g.O * g.I > 1)
  for (int64_t t = 0; t < g.O * g.I; ++t) {
    const int64_t o = t / g.I, i = t % g.I;
    const int64_t base = o * g.R * g.I + i;
    std::vector<int64_t> perm(size_t(g.R));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    auto at = [&](int64_t r) { return x[base + r * g.I]; };
    if (descending)
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t p, int64_t q) { return sort_less(at(q), at(p)); });
    else
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t p, int64_t q) { return sort_less(at(p), at(q)); });
    for (int64_t r = 0; r < g.R; ++r) {
      vals[base + r * g.I] = at(perm[size_t(r)]);
      idx[base + r * g.I] = perm[size_t(r)];
    }
  }
}

Tensors sort_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::Sort s = attr::Sort::of(a);
  const DType t = in[0].dtype();
  Tensor x = cpu::contiguous_as(in[0], t);
  Tensor vals = make_tensor(mt[0].shape, t), idx = make_tensor(mt[1].shape, kInt64);
  if (vals.numel() == 0) return {vals, idx};
  const Geom g = in[0].dim() == 0 ? Geom{} : dim_geom(x.shape(), s.dim);
  int64_t* ip = idx.data<int64_t>();
  switch (t) {
    case DType::Float32: sort_kernel<float>(x.data<float>(), vals.data<float>(), ip, g, s.descending); break;
    case DType::Int64: sort_kernel<int64_t>(x.data<int64_t>(), vals.data<int64_t>(), ip, g, s.descending); break;
    case DType::Int32: sort_kernel<int32_t>(x.data<int32_t>(), vals.data<int32_t>(), ip, g, s.descending); break;
    case DType::Bool:
    case DType::UInt8:
      sort_kernel<uint8_t>(static_cast<const uint8_t*>(x.data_ptr()), static_cast<uint8_t*>(vals.data_ptr()), ip, g,
                           s.descending);
      break;
    default: AXLE_FAIL("[sort] dtype ", t, " is not supported on cpu");
  }
  return {vals, idx};
}

}  // namespace

void register_cpu_reduce_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::Sum, reduce_cpu<RK::Sum>);
  reg(OpKind::Amax, reduce_cpu<RK::Max>);
  reg(OpKind::Amin, reduce_cpu<RK::Min>);
  reg(OpKind::Argmax, arg_cpu<true>);
  reg(OpKind::Argmin, arg_cpu<false>);
  reg(OpKind::Softmax, softmax_cpu<false>);
  reg(OpKind::LogSoftmax, softmax_cpu<true>);
  reg(OpKind::SoftmaxBackward, softmax_bwd_cpu<false>);
  reg(OpKind::LogSoftmaxBackward, softmax_bwd_cpu<true>);
  reg(OpKind::NllLoss, nll_cpu);
  reg(OpKind::NllLossBackward, nll_bwd_cpu);
  reg(OpKind::Cumsum, cumsum_cpu);
  reg(OpKind::Prod, prod_cpu);
  reg(OpKind::ProdBackward, prod_bwd_cpu);
  reg(OpKind::Sort, sort_cpu);
}

}  // namespace axle::cpu
