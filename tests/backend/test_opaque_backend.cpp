// The backend seam reaches down to memory: a second backend whose buffers are not host
// tensors (tests/support/opaque_backend.h: opaque handles from its own allocator, reachable
// only through its transfers) serves the lazy device, trains the mlp step and a 2-device
// SPMD step, and gets the cpu backend's losses, bit for bit. Registering it is the only
// line it needs outside its own files (the `backend_seam` test checks that, and the list
// of places a backend is named in docs/architecture.md).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "axle/xs.h"
#include "backend/backend.h"
#include "compiler/disk_cache.h"
#include "core/tensor_impl.h"
#include "dist/dist_internal.h"
#include "lazy/ir.h"
#include "ops/kernels.h"
#include "ops/replica_groups.h"
#include "spmd/device_count.h"
#include "opaque_backend.h"

using namespace axle;

namespace {

// One kernel thread (the reference and the runs under test alike): a reduction's bits
// depend on the thread count, and the machine is busy.
struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

// Serves the xla device with the opaque backend for a scope (its registration: the one
// line a backend needs outside its own files), then restores the cpu backend.
struct ServeOpaque {
  std::shared_ptr<test::OpaqueBackend> be = std::make_shared<test::OpaqueBackend>();
  std::shared_ptr<backend::Backend> prev;
  ServeOpaque() {
    axle::sync();
    lazy::clear_graph_cache();  // executables cached earlier were lowered by the cpu backend
    prev = backend::register_backend(DeviceType::XLA, be);
  }
  ~ServeOpaque() {
    backend::register_backend(DeviceType::XLA, prev);
    lazy::clear_graph_cache();
  }
};

const Tensor& buffer_of(const Tensor& t) { return lazy::lazy_of(t)->buffer; }

struct Data {
  std::vector<Tensor> x, y;
};
// One batch, seen every step (so the loss must fall), as fresh host tensors each step.
Data make_data(int steps, int64_t batch) {
  Generator g(7);
  const Tensor x = randn({batch, 16}, {}, &g);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back((i * 3) % 4);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(x.clone());
    d.y.push_back(from_vector(labels, {batch}));
  }
  return d;
}

// The mlp step, `steps` times; under SPMD (`devices` > 0) the batch is split on "data".
std::vector<double> train_mlp(int devices, int steps) {
  const Data data = make_data(steps, 8);
  std::optional<xs::Mesh> mesh;
  if (devices) {
    setenv("AXLE_CPU_DEVICES", std::to_string(devices).c_str(), 1);
    spmd::reset_device_count();
    runtime::use_spmd();
    std::vector<int64_t> ids;
    for (int i = 0; i < devices; ++i) ids.push_back(i);
    mesh = xs::Mesh(ids, {devices}, {"data"});
  }
  manual_seed(0);
  auto m = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)});
  m->to(device());
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Tensor> losses;
  for (int s = 0; s < steps; ++s) {
    auto st = axle::step();
    Tensor x = data.x[size_t(s)].to(device()), y = data.y[size_t(s)].to(device());
    if (mesh) xs::ShardingSpec(*mesh, {"data", xs::None}).apply(x);
    opt.zero_grad();
    Tensor loss = cross_entropy((*m)(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss);
  }
  std::vector<double> r;
  for (const Tensor& l : losses) r.push_back(l.item());
  return r;
}

class OpaqueBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics::reset();
    lazy::clear_graph_cache();
  }
  void TearDown() override {
    dist::detail::set_spmd_mode(false);
    unsetenv("AXLE_CPU_DEVICES");
    spmd::reset_device_count();
    lazy::clear_graph_cache();
  }
};

}  // namespace

// Storage takes its block from the allocator of the backend serving its device type.
TEST_F(OpaqueBackendTest, StorageTakesItsBackendsAllocator) {
  Tensor host = zeros({4});
  EXPECT_EQ(host.impl()->storage->allocator, &backend::backend_for(kCPU).allocator());
  {
    ServeOpaque serve;
    EXPECT_EQ(&allocator_for(DeviceType::XLA), &serve.be->allocator());
    EXPECT_STREQ(backend_name_for(DeviceType::XLA), "opaque");
    EXPECT_EQ(&allocator_for(DeviceType::CPU), &backend::backend_for(kCPU).allocator());  // the cpu keeps its own
    Tensor buf = serve.be->allocate({3, 5}, kFloat32, Device("xla:0"));
    EXPECT_EQ(buf.impl()->storage->allocator, &serve.be->allocator());
    EXPECT_TRUE(serve.be->owns(buf));
    EXPECT_EQ(serve.be->memory_info(Device("xla:0")).bytes_used, 60);
  }
  EXPECT_EQ(&allocator_for(DeviceType::XLA), &backend::backend_for(kCPU).allocator());
}

// Kernels are keyed by backend: the xla device resolves to the table of the backend
// serving it; the opaque backend registered no kernels, and the cpu's stay the cpu's.
TEST_F(OpaqueBackendTest, KernelsAreKeyedByBackend) {
  EXPECT_EQ(ops::kernels_for(DeviceType::XLA).backend(), "cpu");
  {
    ServeOpaque serve;
    EXPECT_EQ(ops::kernels_for(DeviceType::XLA).backend(), "opaque");
    EXPECT_FALSE(ops::kernels_for(DeviceType::XLA).supports(ops::OpKind::Add));
    EXPECT_TRUE(ops::kernels_for(DeviceType::CPU).supports(ops::OpKind::Add));
    EXPECT_TRUE(serve.be->supports(ops::OpKind::Add));  // it computes with the cpu's program inside
  }
  EXPECT_EQ(ops::kernels_for(DeviceType::XLA).backend(), "cpu");
}

// The persistent cache keys programs by backend: one backend never loads another's.
TEST_F(OpaqueBackendTest, DiskCacheKeyIncludesTheBackend) {
  const uint64_t h = 0x0123456789abcdefull;
  test::OpaqueBackend opaque;
  const std::string cpu_tag = backend::backend_for(kCPU).cache_tag();
  EXPECT_EQ(cpu_tag, "cpu");
  EXPECT_EQ(compiler::disk_cache_key(h, cpu_tag), compiler::disk_cache_key(h, "cpu"));
  EXPECT_NE(compiler::disk_cache_key(h, cpu_tag), compiler::disk_cache_key(h, opaque.cache_tag()));
  EXPECT_NE(compiler::disk_cache_key(h, cpu_tag), compiler::disk_cache_key(h + 1, cpu_tag));
}

// Its buffers are handles, not host memory: data_ptr refuses them, the values come back
// only through to_host, and the device's memory is the opaque allocator's.
TEST_F(OpaqueBackendTest, BuffersAreOpaqueHandlesReachableOnlyThroughTransfers) {
  ServeOpaque serve;
  const int64_t cpu_xla_before = backend::backend_for(kCPU).memory_info(Device("xla:0")).bytes_used;
  Tensor x0 = randn({16, 8});
  Tensor x = x0.to(device());
  EXPECT_EQ(serve.be->to_devices.load(), 1);
  const Tensor& buf = buffer_of(x);
  ASSERT_TRUE(buf.defined());
  EXPECT_TRUE(buf.device().is_xla());
  EXPECT_TRUE(serve.be->owns(buf));
  EXPECT_THROW((void)buf.data_ptr(), axle::Error);  // never seen as host memory
  EXPECT_EQ(xm::get_memory_info(Device("xla:0")).bytes_used, serve.be->opaque_allocator().bytes_used(Device("xla:0")));
  EXPECT_GE(xm::get_memory_info(Device("xla:0")).bytes_used, 16 * 8 * 4);

  Tensor y = relu(add(mul(x, 3.0), 0.5));
  axle::sync();
  EXPECT_TRUE(serve.be->owns(buffer_of(y)));
  EXPECT_EQ(serve.be->lowers.load(), 1);
  EXPECT_EQ(serve.be->runs.load(), 1);
  const std::vector<float> got = y.cpu().to_vector<float>(), want = relu(add(mul(x0, 3.0), 0.5)).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  EXPECT_GE(serve.be->to_hosts.load(), 1);
  // Nothing of the lazy device's data went to the cpu backend's memory.
  EXPECT_EQ(backend::backend_for(kCPU).memory_info(Device("xla:0")).bytes_used, cpu_xla_before);
}

TEST_F(OpaqueBackendTest, TrainsTheMlpStepWithTheCpuBackendsLosses) {
  OneThread one;
  const std::vector<double> cpu = train_mlp(0, 8);
  std::vector<double> opaque;
  int64_t runs = 0, peak = 0;
  {
    ServeOpaque serve;
    opaque = train_mlp(0, 8);
    runs = serve.be->runs.load();
    peak = serve.be->opaque_allocator().peak_bytes_used(Device("xla:0"));
  }
  EXPECT_GE(runs, 8);  // every step ran on it
  EXPECT_GT(peak, (16 * 32 + 32 * 4) * 4) << "the parameters lived in its memory";
  ASSERT_EQ(opaque.size(), cpu.size());
  EXPECT_LT(opaque.back(), opaque.front()) << "the loss falls";
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(opaque[i], cpu[i]) << "step " << i;
}

TEST_F(OpaqueBackendTest, TrainsATwoDeviceSpmdStepWithTheCpuBackendsLosses) {
  OneThread one;
  const std::vector<double> cpu = train_mlp(2, 6);
  EXPECT_GT(metrics::counter_value("SpmdAllReduce"), 0);
  dist::detail::set_spmd_mode(false);
  lazy::clear_graph_cache();
  metrics::reset();
  std::vector<double> opaque;
  int64_t replicated = 0;
  {
    ServeOpaque serve;
    opaque = train_mlp(2, 6);
    replicated = serve.be->replicated_runs.load();
    // The partitioner handed the backend replica groups, not communicators it made.
    EXPECT_GT(serve.be->replica_group_collectives.load(), 0);
    EXPECT_GT(metrics::counter_value("SpmdAllReduce"), 0) << "gradients of a batch-split input are all-reduced";
    EXPECT_GT(serve.be->opaque_allocator().peak_bytes_used(Device("xla:1")), 0) << "device 1 held its shards";
  }
  EXPECT_GE(replicated, 6);
  ASSERT_EQ(opaque.size(), cpu.size());
  EXPECT_LT(opaque.back(), opaque.front()) << "the loss falls";
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(opaque[i], cpu[i]) << "step " << i;
}

// Replica groups are data in the collective's attribute: a negative handle, the same for
// equal groups, never a process group's id; the backend makes the communicator.
TEST(ReplicaGroups, HandlesNameTheGroupsAndNeverAProcessGroup) {
  const int64_t cols = ops::replica_groups_attr({{0, 2}, {1, 3}});
  EXPECT_LT(cols, 0);
  EXPECT_EQ(ops::replica_groups_attr({{0, 2}, {1, 3}}), cols);
  EXPECT_NE(ops::replica_groups_attr({{0, 1}, {2, 3}}), cols);
  ASSERT_NE(ops::replica_groups_of(cols), nullptr);
  EXPECT_EQ(*ops::replica_groups_of(cols), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(ops::replica_groups_of(0), nullptr);  // the world process group
  EXPECT_EQ(ops::replica_groups_of(3), nullptr);
  EXPECT_EQ(ops::replica_groups_of(-1000000), nullptr);  // never made
  EXPECT_THROW(ops::replica_groups_attr({{0, 1}, {2}}), axle::Error);
  EXPECT_THROW(ops::replica_groups_attr({{0, 1}, {1, 2}}), axle::Error);
  EXPECT_THROW(ops::replica_groups_attr({{0, 5}}), axle::Error);
}
