// The CPU backend behind the Backend interface (backend/backend.h).
#include "backend/cpu/backend.h"

#include <omp.h>

#include <algorithm>
#include <mutex>

#include "backend/cpu/executable.h"
#include "backend/cpu/kernels/kernels.h"
#include "dist/local_devices.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/allocator.h"
#include "ops/kernels.h"

namespace axle::cpu {

bool supports_op(ops::OpKind k) {
  return ops::supports(kName, k);
}

namespace {

const Executable& as_cpu(const backend::Executable& ex) {
  const auto* e = dynamic_cast<const Executable*>(&ex);
  AXLE_CHECK(e != nullptr, "[backend] the cpu backend was given an executable lowered by another backend");
  return *e;
}

class CpuBackend final : public backend::Backend {
 public:
  const char* name() const override { return kName; }

  Allocator& allocator() override { return host_allocator(); }

  Tensor allocate(const Shape& shape, DType dtype, Device device) override {
    ChargeHostMemoryTo charge(charged_device(device));
    return make_tensor(shape, dtype);
  }

  xm::MemoryInfo memory_info(Device device) const override {
    const MemoryCounters c = memory_counters(device);
    return {c.bytes_used, physical_memory_bytes(), c.peak_bytes_used};
  }

  Tensor to_device(const Tensor& host, Device device) override {
    Tensor buf = allocate(host.shape(), host.dtype(), device);
    cpu::copy_into(buf, host);
    return buf;
  }

  Tensor to_host(const Tensor& buffer) override {
    Tensor out = make_tensor(buffer.shape(), buffer.dtype());
    cpu::copy_into(out, buffer);
    return out;
  }

  void copy_into(const Tensor& dst, const Tensor& src) override { cpu::copy_into(dst, src); }

  bool supports(ops::OpKind k) const override { return supports_op(k); }

  void add_passes(compiler::PassPipeline& pp) const override {
    pp.add(make_epilogue_fusion_pass()).add(make_fusion_pass());
  }

  backend::ExecutablePtr lower(const compiler::Program& p, Device device) const override {
    return cpu::lower(p, device);
  }

  std::vector<Tensor> run(const backend::Executable& ex, std::vector<Tensor> inputs) override {
    return as_cpu(ex).run(std::move(inputs));
  }

  // One device thread per device (dist::run_on_devices: in-process collectives meet
  // there), each with its share of this thread's OpenMP threads.
  std::vector<std::vector<Tensor>> run_replicated(const backend::Executable& ex,
                                                  std::vector<std::vector<Tensor>> inputs) override {
    const Executable& e = as_cpu(ex);
    const int n = int(inputs.size());
    std::vector<std::vector<Tensor>> results(inputs.size());
    const int threads = std::max(1, omp_get_max_threads() / std::max(n, 1));
    dist::run_on_devices(n, [&](int d) { results[size_t(d)] = e.run(std::move(inputs[size_t(d)])); }, threads);
    return results;
  }

  // A reduction's order, hence its bits, depends on the thread count: the thread that runs
  // takes the tracing thread's (axle-train --threads, ...).
  std::function<void()> thread_settings() const override {
    const int threads = omp_get_max_threads();
    return [threads] {
      if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    };
  }
};

}  // namespace

std::shared_ptr<backend::Backend> make_backend() {
  // The backend owns its kernel table (ops::kernels(kName)): filled once, with the backend.
  static std::once_flag kernels;
  std::call_once(kernels, register_cpu_kernels);
  return std::make_shared<CpuBackend>();
}

}  // namespace axle::cpu
