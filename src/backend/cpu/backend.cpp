// The CPU backend behind the Backend interface (backend/backend.h).
#include "backend/cpu/backend.h"

#include <omp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/cpu/executable.h"
#include "backend/cpu/loops.h"
#include "core/memory.h"

namespace axle::cpu {

bool supports_op(ops::OpKind k) {
  // MERGE(seama): forward to the kernel registry (backend/kernels.h) keyed by (cpu, k).
  return ops::op_def(k).cpu != nullptr;
}

namespace {

// The execution queue of run_async: one thread that runs tasks in submission order.
// Started on first use; it lives as long as the backend (for the process, in the registry).
class ExecutionQueue {
 public:
  ~ExecutionQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // a packaged_task: its exception goes to its future
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

const Executable& as_cpu(const backend::Executable& ex) {
  const auto* e = dynamic_cast<const Executable*>(&ex);
  AXLE_CHECK(e != nullptr, "[backend] the cpu backend was given an executable lowered by another backend");
  return *e;
}

class CpuBackend final : public backend::Backend {
 public:
  const char* name() const override { return "cpu"; }

  Tensor allocate(const Shape& shape, DType dtype, Device device) override {
    ChargeHostMemoryTo charge(device);
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

  std::future<std::vector<Tensor>> run_async(backend::ExecutablePtr ex, std::vector<Tensor> inputs) override {
    const Executable* e = &as_cpu(*ex);  // checked here, on the caller's thread
    // OpenMP's thread count is per thread: the queue runs with the caller's.
    const int threads = omp_get_max_threads();
    auto task = std::make_shared<std::packaged_task<std::vector<Tensor>()>>(
        [ex = std::move(ex), e, threads, inputs = std::move(inputs)]() mutable {
          omp_set_num_threads(threads);
          return e->run(std::move(inputs));
        });
    std::future<std::vector<Tensor>> result = task->get_future();
    queue_.push([task] { (*task)(); });
    return result;
  }

 private:
  ExecutionQueue queue_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace axle::cpu
