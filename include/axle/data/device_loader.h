// MpDeviceLoader: batches of a DataLoader, already on the device, prepared while the
// step runs (seed Pattern 5).
//
//   axle::pl::MpDeviceLoader mp_loader(train_loader, axle::device());
//   for (const axle::data::Example& batch : mp_loader) {  // batch.data / batch.target on xla
//     auto step = axle::step();
//     opt.zero_grad();
//     axle::cross_entropy(model(batch.data), batch.target).backward();
//     axle::xm::optimizer_step(opt);
//   }
//
// A background thread pulls batches from the loader (up to loader_prefetch_size ahead)
// and transfer threads move them to the device (up to device_prefetch_size ahead of the
// loop). Batches come in the loader's order. Handing out batch i first syncs the device
// when i is a multiple of batches_per_execution (the step boundary torch_xla's loader
// marks, counted in MarkStep with cause "loader"), and the end of the epoch syncs too: an
// epoch of n batches adds ceil(n / batches_per_execution) + 1 to MarkStep. An exception raised while loading or moving a batch is
// rethrown in the loop when that batch is reached (by begin() or ++); iteration may
// continue past it, as with DataLoader. The loader must outlive the MpDeviceLoader and
// must not be iterated elsewhere meanwhile.
//
// Under SPMD (seed Pattern 5 "with SPMD input sharding"), input_sharding shards each
// batch as it is moved, so the step receives it already laid out over the devices:
//
//   axle::runtime::use_spmd();
//   axle::xs::Mesh mesh = axle::xs::get_1d_mesh("data");                   // every device
//   axle::pl::MpDeviceLoader mp_loader(train_loader, axle::device(),
//                                      {.input_sharding = axle::xs::ShardingSpec(mesh, {"data", {}, {}, {}})});
//   // batch.data: "{devices=[n,1,1,1]0,1,...}"; batch.target (rank 1): "{replicated}"
//
// As in torch_xla, a spec applies only to tensors whose rank equals its length; the others
// arrive replicated. A map spec names one spec per field of data::Example ("data",
// "target"); both must be present. ShardingSpec::minibatch (each host loads only its own
// slice of the global batch) needs a batch divisible by the local device count.
#pragma once
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "axle/data/dataloader.h"
#include "axle/device.h"
#include "axle/xs.h"

namespace axle::pl {

/// No sharding (batches arrive replicated under SPMD), one spec for every tensor of a batch,
/// or one per data::Example field ("data", "target").
using InputSharding = std::variant<std::monostate, xs::ShardingSpec, std::map<std::string, xs::ShardingSpec>>;

struct MpDeviceLoaderOptions {
  /// SPMD only (runtime::use_spmd() first): the sharding each batch tensor gets on the device.
  InputSharding input_sharding{};
  /// Host batches read from the loader ahead of the device queue.
  int loader_prefetch_size = 16;
  /// Device batches prepared ahead of the training loop.
  int device_prefetch_size = 8;
  /// Threads moving batches to the device.
  int host_to_device_transfer_threads = 1;
  /// Batches handed out between two syncs.
  int batches_per_execution = 1;
};

namespace detail { class DeviceEpoch; }

class MpDeviceLoader {
 public:
  MpDeviceLoader(data::DataLoader& loader, Device device, MpDeviceLoaderOptions o = {});
  ~MpDeviceLoader();
  MpDeviceLoader(const MpDeviceLoader&) = delete;
  MpDeviceLoader& operator=(const MpDeviceLoader&) = delete;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = data::Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const data::Example*;
    using reference = const data::Example&;

    Iterator() = default;  ///< the end sentinel
    reference operator*() const { return current_; }
    pointer operator->() const { return &current_; }
    /// Syncs (every batches_per_execution batches), then waits for the next batch.
    /// If the sync or the batch throws, the exception propagates; ++ moves past a failed batch.
    Iterator& operator++();
    int64_t index() const { return index_; }
    friend bool operator==(const Iterator& a, const Iterator& b) {
      return a.at_end() == b.at_end() && (a.at_end() || a.index_ == b.index_);
    }

   private:
    friend class MpDeviceLoader;
    bool at_end() const { return !state_; }
    void fetch();
    std::shared_ptr<detail::DeviceEpoch> state_;
    int64_t index_ = 0;
    int64_t per_execution_ = 1;
    data::Example current_;
  };

  /// Starts an epoch of the underlying loader (stopping one still running).
  Iterator begin();
  Iterator end() { return Iterator(); }
  /// Batches per epoch (the loader's).
  int64_t size() const { return loader_.size(); }
  Device device() const { return device_; }
  const MpDeviceLoaderOptions& options() const { return opts_; }

 private:
  data::DataLoader& loader_;
  Device device_;
  MpDeviceLoaderOptions opts_;
  std::shared_ptr<detail::DeviceEpoch> state_;
};

/// Old torch_xla ParallelLoader(loader, [device]).per_device_loader(device).
class [[deprecated("use axle::pl::MpDeviceLoader(loader, device)")]] ParallelLoader {
 public:
  /// One device per process: `devices` must hold exactly one.
  ParallelLoader(data::DataLoader& loader, const std::vector<Device>& devices, MpDeviceLoaderOptions o = {});
  /// The loader of `device` (the one given at construction).
  MpDeviceLoader& per_device_loader(Device device);

 private:
  std::unique_ptr<MpDeviceLoader> loader_;
};

}  // namespace axle::pl

namespace axle::xm {
/// torch_xla's xm.send_cpu_data_to_device: each tensor moved to `device`; with a spec, those
/// whose rank equals its length are sharded as they arrive (each device receives its own
/// shard), the rest are replicated on the spec's mesh ("{replicated}"). A minibatch spec needs dim 0 divisible by the local
/// device count (torch_xla's error otherwise).
std::vector<Tensor> send_cpu_data_to_device(const std::vector<Tensor>& tensors, Device device,
                                            const xs::ShardingSpec* input_sharding = nullptr);
}  // namespace axle::xm
