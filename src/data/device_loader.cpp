// MpDeviceLoader: a loader thread feeding a bounded host queue, transfer threads moving
// batches to the device into an index-ordered window, and the training loop taking them
// in order. Errors travel as the batch they belong to.
#include "axle/data/device_loader.h"

#include <omp.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "axle/error.h"
#include "axle/ops.h"
#include "axle/tensor.h"
#include "axle/xs.h"
#include "core/tensor_impl.h"
#include "dist/local_devices.h"
#include "lazy/ir.h"
#include "spmd/sharding.h"

namespace axle::pl {
namespace detail {

namespace {
// The spec for one field of a batch ("data" or "target"), or null.
const xs::ShardingSpec* spec_for(const InputSharding& s, const char* key) {
  if (const auto* one = std::get_if<xs::ShardingSpec>(&s)) return one;
  if (const auto* per_key = std::get_if<std::map<std::string, xs::ShardingSpec>>(&s)) {
    auto it = per_key->find(key);
    return it == per_key->end() ? nullptr : &it->second;
  }
  return nullptr;
}

// One batch tensor on the device, sharded by `spec` where it applies.
Tensor send(const Tensor& t, Device device, const xs::ShardingSpec* spec) {
  return xm::send_cpu_data_to_device({t}, device, spec)[0];
}
}  // namespace

class DeviceEpoch {
 public:
  DeviceEpoch(data::DataLoader& loader, Device device, const MpDeviceLoaderOptions& o)
      : loader_(loader), device_(device), opts_(o) {
    threads_.emplace_back([this] { load_loop(); });
    for (int i = 0; i < o.host_to_device_transfer_threads; ++i) threads_.emplace_back([this] { transfer_loop(); });
  }
  ~DeviceEpoch() { shutdown(); }
  DeviceEpoch(const DeviceEpoch&) = delete;
  DeviceEpoch& operator=(const DeviceEpoch&) = delete;

  /// Batch k (the next one), or false at the end of the epoch. Rethrows its error.
  bool take(int64_t k, data::Example& out) {
    std::unique_lock<std::mutex> lk(mu_);
    AXLE_CHECK(k == consumed_, "[MpDeviceLoader] expected batch ", consumed_, " next, got a request for batch ", k);
    cv_ready_.wait(lk, [&] { return stop_ || ready_.count(k) != 0 || (total_ >= 0 && k >= total_); });
    AXLE_CHECK(!stop_, "[MpDeviceLoader] this epoch was stopped (a new epoch began or the loader was destroyed)");
    auto it = ready_.find(k);
    if (it == ready_.end()) return false;
    Slot slot = std::move(it->second);
    ready_.erase(it);
    ++consumed_;
    lk.unlock();
    cv_space_.notify_all();
    cv_host_.notify_all();  // the device window moved
    if (slot.error) std::rethrow_exception(slot.error);
    out = std::move(slot.batch);
    return true;
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_space_.notify_all();
    cv_host_.notify_all();
    cv_ready_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  struct Slot {
    data::Example batch;
    std::exception_ptr error;
  };

  // Reads the loader in order into the host queue. A batch the loader failed to
  // assemble travels as its error; an error from the loader's begin() ends the epoch.
  void load_loop() {
    omp_set_num_threads(1);
    int64_t i = 0;
    auto push = [&](Slot slot) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_space_.wait(lk, [&] { return stop_ || int64_t(host_.size()) < opts_.loader_prefetch_size; });
      if (stop_) return false;
      host_.push_back({i++, std::move(slot)});
      lk.unlock();
      cv_host_.notify_one();
      return true;
    };
    try {
      auto it = loader_.begin();
      std::exception_ptr failed;
      while (it != loader_.end()) {
        if (!push(failed ? Slot{{}, failed} : Slot{*it, nullptr})) return;
        try {
          ++it;
          failed = nullptr;
        } catch (...) {
          failed = std::current_exception();  // `it` now stands at the failed batch
        }
      }
    } catch (...) {
      if (!push(Slot{{}, std::current_exception()})) return;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      loaded_ = i;
    }
    cv_host_.notify_all();
  }

  // Moves host batches to the device, at most device_prefetch_size ahead of the loop.
  void transfer_loop() {
    omp_set_num_threads(1);
    for (;;) {
      std::pair<int64_t, Slot> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_host_.wait(lk, [&] {
          return stop_ || (!host_.empty() && host_.front().first < consumed_ + opts_.device_prefetch_size) ||
                 (host_.empty() && loaded_ >= 0);
        });
        if (stop_) return;
        if (host_.empty()) {  // the loader is done and every batch is handed over
          if (in_flight_ == 0) total_ = loaded_;
          lk.unlock();
          cv_ready_.notify_all();
          cv_host_.notify_all();
          return;
        }
        job = std::move(host_.front());
        host_.pop_front();
        ++in_flight_;
      }
      cv_space_.notify_all();
      if (!job.second.error) {
        try {
          data::Example& b = job.second.batch;
          b.data = send(b.data, device_, spec_for(opts_.input_sharding, "data"));
          b.target = send(b.target, device_, spec_for(opts_.input_sharding, "target"));
        } catch (...) {
          job.second = Slot{{}, std::current_exception()};
        }
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        ready_.emplace(job.first, std::move(job.second));
        --in_flight_;
        if (in_flight_ == 0 && host_.empty() && loaded_ >= 0) total_ = loaded_;
      }
      cv_ready_.notify_all();
      cv_host_.notify_all();
    }
  }

  data::DataLoader& loader_;
  const Device device_;
  const MpDeviceLoaderOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_space_;  ///< loader thread: host queue has room; transfers: window moved
  std::condition_variable cv_host_;   ///< transfer threads: a host batch (or the end) is there
  std::condition_variable cv_ready_;  ///< the loop: a device batch (or the end) is there
  std::deque<std::pair<int64_t, Slot>> host_;
  std::map<int64_t, Slot> ready_;
  int64_t consumed_ = 0;
  int64_t loaded_ = -1;  ///< batches the loader produced, once it is done
  int64_t total_ = -1;   ///< batches of this epoch, once every one is on the device
  int in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

namespace {
void check_positive(int v, const char* name) {
  AXLE_CHECK(v >= 1, "[MpDeviceLoader] expected ", name, " >= 1, got ", v);
}
}  // namespace

MpDeviceLoader::MpDeviceLoader(data::DataLoader& loader, Device device, MpDeviceLoaderOptions o)
    : loader_(loader), device_(device), opts_(o) {
  check_positive(o.loader_prefetch_size, "loader_prefetch_size");
  check_positive(o.device_prefetch_size, "device_prefetch_size");
  check_positive(o.host_to_device_transfer_threads, "host_to_device_transfer_threads");
  check_positive(o.batches_per_execution, "batches_per_execution");
  if (std::holds_alternative<std::monostate>(o.input_sharding)) return;
  AXLE_CHECK(runtime::is_spmd(), "[MpDeviceLoader] input_sharding needs SPMD: call axle::runtime::use_spmd() first");
  AXLE_CHECK(!device.is_cpu(), "[MpDeviceLoader] input_sharding needs the xla device, got ", device.str());
  if (const auto* per_key = std::get_if<std::map<std::string, xs::ShardingSpec>>(&o.input_sharding)) {
    // torch_xla: every key of the batch must have a spec (here the fields of data::Example).
    std::string missing;
    for (const char* key : {"data", "target"})
      if (!per_key->count(key)) missing += std::string(missing.empty() ? "'" : ", '") + key + "'";
    AXLE_CHECK(missing.empty(), "[MpDeviceLoader] Keys: [", missing,
               "] are missing from input_sharding (a batch is a data::Example: keys 'data' and 'target')");
  }
}

MpDeviceLoader::~MpDeviceLoader() {
  if (state_) state_->shutdown();
}

MpDeviceLoader::Iterator MpDeviceLoader::begin() {
  if (state_) state_->shutdown();
  state_ = std::make_shared<detail::DeviceEpoch>(loader_, device_, opts_);
  Iterator it;
  it.state_ = state_;
  it.index_ = 0;
  it.per_execution_ = opts_.batches_per_execution;
  lazy::mark_step("loader");  // work traced before the loop is not part of the first step
  it.fetch();
  return it;
}

void MpDeviceLoader::Iterator::fetch() {
  current_ = {};
  if (!state_->take(index_, current_)) state_.reset();  // the end; an error leaves the iterator on its batch
}

MpDeviceLoader::Iterator& MpDeviceLoader::Iterator::operator++() {
  AXLE_CHECK(state_, "[MpDeviceLoader] ++ on an iterator at the end of the epoch");
  const int64_t next = index_ + 1;
  // Cut the step before handing out every batches_per_execution-th batch. If the sync throws,
  // the iterator stays on its batch.
  if (next % per_execution_ == 0) lazy::mark_step("loader");
  index_ = next;
  fetch();
  if (!state_ && next % per_execution_ != 0) lazy::mark_step("loader");  // the epoch's last batches
  return *this;
}

ParallelLoader::ParallelLoader(data::DataLoader& loader, const std::vector<Device>& devices, MpDeviceLoaderOptions o) {
  AXLE_CHECK(devices.size() == 1, "[ParallelLoader] expected exactly one device (axle runs one device per process), got ",
             devices.size());
  loader_ = std::make_unique<MpDeviceLoader>(loader, devices[0], o);
}

MpDeviceLoader& ParallelLoader::per_device_loader(Device device) {
  AXLE_CHECK(device == loader_->device(), "[ParallelLoader] per_device_loader(", device.str(),
             "): this loader was built for ", loader_->device().str());
  return *loader_;
}

}  // namespace axle::pl

namespace axle::xm {
namespace {

// The global batch whose rows [h*b, (h+1)*b) are this host's `t` (b rows) and the rest
// zeros, checked to put only those rows on this host's devices.
Tensor place_host_rows(const Tensor& t, const xs::ShardingSpec& spec) {
  const int hosts = dist::host_count(), h = dist::host_index();
  const int64_t b = t.size(0), n = runtime::global_runtime_device_count();
  Shape global = t.shape();
  global[0] = b * hosts;
  const spmd::Sharding s = spmd::Sharding::from_spec(spec.mesh, spec.partition_spec, t.dim(), "send_cpu_data_to_device");
  const int first = dist::first_local_device(int(n));
  for (int d = first; d < first + int(n) / hosts; ++d) {
    const xs::Slice r = s.range(0, d, global[0]);
    AXLE_CHECK(r.stop <= r.start || (r.start >= h * b && r.stop <= (h + 1) * b),
               "[send_cpu_data_to_device] with minibatch on ", hosts, " hosts, host ", h, "'s devices must hold only "
               "its rows ", h * b, "..", (h + 1) * b, " of the global batch, but device ", d, " holds rows ", r.start,
               "..", r.stop, " (split dim 0 over a mesh whose devices go host by host)");
  }
  const int64_t row = b ? t.numel() / b : 0;
  std::vector<Tensor> parts;
  if (h > 0) parts.push_back(zeros({h * b, row}, {.dtype = t.dtype()}));
  parts.push_back(t.reshape({b, row}));
  if (h < hosts - 1) parts.push_back(zeros({(hosts - 1 - h) * b, row}, {.dtype = t.dtype()}));
  return cat(parts, 0).reshape(global);
}

}  // namespace

std::vector<Tensor> send_cpu_data_to_device(const std::vector<Tensor>& tensors, Device device,
                                            const xs::ShardingSpec* input_sharding) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    AXLE_CHECK(t.defined(), "[send_cpu_data_to_device] expected defined tensors, got an undefined one");
    const bool shard = input_sharding && input_sharding->can_apply(t);
    Tensor host = t;
    if (shard && input_sharding->minibatch && t.dim() > 0) {
      // The per-host batch must split evenly over the host's devices (torch_xla's check).
      const int64_t local = runtime::addressable_runtime_device_count();
      AXLE_CHECK(t.size(0) % local == 0,
                 "[send_cpu_data_to_device] When minibatch is configured, the per-host batch size must be divisible "
                 "by local runtime device count. Per host input data shape = ",
                 shape_str(t.shape()), ", local_runtime_device_count = ", local);
      // Several hosts: this batch is rows [h*b, (h+1)*b) of the global batch of hosts * b rows
      // (torch_xla's GetAdjustedGlobalShape). Only this host's devices get shards, and they
      // read only these rows; the other rows are never sent.
      if (dist::host_count() > 1) host = place_host_rows(t, *input_sharding);
    }
    Tensor x = host.to(device);
    // Data fresh on the device: mark_sharding splits it at once into one shard per device.
    // A tensor the spec does not fit is replicated on its mesh, as torch_xla sends it
    // ("{replicated}").
    if (shard) input_sharding->apply(x);
    else if (input_sharding) xs::mark_sharding(x, input_sharding->mesh, xs::PartitionSpec(size_t(x.dim()), xs::None));
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace axle::xm
