// FusedElementwise and FusedSum kernels on cpu (programs described in src/ops/fused.h).
// The kernel walks the data in tiles that stay in L1, running each op's vectorized loop on
// the tile, so intermediate values never touch main memory. FusedSum adds each tile's values
// of its summed op into float64 partials, one per fixed group of tiles (so the result does
// not depend on the thread count), and never writes them out.
#include <omp.h>

#include <algorithm>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/fused.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr int64_t kTile = 1024;

// Inputs and outputs of one run of a tile program, laid out for the tile walk.
struct Prepared {
  Tensors inputs, outs;       ///< outs: the first `full` outputs (shape S)
  std::vector<int> out_of;    ///< op index -> position in outs, or -1 (tile scratch)
  const Tensor* layout = nullptr;
  bool same_layout = false;   ///< true: memory is walked in `layout`'s dense order
};

// `full` = how many of p.outputs are written out at full shape (FusedSum keeps its last one back).
Prepared prepare(const FProgram& p, const Tensors& in, const std::vector<Meta>& m, size_t full, const char* op) {
  const int64_t numel = shape_numel(p.shape);
  Prepared r;
  // Walk memory in order: when every full-size input shares one dense layout (e.g.
  // channels-last activations), use it as is and lay the outputs out the same way.
  bool same_layout = true;
  for (size_t k = 0; k < in.size(); ++k) {
    const bool scalar = p.inputs[k].second;
    AXLE_CHECK(scalar ? in[k].numel() == 1 : in[k].numel() == numel, "[", op, "] input ", k, " has the wrong size");
    if (scalar) continue;
    if (!r.layout) r.layout = &in[k];
    else same_layout = same_layout && in[k].strides() == r.layout->strides();
  }
  r.same_layout = same_layout && r.layout && cpu::is_dense(*r.layout);
  r.outs.resize(full);
  // Donation: write an output over an input that only this call holds (the input's
  // last use, e.g. a parameter being updated), in its layout. Candidates come in
  // order; each output and each input is used once.
  std::vector<bool> taken(in.size(), false);
  for (auto [k, j] : p.donate) {
    if (size_t(k) >= full || r.outs[size_t(k)].defined() || taken[size_t(j)]) continue;
    const Tensor& t = in[size_t(j)];
    const bool usable = r.same_layout ? t.strides() == r.layout->strides() : t.is_contiguous();
    if (usable && t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1) {
      r.outs[size_t(k)] = t;
      taken[size_t(j)] = true;
    }
  }
  for (size_t k = 0; k < in.size(); ++k) {
    const bool dense_ok = r.same_layout && !p.inputs[k].second;
    r.inputs.push_back(dense_ok ? in[k] : cpu::contiguous_as(in[k], p.inputs[k].first));
  }
  r.out_of.assign(p.ops.size(), -1);
  for (size_t k = 0; k < full; ++k) {
    if (!r.outs[k].defined())
      r.outs[k] = r.same_layout ? cpu::empty_like_dense(m[k].shape, m[k].dtype, {r.layout})
                                : make_tensor(m[k].shape, m[k].dtype);
    r.out_of[size_t(p.outputs[k])] = int(k);
  }
  return r;
}

// Runs the program over S in tiles of kTile elements (memory order), in parallel when S is
// large. The tiles form `groups` runs of consecutive tiles (0: one per tile), each run by one
// thread in order. After each tile, visit(group, start, n, base) may read every op's values
// for the tile: base[i] points at op i's n values.
template <class Visit>
void run_tiles(const FProgram& p, const Prepared& r, int64_t groups, Visit&& visit) {
  const int64_t numel = shape_numel(p.shape);
  const int64_t ntiles = (numel + kTile - 1) / kTile;
  if (groups <= 0 || groups > ntiles) groups = ntiles;
  const size_t nops = p.ops.size();
  // Runs tile t of `group`; base/isz are the running thread's per-op pointers and item sizes.
  auto tile = [&](int64_t group, int64_t t, char* scratch, char** base, int64_t* isz) {
    const int64_t start = t * kTile, n = std::min(kTile, numel - start);
    for (size_t i = 0; i < nops; ++i) {
      const FOp& op = p.ops[i];
      isz[i] = int64_t(itemsize(op.out));
      base[i] = r.out_of[i] >= 0 ? r.outs[size_t(r.out_of[i])].impl()->data() + start * isz[i]
                                 : scratch + i * size_t(kTile) * 8;
      char* ptrs[4] = {base[i], nullptr, nullptr, nullptr};
      int64_t strides[4] = {isz[i], 0, 0, 0};
      for (size_t k = 0; k < op.refs.size(); ++k) {
        int64_t ref = op.refs[k];
        if (ref >= 0) {
          ptrs[k + 1] = base[size_t(ref)];
          strides[k + 1] = isz[size_t(ref)];
        } else {
          const size_t j = size_t(-(ref + 1));
          const int64_t s = int64_t(itemsize(p.inputs[j].first));
          const bool scalar = p.inputs[j].second;
          ptrs[k + 1] = r.inputs[j].impl()->data() + (scalar ? 0 : start * s);
          strides[k + 1] = scalar ? 0 : s;
        }
      }
      if (op.kind == OpKind::Cast) {
        DType from = op.refs[0] >= 0 ? p.ops[size_t(op.refs[0])].out : p.inputs[size_t(-(op.refs[0] + 1))].first;
        cpu::cast_raw(from, op.out, ptrs, strides, n);
      } else {
        elementwise_raw(op.kind, op.compute, ptrs, strides, n, op.attrs);
      }
    }
    visit(group, start, n, base);
  };
  auto run_group = [&](int64_t g, char* scratch, char** base, int64_t* isz) {
    for (int64_t t = g * ntiles / groups, e = (g + 1) * ntiles / groups; t < e; ++t) tile(g, t, scratch, base, isz);
  };
  // Per-thread tile scratch, kept across calls (no allocation or zero-fill per call).
  auto scratch_of_thread = [&]() -> char* {
    thread_local std::vector<char> scratch;
    if (scratch.size() < nops * size_t(kTile) * 8) scratch.resize(nops * size_t(kTile) * 8);
    return scratch.data();
  };
  if (groups < 2 || !cpu::use_team(numel, 4 * kTile)) {
    std::vector<char*> base(nops);
    std::vector<int64_t> isz(nops);
    char* scratch = scratch_of_thread();
    for (int64_t g = 0; g < groups; ++g) run_group(g, scratch, base.data(), isz.data());
    return;
  }
#pragma omp parallel
  {
    std::vector<char*> base(nops);
    std::vector<int64_t> isz(nops);
    char* scratch = scratch_of_thread();
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) run_group(g, scratch, base.data(), isz.data());
  }
}

Tensors fused_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const FProgram p = parse(a);
  Prepared r = prepare(p, in, m, p.outputs.size(), "fused_elementwise");
  run_tiles(p, r, 0, [](int64_t, int64_t, int64_t, char* const*) {});
  return std::move(r.outs);
}

// Where each element of S, in the order the tiles walk memory, adds into the sum: S's dims
// in walk order (outermost first), and each one's stride in the (contiguous) result, 0 if summed.
struct SumWalk {
  std::vector<int64_t> size, out_stride;
};

SumWalk sum_walk(const Shape& shape, const std::vector<bool>& mask, const Tensor* layout) {
  const size_t nd = shape.size();
  std::vector<int64_t> out_stride(nd, 0);
  for (int64_t d = int64_t(nd) - 1, st = 1; d >= 0; --d)
    if (!mask[size_t(d)]) {
      out_stride[size_t(d)] = st;
      st *= shape[size_t(d)];
    }
  std::vector<size_t> order(nd);
  for (size_t d = 0; d < nd; ++d) order[d] = d;
  if (layout)  // dense in another order (channels-last): outermost = largest stride
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const int64_t sx = shape[x] == 1 ? 0 : layout->strides()[x], sy = shape[y] == 1 ? 0 : layout->strides()[y];
      return sx > sy;
    });
  SumWalk w;
  for (size_t d : order) {
    if (shape[d] == 1) continue;
    w.size.push_back(shape[d]);
    w.out_stride.push_back(out_stride[d]);
  }
  if (w.size.empty()) w.size = {1}, w.out_stride = {0};
  return w;
}

// Adds n values (elements start.. of the walk) into acc.
void accumulate(const float* v, int64_t start, int64_t n, const SumWalk& w, double* acc) {
  const size_t nd = w.size.size();
  int64_t c[16];
  int64_t off = 0;
  for (size_t k = nd, rem = size_t(start); k-- > 0;) {
    c[k] = int64_t(rem % size_t(w.size[k]));
    rem /= size_t(w.size[k]);
    off += c[k] * w.out_stride[k];
  }
  const int64_t inner = w.size[nd - 1], os = w.out_stride[nd - 1];
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min(inner - c[nd - 1], n - i);
    const float* x = v + i;
    if (os == 0) {  // a run along a summed dim: one result element
      double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t j = 0;
      for (; j + 8 <= len; j += 8)
        for (int l = 0; l < 8; ++l) lane[l] += double(x[j + l]);
      double s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
      for (; j < len; ++j) s += double(x[j]);
      acc[off] += s;
    } else if (os == 1) {  // a run along a kept dim that is innermost in the result too
      double* o = acc + off;
      for (int64_t j = 0; j < len; ++j) o[j] += double(x[j]);
    } else {
      double* o = acc + off;
      for (int64_t j = 0; j < len; ++j) o[j * os] += double(x[j]);
    }
    i += len;
    c[nd - 1] += len;
    off += len * os;
    if (c[nd - 1] < inner) continue;
    c[nd - 1] = 0;
    off -= inner * os;
    for (size_t k = nd - 1; k-- > 0;) {
      off += w.out_stride[k];
      if (++c[k] < w.size[k]) break;
      off -= w.size[k] * w.out_stride[k];
      c[k] = 0;
    }
  }
}

Tensors fused_sum_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const SumSpec s = parse_sum(a);
  const FProgram p = parse(a, s.program);
  AXLE_CHECK(s.mask.size() <= 16, "[fused_sum] expected at most 16 dims, got ", s.mask.size());
  Prepared r = prepare(p, in, m, p.outputs.size() - 1, "fused_sum");
  const SumWalk walk = sum_walk(p.shape, s.mask, r.same_layout ? r.layout : nullptr);
  Tensor out = make_tensor(m.back().shape, kFloat32);
  const size_t on = size_t(out.numel());
  const int64_t summed = p.outputs.back();
  // float64 partials, one per group of consecutive tiles, added in group order. The groups
  // depend on the shapes only, never on the thread count, so neither does the result: up to
  // 64 groups (enough to share among threads), fewer when the result is large (at most
  // max(S / 8, 2^16) partial values, so zeroing and combining them stays cheap).
  const int64_t numel = shape_numel(p.shape), ntiles = (numel + kTile - 1) / kTile;
  const int64_t cap = std::max<int64_t>(numel / 8, 1 << 16) / std::max<int64_t>(1, int64_t(on));
  const int64_t groups = std::max<int64_t>(1, std::min({ntiles, int64_t(64), cap}));
  std::vector<double> partial(size_t(groups) * on, 0.0);
  run_tiles(p, r, groups, [&](int64_t group, int64_t start, int64_t n, char* const* base) {
    accumulate(reinterpret_cast<const float*>(base[summed]), start, n, walk, partial.data() + size_t(group) * on);
  });
  float* o = out.data<float>();
  for (size_t j = 0; j < on; ++j) {
    double t = 0;
    for (int64_t k = 0; k < groups; ++k) t += partial[size_t(k) * on + j];
    o[j] = float(t);
  }
  Tensors outs = std::move(r.outs);
  outs.push_back(out);
  return outs;
}

}  // namespace

void register_cpu_fused_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::FusedElementwise, fused_cpu);
  reg(OpKind::FusedSum, fused_sum_cpu);
}

}  // namespace axle::cpu
