// Fused scaled dot-product attention on cpu (ops.def: ScaledDotProductAttention and its
// backward), blocked with an online softmax: queries in blocks of g.bq rows, keys in blocks
// of kBk; per query row a running max m and sum l, each key block's scores rescaling the
// accumulator by exp(m_old - m_new). The products are oneDNN batched matmuls over every batch
// entry (batch x heads) at once, reading q, k, v and the output gradient in place through
// their strides (the transposed views of a [B, T, H, E] layout need no copy, and K^T and V^T
// are views too); the softmax steps between them are plain vectorised loops. Query blocks
// (block_rows): 128 rows in bf16, where oneDNN's brgemm kernels (AMX) take a 128 x E x 128
// product and 64-row blocks fell to its plain gemm at a third of the rate (measured: 80 vs
// 226 GFLOP/s on an AMX part), which outweighs computing the masked half of a causal diagonal
// block; 64 rows in float32, whose products keep their rate on 64-row blocks while the
// causal blocks skip a quarter of the work (the gpt's attention, [32, 4, 128, 32], forward and
// backward, one thread, alternating: 18.5-20.1 ms against 20.7-25.5 with 128 rows; bf16 with
// 64 rows: 26.0-26.5 against 22.6-22.9). Scratch is one bq x kBk score block per batch entry
// (the batch taken in chunks of at most kScratchFloats), never L x S. Causal runs skip the
// keys above the diagonal: the forward's key blocks stop at the query block's last row, and
// the backward's products take only the keys its query block sees. The backward
// (FlashAttention-2's) recomputes each block's
// probabilities from q, k and the saved log-sum-exp: P = exp(s - lse), D = rowsum(dO * O),
// dS = P * (dP - D); dV += P^T dO, dQ += dS K, dK += dS^T Q accumulate in the outputs.
// Dropout: weight (b, i, j) of element index e = base[b] + i * S + j (base[b] = b * L * S on
// one device; under SPMD each device's shard of base keeps the global indices) is kept when
// the uniform from word e % 4 of Philox block offset + e / 4 (the generator's seed) is >= p,
// the rule of axle::dropout's rand(); the backward regenerates the same mask.
// bfloat16 (where bf16.h's path is Native, AMX: the bf16 wrapper widens to float32 elsewhere):
// q, k, v, the output gradient and each probability / score-gradient block enter the products
// as bf16, which accumulate in float32 (oneDNN's bf16 primitives); the softmax, the running
// max and sum, the log-sum-exp and the output / gradient accumulators stay float32, rounded to
// bf16 once at the end (PyTorch's cpu flash attention keeps the same split).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <type_traits>
#include <vector>

#include "axle/generator.h"
#include "backend/cpu/bf16.h"
#include "backend/cpu/dnnl.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/vexp.h"
#include "backend/cpu/loops.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/op.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

namespace dg = cpu::dnnl_glue;

constexpr int64_t kBk = 128;  ///< keys per block
/// Score-block scratch per chunk of the batch (floats; the backward holds two such blocks).
constexpr int64_t kScratchFloats = int64_t(1) << 17;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// exp for x <= 0 (scores less their row's max or log-sum-exp), about 1 ulp (Cephes polynomial);
/// 0 below -86 and for -inf. -86, not -87.5: the polynomial times 2^n is then never subnormal
/// (2^-124 at least), and a subnormal product costs a microcode assist of ~100 cycles per
/// vector on Intel cores (it made the masked half of causal blocks 10x slower); e^-86 < 2e-38
/// is far below what a row's sum (>= 1) can feel. The clamp and the zeroing are integer selects
/// on the bits (a float compare would leave a branch the vectoriser gives up on under
/// -ftrapping-math).
inline float fexp(float x) {
  const int32_t xb = __builtin_bit_cast(int32_t, x), lim = __builtin_bit_cast(int32_t, -86.0f);
  const int32_t under = -int32_t((xb < 0) & (xb > lim));  // all ones where x < -86
  const float xc = __builtin_bit_cast(float, (lim & under) | (xb & ~under));
  float y = exp_clamped(xc);
  return __builtin_bit_cast(float, __builtin_bit_cast(int32_t, y) & ~under);
}

/// A [batch..., rows, cols] operand (float32 or bf16): its data and strides (elements), the
/// last dim dense.
struct Operand {
  Tensor t;  ///< keeps the storage alive
  char* p = nullptr;
  Shape strides;
  DType dt = kFloat32;
  /// The address of element offset `off`.
  char* at(int64_t off) const { return p + off * int64_t(itemsize(dt)); }
  float* f32(int64_t off) const { return reinterpret_cast<float*>(at(off)); }
};

Operand operand(const Tensor& t) { return Operand{t, static_cast<char*>(t.data_ptr()), t.strides(), t.dtype()}; }

/// Whether x's dims (those of size > 1 it does not broadcast) tile a block of memory with no
/// gap: a permutation of a dense layout, which oneDNN's bf16 brgemm matmul kernels take. A q,
/// k or v sliced from one packed [B, T, 3, H, E] projection is not (its rows are 3 H E apart),
/// and there oneDNN's bf16 products fall to its plain gemm, at half the rate and less (AMX:
/// 0.08 ms for a [4, 128, 32] x [4, 32, 128] product against 0.035 ms), which costs more than
/// a copy. float32 products take such views in place: the gpt's attention ran 10-12% faster
/// than with the copies (forward and backward, one thread, alternating).
bool gapless(const Tensor& x) {
  std::vector<std::pair<int64_t, int64_t>> by_stride;  // (stride, size)
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[size_t(d)] > 1 && x.strides()[size_t(d)] != 0)
      by_stride.emplace_back(x.strides()[size_t(d)], x.shape()[size_t(d)]);
  std::sort(by_stride.begin(), by_stride.end());
  int64_t next = 1;
  for (const auto& [st, n] : by_stride) {
    if (st != next) return false;
    next = st * n;
  }
  return true;
}

/// x as a `dt` operand whose last dim is dense and, in bf16, whose layout is gapless: x itself,
/// or a copy that keeps x's order of dims where only gaps were wrong (q sliced from a packed
/// [B, T, 3, H, E] projection becomes a [B, T, H, E] buffer: rows of H E copied whole, not E at
/// a time as a [B, H, T, E] copy would), a contiguous one otherwise.
Operand operand_of(const Tensor& x, DType dt) {
  const bool last_dense = x.shape().back() == 1 || x.strides().back() == 1;
  const bool rows_broadcast = x.dim() >= 2 && x.shape()[size_t(x.dim() - 2)] > 1 && x.strides()[size_t(x.dim() - 2)] == 0;
  if (x.dtype() == dt && last_dense && !rows_broadcast && (dt == kFloat32 || gapless(x))) return operand(x);
  const bool plain = std::all_of(x.strides().begin(), x.strides().end(), [](int64_t st) { return st > 0; });
  if (x.dtype() != dt || !last_dense || !plain) return operand(contiguous_as(x, dt));
  std::vector<size_t> order(size_t(x.dim()));  // dims by decreasing stride: the new layout's order
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x.strides()[a] > x.strides()[b]; });
  Shape strides(order.size());
  int64_t next = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[order[k]] = next;
    next *= x.shape()[order[k]];
  }
  const Tensor t = make_view(make_tensor({x.numel()}, dt), x.shape(), strides, 0);
  copy_into(t, x);
  return operand(t);
}

/// The batch geometry: batch dims (at least one: an unbatched call has a dim of 1), the
/// sequence lengths and head sizes.
struct Geom {
  Shape batch;  ///< the batch dims
  int64_t N = 1, L = 0, S = 0, E = 0, Ev = 0;
  int64_t inner = 1;  ///< product of batch dims after the first
  int64_t bq = 128;   ///< query rows per block (block_rows)
};

/// Query rows per block for products in `dt` (the file's opening note has the measurements).
int64_t block_rows(DType dt) { return dt == kBFloat16 ? 128 : 64; }

Geom geom_of(const Tensor& q, const Tensor& v, DType dt) {
  const Shape& s = q.shape();
  Geom g;
  g.bq = block_rows(dt);
  g.batch = Shape(s.begin(), s.end() - 2);
  if (g.batch.empty()) g.batch = {1};
  g.L = s[s.size() - 2];
  g.S = v.shape()[v.dim() - 2];
  g.E = s.back();
  g.Ev = v.shape().back();
  for (int64_t b : g.batch) g.N *= b;
  for (size_t d = 1; d < g.batch.size(); ++d) g.inner *= g.batch[d];
  return g;
}

/// Element offset of flat batch entry b in an operand with `strides` (batch dims first; an
/// unbatched operand has none).
int64_t batch_offset(const Geom& g, const Shape& strides, int64_t b) {
  if (strides.size() == 2) return 0;
  int64_t off = 0;
  for (size_t d = g.batch.size(); d-- > 0;) {
    off += (b % g.batch[d]) * strides[d];
    b /= g.batch[d];
  }
  return off;
}

/// One strided batched matrix: `c` batch entries starting at flat entry b0 (b0 a multiple of
/// g.inner, c of them too), rows x cols, row stride rs, column stride cs.
struct Mat {
  char* p;
  Shape dims, strides;
  DType dt = kFloat32;
};

/// The view of operand o's rows r0..r0+rows (all `cols` columns) for the
/// batch entries [b0, b0 + c) (b0 and c multiples of g.inner). A batch dim the operand
/// broadcasts (stride 0) is a dim of 1 that oneDNN broadcasts.
Mat mat_of(const Geom& g, const Operand& o, int64_t b0, int64_t c, int64_t r0, int64_t rows, int64_t cols) {
  const size_t nb = g.batch.size(), nd = o.strides.size();
  const bool unbatched = nd == 2;
  Mat m;
  m.p = o.at(batch_offset(g, o.strides, b0) + r0 * o.strides[nd - 2]);
  m.dt = o.dt;
  const int64_t rs = rows == 1 ? cols : o.strides[nd - 2], cs = 1;  // a size-1 dim's stride is free
  for (size_t d = 0; d < nb; ++d) {
    const int64_t st = unbatched ? 0 : o.strides[d];
    m.dims.push_back(st == 0 ? 1 : d == 0 ? c / g.inner : g.batch[d]);
    m.strides.push_back(st);
  }
  m.dims.push_back(rows), m.dims.push_back(cols);
  m.strides.push_back(rs), m.strides.push_back(cs);
  // size-1 batch dims: a stride covering the rest (oneDNN checks the layout's extent)
  for (size_t d = nb; d-- > 0;)
    if (m.dims[d] == 1) {
      int64_t ext = 1;
      for (size_t e = d + 1; e < m.dims.size(); ++e) ext = std::max(ext, m.dims[e] * m.strides[e]);
      m.strides[d] = ext;
    }
  return m;
}

/// Runs f(t) for t in [0, n): on an OpenMP team when the work is worth one.
template <class F>
void rows_loop(int64_t n, int64_t work, F&& f) {
  if (n > 1 && use_team(work)) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; ++t) f(t);
  } else {
    for (int64_t t = 0; t < n; ++t) f(t);
  }
}

/// m with its last two dims swapped (a transposed view: oneDNN reads the strides).
Mat transposed(Mat m) {
  const size_t nd = m.dims.size();
  std::swap(m.dims[nd - 2], m.dims[nd - 1]);
  std::swap(m.strides[nd - 2], m.strides[nd - 1]);
  return m;
}

/// A dense [c / inner, batch[1:]..., rows, cols] scratch matrix of `dt` at p.
Mat dense(const Geom& g, void* p, DType dt, int64_t c, int64_t rows, int64_t cols, bool transposed = false) {
  Mat m;
  m.p = static_cast<char*>(p);
  m.dt = dt;
  const size_t nb = g.batch.size();
  for (size_t d = 0; d < nb; ++d) m.dims.push_back(d == 0 ? c / g.inner : g.batch[d]);
  m.dims.push_back(rows), m.dims.push_back(cols);
  m.strides.assign(m.dims.size(), 1);
  for (size_t d = m.dims.size() - 1; d-- > 0;) m.strides[d] = m.strides[d + 1] * m.dims[d + 1];
  if (transposed) {
    std::swap(m.dims[nb], m.dims[nb + 1]);
    std::swap(m.strides[nb], m.strides[nb + 1]);
  }
  return m;
}

/// A score block in scratch: [c / inner, batch[1:]..., m, n] with rows kBk apart (so the row
/// loops run a fixed kBk columns), batch entries bq * kBk apart; or its transpose. float32, or
/// bf16 (a float32 block rounded for the products: Blocks16).
Mat block(const Geom& g, float* p, int64_t c, int64_t m, int64_t n, bool transposed = false) {
  Mat b = dense(g, p, kFloat32, c, g.bq, kBk, transposed);
  const size_t nb = g.batch.size();
  b.dims[nb + (transposed ? 1 : 0)] = m;
  b.dims[nb + (transposed ? 0 : 1)] = n;
  return b;
}
Mat block(const Geom& g, bfloat16* p, int64_t c, int64_t m, int64_t n, bool transposed = false) {
  Mat b = dense(g, p, kBFloat16, c, g.bq, kBk, transposed);
  const size_t nb = g.batch.size();
  b.dims[nb + (transposed ? 1 : 0)] = m;
  b.dims[nb + (transposed ? 0 : 1)] = n;
  return b;
}

/// `parts` outputs of logical shape [batch..., rows, cols] in one buffer laid out as [batch[0],
/// rows, parts, batch[1:]..., cols]. For one [B, H, L, E] output that is [B, L, H, E] (PyTorch's
/// cpu flash attention's layout too), so the caller's transpose(1, 2) and reshape to [B, L, H * E]
/// (the heads merged back) are views, not copies; for dq, dk, dv of equal shapes it is
/// [B, L, 3, H, E], the layout of a packed qkv projection's [B, L, 3 * H * E] gradient, so the
/// cat of the three merged views is a view too (cat_cpu). Fewer than 2 batch dims and one part:
/// the dense layout. The buffer is zeroed when `zero`.
std::vector<Operand> interleaved_outputs(const Shape& shape, int64_t parts, bool zero, DType dt = kFloat32) {
  const size_t nd = shape.size();
  const int64_t rows = shape[nd - 2], cols = shape[nd - 1];
  Shape strides(nd, 1);
  int64_t acc = cols;
  for (size_t d = nd - 2; d-- > 1;) {
    strides[d] = acc;
    acc *= shape[d];
  }
  const int64_t part_stride = shape_numel(shape) == 0 ? 0 : acc;  // (no offsets into an empty buffer)
  acc *= parts;
  strides[nd - 2] = acc;  // a row steps over every part and every entry of batch[1:]
  acc *= rows;
  if (nd >= 3) strides[0] = acc;
  Tensor buf = make_tensor({shape_numel(shape) * parts}, dt);
  const Operand whole = operand(buf);
  if (zero) std::memset(whole.p, 0, size_t(buf.numel()) * itemsize(dt));  // 0.0 in float32 and bf16
  std::vector<Operand> outs;
  for (int64_t k = 0; k < parts; ++k)
    outs.push_back(Operand{make_view(buf, shape, strides, k * part_stride), whole.at(k * part_stride), strides, dt});
  return outs;
}

/// The float32 accumulators `acc` copied (dt float32) or rounded (bf16) into outputs of logical
/// shape `shape`, laid out as interleaved_outputs(shape, acc.size()) lays them out.
std::vector<Operand> outputs_of(const std::vector<Operand>& acc, const Shape& shape, DType dt) {
  std::vector<Operand> out = interleaved_outputs(shape, int64_t(acc.size()), false, dt);
  for (size_t k = 0; k < acc.size(); ++k) {
    if (dt == kFloat32) {
      copy_into(out[k].t, acc[k].t);
      continue;
    }
    TensorIter it(out[k].t, {&acc[k].t});  // the cast op's own loop
    it.run([](char** p, const int64_t* s, int64_t n) { cast_raw(kFloat32, kBFloat16, p, s, n); });
  }
  return out;
}

// 16 floats as one value (GCC's vector extension): a zmm register in the AVX-512 clone, two
// ymm ones otherwise. The row loops below keep their running max / sum in one, so nothing
// goes through memory between a store and a load of another width: such a load cannot take
// its data from the store buffer and waits for the store to retire (measured: those waits
// were most of the forward's row work).
// (-Wpsabi, off for this file: passing one by value changes the ABI without AVX-512; these
// helpers are all internal, and GCC warns at the end of the file, so no push / pop.)
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));

inline F16 load16(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, F16 v) { std::memcpy(p, &v, sizeof v); }
inline F16 splat16(float x) { return F16{} + x; }
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
/// The 16 lanes folded to 4 in registers (halves against halves: a spill to the stack and
/// scalar loads would wait on the spill, as above), then the 4 in order.
template <class Op>
inline float fold16(F16 v, Op op) {
  const F8 a = op(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
  const F4 b = op(__builtin_shufflevector(a, a, 0, 1, 2, 3), __builtin_shufflevector(a, a, 4, 5, 6, 7));
  const float x = op(b[0], b[1]), y = op(b[2], b[3]);
  return op(x, y);
}
inline float hmax16(F16 v) {
  return fold16(v, [](auto a, auto b) { return a > b ? a : b; });
}
inline float hsum16(F16 v) {
  return fold16(v, [](auto a, auto b) { return a + b; });
}

/// The columns of a row the softmax loops compute: its nk unmasked ones, rounded up to whole
/// 16-lane vectors (a causal block's row i sees i + 1 - j0 keys: about half the block).
inline int64_t live_cols(int64_t nk) { return std::min<int64_t>(kBk, (nk + 15) & ~int64_t(15)); }

/// Row r scaled over its live_cols(nk) columns, with -inf from column nk on; returns their max
/// (the columns after them are left as they are: exp_sum zeroes them).
AXLE_SIMD_CLONES float scale_mask_max(float* r, float scale, int64_t nk) {
  const I16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const I16 ninf = (I16)splat16(kNegInf);
  F16 m = splat16(kNegInf);
  const int64_t live = live_cols(nk);
  for (int64_t j = 0; j < live; j += 16) {
    const I16 keep = lane + int32_t(j) < int32_t(nk);  // all ones where column j + l < nk
    const F16 x = (F16)(((I16)(load16(r + j) * scale) & keep) | (ninf & ~keep));  // a select on the bits
    store16(r + j, x);
    m = m > x ? m : x;
  }
  return hmax16(m);
}

/// r[j] = exp(r[j] - mx) over the live_cols(nk) columns (0 where r is -inf), 0 after them;
/// returns their sum.
AXLE_SIMD_CLONES float exp_sum(float* r, float mx, int64_t nk) {
  const int64_t live = live_cols(nk);
  for (int64_t j = 0; j < live; ++j) r[j] = fexp(r[j] - mx);
  std::fill(r + live, r + kBk, 0.0f);
  F16 s = {};
  for (int64_t j = 0; j < live; j += 16) s += load16(r + j);
  return hsum16(s);
}

struct GemmEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  size_t scratch = 0;
};

/// c's elements set to 0 (any strides; c's last dim is its dense one or of size 1).
void zero(const Mat& c) {
  const size_t nd = c.dims.size();
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < nd; ++d) outer *= c.dims[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0, r = o;
    for (size_t d = nd - 1; d-- > 0;) {
      off += (r % c.dims[d]) * c.strides[d];
      r /= c.dims[d];
    }
    float* p = reinterpret_cast<float*>(c.p);  // c is a float32 accumulator
    for (int64_t j = 0; j < c.dims[nd - 1]; ++j) p[off + j * c.strides[nd - 1]] = 0.0f;
  }
}

/// c = a @ b, or c += a @ b with `accumulate` (oneDNN's sum post-op), over the batch dims. An
/// empty product (head size 0) adds nothing; an empty c is left alone.
void gemm(const Mat& a, const Mat& b, const Mat& c, bool accumulate) {
  if (shape_numel(c.dims) == 0) return;
  if (a.dims.back() == 0) {
    if (!accumulate) zero(c);
    return;
  }
  dg::Key key("sdpa-gemm");
  key << a.dims << a.strides << b.dims << b.strides << c.dims << c.strides << int64_t(accumulate)
      << int64_t(a.dt) << int64_t(b.dt) << int64_t(c.dt);
  auto e = dg::cached<GemmEntry>(key, [&] {
    auto e = std::make_shared<GemmEntry>();
    e->a = dg::strided_desc(a.dims, a.strides, a.dt);
    e->b = dg::strided_desc(b.dims, b.strides, b.dt);
    e->c = dg::strided_desc(c.dims, c.strides, c.dt);
    dnnl::primitive_attr attr = dg::default_attr();
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, dg::engine());
    e->prim = dnnl::matmul(pd);
    e->scratch = pd.scratchpad_desc().get_size();
    return e;
  });
  dg::Exec ex;
  ex.arg(DNNL_ARG_SRC, dnnl::memory(e->a, dg::engine(), a.p));
  ex.arg(DNNL_ARG_WEIGHTS, dnnl::memory(e->b, dg::engine(), b.p));
  ex.arg(DNNL_ARG_DST, dnnl::memory(e->c, dg::engine(), c.p));
  ex.run(e->prim, e->scratch);
}

/// The dropout rule: multipliers (0 or 1 / (1 - p)) for keys j0..j0+n-1 of row (b, i).
struct Dropout {
  bool on = false;
  float p = 0, inv_keep = 1;
  Generator gen{0};
  uint64_t offset = 0;
  int64_t S = 0;
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
  d.S = g.S;
  d.base = contiguous_as(in.at(rng_at + 1), kInt64);
  return d;
}

/// Batch entries per chunk: a multiple of g.inner whose score blocks fit the scratch budget.
int64_t chunk_of(const Geom& g, int64_t blocks) {
  const int64_t per = g.inner * g.bq * kBk * blocks;
  const int64_t outer = std::max<int64_t>(1, std::min<int64_t>(g.batch[0], kScratchFloats / std::max<int64_t>(per, 1)));
  return outer * g.inner;
}

/// Runs body(b0, c, scratch) over the batch entries [0, N) in chunks of `chunk` (c <= chunk of
/// them from b0), scratch made by make() once per thread. With two chunks or more and more
/// than one thread the chunks split over an OpenMP team, each thread running its chunks'
/// products and row loops alone (oneDNN runs one thread inside a team; rows_loop too), so a
/// chunk's half dozen products and loops cost no fork and join each (the gpt's attention,
/// forward and backward at 2 threads, alternating: best of 5 runs 9.6 ms against 11.0 in
/// float32, 9.6 against 11.0 in bf16); one chunk runs in turn, its products and loops taking
/// the team. An exception in a chunk is rethrown here, after the team.
template <class Make, class Body>
void over_chunks(int64_t N, int64_t chunk, Make&& make, Body&& body) {
  const int64_t nc = (N + chunk - 1) / chunk;
  if (nc < 2 || omp_get_max_threads() < 2 || omp_in_parallel()) {
    auto scratch = make();
    for (int64_t b0 = 0; b0 < N; b0 += chunk) body(b0, std::min(chunk, N - b0), scratch);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel
  {
    auto scratch = make();
#pragma omp for schedule(static)
    for (int64_t t = 0; t < nc; ++t) {
      try {
        body(t * chunk, std::min(chunk, N - t * chunk), scratch);
      } catch (...) {
#pragma omp critical(axle_attention_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

/// The first masked key of query row i (causal: keys after i; n: none masked).
inline int64_t first_masked(bool causal, int64_t i, int64_t j0, int64_t n) {
  return causal ? std::clamp<int64_t>(i + 1 - j0, 0, n) : n;
}

/// Row r (kBk wide) of scores becomes P = exp(r * scale - lse), 0 from column nk on (values
/// by argument: the loop vectorises without alias checks against captured references).
AXLE_SIMD_CLONES void probabilities(float* r, float scale, float lse, int64_t nk) {
  for (int64_t j = 0; j < nk; ++j) r[j] = fexp(r[j] * scale - lse);  // <= 0 up to rounding
  std::fill(r + nk, r + kBk, 0.0f);
}

/// dS = scale * P * (dP - D) over the first nk columns of a row, 0 after.
AXLE_SIMD_CLONES void score_grads(float* dp, const float* p, float scale, float d, int64_t nk) {
  for (int64_t j = 0; j < nk; ++j) dp[j] = scale * p[j] * (dp[j] - d);
  std::fill(dp + nk, dp + kBk, 0.0f);
}

/// The scale the kernels apply to q k^T: with a head size of 0 the scores are exactly 0, as
/// PyTorch's (which scales q and k before their product), whatever 1 / sqrt(0) would make them.
float score_scale(const Geom& g, double scale) { return g.E == 0 ? 1.0f : float(scale); }

/// y = r rounded to bf16, one kBk-wide row (a clone as the row loops that wrote r: its loads
/// have their stores' width, as the note on F16 explains).
AXLE_SIMD_CLONES void round_block_row(const float* r, bfloat16* y) {
  for (int64_t j = 0; j < kBk; ++j) y[j].bits = bfloat16::round_bits(r[j]);
}

/// Per chunk of the batch, the rows of a float32 score block rounded to bf16 for the products
/// (empty on the float32 path, whose products read the float32 blocks).
struct Blocks16 {
  std::vector<bfloat16> buf;
  int64_t bq;
  Blocks16(DType dt, const Geom& g, int64_t chunk) : bq(g.bq) {
    if (dt == kBFloat16) buf.resize(size_t(chunk * bq * kBk));
  }
  bool on() const { return !buf.empty(); }
  /// Row (bl, ii) of a float32 block rounded into this one.
  void round_row(const float* r, int64_t bl, int64_t ii) {
    if (on()) round_block_row(r, buf.data() + (bl * bq + ii) * kBk);
  }
  /// The block for the products: this one (bf16) if on, else the float32 one at f.
  Mat mat(const Geom& g, float* f, int64_t c, int64_t m, int64_t n, bool transposed = false) {
    return on() ? block(g, buf.data(), c, m, n, transposed) : block(g, f, c, m, n, transposed);
  }
};

// ------------------------------------------------------------------ forward
/// q, k, v of one dtype (float32 or bf16); out a float32 accumulator (any strides, the last dim
/// dense: interleaved_output) and lse (dense [N, L]).
void fwd_impl(const Geom& g, const Operand& q, const Operand& k, const Operand& v, const Operand& out, float* lse,
              float scale, bool causal, const Dropout& drop) {
  const int64_t L = g.L, S = g.S, Ev = g.Ev, E = g.E, bq = g.bq;
  auto row_of = [&g](const Operand& o, int64_t b, int64_t i) {
    return o.f32(batch_offset(g, o.strides, b) + i * o.strides[o.strides.size() - 2]);
  };
  struct Scratch {
    std::vector<float> sbuf, mx, sum;
    Blocks16 p16;
  };
  const int64_t chunk = chunk_of(g, 1);
  auto make = [&] {
    return Scratch{std::vector<float>(size_t(chunk * bq * kBk)), std::vector<float>(size_t(chunk * bq)),
                   std::vector<float>(size_t(chunk * bq)), Blocks16(q.dt, g, chunk)};
  };
  over_chunks(g.N, chunk, make, [&](int64_t b0, int64_t c, Scratch& sc) {
    std::vector<float>&sbuf = sc.sbuf, &mx = sc.mx, &sum = sc.sum;
    Blocks16& p16 = sc.p16;
    for (int64_t i0 = 0; i0 < L; i0 += bq) {
      const int64_t m = std::min(bq, L - i0);
      const Mat qm = mat_of(g, q, b0, c, i0, m, E);
      const Mat om = mat_of(g, out, b0, c, i0, m, Ev);
      std::fill(mx.begin(), mx.end(), kNegInf);
      std::fill(sum.begin(), sum.end(), 0.0f);
      const int64_t jend = causal ? std::min(S, i0 + m) : S;
      for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
        const int64_t n = std::min(kBk, jend - j0);
        gemm(qm, transposed(mat_of(g, k, b0, c, j0, n, E)), block(g, sbuf.data(), c, m, n), false);
        const bool first = j0 == 0;
        rows_loop(c * m, c * m * (kBk + Ev) * 8, [&](int64_t t) {
          const int64_t bl = t / m, ii = t % m, i = i0 + ii;
          float* sr = sbuf.data() + (bl * bq + ii) * kBk;
          const int64_t nk = first_masked(causal, i, j0, n);
          const float mb = scale_mask_max(sr, scale, nk);
          const float mnew = std::max(mx[size_t(t)], mb);
          if (mnew == kNegInf) {  // every key so far masked
            std::fill(sr, sr + kBk, 0.0f);
            p16.round_row(sr, bl, ii);
            return;
          }
          const float rs = exp_sum(sr, mnew, nk);
          if (first) {  // nothing to rescale: the product after this loop sets the output
            sum[size_t(t)] = rs;
          } else {
            const float alpha = fexp(mx[size_t(t)] - mnew);
            sum[size_t(t)] = sum[size_t(t)] * alpha + rs;
            float* orow = row_of(out, b0 + bl, i);
            for (int64_t e = 0; e < Ev; ++e) orow[e] *= alpha;
          }
          mx[size_t(t)] = mnew;
          if (drop.on) {
            float mult[kBk];
            drop.row(b0 + bl, i, j0, n, mult);
            for (int64_t jj = 0; jj < n; ++jj) sr[jj] *= mult[jj];
          }
          p16.round_row(sr, bl, ii);
        });
        gemm(p16.mat(g, sbuf.data(), c, m, n), mat_of(g, v, b0, c, j0, n, Ev), om, !first);  // the first block sets out
      }
      rows_loop(c * m, c * m * Ev, [&](int64_t t) {
        const int64_t bl = t / m, i = i0 + t % m;
        float* orow = row_of(out, b0 + bl, i);
        const float l = sum[size_t(t)];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int64_t e = 0; e < Ev; ++e) orow[e] *= inv;
        lse[(b0 + bl) * L + i] = l > 0.0f ? mx[size_t(t)] + std::log(l) : kNegInf;
      });
    }
  });
}

/// The dtype the kernels compute a call in: bf16 operands stay bf16 (the bf16 wrapper hands
/// them over only on the Native path), anything else is float32.
DType compute_dtype(const Tensor& x) { return x.dtype() == kBFloat16 ? kBFloat16 : kFloat32; }

Tensors sdpa_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& meta) {
  const attr::ScaledDotProductAttention at = attr::ScaledDotProductAttention::of(a);
  const DType dt = compute_dtype(in[0]);
  const Geom g = geom_of(in[0], in[2], dt);
  // float32: the output accumulates in place; bf16: in a float32 buffer, rounded at the end
  const Operand acc = interleaved_outputs(meta[0].shape, 1, g.S == 0)[0];
  Tensor lse = make_tensor(meta[1].shape, kFloat32);
  auto result = [&] {
    return Tensors{dt == kFloat32 ? acc.t : outputs_of({acc}, meta[0].shape, dt)[0].t, lse};
  };
  if (lse.numel() == 0) return result();
  if (g.S == 0) {  // no keys: every row attends to nothing (acc zeroed)
    std::fill(lse.data<float>(), lse.data<float>() + lse.numel(), kNegInf);
    return result();
  }
  const Dropout drop = dropout_of(in, 3, at.dropout_p, g);
  fwd_impl(g, operand_of(in[0], dt), operand_of(in[1], dt), operand_of(in[2], dt), acc, lse.data<float>(),
           score_scale(g, at.scale), at.is_causal, drop);
  return result();
}

// ------------------------------------------------------------------ backward
/// D = rowsum(dO * O) for every batch entry's L rows (T: float or bfloat16).
template <class T>
void row_dots(const Geom& g, const Operand& go, const Operand& o, float* D) {
  const int64_t L = g.L, Ev = g.Ev;
  const int64_t rs_g = go.strides[go.strides.size() - 2], rs_o = o.strides[o.strides.size() - 2];
  auto wide = [](T x) {
    if constexpr (std::is_same_v<T, bfloat16>) return bfloat16::to_float(x.bits);
    else return x;
  };
  rows_loop(g.N, g.N * L * Ev, [&](int64_t b) {
    const T* gb = reinterpret_cast<const T*>(go.at(batch_offset(g, go.strides, b)));
    const T* ob = reinterpret_cast<const T*>(o.at(batch_offset(g, o.strides, b)));
    for (int64_t i = 0; i < L; ++i) {
      float d = 0.0f;
      for (int64_t e = 0; e < Ev; ++e) d += wide(gb[i * rs_g + e]) * wide(ob[i * rs_o + e]);
      D[size_t(b * L + i)] = d;
    }
  });
}

/// go, q, k, v, o of one dtype (float32 or bf16); dq, dk, dv float32 accumulators, written
/// whole (the first product into each block sets it).
void bwd_impl(const Geom& g, const Operand& go, const Operand& q, const Operand& k, const Operand& v,
              const Operand& o, const float* lse, const Operand& dq, const Operand& dk, const Operand& dv, float scale,
              bool causal, const Dropout& drop) {
  const int64_t L = g.L, S = g.S, E = g.E, Ev = g.Ev, bq = g.bq;
  std::vector<float> D(size_t(g.N * L));
  if (go.dt == kBFloat16) row_dots<bfloat16>(g, go, o, D.data());
  else row_dots<float>(g, go, o, D.data());
  struct Scratch {
    std::vector<float> pbuf, dbuf;
    Blocks16 p16, d16;
  };
  const int64_t chunk = chunk_of(g, 2);
  auto make = [&] {
    return Scratch{std::vector<float>(size_t(chunk * bq * kBk)), std::vector<float>(size_t(chunk * bq * kBk)),
                   Blocks16(q.dt, g, chunk), Blocks16(q.dt, g, chunk)};
  };
  const int64_t ilast = ((L - 1) / bq) * bq;  // the last query block's first row (L > 0)
  over_chunks(g.N, chunk, make, [&](int64_t b0, int64_t c, Scratch& sc) {
    std::vector<float>&pbuf = sc.pbuf, &dbuf = sc.dbuf;
    Blocks16 &p16 = sc.p16, &d16 = sc.d16;
    for (int64_t j0 = 0; j0 < S; j0 += kBk) {
      const int64_t n = std::min(kBk, S - j0);
      // Query blocks from the last one down: a causal block's rows see keys j0 .. its last row
      // only (nb of them), the products take just those, and the last block sees the most, so
      // its products set dK, dV over every key some query sees (`seen`); earlier blocks add to
      // a prefix. Blocks wholly above the diagonal are skipped.
      const int64_t istart = causal ? (j0 / bq) * bq : 0;
      int64_t seen = 0;
      for (int64_t i0 = ilast; i0 >= istart; i0 -= bq) {
        const int64_t m = std::min(bq, L - i0);
        if (causal && i0 + m <= j0) continue;
        const int64_t nb = causal ? std::min(n, i0 + m - j0) : n;
        const bool fresh = seen == 0;
        const Mat qi = mat_of(g, q, b0, c, i0, m, E);
        const Mat gi = mat_of(g, go, b0, c, i0, m, Ev);
        const Mat kj = mat_of(g, k, b0, c, j0, nb, E);
        gemm(qi, transposed(kj), block(g, pbuf.data(), c, m, nb), false);                              // S = Q K^T
        gemm(gi, transposed(mat_of(g, v, b0, c, j0, nb, Ev)), block(g, dbuf.data(), c, m, nb), false);  // dP = dO V^T
        rows_loop(c * m, c * m * kBk * 8, [&](int64_t t) {
          const int64_t bl = t / m, ii = t % m, i = i0 + ii;
          float* pr = pbuf.data() + (bl * bq + ii) * kBk;
          float* dr = dbuf.data() + (bl * bq + ii) * kBk;
          const float l = lse[(b0 + bl) * L + i];
          const int64_t nk = l == kNegInf ? 0 : first_masked(causal, i, j0, nb);
          const float di = D[size_t((b0 + bl) * L + i)];
          probabilities(pr, scale, l == kNegInf ? 0.0f : l, nk);  // P = exp(s - lse)
          // through the dropout: dS = P * (dP * mult - D); P becomes the dropped weights for dV
          if (drop.on) {
            float mult[kBk];
            drop.row(b0 + bl, i, j0, nb, mult);
            for (int64_t jj = 0; jj < nb; ++jj) {
              dr[jj] = scale * pr[jj] * (dr[jj] * mult[jj] - di);
              pr[jj] *= mult[jj];
            }
          } else {
            score_grads(dr, pr, scale, di, nk);
          }
          p16.round_row(pr, bl, ii);
          d16.round_row(dr, bl, ii);
        });
        // dV += P^T dO, dQ += dS K (the scale folded into dS), dK += dS^T Q; dQ set by key block 0
        // (which every query block sees), dK and dV by this key block's first query block
        gemm(p16.mat(g, pbuf.data(), c, m, nb, true), gi, mat_of(g, dv, b0, c, j0, nb, Ev), !fresh);
        gemm(d16.mat(g, dbuf.data(), c, m, nb), kj, mat_of(g, dq, b0, c, i0, m, E), j0 > 0);
        gemm(d16.mat(g, dbuf.data(), c, m, nb, true), qi, mat_of(g, dk, b0, c, j0, nb, E), !fresh);
        if (fresh) seen = nb;
      }
      if (seen < n) {  // keys no query sees (causal, S > L): no gradient
        zero(mat_of(g, dk, b0, c, j0 + seen, n - seen, E));
        zero(mat_of(g, dv, b0, c, j0 + seen, n - seen, Ev));
      }
    }
  });
}

Tensors sdpa_bwd_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& meta) {
  const attr::ScaledDotProductAttentionBackward at = attr::ScaledDotProductAttentionBackward::of(a);
  const DType dt = compute_dtype(in[0]);
  const Geom g = geom_of(in[1], in[3], dt);
  // float32 accumulators (zeroed only when there is nothing to propagate: bwd_impl writes them
  // whole). In float32, dq, dk, dv of one shape accumulate in the packed outputs themselves
  // ([B, L, 3, H, E]: interleaved_outputs); otherwise in one gapless buffer each, then rounded
  // (bf16) or copied into the outputs' layout: in bf16, oneDNN takes a product into the packed
  // layout (rows 3 H E apart) on its plain gemm (dV's [4, 128, 128] x [4, 128, 32], one
  // thread: 0.023-0.027 ms, against 0.011 on AMX brgemm into its own buffer).
  const bool none = g.N * g.L == 0 || g.S == 0;
  const bool same = meta[0].shape == meta[1].shape && meta[1].shape == meta[2].shape;
  const bool packed = same && dt == kFloat32;
  std::vector<Operand> d;
  if (packed) {
    d = interleaved_outputs(meta[0].shape, 3, none);
  } else {
    for (size_t k = 0; k < 3; ++k) d.push_back(interleaved_outputs(meta[k].shape, 1, none)[0]);
  }
  auto result = [&] {
    if (packed) return Tensors{d[0].t, d[1].t, d[2].t};
    if (same) {
      const std::vector<Operand> r = outputs_of(d, meta[0].shape, dt);
      return Tensors{r[0].t, r[1].t, r[2].t};
    }
    if (dt == kFloat32) return Tensors{d[0].t, d[1].t, d[2].t};
    Tensors r;
    for (size_t k = 0; k < 3; ++k) r.push_back(outputs_of({d[k]}, meta[k].shape, dt)[0].t);
    return r;
  };
  if (none) return result();  // nothing to propagate
  const Tensor lse = contiguous_as(in[5], kFloat32);
  const Dropout drop = dropout_of(in, 6, at.dropout_p, g);
  bwd_impl(g, operand_of(in[0], dt), operand_of(in[1], dt), operand_of(in[2], dt), operand_of(in[3], dt),
           operand_of(in[4], dt), lse.data<float>(), d[0], d[1], d[2], score_scale(g, at.scale), at.is_causal, drop);
  return result();
}

}  // namespace

void register_cpu_attention_kernels() {
  ops::register_kernel("cpu", OpKind::ScaledDotProductAttention, sdpa_cpu);
  ops::register_kernel("cpu", OpKind::ScaledDotProductAttentionBackward, sdpa_bwd_cpu);
}

}  // namespace axle::cpu
