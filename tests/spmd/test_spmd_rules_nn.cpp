// The SPMD partitioner's device ops (src/ops/spmd.h: sharding_constraint, shard_slice,
// mask_padding) on every device of dist::run_on_devices, uneven shards and infinite fills
// included, and their attribute encoders (src/spmd/device_ops.h); then the nn ops' rules
// (src/spmd/rules_nn.cpp: conv, pooling, along-dim ops, nll_loss) and BatchNorm's global
// statistics, each partitioned program run on its devices against one device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "axle/axle.h"
#include "compiler/program.h"
#include "dist/local_devices.h"
#include "lazy/graph.h"
#include "lazy/ir.h"
#include "ops/spmd.h"
#include "spmd/device_count.h"
#include "spmd/device_ops.h"
#include "spmd/rules.h"
#include "spmd/sharding.h"
#include "random.h"
#include "spmd_harness.h"
#include "test_util.h"

namespace {

using namespace axle;
using test::error_of;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// fn(d) on devices 0..n-1 (device threads, one kernel thread each); results per device.
std::vector<Tensor> per_device(int n, const std::function<Tensor(int)>& fn) {
  std::vector<Tensor> out(static_cast<size_t>(n));
  dist::run_on_devices(n, [&](int d) { out[size_t(d)] = fn(d); }, 1);
  return out;
}

Tensor arange_f(int64_t n, double start = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(start + double(i));
  return from_vector(v, {n});
}

// ---- shard_slice
TEST(SpmdDeviceOps, ShardSliceTwoByTwoOnEachDevice) {
  // (5, 7) over a 2x2 tiling: shards of (3, 4); device d holds tile (d / 2, d % 2).
  const Tensor x = arange_f(35).reshape({5, 7});
  const std::vector<int64_t> layout{2, 2, 2, 0, 0, 0, 1, 1, 0, 1, 1};
  const std::vector<Tensor> s = per_device(4, [&](int) { return ops::shard_slice(x, layout); });
  for (int d = 0; d < 4; ++d) {
    ASSERT_EQ(s[size_t(d)].shape(), (Shape{3, 4})) << d;
    const std::vector<float> got = s[size_t(d)].contiguous().to_vector<float>();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t gi = (d / 2) * 3 + i, gj = (d % 2) * 4 + j;
        const float want = gi < 5 && gj < 7 ? float(gi * 7 + gj) : 0.0f;
        EXPECT_EQ(got[size_t(i * 4 + j)], want) << "device " << d << " at " << i << "," << j;
      }
  }
}

TEST(SpmdDeviceOps, ShardSliceUnevenVectorPadsWithZeros) {
  // A length-(N+1) vector on N devices: shards of 2, the tail zero-padded, some all padding.
  for (int n : {2, 3, 4}) {
    const Tensor x = arange_f(n + 1, 1);  // 1..n+1: no zeros of its own
    std::vector<int64_t> layout{1, n};
    for (int d = 0; d < n; ++d) layout.push_back(d);
    const std::vector<Tensor> s = per_device(n, [&](int) { return ops::shard_slice(x, layout); });
    for (int d = 0; d < n; ++d) {
      ASSERT_EQ(s[size_t(d)].shape(), (Shape{2})) << n << " devices, device " << d;
      const std::vector<float> got = s[size_t(d)].to_vector<float>();
      for (int i = 0; i < 2; ++i) {
        const int g = 2 * d + i;
        EXPECT_EQ(got[size_t(i)], g < n + 1 ? float(g + 1) : 0.0f) << n << " devices, device " << d << ", " << i;
      }
    }
  }
}

TEST(SpmdDeviceOps, ShardSliceOfANonContiguousView) {
  // The transpose of a (3, 4): dim 0 (size 4) in 2 tiles, the device on the second tile.
  const Tensor x = arange_f(12).reshape({3, 4}).t();
  const std::vector<Tensor> s = per_device(2, [&](int) { return ops::shard_slice(x, {2, 2, 1, 0, 0, 1, 0}); });
  EXPECT_EQ(s[1].contiguous().to_vector<float>(), (std::vector<float>{2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(s[0].contiguous().to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9}));
}

TEST(SpmdDeviceOps, OffADeviceThreadIsDeviceZero) {
  ASSERT_EQ(dist::this_device(), -1);
  const Tensor x = arange_f(5, 1);
  // Device 0 holds tile 1 here: [4, 5, 0].
  EXPECT_EQ(ops::shard_slice(x, {1, 2, 1, 0}).to_vector<float>(), (std::vector<float>{4, 5, 0}));
  EXPECT_EQ(ops::mask_padding(arange_f(3, 1), 0, 5, -1, {1, 0}).to_vector<float>(), (std::vector<float>{1, 2, -1}));
}

// ---- mask_padding
TEST(SpmdDeviceOps, MaskPaddingWithInfinitiesOnEachDevice) {
  // All-negative data of length 5 on 4 devices: the padding would win an amax as 0; masked
  // with -inf the largest local max is the global max.
  const Tensor x = from_vector(std::vector<float>{-5, -3, -4, -2, -6}, {5});
  const std::vector<int64_t> slice_layout{1, 4, 0, 1, 2, 3}, tiles{0, 1, 2, 3};
  const std::vector<Tensor> m = per_device(4, [&](int) {
    return ops::mask_padding(ops::shard_slice(x, slice_layout), 0, 5, -kInf, tiles);
  });
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(m[0].to_vector<float>(), (std::vector<float>{-5, -3}));
  EXPECT_EQ(m[1].to_vector<float>(), (std::vector<float>{-4, -2}));
  EXPECT_EQ(m[2].to_vector<float>(), (std::vector<float>{-6, ninf}));
  EXPECT_EQ(m[3].to_vector<float>(), (std::vector<float>{ninf, ninf}));
  float best = ninf;
  for (const Tensor& t : m) best = std::max(best, amax(t).item<float>());
  EXPECT_EQ(best, -2.0f);
  // +inf for a min over positive data.
  const std::vector<Tensor> p = per_device(4, [&](int) {
    return ops::mask_padding(ops::shard_slice(neg(x), slice_layout), 0, 5, kInf, tiles);
  });
  EXPECT_EQ(p[2].to_vector<float>(), (std::vector<float>{6, std::numeric_limits<float>::infinity()}));
}

TEST(SpmdDeviceOps, MaskPaddingAlongAnInnerDimOfAView) {
  // x: a (2, 3) local shard, non-contiguous, of a dim 1 of global size 5 in tiles of 3 over
  // 2 devices (device 1 holds global columns 3, 4 and one padding column).
  const Tensor x = arange_f(6, 1).reshape({3, 2}).t();  // [[1, 3, 5], [2, 4, 6]]
  const std::vector<Tensor> m = per_device(2, [&](int) { return ops::mask_padding(x, -1, 5, 0.5, {0, 1}); });
  EXPECT_EQ(m[0].contiguous().to_vector<float>(), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(m[1].contiguous().to_vector<float>(), (std::vector<float>{1, 3, 0.5, 2, 4, 0.5}));
}

TEST(SpmdDeviceOps, MaskPaddingOfIntegerTargets) {
  // Loss targets: padding rows get ignore_index.
  const Tensor t = from_vector(std::vector<int64_t>{3, 1}, {2}, {.dtype = kInt64});
  const std::vector<Tensor> m = per_device(2, [&](int) { return ops::mask_padding(t, 0, 3, -100, {0, 1}); });
  EXPECT_EQ(m[0].to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(m[1].to_vector<int64_t>(), (std::vector<int64_t>{3, -100}));
}

TEST(SpmdDeviceOps, BadLayoutsAndFillsAreErrors) {
  const Tensor x = arange_f(6).reshape({2, 3});
  EXPECT_NE(error_of([&] { ops::shard_slice(x, {1, 2, 0, 1}); }).find("[shard_slice] expected a layout for a tensor of rank 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::shard_slice(x, {2, 2, 1, 0}); }).find("[shard_slice] expected a layout of 1 + 2 + devices * 2 ints"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::shard_slice(x, {2, 2, 1, 2, 0}); }).find("tile index along dim 0 in [0, 2), got 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::mask_padding(x.to(kInt64), 0, 3, 0.5, {0}); }).find("[mask_padding] expected an integer fill"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::mask_padding(x, 2, 3, 0, {0}); }).find("mask_padding"), std::string::npos);
  // A layout for 2 devices run on 3: the device without a row fails, naming itself.
  const std::string e = error_of([&] { per_device(3, [&](int) { return ops::shard_slice(x, {2, 2, 1, 0, 0, 1, 0}); }); });
  EXPECT_NE(e.find("running on device 2 but the layout covers 2 devices"), std::string::npos) << e;
}

TEST(SpmdDeviceOps, DeviceOpsAreNeverConstantFolded) {
  // expand(1.0) folds to a constant; the shard_slice of it must stay an op (each device its own).
  compiler::Program p;
  compiler::PNode c;
  c.kind = compiler::NodeKind::Constant;
  c.constant = full({}, 1.0);
  c.outs = {{{}, kFloat32}};
  p.nodes.push_back(c);
  compiler::PNode e;
  e.op = ops::OpKind::Expand;
  e.attrs = ops::attr::Expand{.shape = {5}}.pack();
  e.operands = {{0, 0}};
  e.outs = {{{5}, kFloat32}};
  p.nodes.push_back(e);
  compiler::PNode s;
  s.op = ops::OpKind::ShardSlice;
  s.attrs = ops::attr::ShardSlice{.layout = {1, 2, 0, 1}}.pack();
  s.operands = {{1, 0}};
  s.outs = {{{3}, kFloat32}};
  p.nodes.push_back(s);
  p.outputs = {{2, 0}};
  compiler::make_constant_folding_pass()->run(p);
  EXPECT_EQ(p.nodes[1].kind, compiler::NodeKind::Constant) << p.text();
  EXPECT_EQ(p.nodes[2].kind, compiler::NodeKind::Op) << p.text();
}

// ---- the encoders: a Sharding's tile tables
std::shared_ptr<const xs::Mesh> mesh_of(int64_t n, std::vector<int64_t> shape, std::vector<std::string> names) {
  setenv("AXLE_CPU_DEVICES", std::to_string(n).c_str(), 1);
  spmd::reset_device_count();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  return std::make_shared<const xs::Mesh>(ids, shape, names);
}

TEST(SpmdDeviceOps, ShardSliceAttrsGiveEachDeviceItsHostShard) {
  // Every device's shard_slice equals spmd::shard_host's shard for that device, padding
  // included: a 2x2 mesh (tiled both ways, partially replicated, both axes on one dim, the
  // device order reversed) and an uneven 1-D mesh of 3.
  const Tensor x = arange_f(35, 1).reshape({5, 7});
  auto m22 = mesh_of(4, {2, 2}, {"a", "b"});
  auto rev = std::make_shared<const xs::Mesh>(std::vector<int64_t>{3, 2, 1, 0}, std::vector<int64_t>{2, 2},
                                              std::vector<std::string>{"a", "b"});
  std::vector<spmd::Sharding> cases = {
      spmd::Sharding::from_spec(*m22, {"a", "b"}, 2, "test"), spmd::Sharding::from_spec(*m22, {"b", xs::None}, 2, "test"),
      spmd::Sharding::from_spec(*m22, {xs::None, xs::axes("a", "b")}, 2, "test"),
      spmd::Sharding::from_spec(*rev, {"b", "a"}, 2, "test"), spmd::Sharding::replicated(m22)};
  for (const spmd::Sharding& s : cases) {
    const std::vector<Tensor> want = spmd::shard_host(x, s);
    const ops::Attrs a = spmd::shard_slice_attrs(s, x.shape());
    const std::vector<Tensor> got = per_device(4, [&](int) { return ops::shard_slice(x, ops::attr::ShardSlice::of(a).layout); });
    for (int d = 0; d < 4; ++d) {
      ASSERT_EQ(got[size_t(d)].shape(), want[size_t(d)].shape()) << s.str() << " device " << d;
      EXPECT_EQ(got[size_t(d)].contiguous().to_vector<float>(), want[size_t(d)].contiguous().to_vector<float>())
          << s.str() << " device " << d;
    }
  }
  auto m3 = mesh_of(3, {3}, {"data"});
  const spmd::Sharding s3 = spmd::Sharding::from_spec(*m3, {xs::None, "data"}, 2, "test");
  const std::vector<Tensor> want = spmd::shard_host(x, s3);
  const ops::Attrs a = spmd::shard_slice_attrs(s3, x.shape());
  const std::vector<Tensor> got = per_device(3, [&](int) { return ops::shard_slice(x, ops::attr::ShardSlice::of(a).layout); });
  for (int d = 0; d < 3; ++d)
    EXPECT_EQ(got[size_t(d)].contiguous().to_vector<float>(), want[size_t(d)].contiguous().to_vector<float>()) << d;
  unsetenv("AXLE_CPU_DEVICES");
  spmd::reset_device_count();
}

TEST(SpmdDeviceOps, MaskPaddingAttrsMaskExactlyThePadding) {
  // (5, 7) tiled (2, 2) reversed: on each device, after masking both dims with -inf, the
  // elements that are not -inf are exactly the ones of x in its shard.
  const Tensor x = arange_f(35, 1).reshape({5, 7});
  mesh_of(4, {4}, {"data"});  // the device count
  auto rev = std::make_shared<const xs::Mesh>(std::vector<int64_t>{3, 2, 1, 0}, std::vector<int64_t>{2, 2},
                                              std::vector<std::string>{"a", "b"});
  const spmd::Sharding s = spmd::Sharding::from_spec(*rev, {"a", "b"}, 2, "test");
  const std::vector<Tensor> shards = spmd::shard_host(x, s);
  const ops::Attrs a0 = spmd::mask_padding_attrs(s, 0, 5, -kInf), a1 = spmd::mask_padding_attrs(s, 1, 7, -kInf);
  const std::vector<Tensor> got = per_device(4, [&](int d) {
    const ops::attr::MaskPadding p0 = ops::attr::MaskPadding::of(a0), p1 = ops::attr::MaskPadding::of(a1);
    return ops::mask_padding(ops::mask_padding(shards[size_t(d)], p0.dim, p0.global_size, p0.fill, p0.layout), p1.dim,
                             p1.global_size, p1.fill, p1.layout);
  });
  for (int d = 0; d < 4; ++d) {
    const std::vector<float> g = got[size_t(d)].contiguous().to_vector<float>();
    int64_t kept = 0;
    for (float v : g) kept += std::isfinite(v) ? 1 : 0;
    int64_t want = 1;
    for (int k = 0; k < 2; ++k) {
      const xs::Slice r = s.range(k, d, x.shape()[size_t(k)]);
      want *= r.stop - r.start;
    }
    EXPECT_EQ(kept, want) << "device " << d;
    for (float v : g) EXPECT_TRUE(!std::isfinite(v) || v >= 1) << "device " << d;  // no zero padding survives
  }
  unsetenv("AXLE_CPU_DEVICES");
  spmd::reset_device_count();
}

// ---- sharding_constraint
TEST(SpmdDeviceOps, ShardingConstraintIsTheIdentityAndConstrainsTheGradientOnRequest) {
  const std::vector<int64_t> enc{7, 1, 2};  // opaque to the ops layer
  for (bool on_grad : {false, true}) {
    Tensor x = arange_f(6).reshape({2, 3}).to(axle::device());
    x.set_requires_grad(true);
    Tensor y = ops::sharding_constraint(x, enc, on_grad);
    EXPECT_EQ(y.cpu().to_vector<float>(), x.cpu().to_vector<float>());
    (y * 3.0).sum().backward();
    const Tensor g = x.grad();
    ASSERT_TRUE(g.defined());
    // The gradient's graph: a constraint on it only with on_grad.
    int constraints = 0;
    const compiler::Program p = lazy::to_program(lazy::build_graph({lazy::lazy_of(g)->ir}));
    for (const compiler::PNode& n : p.nodes)
      if (n.kind == compiler::NodeKind::Op && n.op == ops::OpKind::ShardingConstraint) {
        ++constraints;
        EXPECT_EQ(ops::attr::ShardingConstraint::of(n.attrs).sharding, enc);
      }
    EXPECT_EQ(constraints, on_grad ? 1 : 0) << p.text();
    EXPECT_EQ(g.cpu().to_vector<float>(), std::vector<float>(6, 3.0f));
  }
}

}  // namespace

// ======================================================================== the nn rules
namespace {

using namespace axle::spmd_test;
using spmd::Partitioned;
using spmd::Sharding;

using axle::test::rnd;  // tests/support/random.h
Tensor ints(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s, {.dtype = kInt64}); }

ops::Attrs conv_attrs(std::vector<int64_t> extra = {}) {
  ops::Attrs a{.ints = {1, 1, 1, 1, 1, 1, 1}};  // stride 1, padding 1, dilation 1, groups 1
  a.ints.insert(a.ints.end(), extra.begin(), extra.end());
  return a;
}

/// The partitioned outputs of b equal the single-device ones within tol.
void expect_matches(const Builder& b, const Partitioned& pp, const std::vector<Tensor>& in, double tol,
                    const std::string& what) {
  EXPECT_TRUE(pp.opaque_ops.empty()) << what << ": opaque " << pp.opaque_ops[0];
  const std::vector<Tensor> want = run_global(b.p, in), got = run_partitioned(pp, b.p, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t j = 0; j < want.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), tol) << what << ": output " << j;
}

}  // namespace

// S9: conv2d with a batch-sharded input: forward and input gradient local, weight and bias
// gradients one all-reduce each; global batch 6 (uneven on 4: the last device all padding).
TEST(SpmdRulesNn, ConvBatchShardedForwardAndInputGradientAreLocal) {
  for (int64_t n : {2, 4}) {
    auto m = mesh1d(n);
    Builder b;
    Ref x = b.input({6, 3, 5, 5}, spec(m, {"data", xs::None, xs::None, xs::None}));
    Ref w = b.input({4, 3, 3, 3}, repl(m));
    Ref bias = b.input({4}, repl(m));
    Ref g = b.input({6, 4, 5, 5}, spec(m, {"data", xs::None, xs::None, xs::None}));
    b.out(b.op(OpKind::Conv2d, {x, w, bias}, conv_attrs()));
    b.out(b.op(OpKind::Conv2dBackwardInput, {g, w}, conv_attrs({6, 3, 5, 5})));
    const Partitioned pp = b.partition();
    EXPECT_EQ(collective_ops(pp), 0) << n << " devices\n" << pp.local.text();
    EXPECT_TRUE(pp.collectives.empty());
    EXPECT_EQ(pp.outputs[0].str(), spec(m, {"data", xs::None, xs::None, xs::None}).str());
    EXPECT_EQ(pp.outputs[1].str(), spec(m, {"data", xs::None, xs::None, xs::None}).str());
    expect_matches(b, pp, {rnd({6, 3, 5, 5}, 1), rnd({4, 3, 3, 3}, 2), rnd({4}, 3), rnd({6, 4, 5, 5}, 4)}, 1e-5,
                   std::to_string(n) + " devices");
  }
}

// conv_transpose2d (its forward is conv2d's input gradient): a batch-sharded input stays local.
TEST(SpmdRulesNn, ConvTransposeBatchShardedIsLocal) {
  for (int64_t n : {2, 4}) {
    auto m = mesh1d(n);
    Builder b;
    Ref x = b.input({6, 4, 3, 3}, spec(m, {"data", xs::None, xs::None, xs::None}));
    Ref w = b.input({4, 2, 3, 3}, repl(m));
    b.out(b.op(OpKind::ConvTranspose2d, {x, w},
               ops::attr::ConvTranspose2d{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 1,
                                          .dilation_w = 1, .groups = 1, .output_padding_h = 1, .output_padding_w = 0}
                   .pack()));
    const Partitioned pp = b.partition();
    EXPECT_EQ(collective_ops(pp), 0) << n << " devices\n" << pp.local.text();
    EXPECT_EQ(pp.outputs[0].str(), spec(m, {"data", xs::None, xs::None, xs::None}).str());
    expect_matches(b, pp, {rnd({6, 4, 3, 3}, 11), rnd({4, 2, 3, 3}, 12)}, 1e-5, std::to_string(n) + " devices");
  }
}

TEST(SpmdRulesNn, ConvWeightGradientContractsTheBatchOneAllReduceEach) {
  for (int64_t n : {2, 4}) {
    auto m = mesh1d(n);
    Builder b;
    Ref x0 = b.input({6, 3, 5, 5}, spec(m, {"data", xs::None, xs::None, xs::None}));
    Ref g0 = b.input({6, 4, 5, 5}, spec(m, {"data", xs::None, xs::None, xs::None}));
    // exp: the padding rows become 1, not 0, so unmasked padding would change the sums.
    Ref x = b.op(OpKind::Exp, {x0}), g = b.op(OpKind::Exp, {g0});
    Ref gw = b.op(OpKind::Conv2dBackwardWeight, {g, x}, conv_attrs({4, 3, 3, 3, 1}));
    b.out(gw);
    b.out(Builder::at(gw, 1));
    const Partitioned pp = b.partition();
    const auto k = kinds(pp);
    EXPECT_EQ(k.size(), 1u) << pp.local.text();
    EXPECT_TRUE(k.count("all-reduce") && (k.at("all-reduce") == 2 || k.at("all-reduce") == 1)) << pp.local.text();
    EXPECT_EQ(count_local(pp, OpKind::AllGather), 0);
    EXPECT_EQ(pp.outputs[0].str(), "{replicated}");
    expect_matches(b, pp, {rnd({6, 3, 5, 5}, 5), rnd({6, 4, 5, 5}, 6)}, 1e-5, std::to_string(n) + " devices");
  }
}

TEST(SpmdRulesNn, ConvSpatialShardingIsReplicatedFirst) {
  auto m = mesh1d(2);
  Builder b;
  Ref x = b.input({2, 3, 6, 5}, spec(m, {xs::None, xs::None, "data", xs::None}));
  Ref w = b.input({4, 3, 3, 3}, repl(m));
  b.out(b.op(OpKind::Conv2d, {x, w, Ref{}}, conv_attrs()));
  const Partitioned pp = b.partition();
  EXPECT_EQ(kinds(pp)["all-gather"], 1) << pp.local.text();
  expect_matches(b, pp, {rnd({2, 3, 6, 5}, 7), rnd({4, 3, 3, 3}, 8)}, 1e-5, "spatial");
}

TEST(SpmdRulesNn, PoolingKeepsBatchAndChannels) {
  auto m = make_mesh(4, {2, 2}, {"data", "model"});
  Builder b;
  Ref x = b.input({3, 4, 6, 6}, spec(m, {"data", "model", xs::None, xs::None}));
  Ref g = b.input({3, 4, 3, 3}, spec(m, {"data", "model", xs::None, xs::None}));
  const ops::Attrs win = ops::attr::MaxPool2d{.kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2, .dilation_h = 1, .dilation_w = 1}.pack();
  Ref mp = b.op(OpKind::MaxPool2d, {x}, win);
  b.out(mp);
  b.out(b.op(OpKind::MaxPool2dBackward, {g, x, Builder::at(mp, 1)}, win));
  b.out(b.op(OpKind::AvgPool2d, {x}, ops::attr::AvgPool2d{.kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2}.pack()));
  b.out(b.op(OpKind::AvgPool2dBackward, {g},
             ops::attr::AvgPool2dBackward{.kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2, .n = 3, .c = 4, .h = 6, .w = 6}.pack()));
  b.out(b.op(OpKind::AdaptiveAvgPool2d, {x}, ops::attr::AdaptiveAvgPool2d{.oh = 2, .ow = 3}.pack()));
  const Partitioned pp = b.partition();
  EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
  for (size_t j = 0; j < pp.outputs.size(); ++j)
    if (j != 1) {
      EXPECT_EQ(pp.outputs[j].str(), "{devices=[2,2,1,1]0,1,2,3}") << j;
    }
  expect_matches(b, pp, {rnd({3, 4, 6, 6}, 9), rnd({3, 4, 3, 3}, 10)}, 1e-5, "pooling");
}

// S5: softmax over a sharded (uneven) last dim of all-negative data gathers that dim first.
TEST(SpmdRulesNn, SoftmaxOverAShardedDimGathersIt) {
  for (int64_t n : {3, 4}) {
    auto m = mesh1d(n);
    Builder b;
    Ref x = b.input({3, 5}, spec(m, {xs::None, "data"}));
    b.out(b.op(OpKind::Softmax, {x}, ops::attr::Softmax{.dim = -1}.pack()));
    b.out(b.op(OpKind::LogSoftmax, {x}, ops::attr::LogSoftmax{.dim = 1}.pack()));
    const Partitioned pp = b.partition();
    EXPECT_GE(kinds(pp)["all-gather"], 1) << pp.local.text();
    EXPECT_EQ(kinds(pp).size(), 1u) << pp.local.text();
    expect_matches(b, pp, {rnd({3, 5}, 11, -9, -1)}, 1e-6, std::to_string(n) + " devices");
  }
}

TEST(SpmdRulesNn, SoftmaxKeepsTheOtherDimsSharded) {
  auto m = mesh1d(4);
  Builder b;
  Ref x = b.input({6, 5}, spec(m, {"data", xs::None}));
  Ref y = b.op(OpKind::Softmax, {x}, ops::attr::Softmax{.dim = 1}.pack());
  Ref g = b.input({6, 5}, spec(m, {"data", xs::None}));
  b.out(y);
  b.out(b.op(OpKind::SoftmaxBackward, {g, y}, ops::attr::SoftmaxBackward{.dim = 1}.pack()));
  const Partitioned pp = b.partition();
  EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
  EXPECT_EQ(pp.outputs[0].str(), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(pp.outputs[1].str(), "{devices=[4,1]0,1,2,3}");
  expect_matches(b, pp, {rnd({6, 5}, 12), rnd({6, 5}, 13)}, 1e-6, "softmax rows");
}

// S5: argmax/argmin ties across shards take the lowest index, as on one device.
TEST(SpmdRulesNn, ArgmaxTiesAcrossShardsTakeTheLowestIndex) {
  for (int64_t n : {3, 4}) {
    auto m = mesh1d(n);
    Builder b;
    Ref x = b.input({2, 7}, spec(m, {xs::None, "data"}));
    b.out(b.op(OpKind::Argmax, {x}, ops::attr::Argmax{.dim = 1, .keepdim = false}.pack()));
    b.out(b.op(OpKind::Argmin, {x}, ops::attr::Argmin{.dim = -1, .keepdim = true}.pack()));
    const Partitioned pp = b.partition();
    // Row 0: the max 5 at 1, 4, 5 (tiles of 2 or 3: several shards); row 1: the min -3 at 3 and 6.
    const Tensor in = from_vector(std::vector<float>{0, 5, 1, 2, 5, 5, 0, 1, 1, 2, -3, 2, 2, -3}, {2, 7});
    const std::vector<Tensor> got = run_partitioned(pp, b.p, {in});
    EXPECT_EQ(got[0].to_vector<int64_t>(), (std::vector<int64_t>{1, 2})) << n << " devices";
    EXPECT_EQ(got[1].contiguous().to_vector<int64_t>(), (std::vector<int64_t>{0, 3})) << n << " devices";
    expect_matches(b, pp, {in}, 0, std::to_string(n) + " devices");
  }
}

TEST(SpmdRulesNn, IndexOpsGatherTheirDimAndKeepTheOthers) {
  auto m = mesh1d(4);
  Builder b;
  Ref x = b.input({6, 5}, spec(m, {"data", xs::None}));
  Ref y = b.input({6, 3}, spec(m, {"data", xs::None}));
  Ref idx = b.input({4}, repl(m), kInt64);
  Ref gi = b.input({6, 2}, spec(m, {"data", xs::None}), kInt64);
  b.out(b.op(OpKind::Cat, {x, y}, ops::attr::Cat{.dim = 1}.pack()));
  b.out(b.op(OpKind::Slice, {x}, ops::attr::Slice{.dim = 1, .start = 1, .end = 4, .step = 2}.pack()));
  b.out(b.op(OpKind::IndexSelect, {x, idx}, ops::attr::IndexSelect{.dim = 1}.pack()));
  b.out(b.op(OpKind::Gather, {x, gi}, ops::attr::Gather{.dim = 1}.pack()));
  Ref y2 = b.op(OpKind::Slice, {y}, ops::attr::Slice{.dim = 1, .start = 0, .end = 2, .step = 1}.pack());
  b.out(b.op(OpKind::ScatterAdd, {y2, gi}, ops::attr::ScatterAdd{.dim = 1, .input_shape = {6, 5}}.pack()));
  b.out(b.op(OpKind::SliceBackward, {y}, ops::attr::SliceBackward{.dim = 1, .start = 1, .end = 4, .step = 1, .input_shape = {6, 5}}.pack()));
  b.out(b.op(OpKind::IndexAdd, {b.op(OpKind::IndexSelect, {x, idx}, ops::attr::IndexSelect{.dim = 1}.pack()), idx},
             ops::attr::IndexAdd{.dim = 1, .input_shape = {6, 5}}.pack()));
  const Partitioned pp = b.partition();
  EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
  for (size_t j = 0; j < pp.outputs.size(); ++j) EXPECT_EQ(pp.outputs[j].str(), "{devices=[4,1]0,1,2,3}") << j;
  expect_matches(b, pp, {rnd({6, 5}, 14), rnd({6, 3}, 15), ints({4, 0, 4, 2}, {4}), ints({0, 4, 1, 1, 3, 2, 2, 0, 4, 4, 1, 0}, {6, 2})},
                 1e-6, "index ops");
}

// Loss: nll_loss over a batch of 3 on 4 devices (the last device all padding) with an
// ignored target: padded rows must not count, the mean divides by the global count.
TEST(SpmdRulesNn, NllLossUnevenBatchWithIgnoreIndex) {
  for (int64_t red : {0, 1, 2}) {  // none, mean, sum
    auto m = mesh1d(4);
    Builder b;
    Ref lp0 = b.input({3, 5}, spec(m, {"data", xs::None}));
    Ref t = b.input({3}, spec(m, {"data"}), kInt64);
    Ref gr = b.input(red == 0 ? Shape{3} : Shape{}, red == 0 ? spec(m, {"data"}) : repl(m));
    // -exp: padding rows become -1, not 0: counted, they would change sum and count.
    Ref lp = b.op(OpKind::Neg, {b.op(OpKind::Exp, {lp0})});
    const ops::Attrs a = ops::attr::NllLoss{.reduction = red, .ignore_index = -100}.pack();
    b.out(b.op(OpKind::NllLoss, {lp, t}, a));
    b.out(b.op(OpKind::NllLossBackward, {gr, t, lp}, a));
    const Partitioned pp = b.partition();
    if (red == 0) {
      EXPECT_EQ(collective_ops(pp), 0) << pp.local.text();
    } else {  // sum: the loss; mean: also the global count, for the loss and for its gradient
      EXPECT_EQ(kinds(pp).size(), 1u) << pp.local.text();
      EXPECT_EQ(kinds(pp)["all-reduce"], red == 1 ? 3 : 1) << pp.local.text();
    }
    EXPECT_EQ(pp.outputs[1].str(), "{devices=[4,1]0,1,2,3}");
    for (const std::vector<int64_t>& tv : {std::vector<int64_t>{2, -100, 4}, std::vector<int64_t>{1, 0, 3}})
      expect_matches(b, pp, {rnd({3, 5}, 16), ints(tv, {3}), red == 0 ? rnd({3}, 17) : full({}, 0.7)}, 1e-6,
                     "reduction " + std::to_string(red));
  }
}

// S10's BatchNorm property: the statistics of a batch-sharded input are the global batch's
// (SyncBN semantics), through the Reduce rule on the composite's reductions; uneven batch.
TEST(SpmdRulesNn, BatchNormStatisticsAreGlobal) {
  const Tensor xv = rnd({6, 3, 4, 4}, 18, -2, 3), wv = rnd({3}, 19), bv = rnd({3}, 20);
  Tensor x = xv.to(axle::device()), w = wv.to(axle::device()), bb = bv.to(axle::device());
  Tensor rm = zeros({3}).to(axle::device()), rv = full({3}, 1.0).to(axle::device());
  const Tensor y = batch_norm(x, w, bb, rm, rv, true, 0.1, 1e-5);
  const lazy::Graph g = lazy::build_graph({lazy::lazy_of(y)->ir, lazy::lazy_of(rm)->ir, lazy::lazy_of(rv)->ir});
  const compiler::Program p = lazy::to_program(g);
  std::vector<Tensor> in;
  for (int k : g.inputs) in.push_back(g.nodes[size_t(k)]->data);
  for (int64_t n : {2, 4}) {
    auto m = mesh1d(n);
    std::vector<Sharding> sh;
    for (const Tensor& t : in) sh.push_back(t.dim() == 4 ? spec(m, {"data", xs::None, xs::None, xs::None}) : repl(m));
    const Partitioned pp = spmd::partition(p, sh);
    const std::vector<Tensor> want = run_global(p, in), got = run_partitioned(pp, p, in);
    for (size_t j = 0; j < want.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), 1e-5) << n << " devices, output " << j;
    EXPECT_GE(kinds(pp)["all-reduce"], 1) << pp.local.text();
    EXPECT_TRUE(pp.opaque_ops.empty()) << pp.opaque_ops[0];
  }
}

// The rules together on a traced training step: conv -> relu -> max_pool -> linear ->
// cross_entropy (log_softmax + nll_loss mean) and its backward, the batch (6, and an
// ignored target) sharded over 4 devices: loss and every gradient equal one device's, no
// op left opaque, the activations never gathered.
TEST(SpmdRulesNn, TracedCnnStepEqualsOneDevice) {
  const Device xla = axle::device();
  Tensor x = rnd({6, 2, 6, 6}, 21).to(xla), t = ints({1, 0, -100, 4, 2, 3}, {6}).to(xla);
  Tensor w1 = rnd({3, 2, 3, 3}, 22, -0.5, 0.5).to(xla), b1 = rnd({3}, 23).to(xla);
  Tensor w2 = rnd({5, 27}, 24, -0.3, 0.3).to(xla), b2 = rnd({5}, 25).to(xla);
  for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_requires_grad(true);
  const Tensor h = max_pool2d(relu(conv2d(x, w1, b1, {.padding = {1, 1}})));
  const Tensor loss = cross_entropy(linear(flatten(h, 1), w2, b2), t);
  loss.backward();
  std::vector<lazy::Value> roots{lazy::lazy_of(loss)->ir};
  for (Tensor* p : {&w1, &b1, &w2, &b2}) roots.push_back(lazy::lazy_of(p->grad())->ir);
  const lazy::Graph g = lazy::build_graph(roots);
  const compiler::Program p = lazy::to_program(g);
  std::vector<Tensor> in;
  for (int k : g.inputs) in.push_back(g.nodes[size_t(k)]->data);
  auto m = mesh1d(4);
  std::vector<Sharding> sh;
  for (const Tensor& v : in) {
    const bool batch = !v.shape().empty() && v.shape()[0] == 6;  // x and the target
    sh.push_back(batch ? (v.dim() == 4 ? spec(m, {"data", xs::None, xs::None, xs::None}) : spec(m, {"data"})) : repl(m));
  }
  const Partitioned pp = spmd::partition(p, sh);
  EXPECT_TRUE(pp.opaque_ops.empty()) << pp.opaque_ops[0];
  EXPECT_EQ(kinds(pp)["all-gather"], 0) << spmd::explain_table(pp, "cnn");
  const std::vector<Tensor> want = run_global(p, in), got = run_partitioned(pp, p, in);
  for (size_t j = 0; j < want.size(); ++j) EXPECT_LE(max_rel_diff(got[j], want[j]), 1e-5) << "output " << j;
}
