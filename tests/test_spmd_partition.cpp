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

#include "axle/xs.h"
#include "compiler/program.h"
#include "core/tensor_impl.h"
#include "ops/op.h"
#include "spmd/device_count.h"
#include "spmd/partition.h"
#include "spmd/rules.h"
#include "spmd/sharding.h"

using namespace axle;
using namespace axle::spmd;
using compiler::NodeKind;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;
using ops::OpKind;

namespace {

// A mesh over n devices (the device count set to n for it).
std::shared_ptr<const xs::Mesh> make_mesh(int64_t n, std::vector<int64_t> shape, std::vector<std::string> names) {
  setenv("AXLE_CPU_DEVICES", std::to_string(n).c_str(), 1);
  reset_device_count();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  return std::make_shared<const xs::Mesh>(ids, shape, names);
}
std::shared_ptr<const xs::Mesh> mesh4() { return make_mesh(4, {4}, {"data"}); }

Sharding spec(const std::shared_ptr<const xs::Mesh>& m, const xs::PartitionSpec& s) {
  return Sharding::from_spec(*m, s, int64_t(s.size()), "test");
}
Sharding repl(const std::shared_ptr<const xs::Mesh>& m) { return Sharding::replicated(m); }

Tensor meta_tensor(const ops::Meta& m) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = m.dtype;
  impl->device = Device(DeviceType::XLA, 0);
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->refresh();
  return Tensor(std::move(impl));
}

// Builds a global Program; each op's outputs come from its shape rule.
struct Builder {
  Program p;
  std::vector<Sharding> shardings;
  std::vector<std::string> labels;
  Ref input(const Shape& s, const Sharding& sh, const std::string& label = "") {
    PNode n;
    n.kind = NodeKind::Data;
    n.input = p.num_inputs++;
    n.outs = {{s, kFloat32}};
    p.nodes.push_back(n);
    shardings.push_back(sh);
    labels.push_back(label);
    return {int(p.nodes.size()) - 1, 0};
  }
  Ref op(OpKind k, std::vector<Ref> in, ops::Attrs a = {}) {
    PNode n;
    n.kind = NodeKind::Op;
    n.op = k;
    n.attrs = a;
    n.operands = in;
    ops::Tensors t;
    for (const Ref& r : in) t.push_back(r.node < 0 ? Tensor() : meta_tensor(p.nodes[size_t(r.node)].outs[size_t(r.index)]));
    n.outs = ops::op_def(k).infer(t, a);
    p.nodes.push_back(n);
    return {int(p.nodes.size()) - 1, 0};
  }
  Ref constrain(Ref x, const Sharding& s) {
    std::vector<int64_t> enc;
    encode(s, enc);
    return op(OpKind::ShardingConstraint, {x}, ops::attr::ShardingConstraint{.on_grad = false, .sharding = enc}.pack());
  }
  Ref reshape(Ref x, Shape s) { return op(OpKind::Reshape, {x}, ops::attr::Reshape{.shape = s}.pack()); }
  Ref permute(Ref x, Shape d) { return op(OpKind::Permute, {x}, ops::attr::Permute{.dims = d}.pack()); }
  Ref sum(Ref x, Shape dims, bool keepdim = false) {
    return op(OpKind::Sum, {x}, ops::attr::Sum{.keepdim = keepdim, .dims = dims}.pack());
  }
  Ref amax(Ref x, Shape dims) { return op(OpKind::Amax, {x}, ops::attr::Amax{.keepdim = false, .dims = dims}.pack()); }
  void out(Ref r) { p.outputs.push_back(r); }
  Partitioned partition(std::vector<std::optional<Sharding>> pins = {}) {
    p.name = "test";
    p.verify("built by the test");
    PartitionOptions o;
    o.output_pins = pins;
    o.input_labels = labels;
    return spmd::partition(p, shardings, o);
  }
};

// Collectives by kind.
std::map<std::string, int> kinds(const Partitioned& p) {
  std::map<std::string, int> k;
  for (const CollectiveNote& c : p.collectives) ++k[c.kind];
  return k;
}
int count_local(const Partitioned& p, OpKind k) {
  int c = 0;
  for (const PNode& n : p.local.nodes) c += !n.dead && n.kind == NodeKind::Op && n.op == k;
  return c;
}
int collective_ops(const Partitioned& p) {
  return count_local(p, OpKind::AllReduce) + count_local(p, OpKind::AllGather) + count_local(p, OpKind::ReduceScatter) +
         count_local(p, OpKind::AllToAll) + count_local(p, OpKind::CollectivePermute);
}

}  // namespace

// ---- propagation

TEST(SpmdPropagate, ForwardFromAShardedInput) {
  auto m = mesh4();
  Builder b;
  Ref x = b.input({8, 6}, spec(m, {"data", xs::None}));
  Ref w = b.input({6}, repl(m));
  Ref y = b.op(OpKind::Relu, {b.op(OpKind::Add, {x, w})});
  Ref s = b.sum(y, {1});
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
  Ref t = b.permute(e, {1, 0});
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
  b.out(b.permute(y, {1, 0}));
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
  Ref f = b.reshape(x, {8, 60});        // (B, C, H, W) -> (B, CHW)
  Ref u = b.reshape(f, {8, 1, 60});     // unsqueeze
  Ref s = b.reshape(u, {8, 60});        // squeeze
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
  Ref x = b.input({2, 8}, spec(m, {xs::None, "data"}), "x");
  b.out(b.reshape(x, {16}));
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
  Ref x = b.input({8, 16}, spec(m, {"fsdp", xs::None}), "x");
  Ref w = b.input({32, 16}, spec(m, {"fsdp", xs::None}), "w");
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
  Ref x = b.input({8, 16}, spec(m, {"fsdp", xs::None}), "x");
  Ref g = b.input({8, 32}, spec(m, {"fsdp", xs::None}), "grad");
  // dW = g^T @ x contracts the batch, sharded on both: Partial, then the weight's sharding.
  Ref dw = b.op(OpKind::Matmul, {b.permute(g, {1, 0}), x});
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
  Ref s = b.sum(x, {0});  // [6], partial over data
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
  b.out(b.sum(x, {0}));
  b.out(b.amax(x, {0}));
  b.out(b.sum(x, {1}));  // not over the sharded dim: no mask
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
  b.out(b.sum(x, {0}));
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
  b.out(b.op(OpKind::Div, {b.sum(x, {0}), n}));
  Partitioned p = b.partition();
  EXPECT_EQ(kinds(p)["all-reduce"], 1);
  EXPECT_EQ(p.collectives.size(), 1u);
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
  Ref x = b.input({8, 8}, spec(m, {"a", "b"}), "x");
  // dims (a, b) -> (b, a): no single collective does it.
  b.out(b.constrain(b.op(OpKind::Exp, {x}), spec(m, {"b", "a"})));
  Partitioned p = b.partition();
  // Same tile counts per dim: a collective-permute, no rematerialization.
  EXPECT_EQ(kinds(p)["collective-permute"], 1);
  EXPECT_TRUE(p.warnings.empty());
  Builder c;
  Ref y = c.input({8, 8}, spec(m, {"a", xs::None}), "y");
  c.out(c.constrain(c.op(OpKind::Exp, {y}), spec(m, {"b", "a"})));
  Partitioned q = c.partition();
  ASSERT_EQ(q.warnings.size(), 1u);
  EXPECT_NE(q.warnings[0].find("full rematerialization"), std::string::npos) << q.warnings[0];
  EXPECT_NE(explain_table(q, "g").find("warning: full rematerialization"), std::string::npos);
}
