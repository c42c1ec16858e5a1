// optimization_barrier (include/axle/ops.h) and collective CSE (src/compiler/passes.cpp):
// the barrier is the identity on every device and for autograd, and opaque to the compiler
// (never merged by CSE, folded, simplified through or fused across; DCE drops an unused one);
// CSE merges identical collectives, which is why FSDP puts a barrier in front of its
// backward re-gather; under SPMD each output keeps its operand's sharding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/dist.h"
#include "axle/runtime.h"
#include "backend/backend.h"
#include "compiler/program.h"
#include "lazy/graph.h"
#include "lazy/ir.h"
#include "ops/op.h"
#include "spmd/partition.h"
#include "spmd_harness.h"

using namespace axle;
using compiler::NodeKind;
using compiler::PassPipeline;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;
using ops::OpKind;

namespace {

// Traces `roots` (xla tensors with pending IR; a test failure for one without) into a Program.
Program trace(const std::vector<Tensor>& roots) {
  std::vector<lazy::Value> vals;
  for (const Tensor& t : roots) {
    if (const lazy::LazyTensor* lt = lazy::lazy_of(t); lt && lt->ir) vals.push_back(lt->ir);
    else ADD_FAILURE() << "a root has no pending computation";
  }
  return lazy::to_program(lazy::build_graph(vals));
}
// The pipeline the lazy device runs: the generic passes, then the cpu backend's.
PassPipeline cpu_pipeline() { return backend::backend_for(kCPU).pipeline(); }
int count_op(const Program& p, OpKind k) {
  int c = 0;
  for (const PNode& n : p.nodes) c += !n.dead && n.kind == NodeKind::Op && n.op == k;
  return c;
}
// The names of the live collectives of `p`, in program order.
std::vector<std::string> collectives_in_order(const Program& p) {
  std::vector<std::string> r;
  for (const PNode& n : p.nodes)
    if (!n.dead && n.kind == NodeKind::Op && ops::shard_rule(n.op) == ops::ShardRule::Collective)
      r.push_back(ops::op_name(n.op));
  return r;
}
void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.cpu().to_vector<double>(), want.cpu().to_vector<double>());
}
// A hand-built program: leaves and ops, outputs from each op's shape rule.
struct Builder {
  Program p;
  Ref input(const Shape& s) {
    PNode n;
    n.kind = NodeKind::Data;
    n.input = p.num_inputs++;
    n.outs = {{s, kFloat32}};
    return push(std::move(n));
  }
  Ref constant(double v) {
    PNode n;
    n.kind = NodeKind::Constant;
    n.constant = scalar_tensor(v);
    n.outs = {{{}, kFloat32}};
    return push(std::move(n));
  }
  Ref op(OpKind k, std::vector<Ref> in, ops::Attrs a = {}) {
    PNode n;
    n.op = k;
    n.attrs = a;
    n.operands = in;
    ops::Tensors t;
    for (const Ref& r : in) t.push_back(compiler::meta_tensor(p.nodes[size_t(r.node)].outs[size_t(r.index)]));
    n.outs = ops::op_def(k).infer(t, a);
    return push(std::move(n));
  }
  Ref push(PNode n) {
    p.nodes.push_back(std::move(n));
    return {int(p.nodes.size()) - 1, 0};
  }
};

}  // namespace

// ---- values: the identity everywhere

TEST(Barrier, ForwardIsTheIdentityOnCpuLazyAndEager) {
  manual_seed(1);
  const Tensor a = randn({3, 4}), b = arange(0, 6, 1, {.dtype = kInt64}).reshape({2, 3});
  // cpu: the outputs alias the inputs (nothing is copied).
  std::vector<Tensor> y = optimization_barrier({a, b});
  ASSERT_EQ(y.size(), 2u);
  expect_equal(y[0], a);
  expect_equal(y[1], b);
  EXPECT_EQ(y[0].data_ptr(), a.data_ptr());
  // A strided input stays the same view of the same values.
  const Tensor at = a.t();
  expect_equal(optimization_barrier({at})[0], at);
  EXPECT_TRUE(optimization_barrier({}).empty());
  // xla, lazy: one barrier node in the graph, values unchanged.
  const Tensor xa = a.to(device()), xb = b.to(device());
  std::vector<Tensor> z = optimization_barrier({xa * 2.0, xb});
  EXPECT_EQ(count_op(trace({z[0], z[1]}), OpKind::OptimizationBarrier), 1);
  expect_equal(z[0], a * 2.0);
  expect_equal(z[1], b);
  // xla, eager: each op runs at once.
  experimental::eager_mode(true);
  std::vector<Tensor> e = optimization_barrier({xa * 2.0, xb});
  expect_equal(e[0], a * 2.0);
  expect_equal(e[1], b);
  experimental::eager_mode(false);
  // An undefined tensor is an error, not a crash.
  EXPECT_THROW(optimization_barrier({a, Tensor()}), Error);
}

TEST(Barrier, InPlaceFormReplacesTheTensorsInTheVector) {
  const Tensor a = randn({4}).to(device()), b = randn({2, 2}).to(device());
  std::vector<Tensor> v{a + 1.0, b};
  const Tensor before = v[0];
  xm::optimization_barrier_(v);
  ASSERT_EQ(v.size(), 2u);
  // v[0] is now the barrier's output: its graph has the barrier, the old handle's has not.
  EXPECT_EQ(count_op(trace({v[0]}), OpKind::OptimizationBarrier), 1);
  EXPECT_EQ(count_op(trace({before}), OpKind::OptimizationBarrier), 0);
  expect_equal(v[0], a.cpu() + 1.0);
  expect_equal(v[1], b.cpu());
}

// ---- gradients: the identity, through a barrier of their own

TEST(Barrier, GradientPassesThroughAndMatchesFiniteDifferences) {
  manual_seed(2);
  const Tensor x0 = randn({5}), w0 = randn({5});
  // loss = sum(sin(x) * w), with x and w through one barrier.
  auto loss_of = [](const Tensor& x, const Tensor& w) {
    std::vector<Tensor> y = optimization_barrier({x, w});
    return sum(sin(y[0]) * y[1]);
  };
  for (const Device dev : {kCPU, device()}) {
    SCOPED_TRACE(dev.str());
    Tensor x = x0.to(dev), w = w0.to(dev);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    loss_of(x, w).backward();
    if (dev.is_xla()) {
      // The backward holds a second barrier, on the gradients (the forward's is the first).
      EXPECT_EQ(count_op(trace({x.grad(), w.grad()}), OpKind::OptimizationBarrier), 2);
    }
    const std::vector<float> gx = x.grad().cpu().to_vector<float>(), gw = w.grad().cpu().to_vector<float>();
    // Central differences of the loss in double (plain loops), one element at a time.
    const std::vector<float> xf = x0.to_vector<float>(), wf = w0.to_vector<float>();
    auto f = [](std::vector<double> xs, std::vector<double> ws) {
      double l = 0;
      for (size_t i = 0; i < xs.size(); ++i) l += std::sin(xs[i]) * ws[i];
      return l;
    };
    const std::vector<double> xd(xf.begin(), xf.end()), wd(wf.begin(), wf.end());
    const double h = 1e-6;
    for (size_t i = 0; i < xd.size(); ++i) {
      std::vector<double> xp = xd, xm = xd, wp = wd, wm = wd;
      xp[i] += h, xm[i] -= h, wp[i] += h, wm[i] -= h;
      EXPECT_NEAR(gx[i], (f(xp, wd) - f(xm, wd)) / (2 * h), 1e-5) << "d/dx " << i;
      EXPECT_NEAR(gw[i], (f(xd, wp) - f(xd, wm)) / (2 * h), 1e-5) << "d/dw " << i;
    }
  }
}

// ---- CSE: identical collectives merge; a barrier keeps them apart

TEST(CollectiveCse, IdenticalAllGathersAndAllReducesMerge) {
  // Outside launch() the default group has one rank: the collectives are identities.
  manual_seed(3);
  const Tensor x0 = randn({3, 2}), y0 = randn({4});
  const Tensor x = x0.to(device()), y = y0.to(device());
  Tensor g1 = dist::all_gather(x);
  Tensor r = dist::all_reduce(y);
  Tensor g2 = dist::all_gather(x);
  Tensor r2 = dist::all_reduce(y);
  Tensor rmax = dist::all_reduce(y, dist::ReduceOp::Max);  // other attributes: not merged
  Program p = trace({g1 + 1.0, r, g2 * 2.0, r2, rmax});
  EXPECT_EQ(count_op(p, OpKind::AllGather), 2);
  EXPECT_EQ(count_op(p, OpKind::AllReduce), 3);
  cpu_pipeline().run(p);
  EXPECT_EQ(count_op(p, OpKind::AllGather), 1) << p.text();
  EXPECT_EQ(count_op(p, OpKind::AllReduce), 2) << p.text();
  // The earlier of each pair survives: the collectives keep their traced order.
  EXPECT_EQ(collectives_in_order(p), (std::vector<std::string>{"all_gather", "all_reduce", "all_reduce"}))
      << p.text();
  // And the values are those of running each collective.
  expect_equal(g2, x0);
  expect_equal(g1, x0);
  expect_equal(r2, y0);
  expect_equal(rmax, y0);
}

TEST(CollectiveCse, ABarrierKeepsTwoAllGathersOfOneShardApart) {
  const Tensor s0 = randn({6});
  const Tensor shard = s0.to(device());
  // FSDP's pattern: the forward gathers the shard; the backward re-gathers it behind a barrier.
  Tensor forward_gather = dist::all_gather(shard);
  Tensor backward_gather = dist::all_gather(optimization_barrier({shard})[0]);
  Program p = trace({exp(forward_gather), exp(backward_gather)});
  cpu_pipeline().run(p);
  EXPECT_EQ(count_op(p, OpKind::AllGather), 2) << p.text();
  EXPECT_EQ(count_op(p, OpKind::OptimizationBarrier), 1) << p.text();
  // Two barriers on the same value stay two, and so do the gathers behind them.
  Tensor b1 = dist::all_gather(optimization_barrier({shard})[0]);
  Tensor b2 = dist::all_gather(optimization_barrier({shard})[0]);
  Program q = trace({b1, b2});
  cpu_pipeline().run(q);
  EXPECT_EQ(count_op(q, OpKind::OptimizationBarrier), 2) << q.text();
  EXPECT_EQ(count_op(q, OpKind::AllGather), 2) << q.text();
  expect_equal(backward_gather, s0);
  expect_equal(b2, s0);
}

// Memory: the executable frees a value after its last reader (src/backend/cpu/executable.cpp).
// Without a barrier the backward's gather is the forward's, alive from the forward to the
// end; with one, the forward's gather is last read before the backward's gather runs.
TEST(CollectiveCse, WithABarrierTheForwardGatherDiesBeforeTheBackwardGather) {
  const Tensor shard = randn({1000}).to(device()), x = randn({1000}).to(device());
  auto program = [&](bool barrier) {
    Tensor y = exp(dist::all_gather(shard) * x);  // forward
    Tensor loss = sum(y);
    Tensor regather = dist::all_gather(barrier ? optimization_barrier({shard})[0] : shard);
    Tensor grad = regather * y;  // "backward"
    Program p = trace({loss, grad});
    cpu_pipeline().run(p);
    return p;
  };
  // The position of each live all_gather and of its last reader.
  auto gathers = [](const Program& p) {
    std::vector<std::pair<int, int>> g;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      if (p.nodes[i].dead || p.nodes[i].kind != NodeKind::Op || p.nodes[i].op != OpKind::AllGather) continue;
      int last = -1;
      for (size_t j = i + 1; j < p.nodes.size(); ++j)
        for (const Ref& r : p.nodes[j].operands)
          if (!p.nodes[j].dead && r.node == int(i)) last = int(j);
      g.push_back({int(i), last});
    }
    return g;
  };
  const Program merged = program(false), apart = program(true);
  const auto m = gathers(merged), a = gathers(apart);
  ASSERT_EQ(m.size(), 1u) << merged.text();
  EXPECT_EQ(m[0].second, int(merged.nodes.size()) - 1) << merged.text();  // read by the last op
  ASSERT_EQ(a.size(), 2u) << apart.text();
  EXPECT_LT(a[0].second, a[1].first) << apart.text();  // freed before the re-gather runs
}

TEST(CollectiveCse, DceKeepsACollectiveWhoseOutputIsUnused) {
  Builder b;
  Ref x = b.input({4});
  Ref g = b.op(OpKind::AllGather, {x}, ops::attr::AllGather{.group = 0, .world = 1}.pack());
  (void)g;
  b.p.outputs = {b.op(OpKind::Exp, {x})};
  compiler::make_dce_pass()->run(b.p);
  EXPECT_EQ(count_op(b.p, OpKind::AllGather), 1) << b.p.text();
}

// ---- the barrier is opaque to the compiler's other passes

TEST(Barrier, NotMergedFoldedOrSimplifiedThrough) {
  // Constant folding: exp(barrier(2)) stays an exp of a barrier (no constant comes out).
  Builder b;
  Ref c = b.constant(2.0);
  Ref e = b.op(OpKind::Exp, {b.op(OpKind::OptimizationBarrier, {c})});
  b.p.outputs = {e};
  PassPipeline::standard().run(b.p);
  EXPECT_EQ(count_op(b.p, OpKind::OptimizationBarrier), 1) << b.p.text();
  EXPECT_EQ(count_op(b.p, OpKind::Exp), 1) << b.p.text();

  // CSE: exp(x) and exp(barrier(x)) are two values; two barriers on x are two barriers.
  const Tensor x0 = randn({2, 3, 4});
  const Tensor x = x0.to(device());
  Tensor y1 = exp(x), y2 = exp(optimization_barrier({x})[0]), y3 = exp(optimization_barrier({x})[0]);
  Program p = trace({y1, y2, y3});
  PassPipeline::standard().run(p);
  EXPECT_EQ(count_op(p, OpKind::OptimizationBarrier), 2) << p.text();
  EXPECT_EQ(count_op(p, OpKind::Exp), 3) << p.text();

  // Simplification: reshape(barrier(reshape(x))) and permute(barrier(permute(x))) keep both.
  Tensor r = reshape(optimization_barrier({reshape(x, {6, 4})})[0], {24});
  Tensor q = permute(optimization_barrier({permute(x, {2, 0, 1})})[0], {1, 2, 0});
  Program s = trace({r, q});
  PassPipeline::standard().run(s);
  EXPECT_EQ(count_op(s, OpKind::Reshape), 2) << s.text();
  EXPECT_EQ(count_op(s, OpKind::Permute), 2) << s.text();
  expect_equal(r, reshape(x0, {24}));
  expect_equal(q, x0);
}

TEST(Barrier, ElementwiseChainThroughABarrierIsTwoFusions) {
  manual_seed(4);
  const Tensor x0 = randn({300, 70});
  const Tensor x = x0.to(device());
  Tensor mid = optimization_barrier({x * 2.0 + 1.0})[0];
  Tensor y = exp(mid * 3.0 - 0.5);
  Program p = trace({y});
  cpu_pipeline().run(p);
  EXPECT_EQ(count_op(p, OpKind::FusedElementwise), 2) << p.text();
  EXPECT_EQ(count_op(p, OpKind::OptimizationBarrier), 1) << p.text();
  // Without the barrier the same chain is one fusion.
  Program one = trace({exp((x * 2.0 + 1.0) * 3.0 - 0.5)});
  cpu_pipeline().run(one);
  EXPECT_EQ(count_op(one, OpKind::FusedElementwise), 1) << one.text();
  const std::vector<float> got = y.cpu().to_vector<float>(), want = exp((x0 * 2.0 + 1.0) * 3.0 - 0.5).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(Barrier, DceDropsABarrierWhoseOutputsAreUnused) {
  Builder b;
  Ref x = b.input({4});
  b.op(OpKind::OptimizationBarrier, {x});
  b.p.outputs = {b.op(OpKind::Exp, {x})};
  compiler::make_dce_pass()->run(b.p);
  EXPECT_EQ(count_op(b.p, OpKind::OptimizationBarrier), 0) << b.p.text();
}

// ---- SPMD: each output keeps its operand's sharding

TEST(BarrierSpmd, ShardingsPassThroughBothWays) {
  using namespace axle::spmd_test;
  auto m = mesh1d(4);
  spmd_test::Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref w = b.input({6, 8}, repl(m));
  Ref ex = b.op(OpKind::Exp, {x}), nw = b.op(OpKind::Neg, {w});
  Ref bar = b.op(OpKind::OptimizationBarrier, {ex, nw});
  Ref y0 = b.op(OpKind::Relu, {spmd_test::Builder::at(bar, 0)});
  // Output 1 is constrained after the barrier: propagation carries it back to neg(w).
  Ref y1 = b.constrain(b.op(OpKind::Relu, {spmd_test::Builder::at(bar, 1)}), spec(m, {xs::None, "data"}));
  b.out(y0);
  b.out(y1);
  auto sh = spmd::propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(bar.node)][0].str(), "{devices=[4,1]0,1,2,3}");  // forward, from x
  EXPECT_EQ(sh[size_t(y0.node)][0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(sh[size_t(bar.node)][1].str(), "{devices=[1,4]0,1,2,3}");  // backward, from the constraint
  EXPECT_EQ(sh[size_t(nw.node)][0].str(), "{devices=[1,4]0,1,2,3}");  // neg(w), before the barrier
  // Partitioned: the barrier runs on the shards (no collective), and the values are the global run's.
  Partitioned part = b.partition();
  EXPECT_EQ(collective_ops(part), 0) << part.local.text();
  EXPECT_EQ(count_local(part, OpKind::OptimizationBarrier), 1) << part.local.text();
  EXPECT_EQ(part.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  const std::vector<Tensor> in{randn({8, 6}), randn({6, 8})};
  const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(part, b.p, in);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LE(max_rel_diff(got[0], want[0]), 1e-6);
  EXPECT_LE(max_rel_diff(got[1], want[1]), 1e-6);
}
