// FusedElementwise: a chain of elementwise ops run in one pass over memory.
// The compiler's fusion pass builds it; the kernel walks the data in tiles that
// stay in L1, running each op's vectorized loop on the tile, so intermediate
// values never touch main memory.
//
// Program (Attrs::ints):
//   ndim, dims...                           iteration shape S
//   n_in, (dtype, is_scalar) * n_in         inputs: shape S, or one element (broadcast)
//   n_ops, per op: kind, out_dtype, compute_dtype, n_operands, refs...
//                                           ref >= 0: op index; ref < 0: input -(ref+1)
//   n_out, op index * n_out                 which op results are outputs
//   [n_donate, (out k, input j) * n_donate] optional, added when lowering: output k may be
//                                           written over input j if nobody else holds it
#include <omp.h>

#include "backend/cpu/loops.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

struct FOp {
  OpKind kind;
  DType out, compute;
  std::vector<int64_t> refs;
};
struct FProgram {
  Shape shape;
  std::vector<std::pair<DType, bool>> inputs;
  std::vector<FOp> ops;
  std::vector<int64_t> outputs;
  std::vector<std::pair<int64_t, int64_t>> donate;
};

FProgram parse(const Attrs& a) {
  const auto& v = a.ints;
  size_t i = 0;
  auto next = [&]() -> int64_t {
    AXLE_CHECK(i < v.size(), "[fused_elementwise] malformed program");
    return v[i++];
  };
  FProgram p;
  int64_t nd = next();
  for (int64_t d = 0; d < nd; ++d) p.shape.push_back(next());
  int64_t nin = next();
  for (int64_t k = 0; k < nin; ++k) {
    DType t = DType(next());
    bool scalar = next() != 0;
    p.inputs.push_back({t, scalar});
  }
  int64_t nops = next();
  for (int64_t k = 0; k < nops; ++k) {
    FOp op;
    op.kind = OpKind(next());
    op.out = DType(next());
    op.compute = DType(next());
    int64_t nr = next();
    for (int64_t r = 0; r < nr; ++r) op.refs.push_back(next());
    p.ops.push_back(std::move(op));
  }
  int64_t nout = next();
  for (int64_t k = 0; k < nout; ++k) p.outputs.push_back(next());
  if (i < v.size()) {
    int64_t nd2 = next();
    for (int64_t k = 0; k < nd2; ++k) {
      int64_t o = next(), in = next();
      p.donate.push_back({o, in});
    }
  }
  return p;
}

std::vector<Meta> fused_infer(const Tensors& in, const Attrs& a) {
  FProgram p = parse(a);
  AXLE_CHECK(in.size() == p.inputs.size(), "[fused_elementwise] expected ", p.inputs.size(), " inputs, got ",
             in.size());
  std::vector<Meta> out;
  for (int64_t o : p.outputs) out.push_back({p.shape, p.ops[size_t(o)].out});
  return out;
}

constexpr int64_t kTile = 1024;

Tensors fused_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const FProgram p = parse(a);
  const int64_t numel = shape_numel(p.shape);
  // Walk memory in order: when every full-size input shares one dense layout (e.g.
  // channels-last activations), use it as is and lay the outputs out the same way.
  const Tensor* layout = nullptr;
  bool same_layout = true;
  for (size_t k = 0; k < in.size(); ++k) {
    const bool scalar = p.inputs[k].second;
    AXLE_CHECK(scalar ? in[k].numel() == 1 : in[k].numel() == numel, "[fused_elementwise] input ", k,
               " has the wrong size");
    if (scalar) continue;
    if (!layout) layout = &in[k];
    else same_layout = same_layout && in[k].strides() == layout->strides();
  }
  same_layout = same_layout && layout && cpu::is_dense(*layout);
  Tensors outs(p.outputs.size());
  // Donation: write an output over an input that only this call holds (the input's
  // last use, e.g. a parameter being updated), in its layout. Candidates come in
  // order; each output and each input is used once.
  std::vector<bool> taken(in.size(), false);
  for (auto [k, j] : p.donate) {
    if (outs[size_t(k)].defined() || taken[size_t(j)]) continue;
    const Tensor& t = in[size_t(j)];
    const bool usable = same_layout ? t.strides() == layout->strides() : t.is_contiguous();
    if (usable && t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1) {
      outs[size_t(k)] = t;
      taken[size_t(j)] = true;
    }
  }
  Tensors inputs;
  for (size_t k = 0; k < in.size(); ++k) {
    const bool dense_ok = same_layout && !p.inputs[k].second;
    inputs.push_back(dense_ok ? in[k] : cpu::contiguous_as(in[k], p.inputs[k].first));
  }
  std::vector<int> out_of(p.ops.size(), -1);
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    if (!outs[k].defined())
      outs[k] = same_layout ? cpu::empty_like_dense(m[k].shape, m[k].dtype, {layout}) : make_tensor(m[k].shape, m[k].dtype);
    out_of[size_t(p.outputs[k])] = int(k);
  }
  const int64_t ntiles = (numel + kTile - 1) / kTile;
  const size_t nops = p.ops.size();
#pragma omp parallel if (numel >= 4 * kTile)
  {
    // Per-thread tile scratch, kept across calls (no allocation or zero-fill per call).
    thread_local std::vector<char> scratch;
    if (scratch.size() < nops * size_t(kTile) * 8) scratch.resize(nops * size_t(kTile) * 8);
    std::vector<char*> base(nops);
    std::vector<int64_t> isz(nops);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t start = t * kTile, n = std::min(kTile, numel - start);
      for (size_t i = 0; i < nops; ++i) {
        const FOp& op = p.ops[i];
        isz[i] = int64_t(itemsize(op.out));
        base[i] = out_of[i] >= 0 ? outs[size_t(out_of[i])].impl()->data() + start * isz[i]
                                 : scratch.data() + i * size_t(kTile) * 8;
        char* ptrs[4] = {base[i], nullptr, nullptr, nullptr};
        int64_t strides[4] = {isz[i], 0, 0, 0};
        for (size_t r = 0; r < op.refs.size(); ++r) {
          int64_t ref = op.refs[r];
          if (ref >= 0) {
            ptrs[r + 1] = base[size_t(ref)];
            strides[r + 1] = isz[size_t(ref)];
          } else {
            const size_t k = size_t(-(ref + 1));
            const int64_t s = int64_t(itemsize(p.inputs[k].first));
            const bool scalar = p.inputs[k].second;
            ptrs[r + 1] = inputs[k].impl()->data() + (scalar ? 0 : start * s);
            strides[r + 1] = scalar ? 0 : s;
          }
        }
        if (op.kind == OpKind::Cast) {
          DType from = op.refs[0] >= 0 ? p.ops[size_t(op.refs[0])].out : p.inputs[size_t(-(op.refs[0] + 1))].first;
          cpu::cast_raw(from, op.out, ptrs, strides, n);
        } else {
          elementwise_raw(op.kind, op.compute, ptrs, strides, n);
        }
      }
    }
  }
  return outs;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> fused_donation_candidates(const Attrs& a) {
  const FProgram p = parse(a);
  // Within a tile ops run in order: input j may take output k's writes only if no op
  // after k's producer still reads input j.
  std::vector<int64_t> last_read(p.inputs.size(), -1);
  for (size_t i = 0; i < p.ops.size(); ++i)
    for (int64_t r : p.ops[i].refs)
      if (r < 0) last_read[size_t(-(r + 1))] = int64_t(i);
  // Every safe pair: whether an input's buffer is free to take is only known at run time.
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const int64_t producer = p.outputs[k];
    for (size_t j = 0; j < p.inputs.size(); ++j)
      if (!p.inputs[j].second && p.inputs[j].first == p.ops[size_t(producer)].out && last_read[j] <= producer)
        out.push_back({int64_t(k), int64_t(j)});
  }
  return out;
}

AXLE_REGISTER_OP(FusedElementwise, {.infer = fused_infer, .cpu = fused_cpu, .vjp = nullptr});

}  // namespace axle::ops
