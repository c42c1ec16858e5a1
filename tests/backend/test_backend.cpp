// The backend seam (src/backend/backend.h): the registry, the lazy device reaching the
// hardware only through the interface, asynchronous runs, and per-device memory counters.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "axle/axle.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "backend/backend.h"
#include "compiler/program.h"
#include "lazy/graph.h"
#include "lazy/ir.h"

using namespace axle;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// A traced graph for `roots` (xla tensors with pending IR) and the buffers of its inputs.
struct Traced {
  compiler::Program program;
  std::vector<Tensor> inputs;
};
Traced trace(const std::vector<Tensor>& roots) {
  std::vector<lazy::Value> vals;
  for (const Tensor& t : roots) vals.push_back(lazy::lazy_of(t)->ir);
  lazy::Graph g = lazy::build_graph(vals);
  Traced t{lazy::to_program(g), {}};
  for (int i : g.inputs) t.inputs.push_back(g.nodes[size_t(i)]->data);
  return t;
}

// Forwards every call to `inner` and counts the ones the lazy device makes.
class CountingBackend final : public backend::Backend {
 public:
  explicit CountingBackend(backend::Backend& inner) : inner_(inner) {}
  std::atomic<int> allocations{0}, to_devices{0}, to_hosts{0}, pipelines{0}, lowers{0}, runs{0};

  const char* name() const override { return "counting"; }
  Allocator& allocator() override { return inner_.allocator(); }
  Tensor allocate(const Shape& s, DType d, Device dev) override {
    ++allocations;
    return inner_.allocate(s, d, dev);
  }
  xm::MemoryInfo memory_info(Device d) const override { return inner_.memory_info(d); }
  Tensor to_device(const Tensor& host, Device d) override {
    ++to_devices;
    return inner_.to_device(host, d);
  }
  Tensor to_host(const Tensor& buffer) override {
    ++to_hosts;
    return inner_.to_host(buffer);
  }
  void copy_into(const Tensor& dst, const Tensor& src) override { inner_.copy_into(dst, src); }
  bool supports(ops::OpKind k) const override { return inner_.supports(k); }
  void add_passes(compiler::PassPipeline& pp) const override {
    ++const_cast<CountingBackend*>(this)->pipelines;
    inner_.add_passes(pp);
  }
  backend::ExecutablePtr lower(const compiler::Program& p, Device d) const override {
    ++const_cast<CountingBackend*>(this)->lowers;
    return inner_.lower(p, d);
  }
  std::vector<Tensor> run(const backend::Executable& ex, std::vector<Tensor> in) override {
    ++runs;
    return inner_.run(ex, std::move(in));
  }
  std::vector<std::vector<Tensor>> run_replicated(const backend::Executable& ex,
                                                  std::vector<std::vector<Tensor>> in) override {
    return inner_.run_replicated(ex, std::move(in));
  }

 private:
  backend::Backend& inner_;
};

// Serves the xla device with `b` for a scope, then restores the previous backend.
struct ServeXla {
  std::shared_ptr<backend::Backend> prev;
  explicit ServeXla(std::shared_ptr<backend::Backend> b) {
    axle::sync();
    lazy::clear_graph_cache();  // executables cached earlier were lowered by the other backend
    prev = backend::register_backend(DeviceType::XLA, std::move(b));
  }
  ~ServeXla() {
    backend::register_backend(DeviceType::XLA, prev);
    lazy::clear_graph_cache();
  }
};

}  // namespace

TEST(Backend, CpuBackendServesCpuAndXla) {
  backend::Backend& cpu = backend::backend_for(kCPU);
  EXPECT_STREQ(cpu.name(), "cpu");
  EXPECT_EQ(&backend::backend_for(Device("xla:0")), &cpu);
  EXPECT_EQ(&backend::backend_for(DeviceType::XLA), &cpu);
  EXPECT_TRUE(cpu.supports(ops::OpKind::Add));
  EXPECT_TRUE(cpu.supports(ops::OpKind::FusedElementwise));
}

TEST(Backend, PipelineIsTheGenericPassesThenTheBackendsFusions) {
  Tensor a = randn({64, 8}).to(device()), b = randn({64, 8}).to(device());
  Tensor y = exp(add(mul(a, b), 1.5));
  Traced generic = trace({y}), full = trace({y});
  compiler::PassPipeline::standard().run(generic.program);
  backend::backend_for(kCPU).pipeline().run(full.program);
  EXPECT_EQ(generic.program.op_count(), 3) << generic.program.text();  // no fusion in compiler/
  EXPECT_EQ(full.program.op_count(), 1) << full.program.text();        // one FusedElementwise
  axle::sync();
}

TEST(Backend, LazyDeviceReachesTheHardwareOnlyThroughTheInterface) {
  auto counting = std::make_shared<CountingBackend>(backend::backend_for(kCPU));
  {
    ServeXla serve(counting);
    Tensor x0 = randn({16, 16});
    Tensor x = x0.to(device());
    EXPECT_EQ(counting->to_devices.load(), 1);
    for (int step = 0; step < 2; ++step) {
      Tensor y = relu(mul(x, 3.0));
      axle::sync();
      EXPECT_EQ(counting->lowers.load(), 1) << "step " << step;  // compiled once, then cached
      EXPECT_EQ(counting->runs.load(), step + 1);
      EXPECT_EQ(y.cpu().to_vector<float>(), relu(mul(x0, 3.0)).to_vector<float>());
      EXPECT_EQ(counting->to_hosts.load(), step + 1);
    }
    if (std::getenv("AXLE_CACHE_DIR") == nullptr) {  // a disk-cache hit skips the passes
      EXPECT_EQ(counting->pipelines.load(), 1);
    }
  }
  // Restored: the cpu backend serves xla again.
  EXPECT_STREQ(backend::backend_for(device()).name(), "cpu");
}

TEST(MemoryInfo, CpuCountsEachAllocationOnceNotItsViews) {
  const xm::MemoryInfo before = xm::get_memory_info(kCPU);
  EXPECT_GT(before.bytes_limit, 0);
  EXPECT_GE(before.peak_bytes_used, before.bytes_used);
  Tensor t = zeros({1024, 1024});  // 4 MiB of float32
  const xm::MemoryInfo held = xm::get_memory_info(kCPU);
  EXPECT_EQ(held.bytes_used - before.bytes_used, 4 * kMiB);
  EXPECT_GE(held.peak_bytes_used, held.bytes_used);
  {
    // Views share the block: nothing more is counted.
    Tensor v1 = t.reshape({512, 2048}), v2 = t.transpose(0, 1), v3 = slice(t, 0, 10, 20);
    EXPECT_EQ(xm::get_memory_info(kCPU).bytes_used, held.bytes_used);
  }
  Tensor small = zeros({3});  // 12 bytes: one 64-byte block
  EXPECT_EQ(xm::get_memory_info(kCPU).bytes_used - held.bytes_used, 64);
  small = Tensor();
  t = Tensor();
  const xm::MemoryInfo after = xm::get_memory_info(kCPU);
  EXPECT_EQ(after.bytes_used, before.bytes_used);
  EXPECT_GE(after.peak_bytes_used, held.bytes_used);  // the peak stays
  EXPECT_EQ(after.bytes_limit, before.bytes_limit);
}

TEST(MemoryInfo, XlaDataIsCountedUnderTheXlaDevice) {
  axle::sync();
  lazy::clear_graph_cache();  // cached executables hold cpu constants: start without them
  Tensor host = full({256, 1024}, 2.0);  // 1 MiB
  const xm::MemoryInfo cpu0 = xm::get_memory_info("cpu"), xla0 = xm::get_memory_info("xla:0");
  EXPECT_EQ(xla0.bytes_limit, cpu0.bytes_limit);  // host memory
  Tensor x = host.to(device());
  EXPECT_EQ(xm::get_memory_info("xla:0").bytes_used - xla0.bytes_used, kMiB);
  EXPECT_EQ(xm::get_memory_info("cpu").bytes_used, cpu0.bytes_used);
  Tensor y = add(mul(x, 3.0), 1.0);
  axle::sync();
  // y's data is the graph's one output; its intermediate and scalar inputs are gone.
  EXPECT_EQ(xm::get_memory_info("xla:0").bytes_used - xla0.bytes_used, 2 * kMiB);
  EXPECT_GE(xm::get_memory_info("xla:0").peak_bytes_used, xla0.bytes_used + 2 * kMiB);
  lazy::clear_graph_cache();  // drops this graph's constant (1.0), a cpu tensor
  Tensor back = y.cpu();  // a host copy is the cpu's
  EXPECT_EQ(xm::get_memory_info("cpu").bytes_used - cpu0.bytes_used, kMiB);
  EXPECT_EQ(back.to_vector<float>()[0], 7.0f);
  x = Tensor();
  y = Tensor();
  EXPECT_EQ(xm::get_memory_info("xla:0").bytes_used, xla0.bytes_used);
}
