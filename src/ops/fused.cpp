// FusedElementwise: a chain of elementwise ops run in one pass over memory. The compiler's
// fusion pass builds it; the kernel (src/backend/cpu/kernels/fused.cpp) walks the data in
// tiles that stay in L1, so intermediate values never touch main memory.
//
// Program (Attrs::ints; written by FProgram::encode, read by parse, both below):
//   ndim, dims...                           iteration shape S
//   n_in, (dtype, is_scalar) * n_in         inputs: shape S, or one element (broadcast)
//   n_ops, per op: kind, out_dtype, compute_dtype, n_operands, refs...,
//                  n_ints, ints..., n_floats  the op's attributes: its floats are the next
//                                           n_floats of Attrs::floats
//                                           ref >= 0: op index; ref < 0: input -(ref+1)
//   n_out, op index * n_out                 which op results are outputs
//   [n_donate, (out k, input j) * n_donate] optional, added when lowering: output k may be
//                                           written over input j if nobody else holds it
//
// FusedSum: a sum whose input is such a chain and read by nothing else (e.g. sum(x * x),
// a loss's mean((a - b)^2)). Its ints are {keepdim, n, mask * n} (mask[d] = 1: dim d of S
// is summed) followed by a tile program whose last output is the summed op: each tile's
// values are added into float64 partials, one per fixed group of tiles (so the result does
// not depend on the thread count), and never written out. Its other outputs are written as usual.
#include <algorithm>

#include "ops/op.h"
#include "ops/fused.h"

namespace axle::ops {

// The tile program starting at ints[first].
FProgram parse(const Attrs& a, size_t first) {
  const auto& v = a.ints;
  size_t i = first, f = 0;
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
    int64_t ni = next();
    for (int64_t r = 0; r < ni; ++r) op.attrs.ints.push_back(next());
    int64_t nf = next();
    AXLE_CHECK(nf >= 0 && f + size_t(nf) <= a.floats.size(), "[fused_elementwise] malformed program");
    op.attrs.floats.assign(a.floats.begin() + std::ptrdiff_t(f), a.floats.begin() + std::ptrdiff_t(f + size_t(nf)));
    f += size_t(nf);
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

void FProgram::encode(Attrs& a) const {
  auto& v = a.ints;
  v.push_back(int64_t(shape.size()));
  v.insert(v.end(), shape.begin(), shape.end());
  v.push_back(int64_t(inputs.size()));
  for (auto [t, scalar] : inputs) v.insert(v.end(), {int64_t(t), scalar ? 1 : 0});
  v.push_back(int64_t(ops.size()));
  for (const FOp& op : ops) {
    v.insert(v.end(), {int64_t(op.kind), int64_t(op.out), int64_t(op.compute), int64_t(op.refs.size())});
    v.insert(v.end(), op.refs.begin(), op.refs.end());
    v.push_back(int64_t(op.attrs.ints.size()));
    v.insert(v.end(), op.attrs.ints.begin(), op.attrs.ints.end());
    v.push_back(int64_t(op.attrs.floats.size()));
    a.floats.insert(a.floats.end(), op.attrs.floats.begin(), op.attrs.floats.end());
  }
  v.push_back(int64_t(outputs.size()));
  v.insert(v.end(), outputs.begin(), outputs.end());
  if (donate.empty()) return;
  v.push_back(int64_t(donate.size()));
  for (auto [k, j] : donate) v.insert(v.end(), {k, j});
}

Attrs encode_sum(bool keepdim, const std::vector<bool>& mask, const FProgram& p) {
  Attrs a;
  a.ints = {keepdim ? 1 : 0, int64_t(mask.size())};
  for (bool m : mask) a.ints.push_back(m ? 1 : 0);
  p.encode(a);
  return a;
}

namespace {

std::vector<Meta> fused_infer(const Tensors& in, const Attrs& a) {
  FProgram p = parse(a);
  AXLE_CHECK(in.size() == p.inputs.size(), "[fused_elementwise] expected ", p.inputs.size(), " inputs, got ",
             in.size());
  std::vector<Meta> out;
  for (int64_t o : p.outputs) out.push_back({p.shape, p.ops[size_t(o)].out});
  return out;
}

}  // namespace

SumSpec parse_sum(const Attrs& a) {
  const auto& v = a.ints;
  AXLE_CHECK(v.size() >= 2 && v[1] >= 0 && size_t(v[1]) + 2 <= v.size(), "[fused_sum] malformed program");
  SumSpec s;
  s.keepdim = v[0] != 0;
  for (int64_t d = 0; d < v[1]; ++d) s.mask.push_back(v[size_t(2 + d)] != 0);
  s.program = size_t(2 + v[1]);
  return s;
}

namespace {

std::vector<Meta> fused_sum_infer(const Tensors& in, const Attrs& a) {
  const SumSpec s = parse_sum(a);
  const FProgram p = parse(a, s.program);
  AXLE_CHECK(in.size() == p.inputs.size(), "[fused_sum] expected ", p.inputs.size(), " inputs, got ", in.size());
  AXLE_CHECK(!p.outputs.empty() && s.mask.size() == p.shape.size(), "[fused_sum] malformed program");
  AXLE_CHECK(p.ops[size_t(p.outputs.back())].out == kFloat32, "[fused_sum] expected a float32 sum");
  std::vector<Meta> out;
  for (size_t k = 0; k + 1 < p.outputs.size(); ++k) out.push_back({p.shape, p.ops[size_t(p.outputs[k])].out});
  out.push_back({reduced_shape(p.shape, s.mask, s.keepdim), kFloat32});
  return out;
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

void register_fused_ops() {
  register_op(OpKind::FusedElementwise, {.infer = fused_infer, .vjp = nullptr});
  register_op(OpKind::FusedSum, {.infer = fused_sum_infer, .vjp = nullptr});
}

}  // namespace axle::ops
