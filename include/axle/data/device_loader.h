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
#pragma once
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "axle/data/dataloader.h"
#include "axle/device.h"

namespace axle::pl {

struct MpDeviceLoaderOptions {
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
