// Asynchronous execution: one device thread runs dispatched graphs in order while the
// host traces the next step. A value read waits only for the execution producing that
// value; an execution's error reaches the host at the next sync or value read.
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>

#include "lazy/lazy_internal.h"

namespace axle::lazy {

void Execution::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [this] { return done; });
}

namespace detail {
namespace {

std::atomic<bool> g_async{[] {
  const char* v = std::getenv("AXLE_ASYNC");
  return v && *v && std::string(v) != "0";
}()};

std::atomic<bool> g_dispatched{false};  // the device thread was ever used

std::function<void(const std::string&)>& hook_slot() {
  static auto* h = new std::function<void(const std::string&)>();
  return *h;
}

class DeviceThread;
DeviceThread& device_thread();

class DeviceThread {
 public:
  // At exit (an atexit handler): runs what is queued, then joins the thread.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void push(Job job) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      // Back-pressure: the host runs at most one execution ahead of the one running, so
      // it never queues unbounded steps (and their buffers).
      space_.wait(lock, [this] { return queue_.size() < kMaxQueued; });
      last_ = job.exec;
      queue_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

  void drain() {
    std::shared_ptr<Execution> last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = last_;
    }
    if (last) last->wait();  // executions finish in order: the last one done means all are
  }

  // The first failed execution not yet reported to the host.
  void take_error(std::shared_ptr<Execution>& out) {
    std::lock_guard<std::mutex> lock(mu_);
    out = std::move(unreported_);
    unreported_.reset();
  }
  void reported(const Execution* e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (unreported_.get() == e) unreported_.reset();
  }

 private:
  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      space_.notify_all();
      std::shared_ptr<Execution> exec = job.exec;
      std::exception_ptr error;
      // What the backend carries from the tracing thread (the cpu: its thread count, on
      // which a reduction's bits depend).
      if (job.thread_settings) job.thread_settings();
      try {
        std::vector<Tensor> results = run_job(job);
        for (size_t r = 0; r < results.size(); ++r) job.outs[r]->value = std::move(results[r]);
      } catch (const std::exception& e) {
        error = std::make_exception_ptr(Error("[async] graph " + exec->graph + " failed: " + e.what()));
      } catch (...) {
        error = std::make_exception_ptr(Error("[async] graph " + exec->graph + " failed"));
      }
      // Drop the job's references (inputs, outputs) before the next execution starts, so
      // a buffer that only the next graph holds can be donated to it.
      job = Job();
      if (error) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!unreported_) unreported_ = exec;
      }
      {
        std::lock_guard<std::mutex> lock(exec->mu);
        exec->error = error;
        exec->done = true;
      }
      exec->cv.notify_all();
      // Executions still queued at exit must run before the kernels' static state (oneDNN's,
      // made by the first execution) is destroyed: an atexit handler registered now runs first.
      static std::once_flag at_exit;
      std::call_once(at_exit, [] { std::atexit([] { device_thread().shutdown(); }); });
    }
  }

  std::mutex mu_;
  static constexpr size_t kMaxQueued = 1;  ///< waiting executions, besides the running one
  std::condition_variable cv_, space_;
  std::deque<Job> queue_;
  std::shared_ptr<Execution> last_, unreported_;
  bool stop_ = false;
  std::thread thread_;  // last member: started after the others exist
};

DeviceThread& device_thread() {
  static DeviceThread* t = new DeviceThread();  // never destroyed: shut down by an atexit handler
  return *t;
}

}  // namespace

bool async_enabled() { return g_async.load(std::memory_order_relaxed); }

void set_async(bool on) {
  drain();
  g_async.store(on);
}

void dispatch(Job job) {
  g_dispatched.store(true);
  job.thread_settings = backend::backend_for(job.ex->device()).thread_settings();
  device_thread().push(std::move(job));
}

void drain() {
  if (g_dispatched.load()) device_thread().drain();
}

void rethrow_async_error() {
  if (!g_dispatched.load(std::memory_order_relaxed)) return;
  std::shared_ptr<Execution> e;
  device_thread().take_error(e);
  if (e) std::rethrow_exception(e->error);
}

void set_execute_hook(std::function<void(const std::string&)> hook) { hook_slot() = std::move(hook); }
const std::function<void(const std::string&)>& execute_hook() { return hook_slot(); }

}  // namespace detail

const Tensor& ready_buffer(LazyTensor& lt) {
  if (lt.pending) {
    Execution& e = *lt.pending->producer;
    e.wait();
    if (e.error) {
      detail::device_thread().reported(&e);
      std::rethrow_exception(e.error);  // the tensor stays pending: every read of it throws
    }
    lt.buffer = lt.pending->value;
    lt.pending.reset();
  }
  return lt.buffer;
}

}  // namespace axle::lazy
