// The fused layer norm on cpu (ops.def: LayerNorm and LayerNormBackward). Rows of the N
// normalised elements are independent: the forward reads a row three times while it sits in
// L1 (sum, sum of squared deviations, then y), the backward twice (the two row sums, then dx
// with the weight and bias gradients accumulated alongside). Where the composite of mean, sub,
// mul, rsqrt, add wrote and re-read a full-size tensor per op, each full-size tensor here is
// read and written once. Rows are taken in fixed blocks of kRows: the weight and bias
// gradients are summed per block, then the blocks in order in double, so the result does not
// depend on the thread count.
// bf16 activations (x, the residual, y, dy, dx) are widened a row at a time into a per-thread
// float32 buffer and rounded once as each row is stored (float32 statistics, as PyTorch's bf16
// cpu kernel); the weight and bias (n elements) are widened once, their gradients rounded once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/bf16.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/vexp.h"
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
// Row access for float32 or bf16 tensors: a float32 tensor's rows are used in place; a bf16
// tensor's are widened into (loaded) or computed in and rounded from (stored) `buf`.
struct Rows {
  void* base = nullptr;
  bool bf16 = false;
  explicit Rows(const Tensor& t) : base(t.defined() ? t.data_ptr() : nullptr), bf16(t.defined() && t.dtype() == kBFloat16) {}
  const float* load(int64_t off, int64_t n, float* buf) const {
    if (!bf16) return static_cast<const float*>(base) + off;
    widen_bf16(static_cast<const bfloat16*>(base) + off, buf, n);
    return buf;
  }
  float* out(int64_t off, float* buf) const { return bf16 ? buf : static_cast<float*>(base) + off; }
  void store(int64_t off, int64_t n, const float* buf) const {
    if (bf16) round_bf16(buf, static_cast<bfloat16*>(base) + off, n);
  }
};

// k row buffers of n floats for the calling thread (reused across calls).
float* row_buffers(int64_t k, int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(k * n)) buf.resize(size_t(k * n));
  return buf.data();
}

// t contiguous in its own dtype (float32 or bf16).
Tensor dense(const Tensor& t) { return contiguous_as(t, t.dtype()); }

RowGeom row_geom(const Shape& s, int64_t dims) {
  RowGeom g;
  for (size_t d = s.size() - size_t(dims); d < s.size(); ++d) g.n *= s[d];
  g.rows = g.n == 0 ? 0 : shape_numel(s) / g.n;
  return g;
}

// The forward's operands for forward_row.
struct FwdRows {
  Rows xs, res, sum, ys;
  const float *wp, *bp;
  float *mp, *rp;
  int64_t n;
  double eps;
  bool residual;
};

/// Row r of the forward: s = x (+ r), its mean and rstd, y. One function for the whole row so
/// its loops, the bf16 widening and rounding included, take the AVX-512 copy where the
/// processor has it (16 lanes; 8 in the baseline copy): the gpt's rows are 128 wide, and
/// the per-row work outside the loops was most of the kernel's time.
AXLE_SIMD_CLONES void forward_row(const FwdRows& c, int64_t r, float* buf) {
  const int64_t n = c.n;
  const float* xr = c.xs.load(r * n, n, buf);
  if (c.residual) {
    const float* rr = c.res.load(r * n, n, buf + n);
    float* sr = c.sum.out(r * n, buf + 2 * n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) sr[i] = xr[i] + rr[i];
    c.sum.store(r * n, n, sr);
    xr = c.sum.bf16 ? c.sum.load(r * n, n, buf + 2 * n) : sr;
  }
  float* yr = c.ys.out(r * n, buf + n);
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += xr[i];
  const float m = float(double(s) / double(n));
  float q = 0.f;
#pragma omp simd reduction(+ : q)
  for (int64_t i = 0; i < n; ++i) q += (xr[i] - m) * (xr[i] - m);
  const float rs = float(1.0 / std::sqrt(double(q) / double(n) + c.eps));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rs * c.wp[i] + c.bp[i];
  c.ys.store(r * n, n, yr);
  c.mp[r] = m;
  c.rp[r] = rs;
}

// The backward's operands for backward_row.
struct BwdRows {
  Rows gs, xs, dxs, res;
  const float *wp, *mp, *rp;
  int64_t n;
  float inv_n;
  bool residual;
};

/// Row r of the backward: dx, and the row's terms added to the block's weight and bias
/// gradient partials pw, pb (AVX-512 copy as forward_row).
AXLE_SIMD_CLONES void backward_row(const BwdRows& c, int64_t r, float* buf, float* pw, float* pb) {
  const int64_t n = c.n;
  const float* gr = c.gs.load(r * n, n, buf);
  const float* xr = c.xs.load(r * n, n, buf + n);
  float* dxr = c.dxs.out(r * n, buf + 2 * n);
  const float* wp = c.wp;
  const float m = c.mp[r], rs = c.rp[r];
  float sg = 0.f, sgx = 0.f;  // sum(dy * w), sum(dy * w * xhat)
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t i = 0; i < n; ++i) {
    const float gw = gr[i] * wp[i];
    sg += gw;
    sgx += gw * ((xr[i] - m) * rs);
  }
  const float ca = sg * c.inv_n, cb = sgx * c.inv_n;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xh = (xr[i] - m) * rs;
    dxr[i] = rs * (gr[i] * wp[i] - ca - xh * cb);
    pw[i] += gr[i] * xh;
    pb[i] += gr[i];
  }
  if (c.residual) {
    const float* rr = c.res.load(r * n, n, buf + 3 * n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dxr[i] += rr[i];
  }
  c.dxs.store(r * n, n, dxr);
}

Tensors layer_norm_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::LayerNorm at = attr::LayerNorm::of(a);
  const Tensor x = dense(in[0]), w = contiguous_as(in[1], kFloat32), b = contiguous_as(in[2], kFloat32);
  Tensor y = make_tensor(mt[0].shape, mt[0].dtype), mean = make_tensor(mt[1].shape, kFloat32),
         rstd = make_tensor(mt[2].shape, kFloat32);
  // residual: the rows normalised are s = x + r, written to the 4th output as they are made
  // (in bf16, s is rounded as stored and the rounded s normalised: the unfused add's values).
  Tensor res, sum;
  if (at.residual) {
    res = dense(in[3]);
    sum = make_tensor(mt[3].shape, mt[3].dtype);
  }
  const RowGeom g = row_geom(x.shape(), at.dims);
  Tensors outs = {y, mean, rstd};
  if (at.residual) outs.push_back(sum);
  if (g.rows == 0) return outs;
  const FwdRows c{Rows(x), Rows(res), Rows(sum), Rows(y), w.data<float>(), b.data<float>(), mean.data<float>(),
                  rstd.data<float>(), g.n, at.eps, at.residual};
  const int64_t blocks = (g.rows + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (use_team(g.rows * g.n) && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* buf = row_buffers(3, g.n);
    for (int64_t r = blk * kRows; r < std::min(g.rows, (blk + 1) * kRows); ++r) forward_row(c, r, buf);
  }
  return outs;
}

Tensors layer_norm_backward_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& mt) {
  const attr::LayerNormBackward at = attr::LayerNormBackward::of(a);
  const int64_t dims = at.dims;
  const Tensor dy = dense(in[0]), x = dense(in[1]), w = contiguous_as(in[2], kFloat32),
               mean = contiguous_as(in[3], kFloat32), rstd = contiguous_as(in[4], kFloat32);
  Tensor dx = make_tensor(mt[0].shape, mt[0].dtype), dw = make_tensor(mt[1].shape, kFloat32),
         db = make_tensor(mt[2].shape, kFloat32);
  // dweight and dbias in the weight's dtype, rounded once from their float32 sums.
  auto outputs = [&] {
    return Tensors{dx, mt[1].dtype == kFloat32 ? dw : cast_cpu(dw, mt[1].dtype),
                   mt[2].dtype == kFloat32 ? db : cast_cpu(db, mt[2].dtype)};
  };
  const RowGeom g = row_geom(x.shape(), dims);
  const int64_t n = g.n;
  float* dwp = dw.data<float>();
  float* dbp = db.data<float>();
  if (g.rows == 0) {
    std::fill(dwp, dwp + n, 0.f);
    std::fill(dbp, dbp + n, 0.f);
    return outputs();
  }
  // residual: the gradient from the residual stream, added to dx as it is written.
  const Tensor res = at.residual ? dense(in[5]) : Tensor();
  const BwdRows c{Rows(dy), Rows(x), Rows(dx), Rows(res), w.data<float>(), mean.data<float>(), rstd.data<float>(), n,
                  float(1.0 / double(n)), bool(at.residual)};
  const int64_t blocks = (g.rows + kRows - 1) / kRows;
  // Per block: its weight-gradient partials, then its bias-gradient partials.
  std::vector<float> part(size_t(blocks * 2 * n), 0.f);
#pragma omp parallel for schedule(static) if (use_team(g.rows * n) && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* pw = part.data() + blk * 2 * n;
    float* buf = row_buffers(4, n);
    for (int64_t r = blk * kRows; r < std::min(g.rows, (blk + 1) * kRows); ++r) backward_row(c, r, buf, pw, pw + n);
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
  return outputs();
}

}  // namespace

void register_cpu_norm_kernels() {
  ops::register_kernel("cpu", OpKind::LayerNorm, layer_norm_cpu);
  ops::register_kernel("cpu", OpKind::LayerNormBackward, layer_norm_backward_cpu);
}

}  // namespace axle::cpu
