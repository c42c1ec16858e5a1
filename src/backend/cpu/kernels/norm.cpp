// The fused layer norm on cpu (ops.def: LayerNorm and LayerNormBackward). Rows of the N
// normalised elements are independent: the forward reads a row three times while it sits in
// L1 (sum, sum of squared deviations, then y), the backward twice (the two row sums, then dx
// with the weight and bias gradients accumulated alongside). Where the composite of mean, sub,
// mul, rsqrt, add wrote and re-read a full-size tensor per op, each full-size tensor here is
// read and written once. Rows are taken in fixed blocks of kRows: the weight and bias
// gradients are summed per block, then the blocks in order in double, so the result does not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/norm.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr int64_t kRows = 32;  ///< rows per block (the backward's unit of partial sums)

struct RowGeom {
  int64_t rows = 0, n = 1;
};
RowGeom row_geom(const Shape& s, int64_t dims) {
  RowGeom g;
  for (size_t d = s.size() - size_t(dims); d < s.size(); ++d) g.n *= s[d];
  g.rows = g.n == 0 ? 0 : shape_numel(s) / g.n;
  return g;
}

Tensors layer_norm_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::LayerNorm at = attr::LayerNorm::of(a);
  const Tensor x = contiguous_as(in[0], kFloat32), w = contiguous_as(in[1], kFloat32),
               b = contiguous_as(in[2], kFloat32);
  Tensor y = make_tensor(mt[0].shape, kFloat32), mean = make_tensor(mt[1].shape, kFloat32),
         rstd = make_tensor(mt[2].shape, kFloat32);
  // residual: the rows normalised are s = x + r, written to the 4th output as they are made.
  Tensor res, sum;
  if (at.residual) {
    res = contiguous_as(in[3], kFloat32);
    sum = make_tensor(mt[3].shape, kFloat32);
  }
  const RowGeom g = row_geom(x.shape(), at.dims);
  Tensors outs = {y, mean, rstd};
  if (at.residual) outs.push_back(sum);
  if (g.rows == 0) return outs;
  const float* rsp = at.residual ? res.data<float>() : nullptr;
  float* sp = at.residual ? sum.data<float>() : nullptr;
  const float* x_in = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  float* mp = mean.data<float>();
  float* rp = rstd.data<float>();
  const int64_t n = g.n;
  const double eps = at.eps;
#pragma omp parallel for schedule(static) if (use_team(g.rows * n))
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* xr = x_in + r * n;
    if (sp) {
      const float* rr = rsp + r * n;
      float* sr = sp + r * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sr[i] = xr[i] + rr[i];
      xr = sr;
    }
    float* yr = yp + r * n;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += xr[i];
    const float m = float(double(s) / double(n));
    float q = 0.f;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < n; ++i) q += (xr[i] - m) * (xr[i] - m);
    const float rs = float(1.0 / std::sqrt(double(q) / double(n) + eps));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rs * wp[i] + bp[i];
    mp[r] = m;
    rp[r] = rs;
  }
  return outs;
}

Tensors layer_norm_backward_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::LayerNormBackward at = attr::LayerNormBackward::of(a);
  const int64_t dims = at.dims;
  const Tensor dy = contiguous_as(in[0], kFloat32), x = contiguous_as(in[1], kFloat32),
               w = contiguous_as(in[2], kFloat32), mean = contiguous_as(in[3], kFloat32),
               rstd = contiguous_as(in[4], kFloat32);
  Tensor dx = make_tensor(mt[0].shape, kFloat32), dw = make_tensor(mt[1].shape, kFloat32),
         db = make_tensor(mt[2].shape, kFloat32);
  const RowGeom g = row_geom(x.shape(), dims);
  const int64_t n = g.n;
  float* dwp = dw.data<float>();
  float* dbp = db.data<float>();
  if (g.rows == 0) {
    std::fill(dwp, dwp + n, 0.f);
    std::fill(dbp, dbp + n, 0.f);
    return {dx, dw, db};
  }
  const float* gp = dy.data<float>();
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* mp = mean.data<float>();
  const float* rp = rstd.data<float>();
  float* dxp = dx.data<float>();
  // residual: the gradient from the residual stream, added to dx as it is written.
  const Tensor res = at.residual ? contiguous_as(in[5], kFloat32) : Tensor();
  const float* rsp = at.residual ? res.data<float>() : nullptr;
  const int64_t blocks = (g.rows + kRows - 1) / kRows;
  // Per block: its weight-gradient partials, then its bias-gradient partials.
  std::vector<float> part(size_t(blocks * 2 * n), 0.f);
  const float inv_n = float(1.0 / double(n));
#pragma omp parallel for schedule(static) if (use_team(g.rows * n) && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* pw = part.data() + blk * 2 * n;
    float* pb = pw + n;
    for (int64_t r = blk * kRows; r < std::min(g.rows, (blk + 1) * kRows); ++r) {
      const float* gr = gp + r * n;
      const float* xr = xp + r * n;
      float* dxr = dxp + r * n;
      const float m = mp[r], rs = rp[r];
      float sg = 0.f, sgx = 0.f;  // sum(dy * w), sum(dy * w * xhat)
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t i = 0; i < n; ++i) {
        const float gw = gr[i] * wp[i];
        sg += gw;
        sgx += gw * ((xr[i] - m) * rs);
      }
      const float ca = sg * inv_n, cb = sgx * inv_n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float xh = (xr[i] - m) * rs;
        dxr[i] = rs * (gr[i] * wp[i] - ca - xh * cb);
        pw[i] += gr[i] * xh;
        pb[i] += gr[i];
      }
      if (rsp) {
        const float* rr = rsp + r * n;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dxr[i] += rr[i];
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    double sw = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sw += part[size_t(blk * 2 * n + i)];
      sb += part[size_t(blk * 2 * n + n + i)];
    }
    dwp[i] = float(sw);
    dbp[i] = float(sb);
  }
  return {dx, dw, db};
}

}  // namespace

void register_cpu_norm_kernels() {
  ops::register_kernel("cpu", OpKind::LayerNorm, layer_norm_cpu);
  ops::register_kernel("cpu", OpKind::LayerNormBackward, layer_norm_backward_cpu);
}

}  // namespace axle::cpu
