// The SPMD compiler at the Program level (src/spmd/partition.h): sharding propagation, the
// core rules, the reshard table and its collectives, padding masks, the opaque fallback.
// Programs are built by hand (shapes from each op's shape rule) and partitioned for a
// mesh of 4 virtual devices (AXLE_CPU_DEVICES=4, set per test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "spmd/partition.h"
#include "spmd/rules.h"
#include "spmd_harness.h"

using namespace axle;
using namespace axle::spmd;

namespace {

using namespace axle::spmd_test;

std::shared_ptr<const xs::Mesh> mesh4() { return mesh1d(4); }

Ref reshape(Builder& b, Ref x, Shape s) { return b.op(OpKind::Reshape, {x}, ops::attr::Reshape{.shape = s}.pack()); }
Ref permute(Builder& b, Ref x, Shape d) { return b.op(OpKind::Permute, {x}, ops::attr::Permute{.dims = d}.pack()); }
Ref sum(Builder& b, Ref x, Shape dims, bool keepdim = false) {
  return b.op(OpKind::Sum, {x}, ops::attr::Sum{.keepdim = keepdim, .dims = dims}.pack());
}
Ref amax(Builder& b, Ref x, Shape dims) {
  return b.op(OpKind::Amax, {x}, ops::attr::Amax{.keepdim = false, .dims = dims}.pack());
}

// Partitions b's program, runs it on its device threads and checks every output equals
// the single-device run's (within 1e-5 relative).
Partitioned expect_same_values(Builder& b, const std::vector<Tensor>& in, std::vector<std::optional<Sharding>> pins = {}) {
  Partitioned p = b.partition(pins);
  const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(p, b.p, in);
  EXPECT_EQ(want.size(), got.size());
  for (size_t j = 0; j < want.size() && j < got.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), 1e-5) << "output " << j;
  return p;
}
Tensor negative(const Shape& s) { return sub(neg(abs(randn(s))), 0.5); }  // all < 0

}  // namespace

// ---- propagation

TEST(SpmdPropagate, ForwardFromAShardedInput) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref w = b.input({6}, repl(m));
  Ref y = b.op(OpKind::Relu, {b.op(OpKind::Add, {x, w})});
  Ref s = sum(b, y, {1});
  b.out(s);
  auto sh = propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(y.node)][0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(sh[size_t(s.node)][0].str(), "{devices=[4]0,1,2,3}");
  EXPECT_EQ(sh[size_t(w.node)][0].str(), "{replicated}");  // inputs are fixed
}

TEST(SpmdPropagate, BackwardFromAConstraint) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, repl(m));
  Ref e = b.op(OpKind::Exp, {x});
  Ref t = permute(b, e, {1, 0});
  Ref r = b.op(OpKind::Relu, {t});
  Ref c = b.constrain(r, spec(m, {xs::None, "data"}));
  b.out(b.op(OpKind::Neg, {c}));
  auto sh = propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(r.node)][0].str(), "{devices=[1,4]0,1,2,3}");
  EXPECT_EQ(sh[size_t(t.node)][0].str(), "{devices=[1,4]0,1,2,3}");
  EXPECT_EQ(sh[size_t(e.node)][0].str(), "{devices=[4,1]0,1,2,3}");  // through the transpose, backward
  EXPECT_EQ(sh[size_t(x.node)][0].str(), "{replicated}");
  // The partitioned program slices x's values where the sharding starts: no collective.
  Partitioned p = b.partition();
  EXPECT_EQ(collective_ops(p), 0);
  EXPECT_EQ(count_local(p, OpKind::ShardSlice), 1);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[1,4]0,1,2,3}");
}

TEST(SpmdPropagate, OutputPinIsFixedAndUnknownIsReplicated) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, repl(m));
  Ref y = b.op(OpKind::Exp, {x});
  Ref z = b.op(OpKind::Neg, {x});
  b.out(y);
  b.out(z);
  auto sh = propagate(b.p, b.shardings, {.output_pins = {spec(m, {"data", xs::None}), std::nullopt}, .input_labels = {}});
  EXPECT_EQ(sh[size_t(y.node)][0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(sh[size_t(z.node)][0].str(), "{replicated}");
}

TEST(SpmdPropagate, MoreTilesWin) {
  auto m = make_mesh(4, {2, 2}, {"a", "b"});
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"a", xs::None}));
  Ref y = b.input({8, 6}, spec(m, {"a", "b"}));
  Ref s = b.op(OpKind::Add, {x, y});
  b.out(s);
  auto sh = propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(s.node)][0].str(), "{devices=[2,2]0,1,2,3}");
}

TEST(SpmdPropagate, MeshesMustAgree) {
  auto m1 = make_mesh(4, {4}, {"data"});
  auto m2 = make_mesh(4, {2, 2}, {"a", "b"});
  Builder b;
  Ref x = b.input({8}, spec(m1, {"data"}));
  Ref y = b.input({8}, spec(m2, {"a"}));
  b.out(b.op(OpKind::Add, {x, y}));
  try {
    b.partition();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on one mesh"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("input 1"), std::string::npos) << e.what();
  }
}

// ---- S6: shape ops keep shardings without communication

TEST(SpmdPartition, S6ElementwiseAndTransposeNeedNoCollectives) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref w = b.input({6}, repl(m));
  Ref y = b.op(OpKind::Mul, {x, w});
  b.out(y);
  b.out(permute(b, y, {1, 0}));
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(collective_ops(p), 0);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(p.outputs[1].str(), "{devices=[1,4]0,1,2,3}");
  // Local shapes: x's shard is [2, 6].
  EXPECT_EQ(p.local.nodes[size_t(p.local.outputs[0].node)].outs[0].shape, (Shape{2, 6}));
  EXPECT_EQ(p.local.nodes[size_t(p.local.outputs[1].node)].outs[0].shape, (Shape{6, 2}));
}

TEST(SpmdPartition, S6ReshapeOfABatchShardedImageKeepsTheBatch) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 3, 4, 5}, spec(m, {"data", xs::None, xs::None, xs::None}));
  Ref f = reshape(b, x, {8, 60});        // (B, C, H, W) -> (B, CHW)
  Ref u = reshape(b, f, {8, 1, 60});     // unsqueeze
  Ref s = reshape(b, u, {8, 60});        // squeeze
  b.out(f);
  b.out(u);
  b.out(s);
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(collective_ops(p), 0);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(p.outputs[1].str(), "{devices=[4,1,1]0,1,2,3}");
  EXPECT_EQ(p.outputs[2].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(p.local.nodes[size_t(p.local.outputs[0].node)].outs[0].shape, (Shape{2, 60}));
}

TEST(SpmdPartition, S6ReshapeMergingAShardedMinorDimReshardsOnce) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({2, 8}, spec(m, {xs::None, "data"}), kFloat32, "x");
  b.out(reshape(b, x, {16}));
  Partitioned p = b.partition();
  ASSERT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].kind, "all-gather");
  EXPECT_EQ(collective_ops(p), 1);
  EXPECT_NE(p.collectives[0].rule.find("reshape"), std::string::npos) << p.collectives[0].rule;
  const std::string t = explain_table(p, "g");
  EXPECT_NE(t.find("1 collective,"), std::string::npos) << t;
  EXPECT_NE(t.find("all-gather"), std::string::npos) << t;
  EXPECT_NE(t.find("x [2, 8]"), std::string::npos) << t;
}

// ---- S7: dot rules

TEST(SpmdPartition, S7aContractingShardedMatmulIsOneAllReduce) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 16}, spec(m, {xs::None, "data"}));
  Ref w = b.input({16, 4}, spec(m, {"data", xs::None}));
  b.out(b.op(OpKind::Matmul, {x, w}));
  Partitioned p = b.partition();
  auto k = kinds(p);
  EXPECT_EQ(k["all-reduce"], 1);
  EXPECT_EQ(k["all-gather"], 0);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(collective_ops(p), 1);
  EXPECT_EQ(p.outputs[0].str(), "{replicated}");
  EXPECT_EQ(p.collectives[0].from, "partial(data) {replicated}");
  EXPECT_NE(p.collectives[0].rule.find("contracting"), std::string::npos) << p.collectives[0].rule;
}

TEST(SpmdPartition, S7bBatchShardedTimesReplicatedIsLocal) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 16}, spec(m, {"data", xs::None}));
  Ref w = b.input({16, 4}, repl(m));
  b.out(b.op(OpKind::Matmul, {x, w}));
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(collective_ops(p), 0);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
}

TEST(SpmdPartition, S7cMegatronMlpIsOneAllReducePerForward) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 16}, repl(m));
  Ref w1 = b.input({32, 16}, spec(m, {"data", xs::None}));  // column-sharded: output features
  Ref b1 = b.input({32}, spec(m, {"data"}));
  Ref w2 = b.input({16, 32}, spec(m, {xs::None, "data"}));  // row-sharded: input features
  Ref h = b.op(OpKind::Relu, {b.op(OpKind::Linear, {x, w1, b1})});
  Ref y = b.op(OpKind::Linear, {h, w2});
  b.out(y);
  auto sh = propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(h.node)][0].str(), "{devices=[1,4]0,1,2,3}");
  Partitioned p = b.partition();
  auto k = kinds(p);
  EXPECT_EQ(k["all-reduce"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(collective_ops(p), 1);
  EXPECT_EQ(p.outputs[0].str(), "{replicated}");
}

TEST(SpmdPartition, S7dFsdpGathersTheWeightOnce) {
  auto m = make_mesh(4, {4}, {"fsdp"});
  Builder b;
  Ref x = b.input({8, 16}, spec(m, {"fsdp", xs::None}), kFloat32, "x");
  Ref w = b.input({32, 16}, spec(m, {"fsdp", xs::None}), kFloat32, "w");
  b.out(b.op(OpKind::Linear, {x, w}));
  Partitioned p = b.partition({spec(m, {"fsdp", xs::None})});
  auto k = kinds(p);
  EXPECT_EQ(k["all-gather"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(collective_ops(p), 1);
  ASSERT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].value.substr(0, 2), "w ");
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
}

TEST(SpmdPartition, S7dFsdpWeightGradientIsReduceScattered) {
  auto m = make_mesh(4, {4}, {"fsdp"});
  Builder b;
  Ref x = b.input({8, 16}, spec(m, {"fsdp", xs::None}), kFloat32, "x");
  Ref g = b.input({8, 32}, spec(m, {"fsdp", xs::None}), kFloat32, "grad");
  // dW = g^T @ x contracts the batch, sharded on both: Partial, then the weight's sharding.
  Ref dw = b.op(OpKind::Matmul, {permute(b, g, {1, 0}), x});
  b.out(dw);
  Partitioned p = b.partition({spec(m, {"fsdp", xs::None})});
  auto k = kinds(p);
  EXPECT_EQ(k["reduce-scatter"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(count_local(p, OpKind::ReduceScatter), 1);
}

TEST(SpmdPartition, S14PinningAnIntermediateReplicatedGathersInsteadOfReducing) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({64, 16}, repl(m));
  Ref w1 = b.input({32, 16}, spec(m, {"data", xs::None}));
  Ref w2 = b.input({16, 32}, spec(m, {xs::None, "data"}));
  Ref h = b.constrain(b.op(OpKind::Linear, {x, w1}), repl(m));
  b.out(b.op(OpKind::Linear, {h, w2}));
  Partitioned p = b.partition();
  auto k = kinds(p);
  EXPECT_EQ(k["all-reduce"], 0);
  EXPECT_GE(k["all-gather"], 1);
}

// ---- S8: the reshard table, one collective of the named kind each

TEST(SpmdPartition, S8TiledToReplicatedIsAnAllGather) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  b.out(b.constrain(b.op(OpKind::Exp, {x}), repl(m)));
  Partitioned p = b.partition();
  auto k = kinds(p);
  EXPECT_EQ(k["all-gather"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].from, "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(p.collectives[0].to, "{replicated}");
  EXPECT_EQ(p.collectives[0].bytes_per_device, 8 * 6 * 4 * 3 / 4);
}

TEST(SpmdPartition, S8Dim0ToDim1IsAnAllToAll) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 8}, spec(m, {"data", xs::None}));
  b.out(b.constrain(b.op(OpKind::Exp, {x}), spec(m, {xs::None, "data"})));
  Partitioned p = b.partition();
  EXPECT_EQ(kinds(p)["all-to-all"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(count_local(p, OpKind::AllToAll), 1);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[1,4]0,1,2,3}");
}

TEST(SpmdPartition, S8ReplicatedToTiledIsALocalSlice) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 8}, repl(m));
  b.out(b.constrain(b.op(OpKind::Exp, {x}), spec(m, {"data", xs::None})));
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(collective_ops(p), 0);
  EXPECT_EQ(count_local(p, OpKind::ShardSlice), 1);
}

TEST(SpmdPartition, S8ReversedDeviceOrderIsACollectivePermute) {
  auto m = make_mesh(4, {2, 2}, {"a", "b"});
  Builder b;
  Ref x = b.input({8, 8}, spec(m, {xs::axes("a", "b"), xs::None}));
  b.out(b.constrain(b.op(OpKind::Exp, {x}), spec(m, {xs::axes("b", "a"), xs::None})));
  Partitioned p = b.partition();
  EXPECT_EQ(kinds(p)["collective-permute"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  ASSERT_EQ(count_local(p, OpKind::CollectivePermute), 1);
  for (const PNode& n : p.local.nodes)
    if (n.kind == NodeKind::Op && n.op == OpKind::CollectivePermute) {  // devices 1 and 2 swap tiles
      EXPECT_EQ(ops::attr::CollectivePermute::of(n.attrs).source_of, (std::vector<int64_t>{0, 2, 1, 3}));
    }
}

TEST(SpmdPartition, S8PartialToTiledIsAReduceScatter) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref s = sum(b, x, {0});  // [6], partial over data
  b.out(b.constrain(s, spec(m, {"data"})));
  Partitioned p = b.partition();
  EXPECT_EQ(kinds(p)["reduce-scatter"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(count_local(p, OpKind::ReduceScatter), 1);
  EXPECT_EQ(p.collectives[0].from, "partial(data) {replicated}");
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4]0,1,2,3}");
}

// ---- reductions and padding

TEST(SpmdPartition, UnevenReductionsMaskPaddingWithTheIdentity) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({5, 3}, spec(m, {"data", xs::None}));  // 5 rows on 4 devices: 2 each, padded
  b.out(sum(b, x, {0}));
  b.out(amax(b, x, {0}));
  b.out(sum(b, x, {1}));  // not over the sharded dim: no mask
  Partitioned p = b.partition();
  std::vector<double> fills;
  for (const PNode& n : p.local.nodes)
    if (n.kind == NodeKind::Op && n.op == OpKind::MaskPadding) fills.push_back(ops::attr::MaskPadding::of(n.attrs).fill);
  ASSERT_EQ(fills.size(), 2u);
  EXPECT_EQ(fills[0], 0.0);
  EXPECT_EQ(fills[1], -INFINITY);
  auto k = kinds(p);
  EXPECT_EQ(k["all-reduce"], 2);
  EXPECT_EQ(p.outputs[2].str(), "{devices=[4]0,1,2,3}");
}

TEST(SpmdPartition, EvenReductionsNeedNoMask) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 3}, spec(m, {"data", xs::None}));
  b.out(sum(b, x, {0}));
  Partitioned p = b.partition();
  EXPECT_EQ(count_local(p, OpKind::MaskPadding), 0);
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
}

TEST(SpmdPartition, UnevenContractionMasksBothOperands) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({4, 5}, spec(m, {xs::None, "data"}));
  Ref w = b.input({5, 2}, spec(m, {"data", xs::None}));
  b.out(b.op(OpKind::Matmul, {x, w}));
  Partitioned p = b.partition();
  EXPECT_EQ(count_local(p, OpKind::MaskPadding), 2);
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
}

TEST(SpmdPartition, MeanOfAShardedDimDividesByTheGlobalCount) {
  // mean = sum / n with n a replicated scalar input: the division keeps the value Partial
  // (linear), so one all-reduce, after it.
  auto m = mesh4();
  Builder b;
  Ref x = b.input({6}, spec(m, {"data"}));
  Ref n = b.input({}, repl(m));
  b.out(b.op(OpKind::Div, {sum(b, x, {0}), n}));
  Partitioned p = b.partition();
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
}

TEST(SpmdPartition, APartialValueIsReducedOnceForAllItsUses) {
  // A gradient that is both an output and used by the update: one all-reduce.
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref w = b.input({6}, repl(m));
  Ref g = sum(b, x, {0});
  b.out(g);
  b.out(b.op(OpKind::Sub, {w, g}));
  b.out(b.op(OpKind::Add, {w, g}));
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(count_local(p, OpKind::AllReduce), 1);
}

TEST(SpmdValues, APartialValueMeetingASplitOperandIsReducedFirst) {
  // BatchNorm's backward: a per-channel sum over the split batch (Partial) times, or
  // expanded and added to, batch-split activations. The product is split on the batch, so
  // it cannot stay Partial over the same axis.
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref s = sum(b, x, {0}, true);  // [1, 6], partial(data)
  b.out(b.op(OpKind::Mul, {s, x}));
  b.out(b.op(OpKind::Add, {b.op(OpKind::Expand, {s}, ops::attr::Expand{.shape = {8, 6}}.pack()), x}));
  Partitioned p = expect_same_values(b, {randn({8, 6})});
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
}

TEST(SpmdPartition, ManualValuesAreNotPartitioned) {
  // enable_manual_sharding's result: a value of the local shape, sharded {manual}. Ops on
  // it run as written on every device; their outputs are manual.
  auto m = mesh4();
  Sharding man;
  man.kind = Sharding::Kind::Manual;
  man.mesh = m;
  Builder b;
  Ref x = b.input({8, 2}, man);
  Ref c = b.input({}, repl(m));
  Ref y = b.op(OpKind::Relu, {b.op(OpKind::Add, {x, c})});
  b.out(y);
  auto sh = propagate(b.p, b.shardings);
  EXPECT_EQ(sh[size_t(y.node)][0].str(), "{manual}");
  Partitioned p = b.partition();
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(p.outputs[0].str(), "{manual}");
  EXPECT_EQ(p.local.nodes[size_t(p.local.outputs[0].node)].outs[0].shape, (Shape{8, 2}));
}

// ---- opaque fallback

TEST(SpmdPartition, OpsWithoutARuleAreReplicatedAndListedOnce) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8}, spec(m, {"data"}));
  // mask_padding has no partitioning rule (S_DEVICE: the partitioner makes it): opaque.
  ops::Attrs a = ops::attr::MaskPadding{.dim = 0, .global_size = 8, .fill = 0, .layout = {0}}.pack();
  Ref y = b.op(OpKind::MaskPadding, {x}, a);
  b.out(b.op(OpKind::MaskPadding, {y}, a));
  Partitioned p = b.partition();
  EXPECT_EQ(p.opaque_ops, (std::vector<std::string>{"mask_padding"}));
  EXPECT_EQ(kinds(p)["all-gather"], 1);  // x replicated once
  EXPECT_EQ(p.outputs[0].str(), "{replicated}");
  EXPECT_NE(explain_table(p, "g").find("opaque"), std::string::npos);
}

TEST(SpmdPartition, FullRematerializationWarns) {
  auto m = make_mesh(4, {2, 2}, {"a", "b"});
  Builder b;
  Ref x = b.input({8, 8}, spec(m, {"a", "b"}), kFloat32, "x");
  // dims (a, b) -> (b, a): no single collective does it.
  b.out(b.constrain(b.op(OpKind::Exp, {x}), spec(m, {"b", "a"})));
  Partitioned p = b.partition();
  // Same tile counts per dim: a collective-permute, no rematerialization.
  EXPECT_EQ(kinds(p)["collective-permute"], 1);
  EXPECT_TRUE(p.warnings.empty());
  Builder c;
  Ref y = c.input({8, 8}, spec(m, {"a", xs::None}), kFloat32, "y");
  c.out(c.constrain(c.op(OpKind::Exp, {y}), spec(m, {"b", "a"})));
  Partitioned q = c.partition();
  ASSERT_EQ(q.warnings.size(), 1u);
  EXPECT_NE(q.warnings[0].find("full rematerialization"), std::string::npos) << q.warnings[0];
  EXPECT_NE(explain_table(q, "g").find("warning: full rematerialization"), std::string::npos);
}

// ---- values: the partitioned program on 4 device threads equals one device

TEST(SpmdValues, S5UnevenReductionsOnNegativeData) {
  for (int64_t n : {4, 3}) {
    auto m = make_mesh(n, {n}, {"data"});
    Builder b;
    Ref x = b.input({n + 1}, spec(m, {"data"}));  // every shard 2 long; the tail all padding
    Ref cnt = b.input({}, repl(m));
    b.out(sum(b, x, {0}));
    b.out(b.op(OpKind::Div, {sum(b, x, {0}), cnt}));  // mean
    b.out(amax(b, x, {0}));
    b.out(sum(b, b.op(OpKind::Exp, {x}), {0}));  // exp(padding) = 1 where unmasked
    b.out(b.op(OpKind::Amin, {b.op(OpKind::Neg, {x})}, ops::attr::Amin{.keepdim = false, .dims = {0}}.pack()));
    Ref y = b.input({3, n + 1}, spec(m, {xs::None, "data"}));
    b.out(b.op(OpKind::Softmax, {y}, ops::attr::Softmax{.dim = 1}.pack()));  // over the sharded last dim
    b.out(sum(b, y, {1}));
    expect_same_values(b, {negative({n + 1}), full({}, double(n + 1)), negative({3, n + 1})});
  }
}

TEST(SpmdValues, S7DotRules) {
  auto m = mesh4();
  {  // (a) contracting-sharded, uneven K
    Builder b;
    Ref x = b.input({6, 7}, spec(m, {xs::None, "data"}));
    Ref w = b.input({7, 5}, spec(m, {"data", xs::None}));
    b.out(b.op(OpKind::Matmul, {x, w}));
    expect_same_values(b, {randn({6, 7}), randn({7, 5})});
  }
  {  // (b) batch-sharded x, replicated w
    Builder b;
    Ref x = b.input({9, 7}, spec(m, {"data", xs::None}));
    Ref w = b.input({7, 5}, repl(m));
    b.out(b.op(OpKind::Matmul, {x, w}));
    expect_same_values(b, {randn({9, 7}), randn({7, 5})});
  }
  {  // (c) Megatron MLP with biases
    Builder b;
    Ref x = b.input({8, 16}, repl(m));
    Ref w1 = b.input({32, 16}, spec(m, {"data", xs::None}));
    Ref b1 = b.input({32}, spec(m, {"data"}));
    Ref w2 = b.input({16, 32}, spec(m, {xs::None, "data"}));
    Ref b2 = b.input({16}, repl(m));
    Ref h = b.op(OpKind::Relu, {b.op(OpKind::Linear, {x, w1, b1})});
    b.out(b.op(OpKind::Linear, {h, w2, b2}));
    Partitioned p = expect_same_values(b, {randn({8, 16}), randn({32, 16}), randn({32}), randn({16, 32}), randn({16})});
    EXPECT_EQ(kinds(p)["all-reduce"], 1);
  }
  {  // (d) FSDP: weight gathered, the weight gradient reduce-scattered
    auto f = make_mesh(4, {4}, {"fsdp"});
    Builder b;
    Ref x = b.input({8, 16}, spec(f, {"fsdp", xs::None}));
    Ref w = b.input({32, 16}, spec(f, {"fsdp", xs::None}));
    Ref g = b.input({8, 32}, spec(f, {"fsdp", xs::None}));
    b.out(b.op(OpKind::Linear, {x, w}));
    b.out(b.op(OpKind::Matmul, {permute(b, g, {1, 0}), x}));
    Partitioned p = expect_same_values(b, {randn({8, 16}), randn({32, 16}), randn({8, 32})},
                                       {spec(f, {"fsdp", xs::None}), spec(f, {"fsdp", xs::None})});
    EXPECT_EQ(kinds(p)["all-gather"], 1);
    EXPECT_EQ(kinds(p)["reduce-scatter"], 1);
  }
}

TEST(SpmdValues, DataAndTensorParallelMlpOnA2dMesh) {
  // x split on data, W1 column- and W2 row-split on model: one all-reduce, over the model
  // axis only (groups {0,1} and {2,3}), and the output stays split on data.
  auto m = make_mesh(4, {2, 2}, {"data", "model"});
  Builder b;
  Ref x = b.input({6, 8}, spec(m, {"data", xs::None}));
  Ref w1 = b.input({10, 8}, spec(m, {"model", xs::None}));
  Ref w2 = b.input({8, 10}, spec(m, {xs::None, "model"}));
  Ref h = b.op(OpKind::Gelu, {b.op(OpKind::Linear, {x, w1})}, ops::attr::Gelu{}.pack());
  b.out(b.op(OpKind::Linear, {h, w2}));
  Partitioned p = expect_same_values(b, {randn({6, 8}), randn({10, 8}), randn({8, 10})});
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].from, "partial(model) {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(p.outputs[0].str(), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
}

TEST(SpmdValues, ReshapesSplitMergeOrReplicate) {
  auto m = mesh4();
  auto one = [&](const Shape& from, const Sharding& s, const Shape& to) {
    Builder b;
    Ref x = b.input(from, s);
    b.out(reshape(b, b.op(OpKind::Exp, {x}), to));
    return expect_same_values(b, {randn(from)});
  };
  Partitioned p = one({12}, spec(m, {"data"}), {4, 3});  // split: the major dim takes the tiles
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  p = one({5, 3, 2}, spec(m, {"data", xs::None, xs::None}), {5, 6});  // uneven batch, minor dims merged
  EXPECT_EQ(p.collectives.size(), 0u);
  EXPECT_EQ(p.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  p = one({6}, spec(m, {"data"}), {2, 3});  // 2 rows cannot take 4 tiles: replicated first
  EXPECT_EQ(kinds(p)["all-gather"], 1);
  EXPECT_EQ(p.outputs[0].str(), "{replicated}");
  p = one({5, 4}, spec(m, {"data", xs::None}), {20});  // an uneven major dim cannot merge
  EXPECT_EQ(kinds(p)["all-gather"], 1);
}

TEST(SpmdValues, S8ReshardsKeepValues) {
  auto m = make_mesh(4, {2, 2}, {"a", "b"});
  auto one = [&](const Sharding& from, const Sharding& to, const Shape& s) {
    Builder b;
    Ref x = b.input(s, from);
    b.out(b.constrain(b.op(OpKind::Exp, {x}), to));
    return expect_same_values(b, {randn(s)});
  };
  const Shape s{6, 5};  // uneven on 4 and on 2
  EXPECT_EQ(kinds(one(spec(m, {xs::axes("a", "b"), xs::None}), spec(m, {xs::None, xs::axes("a", "b")}), s))["all-to-all"], 1);
  EXPECT_EQ(kinds(one(spec(m, {xs::axes("a", "b"), xs::None}), spec(m, {xs::axes("b", "a"), xs::None}), s))["collective-permute"], 1);
  EXPECT_EQ(kinds(one(spec(m, {"a", "b"}), repl(m), s))["all-gather"], 2);
  EXPECT_EQ(one(repl(m), spec(m, {"b", "a"}), s).collectives.size(), 0u);
  EXPECT_EQ(kinds(one(spec(m, {"a", xs::None}), spec(m, {"a", "b"}), s)).size(), 0u);  // a local slice
  EXPECT_EQ(one(spec(m, {"a", xs::None}), spec(m, {"b", "a"}), s).warnings.size(), 1u);
  {  // partial -> tiled: reduce-scatter, uneven
    Builder b;
    Ref x = b.input({6, 5}, spec(m, {xs::axes("a", "b"), xs::None}));
    b.out(b.constrain(sum(b, x, {0}), spec(m, {xs::axes("a", "b")})));
    EXPECT_EQ(kinds(expect_same_values(b, {randn({6, 5})}))["reduce-scatter"], 1);
  }
}
