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
#include "spmd/sharding.h"
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
    const compiler::Program p = lazy::to_program(lazy::build_graph({g.impl()->lazy->ir}));
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

