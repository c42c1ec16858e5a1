// DataLoader: batches of a Dataset in sampler order, optionally assembled ahead
// of time by background threads.
//
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 2});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (const data::Example& batch : loader) { ... batch.data, batch.target ... }
//   }
//
// Batches come in the same order whatever num_workers is. With num_workers > 0 at most
// prefetch_factor * num_workers batches are assembled ahead of the consumer. An exception
// thrown while assembling a batch is rethrown in the consuming thread when that batch is
// reached (by begin() or ++); iteration may continue past it. Starting a new epoch
// (begin()) or destroying the loader stops and joins the previous epoch's threads.
#pragma once
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "axle/data/dataset.h"
#include "axle/data/sampler.h"

namespace axle::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  /// Use a RandomSampler(size, seed) (not allowed together with an explicit sampler).
  bool shuffle = false;
  /// Drop the last batch if it is smaller than batch_size.
  bool drop_last = false;
  /// Background threads assembling batches; 0 assembles each batch in the consumer thread.
  int num_workers = 0;
  uint64_t seed = 0;
  /// Batches assembled ahead per worker.
  int prefetch_factor = 2;
};

namespace detail { class EpochState; }

class DataLoader {
 public:
  /// `sampler` defaults to SequentialSampler, or RandomSampler(ds->size(), o.seed) if o.shuffle.
  DataLoader(std::shared_ptr<Dataset> ds, DataLoaderOptions o = {}, std::shared_ptr<Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Input iterator over the batches of one epoch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const Example*;
    using reference = const Example&;

    Iterator() = default;  ///< the end sentinel
    reference operator*() const { return current_; }
    pointer operator->() const { return &current_; }
    Iterator& operator++();
    /// Index of the current batch within the epoch.
    int64_t index() const { return index_; }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.at_end() == b.at_end() && (a.at_end() || a.index_ == b.index_); }

   private:
    friend class DataLoader;
    bool at_end() const;
    void fetch();
    std::shared_ptr<detail::EpochState> state_;
    int64_t index_ = 0;
    int64_t size_ = 0;
    Example current_;
  };

  /// Starts an epoch (stopping any epoch still running) and returns its first batch.
  /// The epoch number is the one given to set_epoch, else one more than the previous begin().
  Iterator begin();
  Iterator end() { return Iterator(); }

  /// Batches per epoch.
  int64_t size() const;
  /// Sets the epoch the next begin() uses (forwarded to the sampler).
  void set_epoch(int64_t e);
  int64_t epoch() const { return next_epoch_; }

  const DataLoaderOptions& options() const { return opts_; }
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions opts_;
  std::shared_ptr<Sampler> sampler_;
  std::shared_ptr<detail::EpochState> state_;
  int64_t next_epoch_ = 0;
};

}  // namespace axle::data
