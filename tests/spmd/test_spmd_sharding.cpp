// The data model of SPMD sharding, without the lazy device: the device count from the
// environment (S1), meshes (S2), torch_xla's sharding strings (S3), placement math and
// host-side sharding (S4, S5 host part), the attribute encoding, and visualize_sharding
// (S15's golden text).
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "axle/tensor.h"
#include "axle/xs.h"
#include "spmd/device_count.h"
#include "spmd/sharding.h"
#include "test_util.h"

using axle::Tensor;
using axle::test::error_of;
namespace xs = axle::xs;
namespace spmd = axle::spmd;

// Readable failures: shardings, meshes and slices print as text.
namespace axle::spmd {
void PrintTo(const Sharding& s, std::ostream* os) { *os << s.str(); }
}  // namespace axle::spmd
namespace axle::xs {
void PrintTo(const Mesh& m, std::ostream* os) { *os << m.str(); }
void PrintTo(const Slice& s, std::ostream* os) { *os << "[" << s.start << ", " << s.stop << ")"; }
}  // namespace axle::xs

namespace {

// Sets the three device-count variables for one test (nullptr: unset) and restores them,
// re-reading the count both times.
class DeviceEnv {
 public:
  explicit DeviceEnv(const char* axle, const char* cpu = nullptr, const char* xla = nullptr) {
    for (int i = 0; i < 3; ++i) {
      const char* v = std::getenv(kVars[i]);
      saved_[i] = v ? std::optional<std::string>(v) : std::nullopt;
    }
    set(0, axle);
    set(1, cpu);
    set(2, xla);
    spmd::reset_device_count();
  }
  ~DeviceEnv() {
    for (int i = 0; i < 3; ++i) set(i, saved_[i] ? saved_[i]->c_str() : nullptr);
    spmd::reset_device_count();
  }

 private:
  static void set(int i, const char* v) {
    if (v)
      ::setenv(kVars[i], v, 1);
    else
      ::unsetenv(kVars[i]);
  }
  static constexpr const char* kVars[3] = {"AXLE_CPU_DEVICES", "CPU_NUM_DEVICES", "XLA_FLAGS"};
  std::optional<std::string> saved_[3];
};

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::string spec_string(const xs::Mesh& m, const xs::PartitionSpec& spec) {
  return spmd::Sharding::from_spec(m, spec, int64_t(spec.size()), "test").to_hlo_v1();
}

std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

// -1, -2, ...: all negative, so a zero in a shard can only be padding.
Tensor negatives(const axle::Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = -float(i + 1);
  return axle::from_vector(v, shape);
}

}  // namespace

// ---- S1: the device count ----

TEST(SpmdDevices, DefaultIsOne) {
  DeviceEnv env(nullptr);
  EXPECT_EQ(axle::runtime::global_runtime_device_count(), 1);
  EXPECT_EQ(axle::runtime::addressable_runtime_device_count(), 1);
}

TEST(SpmdDevices, EachVariableSetsTheCount) {
  {
    DeviceEnv env("4");
    EXPECT_EQ(axle::runtime::global_runtime_device_count(), 4);
    EXPECT_EQ(axle::runtime::addressable_runtime_device_count(), 4);
  }
  {
    DeviceEnv env(nullptr, "4");
    EXPECT_EQ(axle::runtime::global_runtime_device_count(), 4);
  }
  {
    DeviceEnv env(nullptr, nullptr, "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4");
    EXPECT_EQ(axle::runtime::global_runtime_device_count(), 4);
  }
  {
    DeviceEnv env(nullptr, nullptr, "--xla_cpu_enable_fast_math=false");  // no count in XLA_FLAGS
    EXPECT_EQ(axle::runtime::global_runtime_device_count(), 1);
  }
  {
    DeviceEnv env("3", "3", "--xla_force_host_platform_device_count=3");  // agreeing is fine
    EXPECT_EQ(axle::runtime::global_runtime_device_count(), 3);
  }
}

TEST(SpmdDevices, DisagreementNamesBoth) {
  {
    DeviceEnv env("4", "2");
    std::string e = error_of([] { axle::runtime::global_runtime_device_count(); });
    EXPECT_NE(e.find("AXLE_CPU_DEVICES=4"), std::string::npos) << e;
    EXPECT_NE(e.find("CPU_NUM_DEVICES=2"), std::string::npos) << e;
  }
  {
    DeviceEnv env(nullptr, "2", "--xla_force_host_platform_device_count=8");
    std::string e = error_of([] { axle::runtime::global_runtime_device_count(); });
    EXPECT_NE(e.find("CPU_NUM_DEVICES=2"), std::string::npos) << e;
    EXPECT_NE(e.find("XLA_FLAGS=--xla_force_host_platform_device_count=8"), std::string::npos) << e;
  }
}

TEST(SpmdDevices, BadValuesNameTheVariable) {
  for (const char* bad : {"0", "-2", "abc", "4x", "1e3", "99999999999999999999"}) {
    DeviceEnv env(bad);
    std::string e = error_of([] { axle::runtime::global_runtime_device_count(); });
    EXPECT_NE(e.find(std::string("[runtime] AXLE_CPU_DEVICES=") + bad + " is not a device count"), std::string::npos)
        << e;
  }
  {
    DeviceEnv env(nullptr, "zero");
    EXPECT_NE(error_of([] { axle::runtime::global_runtime_device_count(); }).find("CPU_NUM_DEVICES=zero is not"),
              std::string::npos);
  }
  {
    DeviceEnv env(nullptr, nullptr, "--xla_force_host_platform_device_count=");
    std::string e = error_of([] { axle::runtime::global_runtime_device_count(); });
    EXPECT_NE(e.find("XLA_FLAGS=--xla_force_host_platform_device_count= is not"), std::string::npos) << e;
  }
}

TEST(SpmdDevices, ReadOnceUntilReset) {
  DeviceEnv env("4");
  EXPECT_EQ(axle::runtime::global_runtime_device_count(), 4);
  ::setenv("AXLE_CPU_DEVICES", "2", 1);
  EXPECT_EQ(axle::runtime::global_runtime_device_count(), 4);  // cached
  spmd::reset_device_count();
  EXPECT_EQ(axle::runtime::global_runtime_device_count(), 2);
  EXPECT_EQ(spmd::device_count_source(), "AXLE_CPU_DEVICES=2");
}

// ---- Dim ----

TEST(SpmdDim, NamesIndicesTuples) {
  xs::Dim none, name("data"), index(1);
  EXPECT_TRUE(none.is_none());
  EXPECT_TRUE(xs::None.is_none());
  EXPECT_EQ(name.items(), std::vector<std::string>{"data"});
  EXPECT_EQ(index.items(), std::vector<std::string>{"#1"});
  xs::Dim t = xs::axes("data", 1);
  EXPECT_TRUE(t.is_tuple());
  EXPECT_EQ(t.items(), (std::vector<std::string>{"data", "#1"}));
  EXPECT_NE(error_of([] { xs::Dim::axes({xs::axes("a", "b"), xs::Dim("c")}); }).find("do not nest"), std::string::npos);
  EXPECT_NE(error_of([] { xs::Dim::axes({xs::Dim("a"), xs::None}); }).find("is None"), std::string::npos);
  EXPECT_NE(error_of([] { xs::Dim(-1); }).find("negative"), std::string::npos);
}

// ---- S2: meshes ----

TEST(SpmdMesh, ShapeLogicalMeshAndText) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.shape(), (std::vector<std::pair<std::string, int64_t>>{{"data", 2}, {"model", 2}}));
  Tensor lm = m.get_logical_mesh();
  EXPECT_EQ(lm.dtype(), axle::kInt64);
  EXPECT_EQ(lm.device(), axle::kCPU);
  EXPECT_EQ(lm.shape(), (axle::Shape{2, 2}));
  EXPECT_EQ(lm.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.get_axis_name_idx("model"), 1);
  EXPECT_EQ(m.get_axis_name_idx("nope"), std::nullopt);
  EXPECT_EQ(m.str(), "Mesh(device_ids=[0, 1, 2, 3], mesh_shape=(2, 2), axis_names=('data', 'model'))");

  xs::Mesh unnamed({3, 2, 1, 0}, {1, 4});
  EXPECT_EQ(unnamed.shape(), (std::vector<std::pair<std::string, int64_t>>{{"0", 1}, {"1", 4}}));
  EXPECT_EQ(unnamed.str(), "Mesh(device_ids=[3, 2, 1, 0], mesh_shape=(1, 4), axis_names=None)");
  xs::Mesh odd(iota(4), {4}, {"it's"});
  EXPECT_EQ(odd.str(), "Mesh(device_ids=[0, 1, 2, 3], mesh_shape=(4,), axis_names=('it\\'s',))");
  for (const xs::Mesh& mm : {m, unnamed, odd}) {
    auto back = xs::Mesh::from_str(mm.str());
    ASSERT_TRUE(back.has_value()) << mm.str();
    EXPECT_EQ(*back, mm);
  }
  EXPECT_FALSE(xs::Mesh::from_str("Mesh(device_ids=[0, 1], mesh_shape=(2,)").has_value());
  EXPECT_FALSE(xs::Mesh::from_str("not a mesh").has_value());
  EXPECT_FALSE(xs::Mesh::from_str(m.str() + " trailing").has_value());
  EXPECT_NE(m, unnamed);
  EXPECT_NE(m, xs::Mesh(iota(4), {2, 2}, {"data", "other"}));
}

TEST(SpmdMesh, EachInvalidMeshHasItsOwnError) {
  DeviceEnv env("4");
  auto err = [](std::vector<int64_t> ids, std::vector<int64_t> shape, std::vector<std::string> names) {
    return error_of([&] { xs::Mesh(ids, shape, names); });
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {err(iota(4), {2, 2}, {"data"}), "[Mesh] 1 axis names for a 2-D mesh_shape (2, 2)"},
      {err(iota(4), {2, 2}, {"data", "data"}), "[Mesh] axis name 'data' is used twice (axes 0 and 1)"},
      {err(iota(3), {3}, {"data"}), "[Mesh] 3 device ids but 4 runtime devices (AXLE_CPU_DEVICES=4)"},
      {err(iota(4), {2, 3}, {"a", "b"}), "[Mesh] 4 device ids but mesh_shape (2, 3) has 6 positions"},
      {err({0, 1, 1, 3}, {2, 2}, {"a", "b"}), "[Mesh] device id 1 appears twice in device_ids"},
      {err({0, 1, 2, 4}, {2, 2}, {"a", "b"}), "[Mesh] device id 4 is not in 0..3"},
      {err(iota(4), {4, 0}, {"a", "b"}), "has size 0 on axis 1"},
  };
  for (const auto& [got, want] : cases) EXPECT_NE(got.find(want), std::string::npos) << got << "\nwanted: " << want;
  // the errors are all different
  for (size_t i = 0; i < cases.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_NE(cases[i].first, cases[j].first);
}

TEST(SpmdMesh, OneDAndGlobalMesh) {
  DeviceEnv env("4");
  xs::Mesh m = xs::get_1d_mesh("data");
  EXPECT_EQ(m, xs::Mesh(iota(4), {4}, {"data"}));
  EXPECT_EQ(xs::get_1d_mesh().axis_names().size(), 0u);
  xs::set_global_mesh(m);
  ASSERT_TRUE(xs::get_global_mesh().has_value());
  EXPECT_EQ(*xs::get_global_mesh(), m);
  xs::set_global_mesh(std::nullopt);
  EXPECT_FALSE(xs::get_global_mesh().has_value());
}

TEST(SpmdMesh, ShardingSpecCanApplyByRank) {
  DeviceEnv env("4");
  xs::ShardingSpec s(xs::get_1d_mesh("data"), {"data", xs::None, xs::None, xs::None});
  EXPECT_TRUE(s.can_apply(axle::zeros({8, 1, 28, 28})));
  EXPECT_FALSE(s.can_apply(axle::zeros({8})));
  EXPECT_FALSE(s.minibatch);
}

// ---- S3: torch_xla's sharding strings ----

TEST(SpmdSharding, GoldenStrings) {
  DeviceEnv env("4");
  xs::Mesh m41(iota(4), {4, 1}, {"data", "model"});
  xs::Mesh m22(iota(4), {2, 2}, {"data", "model"});
  xs::Mesh m14({3, 2, 1, 0}, {1, 4});
  xs::Mesh m122(iota(4), {1, 2, 2}, {"r", "b", "m"});
  using xs::None;
  struct Row {
    const xs::Mesh& mesh;
    xs::PartitionSpec spec;
    const char* want;
  };
  std::vector<Row> rows = {
      {m41, {"data", None, None, None}, "{devices=[4,1,1,1]0,1,2,3}"},
      {m41, {"data", None}, "{devices=[4,1]0,1,2,3}"},
      {m22, {"data", "model"}, "{devices=[2,2]0,1,2,3}"},
      {m22, {"model", "data"}, "{devices=[2,2]0,2,1,3}"},
      {m22, {"data", None}, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"},
      {m22, {None, "model"}, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"},
      {m22, {xs::axes("data", "model"), None}, "{devices=[4,1]0,1,2,3}"},
      {m22, {xs::axes("model", "data"), None}, "{devices=[4,1]0,2,1,3}"},
      {m22, {"data"}, "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"},
      {m22, {None, None}, "{replicated}"},
      {m22, {}, "{replicated}"},
      {m41, {}, "{replicated}"},
      {m14, {0, 1}, "{devices=[1,4]3,2,1,0}"},
      {m122, {xs::axes("r", "b"), None}, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"},
      {m122, {None, xs::axes("r", "m")}, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"},
      // by index, as the names above
      {m22, {1, 0}, "{devices=[2,2]0,2,1,3}"},
      {m22, {xs::axes(0, 1), None}, "{devices=[4,1]0,1,2,3}"},
  };
  for (const Row& r : rows) EXPECT_EQ(spec_string(r.mesh, r.spec), r.want) << r.mesh.str();
  // a fully replicated spec is Kind::Replicated with no dims
  auto rep = spmd::Sharding::from_spec(m22, {None, None}, 2, "test");
  EXPECT_EQ(rep.kind, spmd::Sharding::Kind::Replicated);
  EXPECT_TRUE(rep.dim_axes.empty());
  auto tiled = spmd::Sharding::from_spec(m22, {"data", None}, 2, "test");
  EXPECT_EQ(tiled.kind, spmd::Sharding::Kind::Tiled);
  EXPECT_EQ(tiled.dim_axes, (std::vector<std::vector<int>>{{0}, {}}));
  // a manual sharding
  spmd::Sharding manual = tiled;
  manual.kind = spmd::Sharding::Kind::Manual;
  EXPECT_EQ(manual.to_hlo_v1(), "{manual}");
  // the mesh (2,2) with a permuted device order: groups' members sorted, as XLA
  xs::Mesh rev({3, 2, 1, 0}, {2, 2}, {"data", "model"});
  EXPECT_EQ(spec_string(rev, {"data", None}), "{devices=[2,1,2]2,3,0,1 last_tile_dim_replicate}");
  EXPECT_EQ(spec_string(rev, {"data", "model"}), "{devices=[2,2]3,2,1,0}");
}

TEST(SpmdSharding, OneDeviceIsReplicated) {
  DeviceEnv env("1");
  xs::Mesh m({0}, {1}, {"data"});
  EXPECT_EQ(spec_string(m, {"data", xs::None}), "{replicated}");
}

TEST(SpmdSharding, SpecErrors) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  using spmd::Sharding;
  EXPECT_NE(error_of([&] { Sharding::from_spec(m, {"data"}, 2, "mark_sharding"); })
                .find("[mark_sharding] partition spec length 1 != tensor rank 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Sharding::from_spec(m, {"batch", xs::None}, 2, "mark_sharding"); })
                .find("names mesh axis 'batch', but the mesh's axes are (data, model)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Sharding::from_spec(m, {2, xs::None}, 2, "mark_sharding"); })
                .find("names mesh axis index 2, but the mesh has 2 axes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Sharding::from_spec(m, {"data", xs::axes("model", "data")}, 2, "mark_sharding"); })
                .find("mesh axis data is used twice in the partition spec (entries 0 and 1)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Sharding::from_spec(m, {"data", 0}, 2, "mark_sharding"); }).find("used twice"),
            std::string::npos);
}

// ---- placement ----

TEST(SpmdSharding, PlacementFormulaOnA2x2Mesh) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"X", "Y"});
  const int64_t M = 4, N = 6, X = 2, Y = 2;
  Tensor t = axle::arange(0, M * N, 1, {.dtype = axle::kFloat32}).reshape({M, N});
  auto s = spmd::Sharding::from_spec(m, {"X", "Y"}, 2, "test");
  auto shards = spmd::shard_host(t, s);
  ASSERT_EQ(shards.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    int64_t a = i / Y, b = i % Y;
    Tensor want = t.narrow(0, a * M / X, M / X).narrow(1, b * N / Y, N / Y);
    EXPECT_EQ(shards[i].shape(), (axle::Shape{M / X, N / Y}));
    EXPECT_EQ(values(shards[i]), values(want)) << "device " << i;
    EXPECT_EQ(s.replica_id(i), 0);
  }
  EXPECT_EQ(values(spmd::assemble_host(shards, s, t.shape())), values(t));

  // replica ids: the device for replicated, the row for (None, 'Y')
  auto rep = spmd::Sharding::from_spec(m, {xs::None, xs::None}, 2, "test");
  auto col = spmd::Sharding::from_spec(m, {xs::None, "Y"}, 2, "test");
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rep.replica_id(i), i);
    EXPECT_EQ(col.replica_id(i), i / 2) << i;
  }
  // (None, 'Y'): devices of one column hold the same tile
  auto cs = spmd::shard_host(t, col);
  EXPECT_EQ(values(cs[0]), values(cs[2]));
  EXPECT_EQ(values(cs[1]), values(cs[3]));
  EXPECT_EQ(values(cs[1]), values(t.narrow(1, 3, 3)));
  EXPECT_EQ(values(spmd::assemble_host(cs, col, t.shape())), values(t));
}

TEST(SpmdSharding, TilesRangesAndReplicaGroups) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  auto s = spmd::Sharding::from_spec(m, {xs::axes("model", "data"), xs::None}, 2, "test");
  EXPECT_EQ(s.tiles(0), 4);
  EXPECT_EQ(s.tiles(1), 1);
  EXPECT_EQ(s.tiles(7), 1);
  // tile index: model coordinate major, data minor
  std::vector<int64_t> tile = {s.tile_index(0, 0), s.tile_index(0, 1), s.tile_index(0, 2), s.tile_index(0, 3)};
  EXPECT_EQ(tile, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(s.shard_shape({5, 3}), (axle::Shape{2, 3}));
  // uneven: n=5 over 4 tiles of 2
  std::vector<xs::Slice> want = {{0, 2}, {4, 5}, {2, 4}, {5, 5}};
  for (int d = 0; d < 4; ++d) EXPECT_EQ(s.range(0, d, 5), want[d]) << d;
  EXPECT_EQ(s.range(1, 3, 3), (xs::Slice{0, 3}));
  EXPECT_NE(error_of([&] { s.shard_shape({5}); }).find("is for rank 2"), std::string::npos);

  using G = std::vector<std::vector<int>>;
  EXPECT_EQ(s.groups({0}), (G{{0, 2}, {1, 3}}));
  EXPECT_EQ(s.groups({1}), (G{{0, 1}, {2, 3}}));
  EXPECT_EQ(s.groups({0, 1}), (G{{0, 1, 2, 3}}));
  EXPECT_EQ(s.groups({1, 0}), (G{{0, 2, 1, 3}}));
  EXPECT_EQ(s.groups({}), (G{{0}, {1}, {2}, {3}}));
  EXPECT_NE(error_of([&] { s.groups({2}); }).find("out of range"), std::string::npos);
  xs::Mesh rev({3, 2, 1, 0}, {2, 2}, {"data", "model"});
  auto r = spmd::Sharding::from_spec(rev, {"data", xs::None}, 2, "test");
  EXPECT_EQ(r.groups({1}), (G{{1, 0}, {3, 2}}));  // ordered by coordinate, not by id
  EXPECT_EQ(r.replicated_axes(), std::vector<int>{1});
  EXPECT_EQ(s.replicated_axes(), std::vector<int>{});
  auto p = r;
  p.partial_axes = {1};
  EXPECT_EQ(p.replicated_axes(), std::vector<int>{});
  EXPECT_EQ(spmd::Sharding::replicated().groups({}).size(), 4u);
}

// ---- S5, host part: uneven padding ----

TEST(SpmdSharding, UnevenVectorPadsWithZeros) {
  for (int n : {4, 3, 2}) {
    std::string ns = std::to_string(n);
    DeviceEnv env(ns.c_str());
    xs::Mesh m = xs::get_1d_mesh("data");
    auto s = spmd::Sharding::from_spec(m, {"data"}, 1, "test");
    Tensor t = negatives({n + 1});
    auto shards = spmd::shard_host(t, s);
    ASSERT_EQ(int(shards.size()), n);
    int64_t covered = 0;
    for (int d = 0; d < n; ++d) {
      EXPECT_EQ(shards[d].shape(), (axle::Shape{2})) << "n=" << n;
      auto r = s.range(0, d, n + 1);
      EXPECT_EQ(r.start, std::min<int64_t>(2 * d, n + 1));
      EXPECT_EQ(r.stop, std::min<int64_t>(2 * d + 2, n + 1));
      auto v = values(shards[d]);
      for (int64_t k = 0; k < 2; ++k) {
        if (r.start + k < r.stop) {
          EXPECT_EQ(v[k], -float(r.start + k + 1));
        } else {
          EXPECT_EQ(v[k], 0.0f) << "padding of device " << d;  // zero padding, right side
        }
      }
      covered += r.stop - r.start;
    }
    EXPECT_EQ(covered, n + 1);
    if (n == 4) {
      EXPECT_EQ(values(shards[3]), (std::vector<float>{0, 0}));  // entirely padding
    }
    EXPECT_EQ(values(spmd::assemble_host(shards, s, t.shape())), values(t));
  }
}

TEST(SpmdSharding, UnevenMatrixRoundTrips) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  Tensor t = negatives({5, 7});
  for (xs::PartitionSpec spec : std::vector<xs::PartitionSpec>{{"data", "model"},
                                                               {"model", "data"},
                                                               {xs::axes("model", "data"), xs::None},
                                                               {xs::None, "model"},
                                                               {xs::None, xs::None}}) {
    auto s = spmd::Sharding::from_spec(m, spec, 2, "test");
    auto shards = spmd::shard_host(t, s);
    for (const Tensor& sh : shards) EXPECT_EQ(sh.shape(), s.shard_shape({5, 7}));
    EXPECT_EQ(values(spmd::assemble_host(shards, s, t.shape())), values(t)) << s.str();
  }
  auto s = spmd::Sharding::from_spec(m, {"data", "model"}, 2, "test");
  auto shards = spmd::shard_host(t, s);
  EXPECT_EQ(shards[3].shape(), (axle::Shape{3, 4}));
  // device 3 holds rows 3..4 and cols 4..6, then a zero column and a zero row
  EXPECT_EQ(values(shards[3]), (std::vector<float>{-26, -27, -28, 0, -33, -34, -35, 0, 0, 0, 0, 0}));
  // a scalar (spec {}) and an empty tensor round-trip too
  auto scalar = spmd::Sharding::from_spec(m, {}, 0, "test");
  auto ss = spmd::shard_host(axle::scalar_tensor(-7), scalar);
  ASSERT_EQ(ss.size(), 4u);
  EXPECT_EQ(values(ss[3]), std::vector<float>{-7});
  EXPECT_EQ(values(spmd::assemble_host(ss, scalar, {})), std::vector<float>{-7});
  auto es = spmd::shard_host(axle::zeros({0, 7}), s);
  EXPECT_EQ(es[0].shape(), (axle::Shape{0, 4}));
  EXPECT_EQ(spmd::assemble_host(es, s, {0, 7}).shape(), (axle::Shape{0, 7}));
  // other dtypes take the same path
  Tensor ints = axle::arange(1, 36).reshape({5, 7});
  auto is = spmd::shard_host(ints, s);
  EXPECT_EQ(spmd::assemble_host(is, s, {5, 7}).to_vector<int64_t>(), ints.to_vector<int64_t>());
  EXPECT_NE(error_of([&] { spmd::assemble_host({shards[0], shards[1]}, s, {5, 7}); }).find("2 shards for 4 devices"),
            std::string::npos);
  auto wrong = shards;
  wrong[2] = axle::zeros({2, 4});
  EXPECT_NE(error_of([&] { spmd::assemble_host(wrong, s, {5, 7}); }).find("shard 2 has shape [2, 4], expected [3, 4]"),
            std::string::npos);
}

TEST(SpmdSharding, PartialShardsAreReducedPerGroup) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  auto s = spmd::Sharding::from_spec(m, {"data", xs::None}, 2, "test");
  s.partial_axes = {1};  // unreduced over 'model'
  // device d's shard: rows of its data tile, each element 10^d
  std::vector<Tensor> shards;
  for (int d = 0; d < 4; ++d) shards.push_back(axle::full({1, 2}, d == 0 ? 1 : d == 1 ? 10 : d == 2 ? 100 : 1000));
  Tensor sum = spmd::assemble_host(shards, s, {2, 2});
  EXPECT_EQ(values(sum), (std::vector<float>{11, 11, 1100, 1100}));
  s.partial_op = spmd::Reduce::Max;
  EXPECT_EQ(values(spmd::assemble_host(shards, s, {2, 2})), (std::vector<float>{10, 10, 1000, 1000}));
  s.partial_op = spmd::Reduce::Min;
  EXPECT_EQ(values(spmd::assemble_host(shards, s, {2, 2})), (std::vector<float>{1, 1, 100, 100}));
  // shard_host of a partial sum: the value once per group, zeros elsewhere; round trip
  s.partial_op = spmd::Reduce::Sum;
  Tensor t = negatives({2, 2});
  auto hs = spmd::shard_host(t, s);
  EXPECT_EQ(values(hs[1]), (std::vector<float>{0, 0}));
  EXPECT_EQ(values(hs[2]), (std::vector<float>{-3, -4}));
  EXPECT_EQ(values(spmd::assemble_host(hs, s, {2, 2})), values(t));
}

// ---- text, equality, encoding ----

TEST(SpmdSharding, StrEqualityHash) {
  DeviceEnv env("4");
  xs::Mesh m41(iota(4), {4, 1}, {"data", "model"});
  xs::Mesh m22(iota(4), {2, 2}, {"data", "model"});
  using spmd::Sharding;
  auto a = Sharding::from_spec(m41, {"data", xs::None}, 2, "t");
  auto b = Sharding::from_spec(m41, {"data", "model"}, 2, "t");  // a size-1 axis splits nothing
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  auto c = Sharding::from_spec(m22, {"data", "model"}, 2, "t");
  auto d = Sharding::from_spec(m22, {"model", "data"}, 2, "t");
  EXPECT_NE(c, d);
  EXPECT_NE(c.hash(), d.hash());
  auto r1 = Sharding::from_spec(m22, {xs::None, xs::None}, 2, "t");
  EXPECT_EQ(r1, Sharding::replicated());
  EXPECT_EQ(r1.hash(), Sharding::replicated().hash());
  EXPECT_TRUE(r1.is_replicated());
  EXPECT_EQ(Sharding::replicated().num_devices(), 4);
  auto p = Sharding::from_spec(m22, {"data", xs::None}, 2, "t");
  EXPECT_EQ(p.str(), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  p.partial_axes = {1};
  EXPECT_TRUE(p.is_partial());
  EXPECT_FALSE(p.is_replicated());
  EXPECT_EQ(p.str(), "partial(model) {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_NE(p, Sharding::from_spec(m22, {"data", xs::None}, 2, "t"));
  auto q = p;
  q.partial_op = spmd::Reduce::Max;
  EXPECT_EQ(q.str(), "partial-max(model) {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_NE(p, q);
  // the same layout on another mesh object with equal ids is equal
  xs::Mesh other(iota(4), {2, 2}, {"x", "y"});
  EXPECT_EQ(c, Sharding::from_spec(other, {"x", "y"}, 2, "t"));
}

TEST(SpmdSharding, EncodeDecodeRoundTrips) {
  DeviceEnv env("4");
  xs::Mesh m22(iota(4), {2, 2}, {"data", "model"});
  xs::Mesh rev({3, 2, 1, 0}, {2, 2}, {"data", "model"});
  EXPECT_EQ(spmd::mesh_id(m22), spmd::mesh_id(xs::Mesh(iota(4), {2, 2}, {"data", "model"})));
  EXPECT_NE(spmd::mesh_id(m22), spmd::mesh_id(rev));
  EXPECT_EQ(*spmd::mesh_by_id(spmd::mesh_id(rev)), rev);
  using spmd::Sharding;
  std::vector<Sharding> cases = {
      Sharding::replicated(),
      Sharding::from_spec(m22, {xs::None, xs::None}, 2, "t"),
      Sharding::from_spec(m22, {"data", "model"}, 2, "t"),
      Sharding::from_spec(rev, {xs::axes("model", "data"), xs::None, xs::None}, 3, "t"),
  };
  Sharding partial = Sharding::from_spec(m22, {"data", xs::None}, 2, "t");
  partial.partial_axes = {1};
  partial.partial_op = spmd::Reduce::Min;
  cases.push_back(partial);
  Sharding manual = Sharding::from_spec(m22, {xs::None, "model"}, 2, "t");
  manual.kind = Sharding::Kind::Manual;
  cases.push_back(manual);
  for (const Sharding& s : cases) {
    std::vector<int64_t> enc = {42};  // encode appends
    spmd::encode(s, enc);
    Sharding back = spmd::decode(enc.data() + 1, enc.size() - 1);
    EXPECT_EQ(back, s) << s.str();
    EXPECT_EQ(back.kind, s.kind);
    EXPECT_EQ(back.dim_axes, s.dim_axes);
    EXPECT_EQ(back.partial_axes, s.partial_axes);
    EXPECT_EQ(back.partial_op, s.partial_op);
    EXPECT_EQ(back.str(), s.str());
    EXPECT_EQ(back.mesh == nullptr, s.mesh == nullptr);
    if (s.mesh) {
      EXPECT_EQ(*back.mesh, *s.mesh);
    }
    // a cut encoding is an error, never a crash
    EXPECT_NE(error_of([&] { spmd::decode(enc.data() + 1, enc.size() - 2); }), "(no error)");
  }
  std::vector<int64_t> junk = {7, 0, 0, 0, 0};
  EXPECT_NE(error_of([&] { spmd::decode(junk.data(), junk.size()); }).find("sharding encoding"), std::string::npos);
  EXPECT_NE(error_of([] { spmd::mesh_by_id(1 << 30); }).find("no mesh with id"), std::string::npos);
}

TEST(SpmdSharding, MalformedShardingsAreErrors) {
  DeviceEnv env("4");
  xs::Mesh m(iota(4), {2, 2}, {"data", "model"});
  spmd::Sharding s = spmd::Sharding::from_spec(m, {"data", xs::None}, 2, "t");
  EXPECT_NE(error_of([&] { s.replica_id(9); }).find("device 9 is not in"), std::string::npos);
  EXPECT_NE(error_of([&] { s.range(0, -1, 4); }).find("device -1 is not in"), std::string::npos);
  s.dim_axes[1] = {5};  // no such mesh axis
  EXPECT_NE(error_of([&] { s.to_hlo_v1(); }).find("mesh axis 5 out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { s.tile_index(1, 0); }).find("mesh axis 5 out of range"), std::string::npos);
  s.dim_axes[1] = {0};  // axis 0 splits two dims
  EXPECT_NE(error_of([&] { s.to_hlo_v1(); }).find("listed twice"), std::string::npos);
  spmd::Sharding p = spmd::Sharding::replicated();
  p.partial_axes = {0};  // partial without a mesh
  EXPECT_NE(error_of([&] { spmd::shard_host(axle::zeros({2}), p); }).find("without a mesh"), std::string::npos);
  EXPECT_NE(error_of([&] { spmd::assemble_host({}, p, {2}); }), "(no error)");
}

TEST(SpmdSharding, ParseHloV1) {
  auto t = spmd::parse_hlo_v1("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(t.dims, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(t.devices, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_TRUE(t.last_tile_dim_replicate);
  EXPECT_TRUE(spmd::parse_hlo_v1("{replicated}").replicated);
  EXPECT_TRUE(spmd::parse_hlo_v1("{manual}").manual);
  for (const char* bad : {"", "{devices=[2,2]0,1,2}", "{devices=[2]0,0}", "{devices=[2]0,1", "{devices=[0]}",
                          "{devices=[2]0,1 extra}", "{devices=[4]0,1,2,3 last_tile_dim_replicate}",
                          "{maximal device=0}"})
    EXPECT_NE(error_of([&] { spmd::parse_hlo_v1(bad); }).find(std::string("cannot read sharding '") + bad + "'"),
              std::string::npos)
        << bad;
}

// ---- S15: visualize_sharding ----

TEST(SpmdVisualize, GoldenText) {
  DeviceEnv env("4");
  using xs::debugging::visualize_sharding;
  EXPECT_EQ(visualize_sharding("{devices=[4]0,1,2,3}"),
            "Visualizing {devices=[4]0,1,2,3} (showing up to the first two dimensions)\n"
            "┌─────────┬─────────┬─────────┬─────────┐\n"
            "│  CPU 0  │  CPU 1  │  CPU 2  │  CPU 3  │\n"
            "└─────────┴─────────┴─────────┴─────────┘\n");
  EXPECT_EQ(visualize_sharding("{devices=[2,2]0,2,1,3}"),
            "Visualizing {devices=[2,2]0,2,1,3} (showing up to the first two dimensions)\n"
            "┌─────────┬─────────┐\n"
            "│  CPU 0  │  CPU 2  │\n"
            "├─────────┼─────────┤\n"
            "│  CPU 1  │  CPU 3  │\n"
            "└─────────┴─────────┘\n");
  // a 3-D tiling: torch_xla draws its first row only; here dims 0..1 fold into rows
  EXPECT_EQ(visualize_sharding("{devices=[1,2,2]0,1,2,3}"),
            "Visualizing {devices=[1,2,2]0,1,2,3} (dims folded: rows = dims 0..1, columns = dim 2)\n"
            "┌─────────┬─────────┐\n"
            "│  CPU 0  │  CPU 1  │\n"
            "├─────────┼─────────┤\n"
            "│  CPU 2  │  CPU 3  │\n"
            "└─────────┴─────────┘\n");
  EXPECT_EQ(visualize_sharding("{devices=[4,1,1,1]0,1,2,3}"),
            "Visualizing {devices=[4,1,1,1]0,1,2,3} (dims folded: rows = dims 0..2, columns = dim 3)\n"
            "┌─────────┐\n"
            "│  CPU 0  │\n"
            "├─────────┤\n"
            "│  CPU 1  │\n"
            "├─────────┤\n"
            "│  CPU 2  │\n"
            "├─────────┤\n"
            "│  CPU 3  │\n"
            "└─────────┘\n");
  // partial replication: a cell per replication group
  EXPECT_EQ(visualize_sharding("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"),
            "Visualizing {devices=[1,2,2]0,2,1,3 last_tile_dim_replicate} (showing up to the first two dimensions)\n"
            "┌────────────┬────────────┐\n"
            "│ CPU [0, 2] │ CPU [1, 3] │\n"
            "└────────────┴────────────┘\n");
  EXPECT_EQ(visualize_sharding("{replicated}"),
            "Visualizing {replicated} (showing up to the first two dimensions)\n"
            "┌──────────────────┐\n"
            "│ CPU [0, 1, 2, 3] │\n"
            "└──────────────────┘\n");
  // every row of the strings table draws, each device exactly once
  for (const char* s : {"{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", "{devices=[1,4]3,2,1,0}",
                        "{devices=[4,1]0,2,1,3}"}) {
    std::string v = visualize_sharding(s);
    for (int d = 0; d < 4; ++d) {
      size_t at = v.find(std::to_string(d), v.find('\n'));
      EXPECT_NE(at, std::string::npos) << v;
      EXPECT_EQ(v.find(std::to_string(d), at + 1), std::string::npos) << v;
    }
  }
  EXPECT_NE(error_of([] { visualize_sharding("{devices=[2]0}"); }).find("cannot read sharding"), std::string::npos);
  // color wraps the labels only
  std::string c = visualize_sharding("{devices=[2]0,1}", {.use_color = true});
  EXPECT_NE(c.find("\x1b[31mCPU 0\x1b[0m"), std::string::npos) << c;
}
