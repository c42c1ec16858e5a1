// The fused scaled_dot_product_attention op (src/ops/attention.cpp, cpu kernels in
// src/backend/cpu/kernels/attention.cpp): values and gradients against the decomposed form
// (matmul, mask, softmax, matmul; kept here as the reference) on cpu, lazy `xla` and eager
// mode; odd lengths, several head sizes, broadcast batch dims; finite differences; dropout
// (deterministic, keep rate, the backward's mask is the forward's); the memory bound (no
// L x S buffer); its SPMD rule on a 4-device mesh; and its error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "compiler/program.h"
#include "lazy/graph.h"
#include "ops/op.h"
#include "spmd/rules.h"
#include "spmd/sharding.h"
#include "random.h"
#include "spmd_harness.h"
#include "test_util.h"

namespace {

using namespace axle;
using test::error_of;

using axle::test::rnd;  // tests/support/random.h

/// The decomposed form, written out here as the reference: softmax(q k^T * scale + mask) v,
/// with `keep` (0 or 1 / (1 - p), broadcastable to the scores) multiplying the weights.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                 const Tensor& keep = Tensor()) {
  Tensor s = mul(matmul(q, transpose(k, -2, -1)), scale);
  const int64_t L = s.shape()[size_t(s.dim() - 2)], S = s.shape().back();
  if (causal) {
    std::vector<float> m(size_t(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) m[size_t(i * S + j)] = j > i ? -1e30f : 0.0f;
    s = add(s, from_vector(m, {L, S}).to(q.device()));
  }
  Tensor p = softmax(s, -1);
  if (keep.defined()) p = mul(p, keep);
  return matmul(p, v);
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1e9;
  const std::vector<float> x = a.cpu().contiguous().to_vector<float>(), y = b.cpu().contiguous().to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(double(x[i]) - double(y[i])) / (1.0 + std::abs(double(y[i])));
    d = std::isnan(e) ? 1e9 : std::max(d, e);
  }
  return d;
}

struct Grads {
  Tensor out, dq, dk, dv;
};

/// out and the gradients of sum(out * w) on `dev` (fused, or the reference).
Grads run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w0, Device dev, bool fused, bool causal,
          const Tensor& keep = Tensor(), AttentionOptions o = {}) {
  Tensor q = q0.clone().to(dev), k = k0.clone().to(dev), v = v0.clone().to(dev);  // fresh leaves: no grad accumulates across runs
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  v.set_requires_grad(true);
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(q0.shape().back()));
  o.is_causal = causal;
  Tensor out = fused ? scaled_dot_product_attention(q, k, v, o)
                     : reference(q, k, v, causal, scale, keep.defined() ? keep.to(dev) : Tensor());
  sum(mul(out, w0.to(dev))).backward();
  return {out.cpu(), q.grad().cpu(), k.grad().cpu(), v.grad().cpu()};
}

void expect_same(const Grads& got, const Grads& want, double tol, const std::string& what) {
  EXPECT_LE(max_diff(got.out, want.out), tol) << what << ": out";
  EXPECT_LE(max_diff(got.dq, want.dq), tol) << what << ": dq";
  EXPECT_LE(max_diff(got.dk, want.dk), tol) << what << ": dk";
  EXPECT_LE(max_diff(got.dv, want.dv), tol) << what << ": dv";
}

struct Case {
  int64_t L, S, E, Ev;
};
// Odd lengths (1, 7, 33, 130: one tile, a partial tile, several tiles), head sizes 1, 8, 32, 80.
const std::vector<Case> kCases = {{1, 1, 1, 1},    {7, 7, 8, 8},     {33, 33, 32, 32}, {130, 130, 8, 16},
                                  {7, 33, 80, 8},  {33, 7, 32, 80},  {130, 33, 1, 32}, {1, 130, 8, 8},
                                  {33, 130, 80, 1}, {130, 7, 32, 32}};

void check_cases(Device dev, const std::string& where) {
  uint32_t seed = 1;
  for (const Case& c : kCases)
    for (bool causal : {false, true}) {
      const Shape qs{2, 2, c.L, c.E}, ks{2, 2, c.S, c.E}, vs{2, 2, c.S, c.Ev}, os{2, 2, c.L, c.Ev};
      const Tensor q = rnd(qs, seed++, -2, 2), k = rnd(ks, seed++, -2, 2), v = rnd(vs, seed++), w = rnd(os, seed++);
      const std::string what = where + " L=" + std::to_string(c.L) + " S=" + std::to_string(c.S) +
                               " E=" + std::to_string(c.E) + " Ev=" + std::to_string(c.Ev) + (causal ? " causal" : "");
      expect_same(run(q, k, v, w, dev, true, causal), run(q, k, v, w, kCPU, false, causal), 2e-5, what);
    }
}

TEST(Attention, FusedEqualsDecomposedOnCpu) { check_cases(kCPU, "cpu"); }

TEST(Attention, FusedEqualsDecomposedOnLazyXla) {
  check_cases(axle::device(), "xla");
  // The graph holds the fused op, not the decomposed one.
  const Tensor q = rnd({1, 5, 4}, 1).to(axle::device());
  Tensor out = scaled_dot_product_attention(q, q, q);
  const compiler::Program p = lazy::to_program(lazy::build_graph({lazy::lazy_of(out)->ir}));
  int fused = 0, softmaxes = 0;
  for (const compiler::PNode& n : p.nodes) {
    if (n.kind != compiler::NodeKind::Op) continue;
    fused += n.op == ops::OpKind::ScaledDotProductAttention;
    softmaxes += n.op == ops::OpKind::Softmax;
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(softmaxes, 0);
}

TEST(Attention, FusedEqualsDecomposedInEagerMode) {
  experimental::eager_mode(true);
  const Tensor q = rnd({2, 3, 33, 8}, 11), k = rnd({2, 3, 7, 8}, 12), v = rnd({2, 3, 7, 5}, 13), w = rnd({2, 3, 33, 5}, 14);
  for (bool causal : {false, true})
    expect_same(run(q, k, v, w, axle::device(), true, causal), run(q, k, v, w, kCPU, false, causal), 2e-5,
                causal ? "eager causal" : "eager");
  experimental::eager_mode(false);
}

// The outputs' layout: [B, L, H, E] (dq, dk, dv interleaved as [B, L, 3, H, E] when their shapes
// agree), so merging the heads back is a view, and a packed qkv projection's gradient (the cat
// of dq, dk, dv) needs no copy in a graph; a cat of slices a caller still holds stays a copy.
TEST(Attention, MergedHeadsAreAViewAndThePackedQkvGradientIsRight) {
  const int64_t B = 2, L = 5, H = 3, E = 4, C = H * E;
  const Tensor q = rnd({B, H, L, E}, 21), k = rnd({B, H, L, E}, 22), v = rnd({B, H, L, E}, 23);
  const Tensor out = scaled_dot_product_attention(q, k, v, {.is_causal = true});
  const Tensor merged = reshape(transpose(out, 1, 2), {B, L, C});
  EXPECT_EQ(merged.data_ptr(), out.data_ptr());  // no copy
  const Tensor want = reshape(transpose(reference(q, k, v, true, 1.0 / std::sqrt(double(E)), Tensor()), 1, 2), {B, L, C});
  EXPECT_LE(max_diff(merged, want), 2e-6);

  // The packed projection's pattern: heads sliced from one [B, L, 3C] tensor, gradient back into it.
  const Tensor x0 = rnd({B, L, 3 * C}, 24), w = rnd({B, L, C}, 25);
  auto packed_grad = [&](Device dev, bool fused) {
    Tensor x = x0.clone().to(dev);
    x.set_requires_grad(true);
    auto heads = [&](int64_t i) { return transpose(reshape(slice(x, 2, i * C, (i + 1) * C), {B, L, H, E}), 1, 2); };
    Tensor o = fused ? scaled_dot_product_attention(heads(0), heads(1), heads(2), {.is_causal = true})
                     : reference(heads(0), heads(1), heads(2), true, 1.0 / std::sqrt(double(E)), Tensor());
    sum(mul(reshape(transpose(o, 1, 2), {B, L, C}), w.to(dev))).backward();
    return x.grad().cpu();
  };
  const Tensor g_ref = packed_grad(kCPU, false);
  EXPECT_LE(max_diff(packed_grad(kCPU, true), g_ref), 2e-5);
  EXPECT_LE(max_diff(packed_grad(axle::device(), true), g_ref), 2e-5);

  // cat of a held tensor's adjacent slices: a new tensor, as always.
  const Tensor y = rnd({4, 6}, 26);
  const Tensor c = cat({slice(y, 1, 0, 3), slice(y, 1, 3, 6)}, 1);
  EXPECT_NE(c.data_ptr(), y.data_ptr());
  EXPECT_EQ(max_diff(c, y), 0.0);
}

TEST(Attention, BroadcastBatchDims) {
  // q [2, 3, L, E], k [3, S, E] (missing dim), v [2, 1, S, Ev] (size-1 dim): gradients summed back.
  const Tensor q = rnd({2, 3, 7, 8}, 21), k = rnd({3, 9, 8}, 22), v = rnd({2, 1, 9, 4}, 23), w = rnd({2, 3, 7, 4}, 24);
  for (Device dev : {kCPU, axle::device()})
    for (bool causal : {false, true}) {
      const Grads got = run(q, k, v, w, dev, true, causal), want = run(q, k, v, w, kCPU, false, causal);
      EXPECT_EQ(got.dk.shape(), (Shape{3, 9, 8}));
      EXPECT_EQ(got.dv.shape(), (Shape{2, 1, 9, 4}));
      expect_same(got, want, 2e-5, "broadcast");
    }
}

// The kernel's batched products: a batch larger than one scratch chunk (20 x 3 entries of
// 64 x 64 score blocks: several chunks), q, k, v read through the strides of [B, T, H, E]
// tensors transposed to [B, H, T, E] (GPT's layout), and an output gradient with a zero row
// stride (the gradient of a mean over the queries).
TEST(Attention, ChunkedBatchStridedViewsAndExpandedGradient) {
  for (Device dev : {kCPU, axle::device()})
    for (bool causal : {false, true}) {
      const Tensor q = rnd({20, 3, 70, 8}, 41), k = rnd({20, 3, 66, 8}, 42), v = rnd({20, 3, 66, 4}, 43),
                   w = rnd({20, 3, 70, 4}, 44);
      expect_same(run(q, k, v, w, dev, true, causal), run(q, k, v, w, kCPU, false, causal), 2e-5, "chunked batch");
      // [B, T, H, E] storage viewed as [B, H, T, E]
      const Tensor qt = rnd({2, 130, 3, 16}, 45), kt = rnd({2, 130, 3, 16}, 46), vt = rnd({2, 130, 3, 16}, 47),
                   wt = rnd({2, 3, 130, 16}, 48);
      auto grads = [&](bool fused) {
        Tensor a = qt.clone().to(dev), b = kt.clone().to(dev), c = vt.clone().to(dev);
        for (Tensor* t : {&a, &b, &c}) t->set_requires_grad(true);
        Tensor qv = transpose(a, 1, 2), kv = transpose(b, 1, 2), vv = transpose(c, 1, 2);
        Tensor out = fused ? scaled_dot_product_attention(qv, kv, vv, {.is_causal = causal})
                           : reference(qv, kv, vv, causal, 0.25);
        // mean over the queries: the output gradient is expanded along L (row stride 0)
        Tensor loss = add(sum(mul(out, wt.to(dev))), sum(mean(out, {2})));
        loss.backward();
        return Grads{out.cpu(), a.grad().cpu(), b.grad().cpu(), c.grad().cpu()};
      };
      expect_same(grads(true), grads(false), 2e-5, "strided views, expanded gradient");
    }
}

// Degenerate sizes as PyTorch 2.15 gives them: head size 0 (the scores are 0: every key
// weighs alike), a value head size of 0, and dropout over an empty sequence (no division by
// its length).
TEST(Attention, DegenerateSizes) {
  for (Device dev : {kCPU, axle::device()}) {
    const Tensor v = rnd({1, 4, 2}, 51);
    const Tensor out = scaled_dot_product_attention(zeros({1, 3, 0}).to(dev), zeros({1, 4, 0}).to(dev), v.to(dev)).cpu();
    const Tensor mean_v = mean(v, {1}, true).cpu();
    for (int64_t i = 0; i < 3; ++i) EXPECT_LE(max_diff(slice(out, 1, i, i + 1), mean_v), 1e-6);
    EXPECT_EQ(scaled_dot_product_attention(rnd({1, 3, 2}, 52).to(dev), rnd({1, 4, 2}, 53).to(dev),
                                           zeros({1, 4, 0}).to(dev)).cpu().shape(),
              (Shape{1, 3, 0}));
    const Tensor e = scaled_dot_product_attention(zeros({2, 0, 8}).to(dev), zeros({2, 0, 8}).to(dev),
                                                  zeros({2, 0, 8}).to(dev), {.dropout_p = 0.5});
    EXPECT_EQ(e.cpu().shape(), (Shape{2, 0, 8}));
  }
}

TEST(Attention, ExplicitScaleAndUnbatched) {
  const Tensor q = rnd({5, 3}, 31), k = rnd({6, 3}, 32), v = rnd({6, 2}, 33), w = rnd({5, 2}, 34);
  AttentionOptions o;
  o.scale = 0.7;
  const Grads got = run(q, k, v, w, kCPU, true, false, Tensor(), o);
  Tensor ref = reference(q, k, v, false, 0.7);
  EXPECT_LE(max_diff(got.out, ref), 2e-5);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  // Central differences in float32 (step 1e-2) of sum(out * w) against the op's backward.
  const Tensor q = rnd({1, 2, 5, 3}, 41), k = rnd({1, 2, 6, 3}, 42), v = rnd({1, 2, 6, 2}, 43), w = rnd({1, 2, 5, 2}, 44);
  for (bool causal : {false, true}) {
    const Grads g = run(q, k, v, w, kCPU, true, causal);
    const std::vector<Tensor> xs{q, k, v}, gs{g.dq, g.dk, g.dv};
    for (size_t which = 0; which < 3; ++which) {
      std::vector<float> base = xs[which].contiguous().to_vector<float>();
      const std::vector<float> an = gs[which].contiguous().to_vector<float>();
      for (size_t i = 0; i < base.size(); ++i) {
        auto f = [&](float d) {
          std::vector<float> x = base;
          x[i] += d;
          std::vector<Tensor> in = xs;
          in[which] = from_vector(x, xs[which].shape());
          AttentionOptions o;
          o.is_causal = causal;
          return double(sum(mul(scaled_dot_product_attention(in[0], in[1], in[2], o), w)).item<float>());
        };
        const double h = 1e-2, num = (f(float(h)) - f(float(-h))) / (2 * h);
        EXPECT_NEAR(an[i], num, 2e-3 + 2e-2 * std::abs(num)) << "input " << which << " element " << i << (causal ? " causal" : "");
      }
    }
  }
}

TEST(Attention, MaskedCallsRunTheDecomposedForm) {
  const Tensor q = rnd({2, 5, 4}, 51), k = rnd({2, 6, 4}, 52), v = rnd({2, 6, 3}, 53);
  std::vector<float> bm(30), fm(30);
  for (int i = 0; i < 30; ++i) {
    bm[size_t(i)] = (i % 6) <= (i / 6) ? 1.0f : 0.0f;  // causal as a bool mask
    fm[size_t(i)] = float(i % 7) * 0.1f;
  }
  AttentionOptions ob;
  ob.attn_mask = ne(from_vector(bm, {5, 6}), 0.0);
  EXPECT_LE(max_diff(scaled_dot_product_attention(q, k, v, ob), reference(q, k, v, true, 0.5)), 2e-5);
  AttentionOptions of;
  of.attn_mask = from_vector(fm, {5, 6});
  Tensor s = add(mul(matmul(q, transpose(k, -2, -1)), 0.5), of.attn_mask);
  EXPECT_LE(max_diff(scaled_dot_product_attention(q, k, v, of), matmul(softmax(s, -1), v)), 2e-5);
}

// ---- dropout
/// With v = I (S x S) the output is the dropped weights themselves: P * keep / (1 - p).
Tensor dropped_weights(const Tensor& q, const Tensor& k, double p, uint64_t seed, bool causal) {
  const int64_t S = k.shape()[size_t(k.dim() - 2)];
  Shape vs = k.shape();
  vs.back() = S;
  Tensor eye = expand(reshape(cast(eq(reshape(arange(S), {S, 1}), reshape(arange(S), {1, S})), kFloat32), {1, S, S}), {vs[0], S, S}).to(q.device());
  Generator g(seed);
  AttentionOptions o;
  o.dropout_p = p;
  o.generator = &g;
  o.is_causal = causal;
  return scaled_dot_product_attention(q, k, eye, o);
}

TEST(Attention, DropoutIsDeterministicForASeededGeneratorAndKeepsNearOneMinusP) {
  const Tensor q = zeros({2, 64, 8}), k = zeros({2, 64, 8});  // uniform weights 1/64
  const Tensor a = dropped_weights(q, k, 0.3, 7, false), b = dropped_weights(q, k, 0.3, 7, false),
               c = dropped_weights(q, k, 0.3, 8, false);
  EXPECT_EQ(max_diff(a, b), 0.0);
  EXPECT_GT(max_diff(a, c), 0.0);
  const std::vector<float> x = a.to_vector<float>();
  int64_t kept = 0;
  for (float y : x) {
    EXPECT_TRUE(y == 0.0f || std::abs(y - 1.0f / 64.0f / 0.7f) < 1e-6f) << y;
    kept += y > 0.0f;
  }
  EXPECT_NEAR(double(kept) / double(x.size()), 0.7, 0.03);
  // Two calls on one generator draw different masks (the generator advances).
  Generator g(5);
  AttentionOptions o;
  o.dropout_p = 0.5;
  o.generator = &g;
  const Tensor v = rnd({2, 64, 4}, 61);
  EXPECT_GT(max_diff(scaled_dot_product_attention(q, k, v, o), scaled_dot_product_attention(q, k, v, o)), 0.0);
  // The same on the lazy device.
  const Tensor l = dropped_weights(q.to(axle::device()), k.to(axle::device()), 0.3, 7, false);
  EXPECT_EQ(max_diff(l, a), 0.0);
}

TEST(Attention, DropoutBackwardUsesTheForwardsMask) {
  // The keep mask, read from a run with v = I, then the decomposed form with that fixed mask
  // gives the fused op's values and all three gradients (same seed: same mask).
  // One block, and several: 70 queries over 75 keys (float32 query blocks of 64 rows; causal:
  // the backward's products take a prefix of the keys, and some keys no query sees).
  const double p = 0.25;
  for (const auto& [L, S] : {std::pair<int64_t, int64_t>{9, 11}, {70, 75}}) {
    for (bool causal : {false, true}) {
      const Tensor q = rnd({2, L, 5}, 71), k = rnd({2, S, 5}, 72), v = rnd({2, S, 3}, 73), w = rnd({2, L, 3}, 74);
      const Tensor pd = dropped_weights(q, k, p, 99, causal);
      const Tensor keep = mul(cast(gt(pd, 0.0), kFloat32), 1.0 / (1.0 - p));
      for (Device dev : {kCPU, axle::device()}) {
        Generator g(99);
        AttentionOptions o;
        o.dropout_p = p;
        o.generator = &g;
        const Grads got = run(q, k, v, w, dev, true, causal, Tensor(), o);
        const Grads want = run(q, k, v, w, kCPU, false, causal, keep);
        expect_same(got, want, 2e-5, std::string(causal ? "dropout causal L=" : "dropout L=") + std::to_string(L));
      }
    }
  }
}

// ---- memory: no L x S buffer
TEST(Attention, LongSequenceNeverAllocatesTheScores) {
  const int64_t T = 4096, E = 16;
  const Tensor q = rnd({1, 1, T, E}, 81), k = rnd({1, 1, T, E}, 82), v = rnd({1, 1, T, E}, 83);
  Tensor qq = q, kk = k, vv = v;
  qq.set_requires_grad(true);
  kk.set_requires_grad(true);
  vv.set_requires_grad(true);
  const xm::MemoryInfo before = xm::get_memory_info(kCPU);
  AttentionOptions o;
  o.is_causal = true;
  Tensor out = scaled_dot_product_attention(qq, kk, vv, o);
  sum(out).backward();
  const xm::MemoryInfo after = xm::get_memory_info(kCPU);
  const int64_t scores = T * T * 4;  // one float32 L x S buffer: 64 MiB
  // The fused op holds O(T * E) (inputs, out, lse, gradients: under 2 MiB).
  EXPECT_LE(after.peak_bytes_used, std::max(before.peak_bytes_used, before.bytes_used + scores / 16))
      << "before: used " << before.bytes_used << ", peak " << before.peak_bytes_used << "; after: peak "
      << after.peak_bytes_used;
  EXPECT_TRUE(std::isfinite(out.sum().item<float>()));
}

// ---- SPMD: batch and head dims stay sharded, L, S, E replicated
TEST(Attention, SpmdRuleKeepsBatchAndHeadsSharded) {
  using namespace axle::spmd_test;
  auto m = make_mesh(4, {2, 2}, {"data", "model"});
  for (bool causal : {false, true}) {
    Builder b;
    const auto sh = spec(m, {"data", "model", xs::None, xs::None});
    // Batch 3 on 2 devices: uneven, the last shard half padding.
    Ref q = b.input({3, 4, 7, 8}, sh), k = b.input({3, 4, 9, 8}, sh), v = b.input({3, 4, 9, 6}, sh);
    Ref g = b.input({3, 4, 7, 6}, sh);
    const ops::Attrs a = ops::attr::ScaledDotProductAttention{.is_causal = causal, .scale = 0.4, .dropout_p = 0}.pack();
    Ref f = b.op(ops::OpKind::ScaledDotProductAttention, {q, k, v}, a);
    b.out(f);
    b.out(Builder::at(f, 1));
    Ref bw = b.op(ops::OpKind::ScaledDotProductAttentionBackward, {g, q, k, v, f, Builder::at(f, 1)}, a);
    b.out(bw);
    b.out(Builder::at(bw, 1));
    b.out(Builder::at(bw, 2));
    const spmd::Partitioned pp = b.partition();
    EXPECT_TRUE(pp.opaque_ops.empty());
    EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
    for (size_t j = 0; j < pp.outputs.size(); ++j) EXPECT_EQ(pp.outputs[j].str(), "{devices=[2,2,1,1]0,1,2,3}") << j;
    const std::vector<Tensor> in{rnd({3, 4, 7, 8}, 91), rnd({3, 4, 9, 8}, 92), rnd({3, 4, 9, 6}, 93), rnd({3, 4, 7, 6}, 94)};
    const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(pp, b.p, in);
    ASSERT_EQ(want.size(), got.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), 1e-5) << "output " << j;
  }
}

// Dropout under SPMD: each device's shard of the base operand keeps the global weight
// indices, so every device draws the mask one device would (a batch entry's weights are the
// same stream positions wherever it runs), forward and backward.
TEST(Attention, SpmdDropoutDrawsOneDevicesMask) {
  using namespace axle::spmd_test;
  auto m = make_mesh(4, {2, 2}, {"data", "model"});
  Builder b;
  const auto sh = spec(m, {"data", "model", xs::None, xs::None});
  Ref q = b.input({3, 4, 7, 8}, sh), k = b.input({3, 4, 9, 8}, sh), v = b.input({3, 4, 9, 6}, sh);
  Ref g = b.input({3, 4, 7, 6}, sh);
  Ref rng = b.input({2}, repl(m), kInt64), base = b.input({3, 4}, spec(m, {"data", "model"}), kInt64);
  const ops::Attrs a = ops::attr::ScaledDotProductAttention{.is_causal = true, .scale = 0.4, .dropout_p = 0.5}.pack();
  Ref f = b.op(ops::OpKind::ScaledDotProductAttention, {q, k, v, rng, base}, a);
  b.out(f);
  Ref bw = b.op(ops::OpKind::ScaledDotProductAttentionBackward, {g, q, k, v, f, Builder::at(f, 1), rng, base}, a);
  b.out(bw);
  b.out(Builder::at(bw, 1));
  b.out(Builder::at(bw, 2));
  const spmd::Partitioned pp = b.partition();
  EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
  std::vector<int64_t> bases(12);
  for (size_t i = 0; i < bases.size(); ++i) bases[i] = int64_t(i) * 7 * 9;
  const std::vector<Tensor> in{rnd({3, 4, 7, 8}, 81), rnd({3, 4, 9, 8}, 82), rnd({3, 4, 9, 6}, 83), rnd({3, 4, 7, 6}, 84),
                               from_vector(std::vector<int64_t>{1234, 5}, {2}, {.dtype = kInt64}),
                               from_vector(bases, {3, 4}, {.dtype = kInt64})};
  const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(pp, b.p, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t j = 0; j < want.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), 1e-5) << "output " << j;
}

TEST(Attention, SpmdRuleGathersAShardedSequence) {
  using namespace axle::spmd_test;
  auto m = mesh1d(4);
  Builder b;
  // L and S sharded: the rule needs them whole (an all-gather), the batch stays as it is.
  Ref q = b.input({2, 10, 8}, spec(m, {xs::None, "data", xs::None}));
  Ref k = b.input({2, 10, 8}, spec(m, {xs::None, "data", xs::None}));
  Ref v = b.input({2, 10, 8}, repl(m));
  b.out(b.op(ops::OpKind::ScaledDotProductAttention, {q, k, v},
             ops::attr::ScaledDotProductAttention{.is_causal = true, .scale = 0.3, .dropout_p = 0}.pack()));
  const spmd::Partitioned pp = b.partition();
  EXPECT_GE(kinds(pp)["all-gather"], 1) << pp.local.text();
  const std::vector<Tensor> in{rnd({2, 10, 8}, 95), rnd({2, 10, 8}, 96), rnd({2, 10, 8}, 97)};
  const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(pp, b.p, in);
  EXPECT_LE(max_rel_diff(got[0], want[0]), 1e-5);
}

// ---- errors
TEST(Attention, BadInputsAreClearErrors) {
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  auto msg = [](const std::function<void()>& f) { return error_of(f); };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find("[scaled_dot_product_attention]") != std::string::npos && m.find(part) != std::string::npos;
  };
  std::string m = msg([&] { scaled_dot_product_attention(zeros({4}), k, v); });
  EXPECT_TRUE(has(m, "at least 2 dims")) << m;
  m = msg([&] { scaled_dot_product_attention(q, zeros({2, 6, 5}), v); });
  EXPECT_TRUE(has(m, "key's last dim E = 4")) << m;
  m = msg([&] { scaled_dot_product_attention(q, k, zeros({2, 7, 3})); });
  EXPECT_TRUE(has(m, "value's sequence length S = 6")) << m;
  m = msg([&] { scaled_dot_product_attention(zeros({2, 5, 4}, {.dtype = kInt64}), k, v); });
  EXPECT_TRUE(has(m, "floating")) << m;
  for (double p : {-0.1, 1.5}) {
    AttentionOptions o;
    o.dropout_p = p;
    m = msg([&] { scaled_dot_product_attention(q, k, v, o); });
    EXPECT_TRUE(has(m, "dropout_p in [0, 1]")) << m;
  }
  m = msg([&] { scaled_dot_product_attention(q, k.to(axle::device()), v); });
  EXPECT_TRUE(has(m, "one device")) << m;
  AttentionOptions both;
  both.is_causal = true;
  both.attn_mask = ones({5, 6});
  m = msg([&] { scaled_dot_product_attention(q, k, v, both); });
  EXPECT_TRUE(has(m, "is_causal or attn_mask")) << m;
  m = msg([&] { scaled_dot_product_attention(q, zeros({3, 6, 4}), v); });
  EXPECT_NE(m.find("scaled_dot_product_attention"), std::string::npos) << m;  // batch dims do not broadcast
  // The op itself (as a graph would call it): one rank, one batch shape.
  m = msg([&] { ops::call(ops::OpKind::ScaledDotProductAttention, {q, zeros({6, 4}), v}, ops::attr::ScaledDotProductAttention{}.pack()); });
  EXPECT_TRUE(has(m, "one rank")) << m;
}

TEST(Attention, DropoutOneGivesZeros) {
  const Tensor q = rnd({2, 5, 4}, 1), k = rnd({2, 6, 4}, 2), v = rnd({2, 6, 3}, 3);
  AttentionOptions o;
  o.dropout_p = 1.0;
  EXPECT_EQ(max_diff(scaled_dot_product_attention(q, k, v, o), zeros({2, 5, 3})), 0.0);
}

}  // namespace
