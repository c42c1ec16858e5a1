// The trainer every task shares (trainer.h).
#include "trainer.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include <fmt/core.h>

#include "axle/runtime.h"
#include "axle/serialize.h"
#include "progress.h"
#include "report.h"

namespace axle_train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace axle;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// OpenMP's threads for this process: --threads, else the machine's cores shared among the
/// ranks (one process: OpenMP's default). Returns the count.
int set_threads(const Config& cfg, int world) {
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  else if (world > 1) omp_set_num_threads(std::max(1, omp_get_num_procs() / world));  // share the cores
  return omp_get_max_threads();
}

class Trainer {
 public:
  Trainer(Config& cfg, Task& task) : cfg_(cfg), task_(task) {}
  int run();

 private:
  void setup();
  void resume();
  void save(int64_t epoch, int64_t batch);
  void train_epoch(int64_t epoch);
  template <class Source>
  void run_epoch(Source& source, int64_t epoch, int64_t first, int64_t planned, Progress& progress);
  void one_step(std::vector<data::Example>& micro);
  void report();

  Config& cfg_;
  Task& task_;
  Process proc_;
  double load_s_ = 0;
  std::unique_ptr<Strategy> strategy_;
  nn::ModulePtr model_;
  int64_t num_parameters_ = 0;
  std::unique_ptr<optim::Optimizer> opt_;
  data::DataLoader* loader_ = nullptr;
  RunState st_;
  std::vector<double> step_ms_, epoch_seconds_;
  double train_seconds_ = 0, eval_seconds_ = 0;
  int64_t units_ = 0;  // target elements trained on (samples, tokens)
  int64_t start_epoch_ = 0, skip_ = 0;
  CollectiveCount collectives_;
  std::vector<int64_t> peaks_;  // each device's peak bytes after the first epoch's training
};

void Trainer::setup() {
  proc_.world = runtime::world_size();
  proc_.rank = runtime::global_ordinal();
  if (!proc_.master()) std::freopen("/dev/null", "w", stdout);
  proc_.threads = set_threads(cfg_, proc_.world);
  const auto t_load = Clock::now();
  task_.load_data();
  load_s_ = seconds_since(t_load);
  task_.plan(proc_);

  manual_seed(cfg_.seed);
  model_ = task_.make_model();
  num_parameters_ = model_->num_parameters();  // FSDP v1 moves them into its shards
  model_->train();
  if (!cfg_.init.empty()) model_->load_state_dict(axle::load(cfg_.init).tensors);  // weights by name
  strategy_ = Strategy::make(cfg_, task_.input_dims());
  model_->to(strategy_->device());  // before the optimizer, as with torch_xla
  task_.shard_model(*model_, *strategy_);
  strategy_->wrap(model_, task_.wrap_policy());
  std::string opt_desc;
  opt_ = task_.make_optimizer(*strategy_, opt_desc);
  if (cfg_.autocast()) opt_desc += ", bf16 autocast (fp32 parameters and optimizer state)";
  loader_ = &task_.make_loader(proc_);
  strategy_->attach(*loader_);
  task_.print_header(proc_, *strategy_, num_parameters_, opt_desc, load_s_);
  std::fflush(stdout);
}

// Checkpoints: model, optimizer, scheduler, RNG state and the loader position, written
// atomically, so a run killed at any moment resumes to the same parameters as an
// uninterrupted one.
void Trainer::resume() {
  if (cfg_.resume.empty()) return;
  Checkpoint ck = strategy_->load_checkpoint(cfg_.resume, {.model = model_.get(), .optimizer = opt_.get(),
                                                           .scheduler = task_.scheduler(),
                                                           .generator = &default_generator()});
  start_epoch_ = ck.epoch;
  skip_ = ck.batch;
  st_.steps = ck.step;
  const std::string file = strategy_->checkpoint_file(cfg_.resume);
  st_.losses = task_.restore(ck.metadata, file);
  st_.restored = st_.losses.size();
  std::printf("resumed from %s at epoch %lld, %s, step %lld\n", file.c_str(), static_cast<long long>(start_epoch_ + 1),
              task_.resume_position(skip_).c_str(), static_cast<long long>(st_.steps));
}

void Trainer::save(int64_t epoch, int64_t batch) {
  if (cfg_.save.empty()) return;
  if (batch == task_.steps_per_epoch()) ++epoch, batch = 0;
  std::map<std::string, std::string> metadata{{kLossesKey, nlohmann::json(st_.losses).dump()}};
  task_.save_metadata(metadata);
  strategy_->save_checkpoint(cfg_.save, {.model = model_.get(), .optimizer = opt_.get(),
                                         .scheduler = task_.scheduler(), .generator = &default_generator(),
                                         .epoch = epoch, .batch = batch, .step = st_.steps, .metadata = metadata});
}

void Trainer::one_step(std::vector<data::Example>& micro) {
  task_.before_step();
  const auto t0 = Clock::now();
  const StepOut out = strategy_->step(
      micro, *opt_, [this](nn::Module& net, const Tensor& x, const Tensor& y) { return task_.loss(net, x, y); },
      task_.clip());
  const double l = out.loss.item();
  step_ms_.push_back(1e3 * seconds_since(t0));
  for (const data::Example& b : micro) units_ += b.target.numel();
  micro.clear();
  task_.after_step(out);
  st_.losses.push_back(l);
  ++st_.steps;
}

template <class Source>
void Trainer::run_epoch(Source& source, int64_t epoch, int64_t first, int64_t planned, Progress& progress) {
  const int64_t accum = task_.accum_steps();
  auto it = source.begin();
  for (int64_t b = 0; b < first * accum && it != source.end(); ++b) ++it;  // resume inside the epoch
  std::vector<data::Example> micro;
  int64_t done = 0;
  while (done < planned && it != source.end()) {
    micro.push_back(*it);
    if (static_cast<int64_t>(micro.size()) < accum) {
      ++it;
      continue;
    }
    one_step(micro);
    progress.update(++done, st_.losses.back());
    eval_seconds_ += task_.evaluate_after_step(st_);
    if (cfg_.save_every > 0 && st_.steps % cfg_.save_every == 0) save(epoch, first + done);
    if (done == planned) break;  // not ++it: no batch fetched (nor the loader pattern synced) beyond the last step's
    ++it;
  }
}

void Trainer::train_epoch(int64_t epoch) {
  const int64_t first = epoch == start_epoch_ ? skip_ : 0;
  const int64_t planned = std::min(task_.steps_per_epoch() - first, task_.total_steps() - st_.steps);
  Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg_.epochs), planned, proc_.master());
  task_.set_progress_units(progress, proc_);
  loader_->set_epoch(epoch);
  const auto t_epoch = Clock::now();
  const size_t first_loss = st_.losses.size(), first_ms = step_ms_.size();
  eval_seconds_ = 0;  // evaluation inside the epoch, not counted as training time
  collectives_.begin();
  if (pl::MpDeviceLoader* mp = strategy_->device_loader()) run_epoch(*mp, epoch, first, planned, progress);
  else run_epoch(*loader_, epoch, first, planned, progress);
  collectives_.end();
  progress.finish();
  const int64_t done = static_cast<int64_t>(st_.losses.size() - first_loss);
  save(epoch, first + done);
  const double es = seconds_since(t_epoch) - eval_seconds_;
  epoch_seconds_.push_back(es);
  train_seconds_ += es;
  // Before evaluation's batches.
  if (peaks_.empty()) peaks_ = peak_bytes(strategy_->device(), strategy_->layout().mesh ? cfg_.devices : 0);
  const std::string figures = task_.end_of_epoch();
  const double mean_loss = std::accumulate(st_.losses.begin() + static_cast<std::ptrdiff_t>(first_loss),
                                           st_.losses.end(), 0.0) /
                           double(std::max<int64_t>(1, done));
  std::printf("epoch %lld/%lld: %lld steps, mean loss %.4f%s, %.2f s (%.2f ms/step median)\n",
              static_cast<long long>(epoch + 1), static_cast<long long>(cfg_.epochs), static_cast<long long>(done),
              mean_loss, figures.c_str(), es,
              median(std::vector<double>(step_ms_.begin() + static_cast<std::ptrdiff_t>(first_ms), step_ms_.end())));
  std::fflush(stdout);
}

void Trainer::report() {
  const double med = median(step_ms_);
  // Units per second of the whole job (every rank trains on its own shard).
  const double rate = train_seconds_ > 0 ? double(units_) * proc_.world / train_seconds_ : 0;
  const double final_loss = st_.losses.empty() ? 0 : st_.losses.back();
  std::printf("result: %lld steps, final loss %.4f, %s, train %.2f s, median step %.2f ms, %.0f %s/s, precision %s\n",
              static_cast<long long>(st_.steps), final_loss, task_.result_figure().c_str(), train_seconds_, med, rate,
              task_.rate_unit(), cfg_.precision.c_str());
  std::fflush(stdout);
  if (cfg_.json.empty()) return;
  const DeviceMemory memory = report_memory(*opt_, peaks_, strategy_->device(), strategy_->layout(), proc_.world);
  if (!proc_.master()) return;
  nlohmann::ordered_json j;
  j["pattern"] = pattern_name(cfg_.pattern);
  j["device"] = cfg_.device;
  j["model"] = cfg_.model;
  j["parameters"] = num_parameters_;
  j["world_size"] = proc_.world;
  j["epochs"] = cfg_.epochs;
  j["steps"] = st_.steps;
  j["batch_size"] = cfg_.batch_size;
  j["precision"] = cfg_.precision;
  j["optimizer"] = cfg_.optimizer;
  j["lr"] = cfg_.lr;
  j["momentum"] = cfg_.momentum;
  j["seed"] = cfg_.seed;
  j["threads"] = proc_.threads;
  j["final_loss"] = final_loss;
  j["losses"] = st_.losses;
  j["restored_losses"] = st_.restored;  // how many of them a resumed run read from its checkpoint
  j["train_seconds"] = train_seconds_;
  j["epoch_seconds"] = epoch_seconds_;
  j["data_load_seconds"] = load_s_;
  j["median_step_ms"] = med;
  j["step_ms"] = step_ms_;
  nlohmann::ordered_json out = task_.report(std::move(j), rate, st_);
  add_device_report(out, memory, strategy_->layout(), *model_, collectives_, st_.trained());
  write_json(cfg_.json, out);
}

int Trainer::run() {
  setup();
  resume();
  for (int64_t epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
    if (st_.steps >= task_.total_steps()) break;
    train_epoch(epoch);
  }
  task_.finish(st_);
  report();
  return 0;
}

}  // namespace

nlohmann::ordered_json ordered(const nlohmann::ordered_json& fields, const std::vector<std::string>& keys) {
  nlohmann::ordered_json j;
  for (const std::string& k : keys) {
    AXLE_CHECK(fields.contains(k), "[axle-train] report field '", k, "' was not set");
    j[k] = fields.at(k);
  }
  return j;
}

int train(Config& cfg, Task& task) { return Trainer(cfg, task).run(); }

}  // namespace axle_train
