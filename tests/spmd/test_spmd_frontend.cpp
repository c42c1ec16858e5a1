// What SPMD users touch (issue 13): MpDeviceLoader's input_sharding and
// xm::send_cpu_data_to_device (spec S11), the distributed checkpoint (S16), and
// axle-train --pattern spmd. The whole program runs under SPMD (use_spmd is for the process).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "axle/distributed_checkpoint.h"
#include "axle/xs.h"
#include "spmd/device_count.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace axle;
using axle::test::error_of;
using axle::test::TempDir;

namespace {

// n virtual devices from now on, SPMD on, counters zeroed.
void use_devices(int n) {
  ::setenv("AXLE_CPU_DEVICES", std::to_string(n).c_str(), 1);
  ::unsetenv("CPU_NUM_DEVICES");
  ::unsetenv("XLA_FLAGS");
  spmd::reset_device_count();
  runtime::use_spmd();
  metrics::reset();
}

std::vector<int64_t> iota_ids(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}

// Images [n, 1, 2, 2] with distinct values and labels 0, 1, 2, 0, ...
std::shared_ptr<data::TensorDataset> small_dataset(int64_t n) {
  std::vector<float> x(size_t(n * 4));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * float(i) - 3.0f;
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = i % 3;
  return std::make_shared<data::TensorDataset>(from_vector(x, {n, 1, 2, 2}), from_vector(y, {n}));
}

const xs::PartitionSpec kBatchSpec{"data", xs::None, xs::None, xs::None};

}  // namespace

// ---------------------------------------------------------------- S11: input_sharding

TEST(SpmdLoader, ImagesArriveShardedAndLabelsReplicated) {
  use_devices(4);
  auto ds = small_dataset(16);
  data::DataLoader loader(ds, {.batch_size = 8});
  xs::Mesh mesh(iota_ids(4), {4, 1}, {"data", "model"});
  pl::MpDeviceLoader mp(loader, axle::device(), {.input_sharding = xs::ShardingSpec(mesh, kBatchSpec)});
  int64_t batches = 0;
  for (const data::Example& b : mp) {
    EXPECT_EQ(xs::get_sharding_spec(b.data), "{devices=[4,1,1,1]0,1,2,3}");
    EXPECT_EQ(xs::get_sharding_spec(b.target), "{replicated}");  // rank 1 != 4: torch_xla replicates it
    // Each device holds its two rows of the batch, nothing else.
    const std::vector<float> all = ds->data().to_vector<float>();
    const std::vector<xs::XLAShard> shards = xs::local_shards(b.data);
    ASSERT_EQ(shards.size(), 4u);
    for (size_t d = 0; d < 4; ++d) {
      ASSERT_EQ(shards[d].data.shape(), (Shape{2, 1, 2, 2}));
      const auto first = all.begin() + (batches * 8 + int64_t(d) * 2) * 4;
      EXPECT_EQ(shards[d].data.to_vector<float>(), std::vector<float>(first, first + 8)) << "device " << d;
    }
    EXPECT_EQ(b.target.cpu().to_vector<int64_t>(),
              ds->targets().narrow(0, batches * 8, 8).contiguous().to_vector<int64_t>());
    ++batches;
  }
  EXPECT_EQ(batches, 2);
}

TEST(SpmdLoader, DictSpecsApplyPerKey) {
  use_devices(4);
  auto ds = small_dataset(8);
  data::DataLoader loader(ds, {.batch_size = 8});
  xs::Mesh mesh(iota_ids(4), {2, 2}, {"data", "model"});
  std::map<std::string, xs::ShardingSpec> specs{
      {"data", xs::ShardingSpec(mesh, {xs::None, xs::None, "model", xs::None})},
      {"target", xs::ShardingSpec(mesh, {"data"})}};
  pl::MpDeviceLoader mp(loader, axle::device(), {.input_sharding = specs});
  auto it = mp.begin();
  ASSERT_NE(it, mp.end());
  EXPECT_EQ(xs::get_sharding_spec(it->data), "{devices=[1,1,2,1,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(xs::get_sharding_spec(it->target), "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(it->data.cpu().to_vector<float>(), ds->data().to_vector<float>());
  EXPECT_EQ(it->target.cpu().to_vector<int64_t>(), ds->targets().to_vector<int64_t>());
}

TEST(SpmdLoader, MissingKeyAndNoSpmdDeviceAreErrors) {
  use_devices(4);
  auto ds = small_dataset(8);
  data::DataLoader loader(ds, {.batch_size = 8});
  xs::Mesh mesh(iota_ids(4), {4}, {"data"});
  std::map<std::string, xs::ShardingSpec> only_data{{"data", xs::ShardingSpec(mesh, kBatchSpec)}};
  const std::string e = error_of([&] { pl::MpDeviceLoader mp(loader, axle::device(), {.input_sharding = only_data}); });
  EXPECT_NE(e.find("Keys: ['target'] are missing from input_sharding"), std::string::npos) << e;
  const std::string cpu = error_of(
      [&] { pl::MpDeviceLoader mp(loader, kCPU, {.input_sharding = xs::ShardingSpec(mesh, kBatchSpec)}); });
  EXPECT_NE(cpu.find("needs the xla device"), std::string::npos) << cpu;
}

TEST(SpmdLoader, MinibatchNeedsABatchDivisibleByTheLocalDevices) {
  use_devices(4);
  auto ds = small_dataset(6);
  data::DataLoader loader(ds, {.batch_size = 6});
  xs::Mesh mesh(iota_ids(4), {4}, {"data"});
  pl::MpDeviceLoader mp(loader, axle::device(),
                        {.input_sharding = xs::ShardingSpec(mesh, kBatchSpec, /*minibatch=*/true)});
  const std::string e = error_of([&] { (void)mp.begin(); });
  EXPECT_NE(e.find("When minibatch is configured, the per-host batch size must be divisible by local runtime device "
                   "count. Per host input data shape = [6, 1, 2, 2], local_runtime_device_count = 4"),
            std::string::npos)
      << e;
  // A divisible batch is fine (one host: the global batch is the per-host batch).
  data::DataLoader eight(small_dataset(8), {.batch_size = 8});
  pl::MpDeviceLoader ok(eight, axle::device(),
                        {.input_sharding = xs::ShardingSpec(mesh, kBatchSpec, /*minibatch=*/true)});
  auto it = ok.begin();
  EXPECT_EQ(xs::get_sharding_spec(it->data), "{devices=[4,1,1,1]0,1,2,3}");
}

TEST(SpmdLoader, SendCpuDataToDevice) {
  use_devices(2);
  xs::Mesh mesh(iota_ids(2), {2}, {"data"});
  const xs::ShardingSpec spec(mesh, {"data", xs::None});
  const Tensor a = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor b = from_vector(std::vector<float>{7, 8, 9}, {3});
  std::vector<Tensor> out = xm::send_cpu_data_to_device({a, b}, axle::device(), &spec);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(xs::get_sharding_spec(out[0]), "{devices=[2,1]0,1}");
  EXPECT_EQ(xs::get_sharding_spec(out[1]), "{replicated}");
  EXPECT_EQ(out[0].cpu().to_vector<float>(), a.to_vector<float>());  // 3 rows: the second shard padded
  EXPECT_EQ(out[1].cpu().to_vector<float>(), b.to_vector<float>());
  std::vector<Tensor> plain = xm::send_cpu_data_to_device({a}, axle::device());
  EXPECT_EQ(xs::get_sharding_spec(plain[0]), "");
  EXPECT_TRUE(plain[0].device().is_xla());
}

// torch_xla's test_data_loader_with_non_batch_size, trained: a batch of 3 on 4 devices (the
// last shard all padding) gives the loss and the parameters of the same steps on the cpu.
TEST(SpmdLoader, BatchOfThreeOnFourDevicesTrainsLikeOneDevice) {
  use_devices(4);
  auto ds = small_dataset(3);
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Sequential>(
        std::vector<nn::ModulePtr>{std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4, 3)});
  };
  auto ref = make();
  auto model = make();
  model->to(axle::device());
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  data::DataLoader loader(ds, {.batch_size = 3});
  xs::Mesh mesh(iota_ids(4), {4}, {"data"});
  pl::MpDeviceLoader mp(loader, axle::device(), {.input_sharding = xs::ShardingSpec(mesh, kBatchSpec)});
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const data::Example& b : mp) {
      ASSERT_EQ(xs::get_sharding_spec(b.data), "{devices=[4,1,1,1]0,1,2,3}");
      Tensor loss;
      {
        auto step = axle::step();
        opt.zero_grad();
        loss = cross_entropy((*model)(b.data), b.target);
        loss.backward();
        opt.step();
      }
      ref_opt.zero_grad();
      const Tensor ref_loss = cross_entropy((*ref)(ds->data()), ds->targets());
      ref_loss.backward();
      ref_opt.step();
      EXPECT_NEAR(loss.item(), ref_loss.item(), 1e-5 * std::fabs(ref_loss.item())) << "epoch " << epoch;
    }
  }
  const auto want = ref->named_parameters(), got = model->named_parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    const auto w = want[i].second.to_vector<float>(), g = got[i].second.cpu().to_vector<float>();
    for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(g[k], w[k], 1e-5) << want[i].first << "[" << k << "]";
  }
}

// ---------------------------------------------------------------- S16: distributed checkpoint

namespace {
namespace dc = axle::experimental::distributed_checkpoint;

Tensor values(const Shape& shape, float base) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.125f * float(i) * (i % 2 ? -1.f : 1.f);
  return from_vector(v, shape);
}

Tensor on_device(const Tensor& cpu, const xs::Mesh* mesh, const xs::PartitionSpec& spec) {
  Tensor t = cpu.to(axle::device());
  if (mesh) xs::mark_sharding(t, *mesh, spec);
  return t;
}

nlohmann::json metadata(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "metadata.json");
  return nlohmann::json::parse(f);
}

// The state a (2, 2) mesh training run might hold.
struct Saved {
  Tensor w = values({8, 6}, 1.f), b = values({6}, -2.f), r = values({5}, 3.f), p = values({5, 7}, 0.5f),
         u = values({3, 4}, 7.f), c = values({2}, -9.f);
};
}  // namespace

TEST(DistributedCheckpoint, SavesShardsOnceAndLoadsIntoAnyLayout) {
  use_devices(4);
  const Saved v;
  xs::Mesh m22(iota_ids(4), {2, 2}, {"data", "model"});
  nn::StateDict sd{{"w", on_device(v.w, &m22, {"data", "model"})},
                   {"b", on_device(v.b, &m22, {"model"})},  // replicated over "data"
                   {"r", on_device(v.r, &m22, {xs::None})},
                   {"p", on_device(v.p, &m22, {"data", "model"})},  // 5 x 7 on 2 x 2: padded shards
                   {"u", on_device(v.u, nullptr, {})},
                   {"c", v.c}};
  TempDir d;
  const std::string dir = d / "ckpt";
  dc::save(sd, dir);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "shard-0.safetensors"));
  for (const auto& e : fs::directory_iterator(d.path))  // no temporary directory left
    EXPECT_EQ(e.path().filename(), "ckpt") << e.path();
  const auto meta = metadata(dir);
  const auto& t = meta.at("tensors");
  EXPECT_EQ(t.at("w").at("chunks").size(), 4u);
  EXPECT_EQ(t.at("b").at("chunks").size(), 2u);  // replica 0 of each tile only
  EXPECT_EQ(t.at("r").at("chunks").size(), 1u);  // replicated: written once
  EXPECT_EQ(t.at("u").at("chunks").size(), 1u);
  EXPECT_EQ(t.at("c").at("chunks").size(), 1u);
  EXPECT_EQ(t.at("w").at("sharding"), "{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(t.at("w").at("shape"), nlohmann::json({8, 6}));
  std::vector<std::vector<int64_t>> p_sizes;
  for (const auto& c : t.at("p").at("chunks")) p_sizes.push_back(c.at("sizes").get<std::vector<int64_t>>());
  EXPECT_EQ(p_sizes, (std::vector<std::vector<int64_t>>{{3, 4}, {3, 3}, {2, 4}, {2, 3}}));  // unpadded
  // The file holds each value once: 48 + 6 + 5 + 35 + 12 + 2 floats.
  const SafeTensors file = axle::load(dir + "/shard-0.safetensors");
  int64_t stored = 0;
  for (const auto& [name, x] : file.tensors) stored += x.numel();
  EXPECT_EQ(stored, 48 + 6 + 5 + 35 + 12 + 2);

  auto expect_loaded = [&](const nn::StateDict& target, const std::string& what) {
    dc::load(target, dir);
    const std::map<std::string, Tensor> want{{"w", v.w}, {"b", v.b}, {"r", v.r}, {"p", v.p}, {"u", v.u}, {"c", v.c}};
    for (const auto& [name, x] : target)
      EXPECT_EQ(x.cpu().to_vector<float>(), want.at(name).to_vector<float>()) << what << ": " << name;
  };
  auto zeros_on = [&](const Tensor& like, const xs::Mesh* mesh, const xs::PartitionSpec& spec) {
    return on_device(zeros(like.shape()), mesh, spec);
  };
  // Another mesh shape (4, 1), and a mesh with the devices in another order.
  xs::Mesh m41(iota_ids(4), {4, 1}, {"data", "model"});
  nn::StateDict s41{{"w", zeros_on(v.w, &m41, {"data", xs::None})}, {"b", zeros_on(v.b, &m41, {"data"})},
                    {"r", zeros_on(v.r, &m41, {"data"})},           {"p", zeros_on(v.p, &m41, {"data", xs::None})},
                    {"u", zeros_on(v.u, &m41, {xs::None, "data"})}, {"c", zeros_on(v.c, &m41, {"data"})}};
  expect_loaded(s41, "mesh (4, 1)");
  EXPECT_EQ(xs::get_sharding_spec(s41[0].second), "{devices=[4,1]0,1,2,3}");  // the target keeps its sharding
  xs::Mesh rev({3, 1, 2, 0}, {2, 2}, {"data", "model"});
  nn::StateDict srev{{"w", zeros_on(v.w, &rev, {"data", "model"})}, {"p", zeros_on(v.p, &rev, {"model", "data"})}};
  expect_loaded(srev, "mesh with devices 3, 1, 2, 0");
  // Transposed specs on the saving mesh.
  nn::StateDict st{{"w", zeros_on(v.w, &m22, {"model", "data"})}, {"b", zeros_on(v.b, &m22, {"data"})},
                   {"p", zeros_on(v.p, &m22, {"model", "data"})}};
  expect_loaded(st, "transposed");
  // Unsharded: unannotated device tensors and cpu tensors.
  nn::StateDict plain{{"w", zeros(v.w.shape()).to(axle::device())}, {"p", zeros(v.p.shape())},
                      {"c", zeros(v.c.shape())}, {"r", zeros_on(v.r, &m22, {xs::None})}};
  expect_loaded(plain, "unsharded");
  EXPECT_EQ(xs::get_sharding_spec(plain[3].second), "{replicated}");
}

TEST(DistributedCheckpoint, ErrorsLeaveTheTargetsAlone) {
  use_devices(2);
  xs::Mesh mesh(iota_ids(2), {2}, {"data"});
  TempDir d;
  const std::string dir = d / "ckpt";
  dc::save({{"a", on_device(values({4, 2}, 1.f), &mesh, {"data", xs::None})}, {"b", values({3}, 2.f)}}, dir);
  const Tensor a = on_device(zeros({4, 2}), &mesh, {"data", xs::None});
  const Tensor wrong = zeros({2, 4});
  std::string e = error_of([&] { dc::load({{"a", a}, {"zz", zeros({1})}}, dir); });
  EXPECT_NE(e.find("the checkpoint has no tensor \"zz\""), std::string::npos) << e;
  e = error_of([&] { dc::load({{"a", a}, {"b", wrong}}, dir); });
  EXPECT_NE(e.find("tensor \"b\": the checkpoint holds shape [3], the target has [2, 4]"), std::string::npos) << e;
  e = error_of([&] { dc::load({{"b", zeros({3}, {.dtype = kInt64})}}, dir); });
  EXPECT_NE(e.find("dtype F32"), std::string::npos) << e;
  EXPECT_EQ(a.cpu().to_vector<float>(), std::vector<float>(8, 0.f));  // checks before any write
  e = error_of([&] { dc::load({{"a", a}}, d / "nothing"); });
  EXPECT_NE(e.find("no metadata.json"), std::string::npos) << e;
  // A chunk file that went missing.
  fs::remove(fs::path(dir) / "shard-0.safetensors");
  e = error_of([&] { dc::load({{"a", a}}, dir); });
  EXPECT_NE(e.find("shard-0.safetensors"), std::string::npos) << e;
  // Saving replaces a checkpoint, never another directory.
  dc::save({{"b", values({3}, 5.f)}}, dir);
  Tensor b = zeros({3});
  dc::load({{"b", b}}, dir);
  EXPECT_EQ(b.to_vector<float>(), values({3}, 5.f).to_vector<float>());
  fs::create_directories(d / "other");
  std::ofstream(d / "other/keep.txt") << "mine\n";
  e = error_of([&] { dc::save({{"b", b}}, d / "other"); });
  EXPECT_NE(e.find("is not a distributed checkpoint"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(d / "other/keep.txt"));
}

// S16: a run saved asynchronously at step 3 and restored into fresh (sharded) parameters
// continues to the parameters of the uninterrupted run, bit for bit.
TEST(DistributedCheckpoint, ManagerSaveAsyncThenRestoreResumesBitIdentical) {
  use_devices(2);
  xs::Mesh mesh(iota_ids(2), {2}, {"model"});
  auto make = [&] {
    manual_seed(3);
    auto m = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4, 6), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(6, 3)});
    m->to(axle::device());
    auto params = m->named_parameters();
    xs::mark_sharding(params[0].second, mesh, {"model", xs::None});  // column-parallel
    xs::mark_sharding(params[2].second, mesh, {xs::None, "model"});  // row-parallel
    return m;
  };
  auto ds = small_dataset(6);
  auto train = [&](nn::Sequential& m, optim::SGD& opt, int steps) {
    for (int i = 0; i < steps; ++i) {
      auto step = axle::step();
      opt.zero_grad();
      cross_entropy(m(ds->data().to(axle::device())), ds->targets().to(axle::device())).backward();
      opt.step();
    }
  };
  auto params_of = [](nn::Module& m) {
    std::vector<std::vector<float>> out;
    for (const auto& [n, p] : m.named_parameters()) out.push_back(p.cpu().to_vector<float>());
    return out;
  };
  TempDir d;
  auto full = make();
  optim::SGD opt(full->parameters(), {.lr = 0.5});
  dc::CheckpointManager ckpt(d.path / "ckpts", /*save_interval=*/3, /*max_to_keep=*/2);
  EXPECT_FALSE(ckpt.save_async(2, full->state_dict()));  // not a multiple of 3
  train(*full, opt, 3);
  const auto at3 = params_of(*full);
  EXPECT_TRUE(ckpt.save_async(3, full->state_dict()));
  train(*full, opt, 2);  // changes the parameters while (or after) the save writes
  ckpt.join();
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{3}));

  auto resumed = make();
  optim::SGD opt2(resumed->parameters(), {.lr = 0.5});
  ckpt.restore(3, resumed->state_dict());
  EXPECT_EQ(params_of(*resumed), at3);
  EXPECT_EQ(xs::get_sharding_spec(resumed->named_parameters()[0].second), "{devices=[2,1]0,1}");
  train(*resumed, opt2, 2);
  EXPECT_EQ(params_of(*resumed), params_of(*full));
  // max_to_keep: the oldest go; an unknown step is an error.
  EXPECT_TRUE(ckpt.save(6, full->state_dict()));
  EXPECT_TRUE(ckpt.save(7, full->state_dict(), /*force=*/true));
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{6, 7}));
  const std::string e = error_of([&] { ckpt.restore(3, resumed->state_dict()); });
  EXPECT_NE(e.find("no checkpoint of step 3"), std::string::npos) << e;
}

// ---------------------------------------------------------------- axle-train --pattern spmd

namespace {
int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
// axle-train without this test program's AXLE_CPU_DEVICES (its --devices sets it).
axle::test::Result run_spmd_train(const std::string& args) {
  return axle::test::run_captured(std::string("env -u AXLE_CPU_DEVICES '") + AXLE_TRAIN_BIN + "' " + args);
}
void expect_usage_error(const axle::test::Result& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}
}  // namespace

TEST(SpmdCli, BadMeshValues) {
  use_devices(2);
  using axle::test::run_train;
  expect_usage_error(run_train("--pattern spmd --devices 4 --mesh data=2,pipe=2"), "unknown axis 'pipe'");
  expect_usage_error(run_train("--pattern spmd --devices 4 --mesh data=3"),
                     "the axis sizes multiply to 3, but --devices is 4");
  expect_usage_error(run_train("--pattern spmd --devices 4 --mesh data=2,data=2"), "axis 'data' appears twice");
  expect_usage_error(run_train("--pattern spmd --devices 2 --mesh data"), "expected AXIS=SIZE");
  expect_usage_error(run_train("--pattern spmd --devices 2 --mesh data=0,model=2"), "needs a size >= 1");
  expect_usage_error(run_train("--devices 2 --mesh data=2"), "--mesh needs --pattern spmd");
  // --devices sets AXLE_CPU_DEVICES; another value already there is an error (it is 2 here).
  expect_usage_error(run_train("--pattern spmd --devices 4"), "--devices 4 disagrees with AXLE_CPU_DEVICES=2");
}

// Data parallel on 2 devices: the same global batch as one device, so the same losses up to
// the order of the additions; the JSON reports the mesh, the collectives and each device's memory.
TEST(SpmdCli, DataParallelCnnMatchesOneDevice) {
  using axle::test::run_train;
  using axle::test::slurp;
  TempDir d;
  const std::string common = "--model cnn --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 32 --epochs 2 "
                             "--threads 2 --json '";
  const auto one = run_train(common + (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto two = run_spmd_train("--pattern spmd --devices 2 " + common + (d / "two.json") + "'");
  ASSERT_EQ(two.status, 0) << two.err;
  const auto a = nlohmann::json::parse(slurp(d / "one.json")), b = nlohmann::json::parse(slurp(d / "two.json"));
  EXPECT_EQ(b.at("pattern"), "spmd");
  EXPECT_EQ(b.at("mesh"), nlohmann::json({{"data", 2}}));
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(lb.size(), 4u);
  for (size_t s = 0; s < la.size(); ++s) EXPECT_NEAR(lb[s], la[s], 1e-5 * std::fabs(la[s])) << "step " << s + 1;
  const auto& per_step = b.at("collectives").at("per_step");
  for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"})
    EXPECT_GE(per_step.at(kind).get<double>(), 0.0) << kind;
  EXPECT_GT(per_step.at("bytes").get<double>(), 0.0);  // the devices exchanged something every step
  EXPECT_EQ(b.at("collectives").at("steps"), 4);
  const auto peaks = b.at("peak_bytes_per_device").get<std::vector<int64_t>>();
  ASSERT_EQ(peaks.size(), 2u);
  for (int64_t p : peaks) EXPECT_GT(p, 0);
  EXPECT_LE(b.at("counters").at("UncachedCompile").get<int64_t>(), 3);
}

// With a model axis the linear layers are split (Megatron): still the one-device losses.
TEST(SpmdCli, TensorParallelMlpMatchesOneDevice) {
  using axle::test::run_train;
  using axle::test::slurp;
  TempDir d;
  const std::string common = "--model mlp --data '" + AXLE_TEST_DATA + "/tiny_fmnist' --batch-size 32 --epochs 2 "
                             "--threads 2 --json '";
  const auto one = run_train(common + (d / "one.json") + "'");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto tp = run_spmd_train("--pattern spmd --devices 4 --mesh data=2,model=2 " + common + (d / "tp.json") + "'");
  ASSERT_EQ(tp.status, 0) << tp.err;
  const auto a = nlohmann::json::parse(slurp(d / "one.json")), b = nlohmann::json::parse(slurp(d / "tp.json"));
  EXPECT_EQ(b.at("mesh"), nlohmann::json({{"data", 2}, {"model", 2}}));
  const auto la = a.at("losses").get<std::vector<double>>(), lb = b.at("losses").get<std::vector<double>>();
  ASSERT_EQ(lb.size(), la.size());
  for (size_t s = 0; s < la.size(); ++s) EXPECT_NEAR(lb[s], la[s], 1e-5 * std::fabs(la[s])) << "step " << s + 1;
  EXPECT_EQ(b.at("peak_bytes_per_device").size(), 4u);
  // Each step all-reduces at least the row-parallel layer's partial output and the gradients.
  EXPECT_GE(b.at("collectives").at("per_step").at("all_reduce").get<double>(), 2.0);
  // The first linear layer split by output features (column-parallel), the second by input
  // features (row-parallel), each replicated over "data"; still so after the steps.
  const auto& sh = b.at("parameter_shardings");
  EXPECT_EQ(sh.at("1.weight"), "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(sh.at("1.bias"), "{devices=[2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(sh.at("3.weight"), "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
}
