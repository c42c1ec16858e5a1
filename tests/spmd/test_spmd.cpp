// SPMD on the lazy device (issue 13, spec §6.9): N virtual cpu devices driven by one
// process; shardings on tensors, their shards, the executor's SPMD path (compile cache,
// aliasing, counters) and data-parallel training parity with one device.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "axle/xs.h"
#include "dist/dist_internal.h"
#include "spmd/device_count.h"
#include "lazy/ir.h"
#include "spmd_fixture.h"
#include "spmd_harness.h"
#include "test_util.h"

using namespace axle;
using axle::test::error_of;

namespace {

using axle::test::iota;
// Each test starts from zero counters, a cold cache and SPMD off; devices(n) turns SPMD on
// with n virtual devices (tests/support/spmd_fixture.h).
using Spmd = axle::test::SpmdFixture;

Tensor host_iota(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return arange(0, double(n)).reshape(s).to(kFloat32);
}

// ---------------------------------------------------------------- S1 runtime API
TEST_F(Spmd, RuntimeApiUnderSpmd) {
  devices(4);
  EXPECT_TRUE(runtime::is_spmd());
  EXPECT_EQ(runtime::global_runtime_device_count(), 4);
  EXPECT_EQ(runtime::world_size(), 1);
  EXPECT_EQ(runtime::global_ordinal(), 0);
  EXPECT_EQ(device(), (Device{DeviceType::XLA, 0}));
  EXPECT_NE(error_of([] { runtime::use_spmd(true); }).find("[use_spmd] auto sharding not implemented"),
            std::string::npos);
}

TEST_F(Spmd, MarkShardingNeedsSpmd) {
  Tensor t = zeros({4, 4}).to(device());
  setenv("AXLE_CPU_DEVICES", "2", 1);
  spmd::reset_device_count();
  xs::Mesh mesh(iota(2), {2}, {"data"});
  EXPECT_NE(error_of([&] { xs::mark_sharding(t, mesh, {"data", xs::None}); }).find("Please enable SPMD via axle::runtime::use_spmd()"),
            std::string::npos);
}

// ---------------------------------------------------------------- S4 placement
TEST_F(Spmd, LocalShardsPlacement) {
  devices(4);
  xs::Mesh mesh(iota(4), {2, 2}, {"data", "model"});
  const int64_t M = 6, N = 8;
  Tensor host = host_iota({M, N});
  Tensor t = host.to(device());
  xs::mark_sharding(t, mesh, {"data", "model"});
  EXPECT_EQ(xs::get_sharding_spec(t), "{devices=[2,2]0,1,2,3}");
  auto shards = xs::local_shards(t);
  ASSERT_EQ(shards.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const int64_t a = i / 2, b = i % 2;
    Tensor want = slice(slice(host, 0, a * M / 2, (a + 1) * M / 2), 1, b * N / 2, (b + 1) * N / 2);
    EXPECT_EQ(shards[size_t(i)].data.to_vector<float>(), want.contiguous().to_vector<float>()) << "shard " << i;
    EXPECT_EQ(shards[size_t(i)].replica_id, 0);
    EXPECT_EQ(shards[size_t(i)].shard_device, "CPU:" + std::to_string(i));
    ASSERT_TRUE(shards[size_t(i)].indices.has_value());
    EXPECT_EQ((*shards[size_t(i)].indices)[0], (xs::Slice{a * M / 2, (a + 1) * M / 2}));
  }
  EXPECT_EQ(t.cpu().to_vector<float>(), host.to_vector<float>());

  // Replicated: every device holds all of it, replica_id is the device.
  Tensor r = host.to(device());
  xs::mark_sharding(r, mesh, {xs::None, xs::None});
  auto rs = xs::local_shards(r);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rs[size_t(i)].replica_id, i);
    EXPECT_FALSE(rs[size_t(i)].indices.has_value());
    EXPECT_EQ(rs[size_t(i)].data.to_vector<float>(), host.to_vector<float>());
  }
  // Partially replicated (None, "model"): replica_id is the row (the data coordinate).
  Tensor p = host.to(device());
  xs::mark_sharding(p, mesh, {xs::None, "model"});
  auto ps = xs::local_shards(p);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ps[size_t(i)].replica_id, i / 2) << "device " << i;

  // load_local_shards_: negated shards give -t; incomplete or wrong shapes are errors.
  for (auto& s : shards) s.data = s.data * -1.0;
  xs::load_local_shards_(t, shards);
  EXPECT_EQ(t.cpu().to_vector<float>(), (host * -1.0).to_vector<float>());
  auto three = shards;
  three.pop_back();
  EXPECT_NE(error_of([&] { xs::load_local_shards_(t, three); }).find("[load_local_shards_]"), std::string::npos);
  auto wrong = shards;
  wrong[1].data = zeros({2, 2});
  EXPECT_NE(error_of([&] { xs::load_local_shards_(t, wrong); }).find("shard 1 expected"), std::string::npos);
  EXPECT_NE(error_of([&] { xs::load_local_shards_(r, rs); }).find("not allowed on a replicated"), std::string::npos);
}

// An unsharded computation under SPMD is the global program on every device.
TEST_F(Spmd, ReplicatedGraphRunsOnEveryDevice) {
  devices(2);
  Tensor a = host_iota({3, 4});
  Tensor x = a.to(device());
  Tensor y = relu(x * 2.0 - 5.0).sum({1});
  EXPECT_EQ(xs::get_sharding_spec(y), "");
  EXPECT_EQ(y.cpu().to_vector<float>(), relu(a * 2.0 - 5.0).sum({1}).to_vector<float>());
  EXPECT_EQ(metrics::counter_value("ExecuteReplicated"), 1);
  EXPECT_EQ(xs::get_sharding_spec(y), "{replicated}");  // torch_xla: computed results report it after sync
  EXPECT_EQ(metrics::counter_value("VirtualDeviceUsage"), 1);
  EXPECT_NE(xs::debug_info(y).find("NumShards: 2"), std::string::npos);
}

// ---------------------------------------------------------------- S13 persistence and aliasing
TEST_F(Spmd, ShardingPersistsAndParametersAlias) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  manual_seed(1);
  auto lin = std::make_shared<nn::Linear>(4, 8, /*bias=*/false);
  lin->to(device());
  Tensor w = lin->weight;
  xs::mark_sharding(w, mesh, {"data", xs::None});
  const std::string spec = "{devices=[2,1]0,1}";
  EXPECT_EQ(xs::get_sharding_spec(w), spec);
  xs::mark_sharding(w, mesh, {"data", xs::None});  // the same again: a no-op
  EXPECT_EQ(metrics::counter_value("XlaMarkSharding"), 2);
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(w), spec);
  const std::vector<float> w0 = w.to_vector<float>();
  w.set_data(w + 1.0);  // add_
  EXPECT_EQ(xs::get_sharding_spec(w), spec) << "pending in-place value keeps the annotation";
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(w), spec);
  EXPECT_EQ(metrics::counter_value("InputOutputAliasCount"), 1);
  Tensor c = w.clone();
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(c), spec);
  std::vector<float> w1 = w.to_vector<float>();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_EQ(w1[i], w0[i] + 1.0f);

  // Three SGD steps: the weight stays sharded, each step aliases its one parameter.
  metrics::reset();
  optim::SGD opt(lin->parameters(), {.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    auto st = axle::step();
    Tensor x = randn({6, 4}).to(device());
    opt.zero_grad();
    lin->forward(x).sum().backward();
    xm::optimizer_step(opt);  // world size 1 under SPMD: no all-reduce, just the step
  }
  EXPECT_EQ(xs::get_sharding_spec(lin->weight), spec);
  EXPECT_EQ(metrics::counter_value("InputOutputAliasCount"), 3);

  // Re-marking: a different sharding needs clear_sharding first; replicated may be re-marked.
  EXPECT_NE(error_of([&] { xs::mark_sharding(w, mesh, {xs::None, "data"}); })
                .find("[mark_sharding] existing annotation {devices=[2,1]0,1} must be cleared first (xs::clear_sharding)"),
            std::string::npos);
  const std::vector<float> before = w.to_vector<float>();
  xs::clear_sharding(w);
  EXPECT_EQ(xs::get_sharding_spec(w), "");
  EXPECT_EQ(w.to_vector<float>(), before);  // gathered back
  xs::mark_sharding(w, mesh, {xs::None, "data"});
  EXPECT_EQ(xs::get_sharding_spec(w), "{devices=[1,2]0,1}");
  Tensor r = zeros({4, 4}).to(device());
  xs::mark_sharding(r, mesh, {xs::None, xs::None});
  EXPECT_EQ(xs::get_sharding_spec(r), "{replicated}");
  xs::mark_sharding(r, mesh, {"data", xs::None});
  EXPECT_EQ(xs::get_sharding_spec(r), "{devices=[2,1]0,1}");
  EXPECT_EQ(xs::get_sharding_type(r), xs::ShardingType::TILED);
  EXPECT_EQ(xs::get_sharding_type(zeros({2}).to(device())), std::nullopt);
}

// ---------------------------------------------------------------- annotations on pending values
TEST_F(Spmd, MarkShardingOnPendingValues) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  Tensor a = host_iota({4, 6});
  Tensor h = a.to(device()) * 2.0;
  xs::mark_sharding(h, mesh, {"data", xs::None});
  EXPECT_EQ(xs::get_sharding_spec(h), "{devices=[2,1]0,1}");
  EXPECT_EQ(xs::inferred_sharding(h), "{devices=[2,1]0,1}");
  Tensor z = h + 1.0;
  EXPECT_EQ(xs::get_sharding_spec(z), "") << "intermediates report nothing before sync, as torch_xla";
  EXPECT_EQ(xs::inferred_sharding(z), "{devices=[2,1]0,1}");
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(z), "{devices=[2,1]0,1}");
  EXPECT_EQ(z.cpu().to_vector<float>(), (a * 2.0 + 1.0).to_vector<float>());
  auto zs = xs::local_shards(z);
  EXPECT_EQ(zs[1].data.to_vector<float>(), slice(a * 2.0 + 1.0, 0, 2, 4).contiguous().to_vector<float>());

  // mark_sharding_with_gradients: the gradient gets the same sharding.
  Tensor w = a.to(device());
  w.set_requires_grad(true);
  Tensor c = xs::mark_sharding_with_gradients(w, mesh, {xs::None, "data"});
  EXPECT_EQ(xs::get_sharding_spec(c), "{devices=[1,2]0,1}");
  (c * c).sum().backward();
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(w.grad()), "{devices=[1,2]0,1}");
  EXPECT_EQ(w.grad().cpu().to_vector<float>(), (a * 2.0).to_vector<float>());
  const std::string vis = xs::debugging::visualize_tensor_sharding(z);
  EXPECT_NE(vis.find("CPU 0"), std::string::npos) << vis;
  EXPECT_NE(vis.find("CPU 1"), std::string::npos) << vis;
}

// A Partial sum broadcast against a tiled value (BatchNorm's backward): reduced first.
TEST_F(Spmd, PartialSumTimesTiledValue) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  Tensor a = host_iota({4, 3});
  Tensor x = a.to(device());
  xs::mark_sharding(x, mesh, {"data", xs::None});
  Tensor y = x * x.sum({0}, true).expand({4, 3});
  Tensor z = y.sum({0});
  Tensor want = a * a.sum({0}, true).expand({4, 3});
  EXPECT_EQ(y.cpu().to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(z.cpu().to_vector<float>(), want.sum({0}).to_vector<float>());
}

// ---------------------------------------------------------------- S14 manual regions
TEST_F(Spmd, ManualShardingRegion) {
  devices(4);
  xs::Mesh mesh(iota(4), {1, 4}, {"data", "model"});
  Tensor a = host_iota({8, 8});
  Tensor x = a.to(device());
  Tensor xx = xs::enable_manual_sharding(x, {0, 1}, &mesh);
  EXPECT_EQ(xx.shape(), (Shape{8, 2}));
  EXPECT_EQ(xs::get_sharding_spec(xx), "{manual}");
  EXPECT_EQ(xs::get_sharding_spec(x), "{devices=[1,4]0,1,2,3}") << "x itself is marked";
  Tensor local = xx * 2.0 + 1.0;  // not partitioned: each device's [8, 2]
  Tensor y = xs::disable_manual_sharding(local, {0, 1}, {8, 8}, &mesh);
  EXPECT_EQ(y.shape(), (Shape{8, 8}));
  EXPECT_EQ(xs::get_sharding_spec(y), "{devices=[1,4]0,1,2,3}");
  EXPECT_EQ(y.cpu().to_vector<float>(), (a * 2.0 + 1.0).to_vector<float>());
  EXPECT_NE(error_of([&] { xx.cpu(); }).find("a manual tensor holds one value per device"), std::string::npos);
  EXPECT_NE(error_of([&] { xs::disable_manual_sharding(y, {0, 1}, {8, 8}, &mesh); }).find("expected a manual tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { xs::disable_manual_sharding(xx, {0, 1}, {8, 12}, &mesh); }).find("is not the shard shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { xs::enable_manual_sharding(x, {0, 1}); }).find("no global mesh"), std::string::npos);
}

// ---------------------------------------------------------------- observability
TEST_F(Spmd, CollectiveCountersExplainAndSavedGraphs) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  axle::test::TempDir dir;
  setenv("AXLE_SAVE_GRAPHS", dir.path.c_str(), 1);
  manual_seed(3);
  Tensor xh = randn({4, 8}), wh = randn({8, 3});
  std::string before_sync;
  for (int i = 0; i < 2; ++i) {
    Tensor x = xh.to(device()), w = wh.to(device());
    xs::mark_sharding(x, mesh, {xs::None, "data"});
    xs::mark_sharding(w, mesh, {"data", xs::None});
    Tensor y = matmul(x, w);
    if (i == 0) {
      before_sync = xs::explain({y});  // compiles, runs nothing
      EXPECT_EQ(metrics::counter_value("ExecuteReplicated"), 0);
      EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
    }
    axle::sync();
    std::vector<float> got = y.to_vector<float>(), want = matmul(xh, wh).to_vector<float>();
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << k;
    if (i == 1) {
      EXPECT_EQ(xs::explain({y}), before_sync);
    }
  }
  unsetenv("AXLE_SAVE_GRAPHS");
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("ExecuteReplicated"), 2);
  // A contracting-sharded matmul: one all-reduce per execution, nothing else.
  EXPECT_EQ(metrics::counter_value("SpmdAllReduce"), 2);
  EXPECT_EQ(metrics::counter_value("SpmdAllGather"), 0);
  EXPECT_EQ(metrics::counter_value("SpmdCollectiveBytes") % 2, 0);
  EXPECT_GT(metrics::counter_value("SpmdCollectiveBytes"), 0);
  EXPECT_NE(before_sync.find("all-reduce"), std::string::npos) << before_sync;
  std::string global, local;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".global.txt")) global = axle::test::slurp(e.path().string());
    if (name.ends_with(".local.txt")) local = axle::test::slurp(e.path().string());
  }
  EXPECT_NE(global.find("{devices=[1,2]0,1}"), std::string::npos) << global;
  EXPECT_NE(local.find("all_reduce"), std::string::npos) << local;

  // AXLE_DEBUG prints the table of each newly compiled graph.
  setenv("AXLE_DEBUG", "1", 1);
  testing::internal::CaptureStderr();
  Tensor x = xh.to(device());
  xs::mark_sharding(x, mesh, {"data", xs::None});
  Tensor y = matmul(x, wh.to(device()));
  axle::sync();
  const std::string err = testing::internal::GetCapturedStderr();
  unsetenv("AXLE_DEBUG");
  EXPECT_NE(err.find("[spmd] graph step"), std::string::npos) << err;
}

// ---------------------------------------------------------------- S12 compile cache
TEST_F(Spmd, CompileCacheAndShardingChanges) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  manual_seed(2);
  Tensor w = randn({8, 3}).to(device());
  auto run = [&](const xs::PartitionSpec& spec) {
    Tensor x = randn({4, 8}).to(device());
    if (!spec.empty()) xs::mark_sharding(x, mesh, spec);
    Tensor y = matmul(x, w) * 2.0;
    axle::sync();
    return y;
  };
  reset();
  for (int i = 0; i < 10; ++i) run({"data", xs::None});
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 9);
  run({xs::None, xs::None});  // only input 0's sharding changed
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
  EXPECT_NE(lazy::last_explanation().find("sharding of input"), std::string::npos) << lazy::last_explanation();
  EXPECT_NE(lazy::last_explanation().find("changed from {devices=[2,1]0,1} to {replicated}"), std::string::npos)
      << lazy::last_explanation();
  // Fresh unannotated inputs are replicated: no recompile (torch_xla #9755).
  run({});
  run({});
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
}

// ---------------------------------------------------------------- S10 data-parallel parity
nn::ModulePtr make_model(const std::string& name) {
  if (name == "mlp")  // the seed's mlp
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10)});
  if (name == "mlp-dropout")  // its mask is drawn for the global batch: every device applies its rows
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(256, 10)});
  // A small cnn with BatchNorm (running statistics must be the global batch's).
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 14 * 14, 10)});
}

using spmd_test::Batch;  // the shared parity data (spmd_harness.h)
using spmd_test::batches;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params, buffers;
};
// `devices` 0: SPMD off (the single-device reference); else SPMD on that many devices,
// the input sharded {"data", None, None, None} and the labels replicated (rank mismatch).
TrainRun train(const std::string& model, int devices, int steps) {
  const auto& data = batches(steps);
  // One kernel thread per device (and for the reference): fast on a busy machine.
  struct Threads {
    int saved = omp_get_max_threads();
    Threads() { omp_set_num_threads(1); }
    ~Threads() { omp_set_num_threads(saved); }
  } threads;
  if (devices == 0) {
    dist::detail::set_spmd_mode(false);
  } else {
    setenv("AXLE_CPU_DEVICES", std::to_string(devices).c_str(), 1);
    spmd::reset_device_count();
    runtime::use_spmd();
  }
  std::optional<xs::Mesh> mesh;
  if (devices) mesh = xs::Mesh(iota(devices), {devices}, {"data"});
  manual_seed(0);
  auto m = make_model(model);
  m->to(device());
  optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
  std::vector<Tensor> losses;
  for (int s = 0; s < steps; ++s) {
    auto st = axle::step();
    Tensor x = data[size_t(s)].x.to(device()), y = data[size_t(s)].y.to(device());
    if (mesh) xs::ShardingSpec(*mesh, {"data", xs::None, xs::None, xs::None}).apply(x);
    opt.zero_grad();
    Tensor loss = cross_entropy((*m)(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss);
  }
  TrainRun r;
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const Tensor& p : m->parameters()) r.params.push_back(p.to_vector<float>());
  for (const Tensor& b : m->buffers()) r.buffers.push_back(b.to_vector<float>());
  return r;
}

void expect_parity(const TrainRun& ref, const TrainRun& got, double loss_tol, double param_tol, const std::string& what) {
  ASSERT_EQ(ref.losses.size(), got.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], loss_tol * std::abs(ref.losses[i])) << what << " step " << i;
  ASSERT_EQ(ref.params.size(), got.params.size());
  for (size_t p = 0; p < ref.params.size(); ++p)
    for (size_t i = 0; i < ref.params[p].size(); ++i)
      ASSERT_NEAR(got.params[p][i], ref.params[p][i], param_tol * (1 + std::abs(ref.params[p][i])))
          << what << " parameter " << p << " element " << i;
  // Running statistics: averages of sums whose float order differs between one device and
  // the sharded batch (and between builds: 1.2e-6 relative after 100 cnn steps at -O1 under
  // ASan, below 1e-6 at -O2), so 1e-5 rather than 1e-6.
  ASSERT_EQ(ref.buffers.size(), got.buffers.size());
  for (size_t b = 0; b < ref.buffers.size(); ++b)
    for (size_t i = 0; i < ref.buffers[b].size(); ++i)
      ASSERT_NEAR(got.buffers[b][i], ref.buffers[b][i], 1e-5 * (1 + std::abs(ref.buffers[b][i])))
          << what << " buffer " << b << " (running statistics) element " << i;
}

TEST_F(Spmd, DataParallelMlpMatchesOneDevice) {
  const TrainRun ref = train("mlp", 0, 20);
  for (int n : {2, 4}) {
    reset();
    const TrainRun got = train("mlp", n, 20);
    expect_parity(ref, got, 1e-5, 1e-4, "mlp on " + std::to_string(n) + " devices");
    EXPECT_LE(metrics::counter_value("UncachedCompile"), 3);
    EXPECT_GT(metrics::counter_value("SpmdAllReduce"), 0) << "gradients of a batch-sharded input are all-reduced";
  }
}

// The longer bound: 100 steps within 1e-4 relative (4 devices: the most reordered sums).
TEST_F(Spmd, DataParallelMlpStaysWithin1e4For100Steps) {
  const TrainRun ref = train("mlp", 0, 100);
  reset();
  const TrainRun got = train("mlp", 4, 100);
  expect_parity(ref, got, 1e-4, 1e-3, "mlp on 4 devices, 100 steps");
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
}

TEST_F(Spmd, DataParallelCnnStaysWithin1e4For100Steps) {
  const TrainRun ref = train("cnn", 0, 100);
  reset();
  const TrainRun got = train("cnn", 2, 100);
  expect_parity(ref, got, 1e-4, 1e-3, "cnn on 2 devices, 100 steps");
}

// Dropout under SPMD: the mask comes from the same counter-based (Philox) stream as on one
// device, drawn for the global shape, so a batch-sharded step drops the same elements.
TEST_F(Spmd, ShardedDropoutEqualsOneDevice) {
  const TrainRun ref = train("mlp-dropout", 0, 5);
  for (int n : {2, 3}) {
    reset();
    expect_parity(ref, train("mlp-dropout", n, 5), 1e-5, 1e-4, "mlp with dropout on " + std::to_string(n) + " devices");
  }
}

TEST_F(Spmd, DataParallelCnnWithBatchNormMatchesOneDevice) {
  const TrainRun ref = train("cnn", 0, 20);
  for (int n : {2, 4}) {
    reset();
    const TrainRun got = train("cnn", n, 20);
    expect_parity(ref, got, 1e-5, 1e-4, "cnn on " + std::to_string(n) + " devices");
  }
}

// ---------------------------------------------------------------- S15 inspection
TEST_F(Spmd, InferredShardingMatchesAfterSync) {
  devices(4);
  xs::Mesh mesh(iota(4), {4}, {"data"});
  manual_seed(0);
  auto m = make_model("mlp");
  m->to(device());
  Tensor x = batches(1)[0].x.to(device()), y = batches(1)[0].y.to(device());
  xs::mark_sharding(x, mesh, {"data", xs::None, xs::None, xs::None});
  auto& seq = static_cast<nn::Sequential&>(*m);
  std::vector<Tensor> ts{x};
  for (size_t i = 0; i < seq.size(); ++i) ts.push_back(seq[i]->forward(ts.back()));
  ts.push_back(cross_entropy(ts.back(), y));
  std::vector<std::string> inferred;
  for (const Tensor& t : ts) inferred.push_back(xs::inferred_sharding(t));
  EXPECT_EQ(metrics::counter_value("ExecuteReplicated"), 0) << "inferred_sharding runs nothing";
  EXPECT_EQ(inferred[2], "{devices=[4,1]0,1,2,3}") << "linear on a batch-sharded input stays batch-sharded";
  axle::sync();
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(inferred[i], xs::get_sharding_spec(ts[i])) << "tensor " << i;
  EXPECT_NE(xs::debug_info(ts[2]).find("NumShards: 4"), std::string::npos);
}

// ---------------------------------------------------------------- S17 robustness
TEST_F(Spmd, UseSpmdAfterTensorsWarnsAndReplicates) {
  Tensor t = host_iota({2, 3}).to(device());
  setenv("AXLE_CPU_DEVICES", "2", 1);
  spmd::reset_device_count();
  testing::internal::CaptureStderr();
  runtime::use_spmd();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[use_spmd] warning: replicating"), std::string::npos) << err;
  Tensor y = t + 1.0;  // the old tensor now feeds every device
  EXPECT_EQ(y.cpu().to_vector<float>(), (host_iota({2, 3}) + 1.0).to_vector<float>());
}

TEST_F(Spmd, TwoRunsAreBitwiseIdentical) {
  const TrainRun a = train("mlp", 4, 5);
  reset();
  const TrainRun b = train("mlp", 4, 5);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

TEST_F(Spmd, ShardedDataOutsideSpmdIsAnError) {
  devices(2);
  xs::Mesh mesh(iota(2), {2}, {"data"});
  Tensor t = host_iota({4, 2}).to(device());
  xs::mark_sharding(t, mesh, {"data", xs::None});
  spmd_off();
  EXPECT_NE(error_of([&] { (t + 1.0).cpu(); }).find("is SPMD data (one shard per device) but SPMD is off"),
            std::string::npos);
  EXPECT_EQ(t.cpu().to_vector<float>(), host_iota({4, 2}).to_vector<float>()) << "its value can still be read";
}

TEST_F(Spmd, MultiProcessApisRefuseSpmd) {
  devices(2);
  EXPECT_NE(error_of([] { dist::init_process_group("xla"); }).find("[init_process_group] backend \"xla\" is not available under SPMD"),
            std::string::npos);
  EXPECT_NE(error_of([] { axle::launch([](int) {}, {.nprocs = 2}); }).find("[launch] SPMD drives all local devices from one process"),
            std::string::npos);
}

}  // namespace
