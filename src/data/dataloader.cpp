// DataLoader: batches in sampler order; optional background workers with a bounded
// prefetch window, results delivered in order, errors rethrown at their batch.
#include "axle/data/dataloader.h"

#include <omp.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "axle/error.h"

namespace axle::data {
namespace detail {

class EpochState {
 public:
  EpochState(std::shared_ptr<Dataset> ds, std::vector<std::vector<int64_t>> batches, int num_workers,
             int64_t window)
      : ds_(std::move(ds)), batches_(std::move(batches)), window_(window), workers_(num_workers > 0) {
    const int nw = static_cast<int>(std::min<int64_t>(num_workers, static_cast<int64_t>(batches_.size())));
    threads_.reserve(nw);
    for (int w = 0; w < nw; ++w) threads_.emplace_back([this] { worker_loop(); });
  }
  ~EpochState() { shutdown(); }
  EpochState(const EpochState&) = delete;
  EpochState& operator=(const EpochState&) = delete;

  int64_t size() const { return static_cast<int64_t>(batches_.size()); }

  /// Batch k, which must be the next one not yet taken. Rethrows the error its assembly raised.
  Example take(int64_t k) {
    std::unique_lock<std::mutex> lk(mu_);
    AXLE_CHECK(!stop_, "[DataLoader] this epoch was stopped (a new epoch began or the loader was destroyed); "
                       "call begin() again");
    AXLE_CHECK(k == consumed_, "[DataLoader] expected batch ", consumed_, " next, got a request for batch ", k,
               " (iterators of one epoch must advance together)");
    if (!workers_) {
      ++consumed_;
      lk.unlock();
      return ds_->get_batch(batches_[k]);
    }
    cv_ready_.wait(lk, [&] { return stop_ || ready_.count(k) != 0; });
    AXLE_CHECK(!stop_, "[DataLoader] this epoch was stopped while waiting for batch ", k);
    auto it = ready_.find(k);
    Slot slot = std::move(it->second);
    ready_.erase(it);
    ++consumed_;
    lk.unlock();
    cv_work_.notify_all();  // the window moved: a worker may claim another batch
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

  /// Stops the workers and joins them (idempotent).
  void shutdown() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    cv_ready_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    std::lock_guard<std::mutex> g(mu_);
    ready_.clear();
  }

 private:
  struct Slot {
    Example batch;
    std::exception_ptr error;
  };

  void worker_loop() {
    // Batches are small; one thread each keeps workers from each starting an OpenMP team.
    omp_set_num_threads(1);
    for (;;) {
      int64_t k;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || next_claim_ >= size() || next_claim_ < consumed_ + window_; });
        if (stop_ || next_claim_ >= size()) return;
        k = next_claim_++;
      }
      Slot slot;
      try {
        slot.batch = ds_->get_batch(batches_[k]);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        if (stop_) return;
        ready_.emplace(k, std::move(slot));
      }
      cv_ready_.notify_all();
    }
  }

  std::shared_ptr<Dataset> ds_;
  std::vector<std::vector<int64_t>> batches_;
  const int64_t window_;
  const bool workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_ready_;
  int64_t next_claim_ = 0;  // next batch a worker will assemble
  int64_t consumed_ = 0;    // batches handed to the consumer
  bool stop_ = false;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> threads_;
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<Dataset> ds, DataLoaderOptions o, std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(ds)), opts_(o), sampler_(std::move(sampler)) {
  AXLE_CHECK(dataset_ != nullptr, "[DataLoader] expected a dataset, got null");
  AXLE_CHECK(opts_.batch_size >= 1, "[DataLoader] expected batch_size >= 1, got ", opts_.batch_size);
  AXLE_CHECK(opts_.num_workers >= 0, "[DataLoader] expected num_workers >= 0, got ", opts_.num_workers);
  AXLE_CHECK(opts_.prefetch_factor >= 1, "[DataLoader] expected prefetch_factor >= 1, got ", opts_.prefetch_factor);
  AXLE_CHECK(!(sampler_ && opts_.shuffle),
             "[DataLoader] expected either shuffle = true or an explicit sampler, got both");
  if (!sampler_) {
    if (opts_.shuffle) sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opts_.seed);
    else sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() {
  if (state_) state_->shutdown();
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size();
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

void DataLoader::set_epoch(int64_t e) {
  AXLE_CHECK(e >= 0, "[DataLoader::set_epoch] expected an epoch >= 0, got ", e);
  next_epoch_ = e;
}

DataLoader::Iterator DataLoader::begin() {
  if (state_) {
    state_->shutdown();
    state_.reset();
  }
  sampler_->set_epoch(next_epoch_);
  ++next_epoch_;
  const std::vector<int64_t> idx = sampler_->indices();
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t bs = opts_.batch_size;
  const int64_t nb = opts_.drop_last ? n / bs : (n + bs - 1) / bs;
  std::vector<std::vector<int64_t>> batches(nb);
  for (int64_t b = 0; b < nb; ++b)
    batches[b].assign(idx.begin() + b * bs, idx.begin() + std::min(n, (b + 1) * bs));
  state_ = std::make_shared<detail::EpochState>(dataset_, std::move(batches), opts_.num_workers,
                                                int64_t(opts_.prefetch_factor) * opts_.num_workers);
  Iterator it;
  it.state_ = state_;
  it.size_ = nb;
  it.index_ = 0;
  if (nb > 0) it.fetch();
  return it;
}

bool DataLoader::Iterator::at_end() const { return !state_ || index_ >= size_; }

void DataLoader::Iterator::fetch() { current_ = state_->take(index_); }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  AXLE_CHECK(!at_end(), "[DataLoader] cannot advance past the end of the epoch");
  ++index_;
  current_ = Example{};
  if (index_ < size_) fetch();
  return *this;
}

}  // namespace axle::data
