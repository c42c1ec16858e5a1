// 2-D pooling kernels on cpu: max (with a workspace for backward), average, adaptive average.
// Pooling keeps its input's memory layout: a channels-last input (NHWC strides) gives
// channels-last results, so no reorder sits between a channels-last convolution and its pooling.
// Max pooling: 2x2/stride-2 on channels-last runs axle's own kernel (vectorised over channels,
// ~15-22 GB/s: cnn pools fwd+bwd 2.8 ms per step vs PyTorch 1.13's ~17 ms); other channels-last
// windows run oneDNN (unless the input holds a NaN or -inf, which oneDNN's kernel gets wrong);
// NCHW (and odd strides, dilated windows, ceil_mode windows past the padded input) run axle's own
// NCHW kernel (oneDNN's NCHW kernel is slow here). All share the workspace encoding: uint8 (int32
// if kh*kw >= 256) index inside the window, in y's layout. Avg pooling runs
// oneDNN, except where a ceil_mode window overhangs the padded input (axle's own kernel: PyTorch's
// divisor); adaptive avg runs oneDNN when the output divides the input, else a small kernel of its own.
#include <algorithm>
#include <cmath>
#include <bit>
#include <cstdint>

#include "axle/ops.h"
#include "backend/cpu/dnnl.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/pool.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

namespace dg = cpu::dnnl_glue;

using dnnl::memory;

struct PoolCfg : PoolWindow {
  dnnl::algorithm alg;
};

memory::dims pad_r(const PoolGeom& g, const PoolCfg& c) {
  return {pad_right(g.H, g.OH, c.sh, c.eh(), c.ph), pad_right(g.W, g.OW, c.sw, c.ew(), c.pw)};
}

// Whether a ceil_mode window reaches past the padded input (right or bottom): oneDNN would count
// that overhang in an include-padding average, PyTorch does not (and oneDNN's kernels are not
// asked about such windows at all: axle's own kernels run them).
bool overhangs(const PoolGeom& g, const PoolCfg& c) {
  const memory::dims r = pad_r(g, c);
  return r[0] > c.ph || r[1] > c.pw;
}

// Every window lies inside the input (no padding, no overhang, no dilation): the 2x2 fast paths.
bool full_windows(const PoolGeom& g, const PoolCfg& c) {
  return c.ph == 0 && c.pw == 0 && c.dh == 1 && c.dw == 1 && (g.OH - 1) * c.sh + c.kh <= g.H &&
         (g.OW - 1) * c.sw + c.kw <= g.W;
}

// The first and one-past-last kernel offsets a of a window starting at h0 whose rows h0 + a*d
// lie in [0, H) (a0 >= a1: none does).
inline void valid_range(int64_t h0, int64_t d, int64_t k, int64_t H, int64_t& a0, int64_t& a1) {
  a0 = h0 >= 0 ? 0 : (-h0 + d - 1) / d;
  a1 = std::min<int64_t>(k, (H - h0 + d - 1) / d);
}

// The layout pooling computes in: the input's own when it is dense, else the conv mode's.
dg::Layout act_layout(const Tensor& t) {
  if (dg::is_dense(t, dg::Layout::NCHW)) return dg::Layout::NCHW;
  if (dg::is_dense(t, dg::Layout::NHWC)) return dg::Layout::NHWC;
  return dg::conv_mode() == dg::ConvMode::ChannelsLast ? dg::Layout::NHWC : dg::Layout::NCHW;
}

memory::desc user_desc(const Tensor& t, dg::Layout l) {
  if (dg::is_dense(t, l)) return dg::strided_desc(t.shape(), dg::layout_strides(t.shape(), l), t.dtype());
  return dg::desc_of(t);
}

memory::desc tag_desc(const Shape& s, dg::Layout l) {
  return memory::desc(memory::dims(s.begin(), s.end()), memory::data_type::f32, dg::tag_of(l));
}

Shape strides_of(const memory::desc& d) {
  auto s = d.data.format_desc.blocking.strides;
  return Shape(s, s + d.data.ndims);
}

dnnl::pooling_forward::primitive_desc pool_fwd_pd(const PoolGeom& g, const PoolCfg& c, dg::Layout l) {
  dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training, c.alg, tag_desc({g.N, g.C, g.H, g.W}, l),
                                tag_desc({g.N, g.C, g.OH, g.OW}, l), {c.sh, c.sw}, {c.kh, c.kw}, {c.ph, c.pw},
                                pad_r(g, c));
  return dnnl::pooling_forward::primitive_desc(d, dg::default_attr(), dg::engine());
}

dg::Key pool_key(const char* op, const PoolGeom& g, const PoolCfg& c, dg::Layout l) {
  dg::Key k(op);
  k << g.N << g.C << g.H << g.W << c.kh << c.kw << c.sh << c.sw << c.ph << c.pw << g.OH << g.OW << int64_t(c.alg)
    << int64_t(l);
  return k;
}

struct FwdEntry {
  dnnl::pooling_forward prim;
  dg::Slot src;
  memory::desc dst, ws;
  size_t scratch = 0;
};

// ---- axle's own max pooling for NCHW results (oneDNN's NCHW pooling kernel is slow here; its
// NHWC one is good). The workspace holds each output's argmax as its index inside the window
// (a * kw + b), the encoding oneDNN uses too; with dilation the element at (h0 + a*dh, w0 + b*dw).
// Ties: the first maximum in row-major window order (strict >), a NaN wins: PyTorch's CPU rule; a
// window of -inf (or one with no input element at all) keeps its first input element.
// Reads any input strides; writes NCHW.
template <class I>
void max_fwd_own(const Tensor& x, const PoolCfg& c, const PoolGeom& g, float* y, I* ws) {
  const float* base = x.data<float>();
  const int64_t sN = x.strides()[0], sC = x.strides()[1], sH = x.strides()[2], sW = x.strides()[3];
  const int64_t planes = g.N * g.C, OH = g.OH, OW = g.OW;
  const bool fast = c.kh == 2 && c.kw == 2 && c.sh == 2 && c.sw == 2 && full_windows(g, c) && sW == 1;
#pragma omp parallel for schedule(static) if (planes * OH * OW >= cpu::kParallelGrain / 4)
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = base + (p / g.C) * sN + (p % g.C) * sC;
    float* yp = y + p * OH * OW;
    I* wp = ws + p * OH * OW;
    if (fast) {
      int32_t kb[256];
      for (int64_t i = 0; i < OH; ++i) {
        const float* r0 = xp + 2 * i * sH;
        const float* r1 = r0 + sH;
        float* yo = yp + i * OW;
        I* wo = wp + i * OW;
        for (int64_t j0 = 0; j0 < OW; j0 += 256) {
          const int64_t n = std::min<int64_t>(256, OW - j0);
          // Branch-free selects, vectorised: the first maximum wins; a NaN wins and stays.
#pragma omp simd
          for (int64_t jj = 0; jj < n; ++jj) {
            const int64_t j = j0 + jj;
            float m = r0[2 * j];
            int32_t k = 0;
            const float v1 = r0[2 * j + 1], v2 = r1[2 * j], v3 = r1[2 * j + 1];
            bool t = (v1 > m) | (v1 != v1);
            k = t ? 1 : k;
            m = t ? v1 : m;
            t = (v2 > m) | (v2 != v2);
            k = t ? 2 : k;
            m = t ? v2 : m;
            t = (v3 > m) | (v3 != v3);
            k = t ? 3 : k;
            m = t ? v3 : m;
            yo[j] = m;
            kb[jj] = k;
          }
          for (int64_t jj = 0; jj < n; ++jj) wo[j0 + jj] = I(kb[jj]);
        }
      }
      continue;
    }
    for (int64_t i = 0; i < OH; ++i) {
      const int64_t h0 = i * c.sh - c.ph;
      int64_t a0, a1;
      valid_range(h0, c.dh, c.kh, g.H, a0, a1);
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t w0 = j * c.sw - c.pw;
        int64_t b0, b1;
        valid_range(w0, c.dw, c.kw, g.W, b0, b1);
        float m = -INFINITY;
        // No input element in the window (possible with dilation): -inf, and index 0, an element
        // outside the input, which the backward skips.
        I k = a0 < a1 && b0 < b1 ? I(a0 * c.kw + b0) : I(0);
        for (int64_t a = a0; a < a1; ++a)
          for (int64_t b = b0; b < b1; ++b) {
            const float v = xp[(h0 + a * c.dh) * sH + (w0 + b * c.dw) * sW];
            const bool t = (v > m) | (v != v);
            k = t ? I(a * c.kw + b) : k;
            m = t ? v : m;
          }
        yp[i * OW + j] = m;
        wp[i * OW + j] = k;
      }
    }
  }
}

// ym (optional, y's layout): the pooled output; when given, a window's gradient passes only
// where its maximum is > 0 (a relu backward fused by the compiler: y equals x at the argmax).
template <class I>
void max_bwd_own(const float* gy, const I* ws, const PoolCfg& c, const PoolGeom& g, float* gx,
                 const float* ym = nullptr) {
  const int64_t planes = g.N * g.C, OH = g.OH, OW = g.OW, H = g.H, W = g.W;
  const bool fast = c.kh == 2 && c.kw == 2 && c.sh == 2 && c.sw == 2 && full_windows(g, c);
#pragma omp parallel for schedule(static) if (planes * H * W >= cpu::kParallelGrain / 4)
  for (int64_t p = 0; p < planes; ++p) {
    float* xp = gx + p * H * W;
    const float* gp = gy + p * OH * OW;
    const I* wp = ws + p * OH * OW;
    const float* mp = ym ? ym + p * OH * OW : nullptr;
    if (fast) {  // non-overlapping 2x2 windows: write every input position once, no scatter
      if (H != 2 * OH || W != 2 * OW) std::fill(xp, xp + H * W, 0.0f);
      for (int64_t i = 0; i < OH; ++i) {
        float* r0 = xp + 2 * i * W;
        float* r1 = r0 + W;
        const float* go = gp + i * OW;
        const I* wo = wp + i * OW;
        if (mp) {
          const float* mo = mp + i * OW;
#pragma omp simd
          for (int64_t j = 0; j < OW; ++j) {
            const int32_t k = int32_t(wo[j]);
            const float v = mo[j] > 0.0f ? go[j] : 0.0f;
            r0[2 * j] = k == 0 ? v : 0.0f;
            r0[2 * j + 1] = k == 1 ? v : 0.0f;
            r1[2 * j] = k == 2 ? v : 0.0f;
            r1[2 * j + 1] = k == 3 ? v : 0.0f;
          }
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < OW; ++j) {
          const int32_t k = int32_t(wo[j]);
          const float v = go[j];
          r0[2 * j] = k == 0 ? v : 0.0f;
          r0[2 * j + 1] = k == 1 ? v : 0.0f;
          r1[2 * j] = k == 2 ? v : 0.0f;
          r1[2 * j + 1] = k == 3 ? v : 0.0f;
        }
      }
      continue;
    }
    std::fill(xp, xp + H * W, 0.0f);
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t k = int64_t(wp[i * OW + j]);
        const int64_t h = i * c.sh - c.ph + (k / c.kw) * c.dh, w = j * c.sw - c.pw + (k % c.kw) * c.dw;
        if (h < 0 || h >= H || w < 0 || w >= W) continue;  // a window without input elements
        if (!mp || mp[i * OW + j] > 0.0f) xp[h * W + w] += gp[i * OW + j];
      }
  }
}

// ---- 2x2 / stride 2 max pooling on channels-last tensors: every window is four contiguous
// C-vectors, so the loops run over channels at memory speed (oneDNN's kernel is ~2x slower here).
// Same workspace encoding and layout (NHWC) as oneDNN's, so either backward can consume it.
bool is_2x2(const PoolCfg& c, const PoolGeom& g) {
  return c.kh == 2 && c.kw == 2 && c.sh == 2 && c.sw == 2 && full_windows(g, c);
}

// float32 or bf16 elements (T): compared as float32, the maximum stored back exactly (a
// widened bf16 has 16 zero low bits); the backward moves raw element bits (no arithmetic).
inline float ld(float v) { return v; }
inline float ld(bfloat16 v) { return bfloat16::to_float(v.bits); }
inline void st(float& d, float m) { d = m; }
inline void st(bfloat16& d, float m) { d.bits = uint16_t(std::bit_cast<uint32_t>(m) >> 16); }
inline float raw(float v) { return v; }
inline uint16_t raw(bfloat16 v) { return v.bits; }
inline void put(float& d, float v) { d = v; }
inline void put(bfloat16& d, uint16_t v) { d.bits = v; }
// x > 0 (a bf16's test on its bits, in 16-bit lanes: 0 < bits <= +inf's; NaN and -0 are not).
inline bool positive(float v) { return v > 0.0f; }
inline bool positive(bfloat16 v) { return uint16_t(v.bits - 1u) < uint16_t(0x7f80u); }
// v where b, else 0 (bf16 bits masked: branch-free, so the loop vectorises).
inline float keep_if(bool b, float v) { return b ? v : 0.0f; }
inline uint16_t keep_if(bool b, uint16_t v) { return uint16_t(v & uint16_t(-int(b))); }

template <class T, class I>
void max_fwd_nhwc_2x2(const T* x, const PoolGeom& g, T* y, I* ws) {
  const int64_t C = g.C, W = g.W, H = g.H, OH = g.OH, OW = g.OW, rows = g.N * OH;
#pragma omp parallel for schedule(static) if (rows * OW * C >= cpu::kParallelGrain / 4)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / OH, i = r % OH;
    int32_t kb[256];
    for (int64_t j = 0; j < OW; ++j) {
      const T* p00 = x + ((n * H + 2 * i) * W + 2 * j) * C;
      const T *p01 = p00 + C, *p10 = p00 + W * C, *p11 = p10 + C;
      T* yo = y + (r * OW + j) * C;
      I* wo = ws + (r * OW + j) * C;
      for (int64_t c0 = 0; c0 < C; c0 += 256) {
        const int64_t nc = std::min<int64_t>(256, C - c0);
#pragma omp simd
        for (int64_t cc = 0; cc < nc; ++cc) {
          const int64_t c = c0 + cc;
          float m = ld(p00[c]);
          int32_t k = 0;
          const float v1 = ld(p01[c]), v2 = ld(p10[c]), v3 = ld(p11[c]);
          bool t = (v1 > m) | (v1 != v1);
          k = t ? 1 : k;
          m = t ? v1 : m;
          t = (v2 > m) | (v2 != v2);
          k = t ? 2 : k;
          m = t ? v2 : m;
          t = (v3 > m) | (v3 != v3);
          k = t ? 3 : k;
          m = t ? v3 : m;
          st(yo[c], m);
          kb[cc] = k;
        }
        for (int64_t cc = 0; cc < nc; ++cc) wo[c0 + cc] = I(kb[cc]);
      }
    }
  }
}

// ym (optional, NHWC like gy): see max_bwd_own.
template <class T, class I>
void max_bwd_nhwc_2x2(const T* gy, const I* ws, const PoolGeom& g, T* gx, const T* ym = nullptr) {
  const int64_t C = g.C, W = g.W, H = g.H, OH = g.OH, OW = g.OW, rows = g.N * OH;
  using R = decltype(raw(T{}));
  const R zero{};
  if (H != 2 * OH || W != 2 * OW) std::fill(gx, gx + g.N * H * W * C, T{});  // rows/cols no window covers
#pragma omp parallel for schedule(static) if (rows * OW * C >= cpu::kParallelGrain / 4)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / OH, i = r % OH;
    for (int64_t j = 0; j < OW; ++j) {
      T* p00 = gx + ((n * H + 2 * i) * W + 2 * j) * C;
      T *p01 = p00 + C, *p10 = p00 + W * C, *p11 = p10 + C;
      const T* go = gy + (r * OW + j) * C;
      const I* wo = ws + (r * OW + j) * C;
      if (ym) {  // fused relu backward
        const T* mo = ym + (r * OW + j) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const int32_t k = int32_t(wo[c]);
          const R v = keep_if(positive(mo[c]), raw(go[c]));
          put(p00[c], k == 0 ? v : zero);
          put(p01[c], k == 1 ? v : zero);
          put(p10[c], k == 2 ? v : zero);
          put(p11[c], k == 3 ? v : zero);
        }
        continue;
      }
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const int32_t k = int32_t(wo[c]);
        const R v = raw(go[c]);
        put(p00[c], k == 0 ? v : zero);
        put(p01[c], k == 1 ? v : zero);
        put(p10[c], k == 2 ? v : zero);
        put(p11[c], k == 3 ? v : zero);
      }
    }
  }
}

// ---- axle's own average pooling, for windows a ceil_mode overhang makes partial: PyTorch's
// divisor (ops.def) counts the explicit padding (count_include_pad) but never the overhang past
// it, which oneDNN's include-padding average would count. Reads any strides; writes NCHW.
inline int64_t avg_divisor(const PoolCfg& c, const PoolGeom& g, int64_t h0, int64_t w0) {
  const bool include = c.alg == dnnl::algorithm::pooling_avg_include_padding;
  const int64_t hi = include ? g.H + c.ph : g.H, wi = include ? g.W + c.pw : g.W;
  const int64_t lo_h = include ? -c.ph : 0, lo_w = include ? -c.pw : 0;
  const int64_t nh = std::min(h0 + c.kh, hi) - std::max(h0, lo_h), nw = std::min(w0 + c.kw, wi) - std::max(w0, lo_w);
  return std::max<int64_t>(nh, 0) * std::max<int64_t>(nw, 0);
}

Tensor avg_fwd_own(const Tensor& x, const PoolCfg& c, const PoolGeom& g) {
  Tensor y = make_tensor({g.N, g.C, g.OH, g.OW}, kFloat32);
  if (y.numel() == 0) return y;
  const float* base = x.data<float>();
  const int64_t sN = x.strides()[0], sC = x.strides()[1], sH = x.strides()[2], sW = x.strides()[3];
  const int64_t planes = g.N * g.C, OH = g.OH, OW = g.OW;
  float* yd = y.data<float>();
#pragma omp parallel for schedule(static) if (planes * OH * OW * c.kh * c.kw >= cpu::kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = base + (p / g.C) * sN + (p % g.C) * sC;
    for (int64_t i = 0; i < OH; ++i) {
      const int64_t h0 = i * c.sh - c.ph, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + c.kh, g.H);
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t w0 = j * c.sw - c.pw, w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + c.kw, g.W);
        float acc = 0.0f;
        for (int64_t h = h_lo; h < h_hi; ++h)
          for (int64_t w = w_lo; w < w_hi; ++w) acc += xp[h * sH + w * sW];
        yd[(p * OH + i) * OW + j] = acc / float(avg_divisor(c, g, h0, w0));
      }
    }
  }
  return y;
}

Tensor avg_bwd_own(const Tensor& gy_in, const PoolCfg& c, const PoolGeom& g) {
  Tensor gx = make_tensor({g.N, g.C, g.H, g.W}, kFloat32);
  if (gx.numel() == 0) return gx;
  Tensor gy = cpu::contiguous_as(gy_in, kFloat32);
  const float* gp = gy.data<float>();
  float* xd = gx.data<float>();
  const int64_t planes = g.N * g.C, OH = g.OH, OW = g.OW, H = g.H, W = g.W;
#pragma omp parallel for schedule(static) if (planes * OH * OW * c.kh * c.kw >= cpu::kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    float* xp = xd + p * H * W;
    std::fill(xp, xp + H * W, 0.0f);
    for (int64_t i = 0; i < OH; ++i) {
      const int64_t h0 = i * c.sh - c.ph, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + c.kh, H);
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t w0 = j * c.sw - c.pw, w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + c.kw, W);
        const float v = gp[(p * OH + i) * OW + j] / float(avg_divisor(c, g, h0, w0));
        for (int64_t h = h_lo; h < h_hi; ++h)
          for (int64_t w = w_lo; w < w_hi; ++w) xp[h * W + w] += v;
      }
    }
  }
  return gx;
}

// Whether a dense tensor holds a NaN or a -inf (one pass over its memory).
bool any_nan_or_neg_inf(const Tensor& x) {
  const float* p = x.data<float>();
  const int64_t n = x.numel();
  int found = 0;
#pragma omp parallel for simd schedule(static) reduction(| : found) if (n >= cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) found |= !(p[i] > -INFINITY);
  return found != 0;
}

// Channels-last max pooling (the 2x2 kernel above, or oneDNN's) runs only on channels-last inputs
// whose workspace cannot be mistaken for NCHW, without dilation or a ceil_mode overhang; oneDNN's
// also only without NaNs and -infs: its kernel never lets a NaN win a window (PyTorch's does), and
// gives a window of -inf the value -FLT_MAX and its gradient to no element (PyTorch: -inf, the
// first element; golden rows max_pool2d_nan_channels_last, max_pool2d_neg_inf_channels_last).
// axle's own NCHW kernel runs the rest.
bool max_channels_last(const Tensor& x, const PoolGeom& g, const PoolCfg& c) {
  return !dg::is_dense(x, dg::Layout::NCHW) && dg::is_dense(x, dg::Layout::NHWC) && g.C > 1 && g.OH * g.OW > 1 &&
         c.dh == 1 && c.dw == 1 && !overhangs(g, c);
}

// y (and the max-pooling workspace) in x's layout.
Tensors pool_forward(const Tensor& x_in, const PoolCfg& c, const char* op) {
  Tensor x = dg::describable(x_in);
  PoolGeom g = pool_geom(x.shape(), c, op);
  const dg::Layout l = act_layout(x);
  const bool is_max = c.alg == dnnl::algorithm::pooling_max;
  const bool fast_2x2 = is_max && is_2x2(c, g) && l == dg::Layout::NHWC && dg::is_dense(x, l);
  if (x.dtype() == kBFloat16 && !fast_2x2) {  // bf16 elsewhere: float32 on the widened input, rounded once
    Tensors r = pool_forward(cpu::cast_cpu(x, kFloat32), c, op);
    r[0] = cpu::cast_cpu(r[0], kBFloat16);
    return r;
  }
  if (!is_max && overhangs(g, c)) return {avg_fwd_own(x, c, g)};
  auto own_max = [&]() -> Tensors {
    Tensor y = make_tensor({g.N, g.C, g.OH, g.OW}, kFloat32);
    Tensor ws = make_tensor(y.shape(), ws_dtype(c));
    if (y.numel() == 0) return {y, ws};
    if (ws.dtype() == kUInt8)
      max_fwd_own(x, c, g, y.data<float>(), ws.data<uint8_t>());
    else
      max_fwd_own(x, c, g, y.data<float>(), ws.data<int32_t>());
    return {y, ws};
  };
  if (is_max && !max_channels_last(x, g, c)) return own_max();
  if (fast_2x2) {
    Tensor y = dg::empty_4d({g.N, g.C, g.OH, g.OW}, l, x.dtype());
    Tensor ws = dg::empty_4d(y.shape(), l, ws_dtype(c));
    if (y.numel() > 0 && x.dtype() == kBFloat16)
      max_fwd_nhwc_2x2(x.data<bfloat16>(), g, y.data<bfloat16>(), ws.data<uint8_t>());
    else if (y.numel() > 0)
      max_fwd_nhwc_2x2(x.data<float>(), g, y.data<float>(), ws.data<uint8_t>());
    return {y, ws};
  }
  if (is_max && any_nan_or_neg_inf(x)) return own_max();
  Tensor y = dg::empty_4d({g.N, g.C, g.OH, g.OW}, l);
  Tensor ws = is_max ? dg::empty_4d(y.shape(), l, ws_dtype(c)) : Tensor();
  Tensors out{y};
  if (is_max) out.push_back(ws);
  if (y.numel() == 0) return out;
  memory::desc ux = user_desc(x, l);
  dg::Key key = pool_key("pool_fwd", g, c, l);
  key << strides_of(ux);
  auto e = dg::cached<FwdEntry>(key, [&] {
    auto e = std::make_shared<FwdEntry>();
    auto pd = pool_fwd_pd(g, c, l);
    e->prim = dnnl::pooling_forward(pd);
    e->src.init_input(ux, pd.src_desc());
    e->dst = pd.dst_desc();
    if (is_max) {
      e->ws = pd.workspace_desc();
      AXLE_CHECK(e->ws == dg::strided_desc(ws.shape(), ws.strides(), ws.dtype()),
                 "[", op, "] internal: unexpected oneDNN workspace layout");
    }
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_SRC, ex.input(e->src, x));
  ex.arg(DNNL_ARG_DST, ex.wrap(e->dst, y));
  if (is_max) ex.arg(DNNL_ARG_WORKSPACE, ex.wrap(e->ws, ws));
  ex.run(e->prim, e->scratch);
  return out;
}

struct BwdEntry {
  dnnl::pooling_backward prim;
  dg::Slot diff_dst;
  memory::desc diff_src, ws;
  size_t scratch = 0;
};

// Gradient w.r.t. the input [N, C, H, W] of a pooling; `ws` (max only) fixes the layout.
// With `y` and `x` (max only, the pooled output and the pooling's input): the relu backward
// mask (x > 0) applied to that gradient, as the compiler's fused max_pool2d_backward computes it.
Tensor pool_backward(const Tensor& gy_in, const Tensor& ws, const Shape& xs, const PoolCfg& c, const char* op,
                     const Tensor& y = {}, const Tensor& x = {}) {
  Tensor gy = dg::describable(gy_in);
  const bool masked = y.defined();
  PoolGeom g = pool_geom(xs, c, op);
  AXLE_CHECK(gy.shape() == (Shape{g.N, g.C, g.OH, g.OW}), "[", op, "] expected grad of shape ",
             shape_str({g.N, g.C, g.OH, g.OW}), ", got ", shape_str(gy.shape()));
  const bool is_max = c.alg == dnnl::algorithm::pooling_max;
  const dg::Layout l = is_max ? act_layout(ws) : act_layout(gy);
  const bool fast_2x2 = is_max && is_2x2(c, g) && l == dg::Layout::NHWC && dg::is_dense(ws, l);
  if (gy.dtype() == kBFloat16 && !fast_2x2) {  // bf16 elsewhere: float32 on the widened gradient, rounded once
    auto wide = [](const Tensor& t) { return t.defined() && t.dtype() == kBFloat16 ? cpu::cast_cpu(t, kFloat32) : t; };
    return cpu::cast_cpu(pool_backward(wide(gy), ws, xs, c, op, wide(y), wide(x)), kBFloat16);
  }
  if (!is_max && overhangs(g, c)) return avg_bwd_own(gy, c, g);
  if (is_max && dg::is_dense(ws, dg::Layout::NCHW)) {  // made by max_fwd_own
    Tensor gx = make_tensor(xs, kFloat32);
    if (gx.numel() == 0) return gx;
    Tensor gc = cpu::contiguous_as(gy, kFloat32);
    Tensor yc = masked ? cpu::contiguous_as(y, kFloat32) : Tensor();
    const float* ym = masked ? yc.data<float>() : nullptr;
    if (ws.dtype() == kUInt8)
      max_bwd_own(gc.data<float>(), ws.data<uint8_t>(), c, g, gx.data<float>(), ym);
    else
      max_bwd_own(gc.data<float>(), ws.data<int32_t>(), c, g, gx.data<float>(), ym);
    return gx;
  }
  Tensor gx = dg::empty_4d(xs, l, gy.dtype());
  if (gx.numel() == 0) return gx;
  if (fast_2x2) {
    auto in_layout = [&](const Tensor& t) {
      if (dg::is_dense(t, l) && t.dtype() == gy.dtype()) return t;
      Tensor d = dg::empty_4d(t.shape(), l, gy.dtype());
      cpu::copy_into(d, t);
      return d;
    };
    Tensor gc = in_layout(gy);
    Tensor yc = masked ? in_layout(y) : Tensor();
    if (gy.dtype() == kBFloat16)
      max_bwd_nhwc_2x2(gc.data<bfloat16>(), ws.data<uint8_t>(), g, gx.data<bfloat16>(),
                       masked ? yc.data<bfloat16>() : nullptr);
    else
      max_bwd_nhwc_2x2(gc.data<float>(), ws.data<uint8_t>(), g, gx.data<float>(), masked ? yc.data<float>() : nullptr);
    return gx;
  }
  if (masked) {  // any other kernel: the plain gradient, then the relu backward mask from x
    Tensor plain = pool_backward(gy, ws, xs, c, op);
    return ops::kernel("cpu", OpKind::ReluBackward)({plain, x}, {}, {{xs, kFloat32}})[0];
  }
  if (gy.numel() == 0) {
    std::fill(gx.data<float>(), gx.data<float>() + gx.numel(), 0.0f);
    return gx;
  }
  memory::desc ugy = user_desc(gy, l);
  dg::Key key = pool_key("pool_bwd", g, c, l);
  key << strides_of(ugy);
  auto e = dg::cached<BwdEntry>(key, [&] {
    auto e = std::make_shared<BwdEntry>();
    auto hint = pool_fwd_pd(g, c, l);
    dnnl::pooling_backward::desc d(c.alg, tag_desc(xs, l), tag_desc(gy.shape(), l), {c.sh, c.sw}, {c.kh, c.kw},
                                   {c.ph, c.pw}, pad_r(g, c));
    dnnl::pooling_backward::primitive_desc pd(d, dg::default_attr(), dg::engine(), hint);
    e->prim = dnnl::pooling_backward(pd);
    e->diff_dst.init_input(ugy, pd.diff_dst_desc());
    e->diff_src = pd.diff_src_desc();
    if (is_max) e->ws = pd.workspace_desc();
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_DIFF_DST, ex.input(e->diff_dst, gy));
  ex.arg(DNNL_ARG_DIFF_SRC, ex.wrap(e->diff_src, gx));
  if (is_max) ex.arg(DNNL_ARG_WORKSPACE, ex.wrap(e->ws, ws));
  ex.run(e->prim, e->scratch);
  return gx;
}

PoolCfg max_cfg(const Attrs& a) {
  const ops::attr::MaxPool2d m = ops::attr::MaxPool2d::of(a);
  return {{m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, m.dilation_h, m.dilation_w, m.ceil_mode},
          dnnl::algorithm::pooling_max};
}
PoolCfg max_bwd_cfg(const Attrs& a) {
  const ops::attr::MaxPool2dBackward m = ops::attr::MaxPool2dBackward::of(a);
  return {{m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, m.dilation_h, m.dilation_w, m.ceil_mode},
          dnnl::algorithm::pooling_max};
}
dnnl::algorithm avg_alg(bool include) {
  return include ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
}
PoolCfg avg_cfg(const Attrs& a) {
  const ops::attr::AvgPool2d m = ops::attr::AvgPool2d::of(a);
  return {{m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, 1, 1, m.ceil_mode}, avg_alg(m.count_include_pad)};
}
PoolCfg avg_bwd_cfg(const Attrs& a) {
  const ops::attr::AvgPool2dBackward m = ops::attr::AvgPool2dBackward::of(a);
  return {{m.kh, m.kw, m.stride_h, m.stride_w, m.pad_h, m.pad_w, 1, 1, m.ceil_mode}, avg_alg(m.count_include_pad)};
}

Tensors max_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>&) {
  return pool_forward(in[0], max_cfg(a), "max_pool2d");
}

Tensors max_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  Tensor ws = in[2];
  const dg::Layout l = act_layout(ws);
  if (!dg::is_dense(ws, l)) {  // the workspace must keep the layout max_pool2d gave it
    Tensor c = dg::empty_4d(ws.shape(), dg::Layout::NCHW, ws.dtype());
    cpu::copy_into(c, ws);
    ws = c;
  }
  const bool relu = ops::attr::MaxPool2dBackward::of(a).relu;
  return {pool_backward(in[0], ws, m[0].shape, max_bwd_cfg(a), "max_pool2d_backward",
                        relu ? dg::describable(in[3]) : Tensor(), relu ? in[1] : Tensor())};
}

Tensors avg_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>&) {
  return pool_forward(in[0], avg_cfg(a), "avg_pool2d");
}

Tensors avg_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  return {pool_backward(in[0], {}, m[0].shape, avg_bwd_cfg(a), "avg_pool2d_backward")};
}

// ------------------------------------------------------------------ adaptive avg
int64_t start_idx(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }

int64_t end_idx(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

bool divisible(int64_t H, int64_t W, int64_t oh, int64_t ow) { return H % oh == 0 && W % ow == 0; }

PoolCfg adaptive_cfg(int64_t H, int64_t W, int64_t oh, int64_t ow) {
  return {{H / oh, W / ow, H / oh, W / ow, 0, 0}, dnnl::algorithm::pooling_avg_include_padding};
}

Tensors adaptive_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Shape& s = in[0].shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3], oh = a.ints[0], ow = a.ints[1];
  if (divisible(H, W, oh, ow)) return pool_forward(in[0], adaptive_cfg(H, W, oh, ow), "adaptive_avg_pool2d");
  Tensor x = cpu::contiguous_as(in[0], kFloat32);
  Tensor y = make_tensor(m[0].shape, kFloat32);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t planes = N * C;
#pragma omp parallel for schedule(static) if (planes * H * W >= cpu::kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const float* xi = xp + p * H * W;
    float* yo = yp + p * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t h0 = start_idx(i, oh, H), h1 = end_idx(i, oh, H);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t w0 = start_idx(j, ow, W), w1 = end_idx(j, ow, W);
        float acc = 0.0f;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) acc += xi[h * W + w];
        yo[i * ow + j] = acc / float((h1 - h0) * (w1 - w0));
      }
    }
  }
  return {y};
}

Tensors adaptive_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Shape& s = in[0].shape();
  const int64_t N = s[0], C = s[1], oh = s[2], ow = s[3], H = a.ints[0], W = a.ints[1];
  if (divisible(H, W, oh, ow))
    return {pool_backward(in[0], {}, m[0].shape, adaptive_cfg(H, W, oh, ow), "adaptive_avg_pool2d_backward")};
  Tensor g = cpu::contiguous_as(in[0], kFloat32);
  Tensor gx = make_tensor(m[0].shape, kFloat32);
  const float* gp = g.data<float>();
  float* xp = gx.data<float>();
  const int64_t planes = N * C;
#pragma omp parallel for schedule(static) if (planes * H * W >= cpu::kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    float* xi = xp + p * H * W;
    const float* go = gp + p * oh * ow;
    std::fill(xi, xi + H * W, 0.0f);
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t h0 = start_idx(i, oh, H), h1 = end_idx(i, oh, H);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t w0 = start_idx(j, ow, W), w1 = end_idx(j, ow, W);
        const float v = go[i * ow + j] / float((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) xi[h * W + w] += v;
      }
    }
  }
  return {gx};
}

}  // namespace

void register_cpu_pool_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::MaxPool2d, max_cpu);
  reg(OpKind::MaxPool2dBackward, max_bwd_cpu);
  reg(OpKind::AvgPool2d, avg_cpu);
  reg(OpKind::AvgPool2dBackward, avg_bwd_cpu);
  reg(OpKind::AdaptiveAvgPool2d, adaptive_cpu);
  reg(OpKind::AdaptiveAvgPool2dBackward, adaptive_bwd_cpu);
}

}  // namespace axle::cpu
