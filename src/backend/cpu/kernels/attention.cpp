// Fused scaled dot-product attention on cpu (ops.def: ScaledDotProductAttention and its
// backward). Tiled with an online softmax: per query row a running max m and sum l; each key
// tile's scores rescale the accumulator by exp(m_old - m_new). Scratch is one query tile x key
// tile per thread, never L x S. The forward runs batch x query tiles in parallel; causal runs
// skip the key tiles above the diagonal. The backward (FlashAttention-2's) recomputes each
// tile's probabilities from q, k and the saved log-sum-exp: P = exp(s - lse), D = rowsum(dO * O),
// dS = P * (dP - D); it runs the batch in parallel (each batch entry owns its dq, dk, dv rows).
// Dropout: weight (b, i, j) of element index e = base[b] + i * S + j (base[b] = b * L * S on
// one device; under SPMD each device's shard of base keeps the global indices) is kept when
// the uniform from word e % 4 of Philox block offset + e / 4 (the generator's seed) is >= p,
// the rule of axle::dropout's rand(); the backward regenerates the same mask.
// Plain loops the compiler vectorises (inner loops over a key tile or a head dim).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "axle/generator.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/vexp.h"
#include "backend/cpu/loops.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr int64_t kBq = 32;  ///< query rows per tile
constexpr int64_t kBk = 64;  ///< keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// exp for x <= 0 (scores less their row's max or log-sum-exp), about 1 ulp (Cephes polynomial);
/// 0 below -87.5 and for -inf. The clamp and the zeroing are integer selects on the bits (a
/// float compare would leave a branch the vectoriser gives up on under -ftrapping-math).
inline float fexp(float x) {
  const int32_t xb = __builtin_bit_cast(int32_t, x), lim = __builtin_bit_cast(int32_t, -87.5f);
  const int32_t under = -int32_t((xb < 0) & (xb > lim));  // all ones where x < -87.5
  const float xc = __builtin_bit_cast(float, (lim & under) | (xb & ~under));
  float y = exp_clamped(xc);
  return __builtin_bit_cast(float, __builtin_bit_cast(int32_t, y) & ~under);
}

struct Geom {
  int64_t N, L, S, E, Ev;
};

Geom geom_of(const Tensor& q, const Tensor& v) {
  const Shape& s = q.shape();
  Geom g{1, s[s.size() - 2], v.shape()[s.size() - 2], s.back(), v.shape().back()};
  for (size_t d = 0; d + 2 < s.size(); ++d) g.N *= s[d];
  return g;
}

/// The dropout rule: multipliers (0 or 1 / (1 - p)) for keys j0..j0+n-1 of row (b, i).
struct Dropout {
  bool on = false;
  float p = 0, inv_keep = 1;
  Generator gen{0};
  uint64_t offset = 0;
  int64_t L = 0, S = 0;
  Tensor base;  ///< int64, contiguous: batch entry b's first weight index

  void row(int64_t b, int64_t i, int64_t j0, int64_t n, float* mult) const {
    const uint64_t e0 = uint64_t(base.data<int64_t>()[b] + i * S + j0);
    uint32_t r[4];
    uint64_t blk = ~uint64_t(0);
    for (int64_t t = 0; t < n; ++t) {
      const uint64_t e = e0 + uint64_t(t);
      if (e / 4 != blk) {
        blk = e / 4;
        gen.block(offset + blk, r);
      }
      const float u = float(r[e % 4] >> 8) * (1.0f / 16777216.0f);
      mult[t] = u >= p ? inv_keep : 0.0f;
    }
  }
};

Dropout dropout_of(const Tensors& in, size_t rng_at, double p, const Geom& g) {
  Dropout d;
  if (p <= 0.0 || in.size() <= rng_at) return d;
  Tensor r = contiguous_as(in[rng_at], kInt64);
  d.on = true;
  d.p = float(p);
  d.inv_keep = float(1.0 / (1.0 - p));
  d.gen = Generator(uint64_t(r.data<int64_t>()[0]));
  d.offset = uint64_t(r.data<int64_t>()[1]);
  d.L = g.L;
  d.S = g.S;
  d.base = contiguous_as(in.at(rng_at + 1), kInt64);
  return d;
}

/// s[ii * kBk + jj] = sum_e a[ii * E + e] * bt[e * kBk + jj] for ii < m and all kBk columns
/// (bt: E x kBk, zero past the tile's keys): fixed-length inner loops the compiler keeps in
/// registers.
inline void tile_scores(const float* a, const float* bt, float* s, int64_t m, int64_t E) {
  for (int64_t ii = 0; ii < m; ++ii) {
    const float* ar = a + ii * E;
    float acc[kBk] = {};
    int64_t e = 0;
    for (; e + 4 <= E; e += 4) {  // 4 products per accumulator update: shorter store-to-load chains
      const float x0 = ar[e], x1 = ar[e + 1], x2 = ar[e + 2], x3 = ar[e + 3];
      const float *b0 = bt + e * kBk, *b1 = b0 + kBk, *b2 = b1 + kBk, *b3 = b2 + kBk;
      for (int64_t jj = 0; jj < kBk; ++jj) acc[jj] += x0 * b0[jj] + x1 * b1[jj] + x2 * b2[jj] + x3 * b3[jj];
    }
    for (; e < E; ++e) {
      const float x = ar[e];
      const float* br = bt + e * kBk;
      for (int64_t jj = 0; jj < kBk; ++jj) acc[jj] += x * br[jj];
    }
    std::memcpy(s + ii * kBk, acc, sizeof acc);
  }
}

/// bt[e * kBk + jj] = b[(j0 + jj) * E + e] for jj < n, 0 for n <= jj < kBk.
inline void transpose_tile(const float* b, float* bt, int64_t j0, int64_t n, int64_t E) {
  if (n < kBk)
    for (int64_t e = 0; e < E; ++e) std::fill(bt + e * kBk + n, bt + (e + 1) * kBk, 0.0f);
  for (int64_t jj = 0; jj < n; ++jj) {
    const float* br = b + (j0 + jj) * E;
    for (int64_t e = 0; e < E; ++e) bt[e * kBk + jj] = br[e];
  }
}

/// Causal: -inf where key j0 + jj > query i0 + ii; and past the tile's n keys.
inline void mask_tile(float* s, int64_t i0, int64_t m, int64_t j0, int64_t n, bool causal) {
  for (int64_t ii = 0; ii < m; ++ii) {
    const int64_t first = causal ? std::clamp<int64_t>(i0 + ii + 1 - j0, 0, n) : n;
    for (int64_t jj = first; jj < kBk; ++jj) s[ii * kBk + jj] = kNegInf;
  }
}

inline float row_max(const float* r) {
  float m8[8];
  for (int l = 0; l < 8; ++l) m8[l] = r[l];
  for (int64_t j = 8; j < kBk; j += 8)
    for (int l = 0; l < 8; ++l) m8[l] = m8[l] > r[j + l] ? m8[l] : r[j + l];
  float m = m8[0];
  for (int l = 1; l < 8; ++l) m = m > m8[l] ? m : m8[l];
  return m;
}

/// r[j] = exp(r[j] - mx) for all kBk columns; returns their sum.
inline float exp_row(float* r, float mx) {
  for (int64_t j = 0; j < kBk; ++j) r[j] = fexp(r[j] - mx);
  float s8[8] = {};
  for (int64_t j = 0; j < kBk; j += 8)
    for (int l = 0; l < 8; ++l) s8[l] += r[j + l];
  float s = 0.0f;
  for (int l = 0; l < 8; ++l) s += s8[l];
  return s;
}

// Head sizes known at compile time (0: the run time's): the per-row accumulators stay in
// registers for the common sizes.
template <int EQ, int EV>
struct Dims {
  static constexpr int kMaxLocal = 128;
  int64_t E_, Ev_;
  int64_t E() const { return EQ ? EQ : E_; }
  int64_t Ev() const { return EV ? EV : Ev_; }
};

// ------------------------------------------------------------------ forward
template <int EQ, int EV>
void fwd_impl(const float* qp, const float* kp, const float* vp, float* op, float* lp, const Geom& g, float scale,
              bool causal, const Dropout& drop) {
  const Dims<EQ, EV> d{g.E, g.Ev};
  const int64_t E = d.E(), Ev = d.Ev();
  const int64_t qtiles = (g.L + kBq - 1) / kBq, tasks = g.N * qtiles;
  auto body = [&](std::vector<float>& buf, int64_t task) {
    const int64_t b = task / qtiles, i0 = (task % qtiles) * kBq, m = std::min(kBq, g.L - i0);
    float* qs = buf.data();      // kBq x E: the scaled query tile
    float* kt = qs + kBq * E;    // E x kBk: the key tile transposed
    float* s = kt + E * kBk;     // kBq x kBk: scores, then probabilities
    float* acc = s + kBq * kBk;  // kBq x Ev
    float* mx = acc + kBq * Ev;  // kBq running maxima
    float* sum = mx + kBq;       // kBq running sums
    float* mult = sum + kBq;     // kBk dropout multipliers
    const float* qb = qp + (b * g.L + i0) * E;
    for (int64_t t = 0; t < m * E; ++t) qs[t] = qb[t] * scale;
    std::fill(acc, acc + m * Ev, 0.0f);
    std::fill(mx, mx + m, kNegInf);
    std::fill(sum, sum + m, 0.0f);
    const float* kb = kp + b * g.S * E;
    const float* vb = vp + b * g.S * Ev;
    const int64_t jend = causal ? std::min(g.S, i0 + m) : g.S;
    for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
      const int64_t n = std::min(kBk, jend - j0);
      transpose_tile(kb, kt, j0, n, E);
      tile_scores(qs, kt, s, m, E);
      mask_tile(s, i0, m, j0, n, causal);
      for (int64_t ii = 0; ii < m; ++ii) {
        float* sr = s + ii * kBk;
        const float mnew = std::max(mx[ii], row_max(sr));
        if (mnew == kNegInf) continue;  // every key so far masked
        const float alpha = fexp(mx[ii] - mnew);
        const float rs = exp_row(sr, mnew);
        mx[ii] = mnew;
        sum[ii] = sum[ii] * alpha + rs;
        if (drop.on) {
          drop.row(b, i0 + ii, j0, n, mult);
          for (int64_t jj = 0; jj < n; ++jj) sr[jj] *= mult[jj];
        }
        float loc[EV > 0 ? EV : 1];
        float* ar = EV > 0 ? loc : acc + ii * Ev;
        if constexpr (EV > 0) std::memcpy(loc, acc + ii * Ev, sizeof loc);
        for (int64_t e = 0; e < Ev; ++e) ar[e] *= alpha;
        int64_t jj = 0;
        for (; jj + 4 <= n; jj += 4) {
          const float p0 = sr[jj], p1 = sr[jj + 1], p2 = sr[jj + 2], p3 = sr[jj + 3];
          const float* v0 = vb + (j0 + jj) * Ev;
          const float *v1 = v0 + Ev, *v2 = v1 + Ev, *v3 = v2 + Ev;
          for (int64_t e = 0; e < Ev; ++e) ar[e] += p0 * v0[e] + p1 * v1[e] + p2 * v2[e] + p3 * v3[e];
        }
        for (; jj < n; ++jj) {
          const float p = sr[jj];
          const float* vr = vb + (j0 + jj) * Ev;
          for (int64_t e = 0; e < Ev; ++e) ar[e] += p * vr[e];
        }
        if constexpr (EV > 0) std::memcpy(acc + ii * Ev, loc, sizeof loc);
      }
    }
    float* ob = op + (b * g.L + i0) * Ev;
    float* lb = lp + b * g.L + i0;
    for (int64_t ii = 0; ii < m; ++ii) {
      const float inv = sum[ii] > 0.0f ? 1.0f / sum[ii] : 0.0f;
      for (int64_t e = 0; e < Ev; ++e) ob[ii * Ev + e] = acc[ii * Ev + e] * inv;
      lb[ii] = sum[ii] > 0.0f ? mx[ii] + std::log(sum[ii]) : kNegInf;
    }
  };
  const size_t scratch = size_t(kBq * E + E * kBk + kBq * kBk + kBq * Ev + 2 * kBq + kBk);
  const int64_t work = g.N * g.L * g.S * (E + Ev);
  if (tasks > 1 && use_team(work)) {
#pragma omp parallel
    {
      std::vector<float> buf(scratch);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) body(buf, t);
    }
  } else {
    std::vector<float> buf(scratch);
    for (int64_t t = 0; t < tasks; ++t) body(buf, t);
  }
}

Tensors sdpa_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& meta) {
  const attr::ScaledDotProductAttention at = attr::ScaledDotProductAttention::of(a);
  Tensor q = contiguous_as(in[0], kFloat32), k = contiguous_as(in[1], kFloat32), v = contiguous_as(in[2], kFloat32);
  const Geom g = geom_of(q, v);
  const Dropout drop = dropout_of(in, 3, at.dropout_p, g);
  Tensor out = make_tensor(meta[0].shape, kFloat32), lse = make_tensor(meta[1].shape, kFloat32);
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  float *op = out.data<float>(), *lp = lse.data<float>();
  const float scale = float(at.scale);
  if (g.E == 32 && g.Ev == 32) fwd_impl<32, 32>(qp, kp, vp, op, lp, g, scale, at.is_causal, drop);
  else if (g.E == 64 && g.Ev == 64) fwd_impl<64, 64>(qp, kp, vp, op, lp, g, scale, at.is_causal, drop);
  else if (g.E == 16 && g.Ev == 16) fwd_impl<16, 16>(qp, kp, vp, op, lp, g, scale, at.is_causal, drop);
  else fwd_impl<0, 0>(qp, kp, vp, op, lp, g, scale, at.is_causal, drop);
  return {out, lse};
}

// ------------------------------------------------------------------ backward
template <int EQ, int EV>
void bwd_impl(const float* gp, const float* qp, const float* kp, const float* vp, const float* opp, const float* lp,
              float* dqp, float* dkp, float* dvp, const Geom& g, float scale, bool causal, const Dropout& drop) {
  const Dims<EQ, EV> dm{g.E, g.Ev};
  const int64_t E = dm.E(), Ev = dm.Ev(), L = g.L, S = g.S;
  auto body = [&](std::vector<float>& buf, int64_t b) {
    float* kt = buf.data();        // E x kBk: key tile transposed
    float* vt = kt + E * kBk;      // Ev x kBk: value tile transposed
    float* s = vt + Ev * kBk;      // kBq x kBk: probabilities P, then P with dropout
    float* dp = s + kBq * kBk;     // kBq x kBk: dP, then dS
    float* mult = dp + kBq * kBk;  // kBq x kBk: dropout multipliers
    float* qs = mult + kBq * kBk;  // kBq x E: scaled query tile
    float* rowacc = qs + kBq * E;  // max(E, Ev): one row's accumulator (run-time head sizes)
    float* D = rowacc + std::max(E, Ev);  // L: rowsum(dO * O)
    const float *qb = qp + b * L * E, *kb = kp + b * S * E, *vb = vp + b * S * Ev;
    const float *gb = gp + b * L * Ev, *ob = opp + b * L * Ev, *lb = lp + b * L;
    float *dqb = dqp + b * L * E, *dkb = dkp + b * S * E, *dvb = dvp + b * S * Ev;
    std::fill(dqb, dqb + L * E, 0.0f);
    std::fill(dkb, dkb + S * E, 0.0f);
    std::fill(dvb, dvb + S * Ev, 0.0f);
    for (int64_t i = 0; i < L; ++i) {
      float d = 0.0f;
      for (int64_t e = 0; e < Ev; ++e) d += gb[i * Ev + e] * ob[i * Ev + e];
      D[i] = d;
    }
    for (int64_t j0 = 0; j0 < S; j0 += kBk) {
      const int64_t n = std::min(kBk, S - j0);
      transpose_tile(kb, kt, j0, n, E);
      transpose_tile(vb, vt, j0, n, Ev);
      const int64_t istart = causal ? (j0 / kBq) * kBq : 0;  // tiles wholly above the diagonal skipped
      for (int64_t i0 = istart; i0 < L; i0 += kBq) {
        const int64_t m = std::min(kBq, L - i0);
        for (int64_t t = 0; t < m * E; ++t) qs[t] = qb[i0 * E + t] * scale;
        tile_scores(qs, kt, s, m, E);
        mask_tile(s, i0, m, j0, n, causal);
        for (int64_t ii = 0; ii < m; ++ii) {
          float* sr = s + ii * kBk;
          const float l = lb[i0 + ii];
          if (l == kNegInf) {
            std::fill(sr, sr + kBk, 0.0f);
            continue;
          }
          exp_row(sr, l);  // P = exp(s - lse)
        }
        // dP = dO V^T (the gradient of the dropped weights), then through the dropout:
        // dS = P * (dP * mult - D); P becomes the dropped weights for dV.
        tile_scores(gb + i0 * Ev, vt, dp, m, Ev);
        for (int64_t ii = 0; ii < m; ++ii) {
          float* sr = s + ii * kBk;
          float* dr = dp + ii * kBk;
          const float di = D[i0 + ii];
          if (drop.on) {
            float* mr = mult + ii * kBk;
            drop.row(b, i0 + ii, j0, n, mr);
            for (int64_t jj = 0; jj < n; ++jj) {
              dr[jj] = sr[jj] * (dr[jj] * mr[jj] - di);
              sr[jj] *= mr[jj];
            }
          } else {
            for (int64_t jj = 0; jj < kBk; ++jj) dr[jj] = sr[jj] * (dr[jj] - di);
          }
        }
        // dV[j] += sum_i P_dropped[i, j] dO[i];  dK[j] += sum_i dS[i, j] (scale * Q[i])
        for (int64_t jj = 0; jj < n; ++jj) {
          {
            float loc[EV > 0 ? EV : 1] = {};
            float* a = EV > 0 ? loc : rowacc;
            if constexpr (EV == 0) std::fill(a, a + Ev, 0.0f);
            int64_t ii = 0;
            for (; ii + 4 <= m; ii += 4) {
              const float p0 = s[ii * kBk + jj], p1 = s[(ii + 1) * kBk + jj], p2 = s[(ii + 2) * kBk + jj],
                          p3 = s[(ii + 3) * kBk + jj];
              const float* g0 = gb + (i0 + ii) * Ev;
              const float *g1 = g0 + Ev, *g2 = g1 + Ev, *g3 = g2 + Ev;
              for (int64_t e = 0; e < Ev; ++e) a[e] += p0 * g0[e] + p1 * g1[e] + p2 * g2[e] + p3 * g3[e];
            }
            for (; ii < m; ++ii) {
              const float p = s[ii * kBk + jj];
              const float* gr = gb + (i0 + ii) * Ev;
              for (int64_t e = 0; e < Ev; ++e) a[e] += p * gr[e];
            }
            float* dvr = dvb + (j0 + jj) * Ev;
            for (int64_t e = 0; e < Ev; ++e) dvr[e] += a[e];
          }
          {
            float loc[EQ > 0 ? EQ : 1] = {};
            float* a = EQ > 0 ? loc : rowacc;
            if constexpr (EQ == 0) std::fill(a, a + E, 0.0f);
            int64_t ii = 0;
            for (; ii + 4 <= m; ii += 4) {
              const float d0 = dp[ii * kBk + jj], d1 = dp[(ii + 1) * kBk + jj], d2 = dp[(ii + 2) * kBk + jj],
                          d3 = dp[(ii + 3) * kBk + jj];
              const float* q0 = qs + ii * E;
              const float *q1 = q0 + E, *q2 = q1 + E, *q3 = q2 + E;
              for (int64_t e = 0; e < E; ++e) a[e] += d0 * q0[e] + d1 * q1[e] + d2 * q2[e] + d3 * q3[e];
            }
            for (; ii < m; ++ii) {
              const float ds = dp[ii * kBk + jj];
              const float* qr = qs + ii * E;
              for (int64_t e = 0; e < E; ++e) a[e] += ds * qr[e];
            }
            float* dkr = dkb + (j0 + jj) * E;
            for (int64_t e = 0; e < E; ++e) dkr[e] += a[e];
          }
        }
        // dQ[i] += scale * sum_j dS[i, j] K[j]
        for (int64_t ii = 0; ii < m; ++ii) {
          float loc[EQ > 0 ? EQ : 1] = {};
          float* a = EQ > 0 ? loc : rowacc;
          if constexpr (EQ == 0) std::fill(a, a + E, 0.0f);
          const float* dr = dp + ii * kBk;
          int64_t jj = 0;
          for (; jj + 4 <= n; jj += 4) {
            const float d0 = dr[jj], d1 = dr[jj + 1], d2 = dr[jj + 2], d3 = dr[jj + 3];
            const float* k0 = kb + (j0 + jj) * E;
            const float *k1 = k0 + E, *k2 = k1 + E, *k3 = k2 + E;
            for (int64_t e = 0; e < E; ++e) a[e] += d0 * k0[e] + d1 * k1[e] + d2 * k2[e] + d3 * k3[e];
          }
          for (; jj < n; ++jj) {
            const float ds = dr[jj];
            const float* kr = kb + (j0 + jj) * E;
            for (int64_t e = 0; e < E; ++e) a[e] += ds * kr[e];
          }
          float* dqr = dqb + (i0 + ii) * E;
          for (int64_t e = 0; e < E; ++e) dqr[e] += scale * a[e];
        }
      }
    }
  };
  const size_t scratch = size_t(E * kBk + Ev * kBk + 3 * kBq * kBk + kBq * E + std::max(E, Ev) + L);
  const int64_t work = g.N * L * S * (E + Ev);
  if (g.N > 1 && use_team(work)) {
#pragma omp parallel
    {
      std::vector<float> buf(scratch);
#pragma omp for schedule(dynamic, 1)
      for (int64_t b = 0; b < g.N; ++b) body(buf, b);
    }
  } else {
    std::vector<float> buf(scratch);
    for (int64_t b = 0; b < g.N; ++b) body(buf, b);
  }
}

Tensors sdpa_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& meta) {
  const attr::ScaledDotProductAttentionBackward at = attr::ScaledDotProductAttentionBackward::of(a);
  Tensor go = contiguous_as(in[0], kFloat32), q = contiguous_as(in[1], kFloat32), k = contiguous_as(in[2], kFloat32),
         v = contiguous_as(in[3], kFloat32), o = contiguous_as(in[4], kFloat32), lse = contiguous_as(in[5], kFloat32);
  const Geom g = geom_of(q, v);
  const Dropout drop = dropout_of(in, 6, at.dropout_p, g);
  Tensor dq = make_tensor(meta[0].shape, kFloat32), dk = make_tensor(meta[1].shape, kFloat32),
         dv = make_tensor(meta[2].shape, kFloat32);
  const float *gp = go.data<float>(), *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>(),
              *opp = o.data<float>(), *lp = lse.data<float>();
  float *dqp = dq.data<float>(), *dkp = dk.data<float>(), *dvp = dv.data<float>();
  const float scale = float(at.scale);
  const bool c = at.is_causal;
  if (g.E == 32 && g.Ev == 32) bwd_impl<32, 32>(gp, qp, kp, vp, opp, lp, dqp, dkp, dvp, g, scale, c, drop);
  else if (g.E == 64 && g.Ev == 64) bwd_impl<64, 64>(gp, qp, kp, vp, opp, lp, dqp, dkp, dvp, g, scale, c, drop);
  else if (g.E == 16 && g.Ev == 16) bwd_impl<16, 16>(gp, qp, kp, vp, opp, lp, dqp, dkp, dvp, g, scale, c, drop);
  else bwd_impl<0, 0>(gp, qp, kp, vp, opp, lp, dqp, dkp, dvp, g, scale, c, drop);
  return {dq, dk, dv};
}

}  // namespace

void register_cpu_attention_kernels() {
  ops::register_kernel(DeviceType::CPU, OpKind::ScaledDotProductAttention, sdpa_cpu);
  ops::register_kernel(DeviceType::CPU, OpKind::ScaledDotProductAttentionBackward, sdpa_bwd_cpu);
}

}  // namespace axle::cpu
