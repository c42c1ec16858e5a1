// gpt on text (docs/gpt.md), a character-level GPT (tasks.h). An epoch is as many tokens as
// the training split: floor(train tokens / (block_size * batch_size * ranks)) micro-batches
// per rank (rounded down to a multiple of --accum-steps, at least one step), each a batch of
// windows drawn at random (RandomWindowSampler: a pure function of the seed, the rank, the
// epoch and the position, so a resumed run sees the same batches).
#include <chrono>
#include <cstdio>
#include <limits>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "axle/data/text.h"
#include "axle/models/gpt.h"
#include "axle/optim/lr_scheduler.h"
#include "axle/xm.h"
#include "tasks.h"

namespace axle_train {

using namespace axle;

namespace {

/// Checkpoint metadata of gpt runs: the per-step learning rates and gradient norms and the
/// validation history (a JSON object), next to the trainer's losses.
constexpr const char* kGptHistoryKey = "axle-train.gpt";

/// The per-step history besides the losses (which the trainer keeps), and the validation points.
struct GptHistory {
  std::vector<double> lrs, grad_norms;
  std::vector<int64_t> val_steps;
  std::vector<double> val_losses;
};

class GptTask : public Task {
 public:
  explicit GptTask(Config& cfg) : cfg_(cfg) {}

  void load_data() override {
    corpus_ = data::TextCorpus::from_path(cfg_.data);
    train_set_ = std::make_shared<data::TextWindows>(corpus_, data::Split::Train, cfg_.block_size);
    val_set_ = std::make_shared<data::TextWindows>(corpus_, data::Split::Val, cfg_.block_size);
  }
  void plan(const Process& p) override;
  size_t input_dims() const override { return 2; }  // x and y: [B, T], split on B
  nn::ModulePtr make_model() override {
    gc_ = models::GPTConfig{.vocab_size = corpus_->vocab_size(), .block_size = cfg_.block_size,
                            .n_layer = cfg_.n_layer, .n_head = cfg_.n_head, .n_embd = cfg_.n_embd,
                            .dropout = cfg_.dropout};
    gpt_ = std::make_shared<models::GPT>(gc_);
    return gpt_;
  }
  void shard_model(nn::Module&, const Strategy& s) override;
  fsdp::AutoWrapPolicy wrap_policy() const override {
    return fsdp::transformer_auto_wrap_policy({"GPTBlock"});  // the root holds tok (tied head), pos and ln
  }
  std::unique_ptr<optim::Optimizer> make_optimizer(const Strategy& s, std::string& desc) override;
  optim::LRScheduler* scheduler() override { return sched_.get(); }
  data::DataLoader& make_loader(const Process& p) override;
  void print_header(const Process& p, const Strategy& s, int64_t parameters, const std::string& opt_desc,
                    double load_s) override;

  int64_t steps_per_epoch() const override { return per_epoch_; }
  int64_t total_steps() const override { return total_steps_; }
  int64_t accum_steps() const override { return cfg_.accum_steps; }
  void set_progress_units(Progress& progress, const Process& p) const override {
    progress.set_units(double(cfg_.batch_size * cfg_.accum_steps * cfg_.block_size * p.world), "tok/s");
  }
  Tensor loss(nn::Module& net, const Tensor& x, const Tensor& y) override {
    return cross_entropy(reshape(net(x), {-1, vocab()}), reshape(y, {-1}));
  }
  std::optional<double> clip() const override {
    return cfg_.grad_clip > 0 ? cfg_.grad_clip : std::numeric_limits<double>::infinity();
  }
  void before_step() override { lr_ = sched_->get_last_lr(); }
  void after_step(const StepOut& out) override {
    const double g = out.grad_norm.item();
    sched_->step();
    h_.lrs.push_back(lr_);
    h_.grad_norms.push_back(g);
  }
  double evaluate_after_step(const RunState& st) override;
  void finish(const RunState& st) override;
  std::string result_figure() const override { return fmt::format("val loss {:.4f}", h_.val_losses.back()); }
  const char* rate_unit() const override { return "tokens"; }
  std::string resume_position(int64_t skip) const override { return fmt::format("step {} of the epoch", skip); }
  std::vector<double> restore(const std::map<std::string, std::string>& metadata, const std::string& file) override;
  void save_metadata(std::map<std::string, std::string>& m) const override;
  nlohmann::ordered_json report(nlohmann::ordered_json j, double rate, const RunState& st) const override;

 private:
  int64_t vocab() const { return corpus_->vocab_size(); }
  double evaluate_val();
  void validate_now(int64_t steps);
  void sample();

  Config& cfg_;
  std::shared_ptr<data::TextCorpus> corpus_;
  std::shared_ptr<data::TextWindows> train_set_, val_set_;
  std::vector<int64_t> prompt_ids_;
  int64_t train_tokens_ = 0, micro_per_epoch_ = 0, per_epoch_ = 0, total_steps_ = 0, horizon_ = 0, warmup_ = 0;
  models::GPTConfig gc_;
  std::shared_ptr<models::GPT> gpt_;
  const Strategy* strategy_ = nullptr;
  std::unique_ptr<optim::LambdaLR> sched_;
  std::unique_ptr<data::DataLoader> loader_, val_loader_;
  double lr_ = 0;
  GptHistory h_;
  std::string sample_text_;
};

void GptTask::plan(const Process& p) {
  if (!cfg_.prompt.empty()) {
    try {
      prompt_ids_ = corpus_->encode(cfg_.prompt);
    } catch (const axle::Error& e) {
      throw UsageError("--prompt: " + std::string(e.what()));
    }
  }
  if (cfg_.top_k > corpus_->vocab_size())
    throw UsageError(fmt::format("--top-k {} is more than the corpus's {} characters", cfg_.top_k, corpus_->vocab_size()));
  // Steps: micro-batches per epoch per rank, optimizer steps per epoch, the run's total.
  train_tokens_ = static_cast<int64_t>(corpus_->tokens(data::Split::Train).size());
  const int64_t a = cfg_.accum_steps;
  micro_per_epoch_ = std::max(a, train_tokens_ / (cfg_.block_size * cfg_.batch_size * p.world) / a * a);
  per_epoch_ = micro_per_epoch_ / a;
  // --max-steps without --epochs: as many epochs as those steps need (not one epoch's worth).
  if (cfg_.max_steps > 0 && !cfg_.epochs_given) cfg_.epochs = (cfg_.max_steps + per_epoch_ - 1) / per_epoch_;
  total_steps_ = cfg_.max_steps > 0 ? std::min(cfg_.max_steps, per_epoch_ * cfg_.epochs) : per_epoch_ * cfg_.epochs;
  horizon_ = cfg_.lr_decay_steps > 0 ? cfg_.lr_decay_steps : total_steps_;
  if (cfg_.warmup_given && cfg_.warmup_steps > horizon_)
    throw UsageError(fmt::format("--warmup-steps {} is more than the schedule's {} steps", cfg_.warmup_steps, horizon_));
  warmup_ = std::min(cfg_.warmup_steps, horizon_);
}

void GptTask::shard_model(nn::Module&, const Strategy& s) {
  const SpmdLayout& l = s.layout();
  if (!l.mesh || !l.axes.size("model")) return;
  if (cfg_.n_head % l.axes.size("model") != 0)
    throw UsageError(fmt::format("--mesh {}: --n-head {} is not divisible by the model axis ({}): tensor "
                                 "parallelism splits the heads", mesh_text(l.axes), cfg_.n_head, l.axes.size("model")));
  gpt_->shard_tensor_parallel(*l.mesh, "model");
}

// AdamW with GPT's groups: decay on the matrices only. FSDP v1's optimizer holds the
// shards: a shard decays when every parameter it holds is a matrix.
std::unique_ptr<optim::Optimizer> GptTask::make_optimizer(const Strategy& s, std::string& desc) {
  strategy_ = &s;
  const nn::ModulePtr& net = s.net();
  std::unique_ptr<optim::Optimizer> opt;
  if (cfg_.optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = cfg_.lr, .momentum = cfg_.momentum});
    desc = fmt::format("sgd (lr {}, momentum {})", cfg_.lr, cfg_.momentum);
  } else {
    std::vector<optim::ParamGroup> groups;
    if (const auto fsdp_model = s.fsdp_v1()) {
      std::map<std::string, bool> matrix_shard;
      for (const auto& unit : fsdp_model->get_shard_metadata().params) {
        bool all = true;
        for (const Shape& sh : unit.shapes) all = all && sh.size() >= 2;
        matrix_shard[unit.shard_name] = all;
      }
      std::vector<Tensor> decay, no_decay;
      for (const auto& [name, p] : net->named_parameters()) (matrix_shard[name] ? decay : no_decay).push_back(p);
      groups = {optim::ParamGroup(decay, -1, {{"weight_decay", cfg_.weight_decay}}),
                optim::ParamGroup(no_decay, -1, {{"weight_decay", 0.0}})};
    } else {
      groups = gpt_->param_groups(cfg_.weight_decay);
    }
    opt = std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = cfg_.lr, .beta1 = cfg_.beta1,
                                                                     .beta2 = cfg_.beta2,
                                                                     .weight_decay = cfg_.weight_decay});
    desc = fmt::format("adamw (lr {}, betas {}/{}, weight decay {} on matrices)", cfg_.lr, cfg_.beta1, cfg_.beta2,
                       cfg_.weight_decay);
  }
  sched_ = std::make_unique<optim::LambdaLR>(*opt, optim::warmup_cosine(cfg_.lr, warmup_, horizon_, cfg_.min_lr));
  return opt;
}

data::DataLoader& GptTask::make_loader(const Process& p) {
  auto sampler = std::make_shared<data::RandomWindowSampler>(train_set_->size(), micro_per_epoch_ * cfg_.batch_size,
                                                             cfg_.seed, p.world, p.rank);
  loader_ = std::make_unique<data::DataLoader>(train_set_, data::DataLoaderOptions{.batch_size = cfg_.batch_size},
                                               sampler);
  // Validation: the same eval_iters batches every time (the validation sampler's epoch 0).
  auto val_sampler = std::make_shared<data::RandomWindowSampler>(val_set_->size(), cfg_.eval_iters * cfg_.batch_size,
                                                                 cfg_.seed + 1);
  val_loader_ = std::make_unique<data::DataLoader>(val_set_, data::DataLoaderOptions{.batch_size = cfg_.batch_size},
                                                   val_sampler);
  return *loader_;
}

void GptTask::print_header(const Process& p, const Strategy& s, int64_t parameters, const std::string& opt_desc,
                           double load_s) {
  std::printf("axle-train: pattern %s, device %s, model gpt (%lld parameters: %lld layers, %lld heads, %lld wide, "
              "context %lld, dropout %g), %s, batch %lld%s, %lld epoch%s of %lld steps%s, %d thread%s\n",
              pattern_name(cfg_.pattern).c_str(), cfg_.device.c_str(), static_cast<long long>(parameters),
              static_cast<long long>(cfg_.n_layer), static_cast<long long>(cfg_.n_head),
              static_cast<long long>(cfg_.n_embd), static_cast<long long>(cfg_.block_size), cfg_.dropout,
              opt_desc.c_str(), static_cast<long long>(cfg_.batch_size),
              cfg_.accum_steps > 1 ? fmt::format(" x {} accumulated", cfg_.accum_steps).c_str() : "",
              static_cast<long long>(cfg_.epochs), cfg_.epochs == 1 ? "" : "s", static_cast<long long>(per_epoch_),
              cfg_.max_steps > 0 ? fmt::format(" (at most {} steps)", cfg_.max_steps).c_str() : "", p.threads,
              p.threads == 1 ? "" : "s");
  std::printf("schedule: warmup %lld steps, cosine to lr %g at step %lld; grad clip %s\n",
              static_cast<long long>(warmup_), cfg_.min_lr, static_cast<long long>(horizon_),
              cfg_.grad_clip > 0 ? fmt::format("{}", cfg_.grad_clip).c_str() : "off");
  s.print_layout(input_dims());
  const int64_t val_tokens = static_cast<int64_t>(corpus_->tokens(data::Split::Val).size());
  std::printf("data: %s, %lld characters (%lld train / %lld validation), vocabulary %lld, in %.2f s\n",
              cfg_.data.c_str(), static_cast<long long>(train_tokens_ + val_tokens),
              static_cast<long long>(train_tokens_), static_cast<long long>(val_tokens),
              static_cast<long long>(vocab()), load_s);
}

// Validation loss: eval mode, no gradients; every rank computes it (FSDP's forwards are
// collectives).
double GptTask::evaluate_val() {
  nn::ModulePtr net = strategy_->train_net();
  const Device dev = strategy_->device();
  net->eval();
  NoGradGuard no_grad;
  autocast region(dev, DType::BFloat16, cfg_.autocast());  // evaluated as trained
  val_loader_->set_epoch(0);
  Tensor total;
  int64_t n = 0;
  for (const data::Example& b : *val_loader_) {
    std::vector<Tensor> xy{b.data, b.target};
    if (!dev.is_cpu()) xy = xm::send_cpu_data_to_device(xy, dev, strategy_->layout().input());
    const Tensor l = loss(*net, xy[0], xy[1]);
    total = total.defined() ? add(total, l) : l;
    ++n;
  }
  if (!dev.is_cpu()) axle::sync();
  net->train();
  return n > 0 ? total.item() / double(n) : 0.0;
}

void GptTask::validate_now(int64_t steps) {
  const double v = evaluate_val();
  h_.val_steps.push_back(steps);
  h_.val_losses.push_back(v);
  std::printf("step %lld: val loss %.4f\n", static_cast<long long>(steps), v);
  std::fflush(stdout);
}

double GptTask::evaluate_after_step(const RunState& st) {
  if (cfg_.eval_every == 0 || st.steps % cfg_.eval_every != 0 || st.steps >= total_steps_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  validate_now(st.steps);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sampling: on a cpu copy of the trained weights (eagerly, one token at a time), from a
// generator seeded with --seed: the same seed and weights give the same text.
void GptTask::sample() {
  models::GPT sampler_model(gc_);
  nn::StateDict sd;
  for (const auto& [name, t] : strategy_->model()->state_dict()) sd.emplace_back(name, t.to(Device(kCPU)));
  sampler_model.load_state_dict(sd);
  Generator gen(cfg_.seed);
  const std::vector<int64_t> ids = sampler_model.generate(prompt_ids_, cfg_.sample, cfg_.temperature, cfg_.top_k, gen);
  sample_text_ = corpus_->decode(ids);
  std::printf("sample (%lld characters after the prompt, temperature %g, top-k %lld):\n%s\n",
              static_cast<long long>(cfg_.sample), cfg_.temperature, static_cast<long long>(cfg_.top_k),
              sample_text_.c_str());
}

void GptTask::finish(const RunState& st) {
  // The final validation loss (what test_accuracy is to mlp/cnn).
  if (h_.val_steps.empty() || h_.val_steps.back() != st.steps) validate_now(st.steps);
  if (cfg_.sample > 0) sample();
}

std::vector<double> GptTask::restore(const std::map<std::string, std::string>& metadata, const std::string& file) {
  const auto it = metadata.find(kGptHistoryKey);
  AXLE_CHECK(it != metadata.end(), "[axle-train] ", file, ": no ", kGptHistoryKey,
             " metadata: not a --model gpt checkpoint");
  const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(j.is_object(), "[axle-train] ", file, ": metadata ", kGptHistoryKey, " is not a JSON object");
  h_.lrs = j.value("lrs", std::vector<double>{});
  h_.grad_norms = j.value("grad_norms", std::vector<double>{});
  h_.val_steps = j.value("val_steps", std::vector<int64_t>{});
  h_.val_losses = j.value("val_losses", std::vector<double>{});
  return j.value("losses", std::vector<double>{});
}

void GptTask::save_metadata(std::map<std::string, std::string>& m) const {
  nlohmann::json h;
  h["losses"] = nlohmann::json::parse(m.at(kLossesKey));
  h["lrs"] = h_.lrs;
  h["grad_norms"] = h_.grad_norms;
  h["val_steps"] = h_.val_steps;
  h["val_losses"] = h_.val_losses;
  m[kGptHistoryKey] = h.dump();
}

nlohmann::ordered_json GptTask::report(nlohmann::ordered_json j, double rate, const RunState&) const {
  j["gpt"] = {{"n_layer", cfg_.n_layer}, {"n_head", cfg_.n_head}, {"n_embd", cfg_.n_embd},
              {"block_size", cfg_.block_size}, {"dropout", cfg_.dropout}, {"vocab_size", vocab()}};
  j["data"] = cfg_.data;
  j["train_tokens"] = train_tokens_;
  j["steps_per_epoch"] = per_epoch_;
  j["accum_steps"] = cfg_.accum_steps;
  j["min_lr"] = cfg_.min_lr;
  j["warmup_steps"] = warmup_;
  j["weight_decay"] = cfg_.weight_decay;
  j["betas"] = {cfg_.beta1, cfg_.beta2};
  j["grad_clip"] = cfg_.grad_clip;
  j["learning_rates"] = h_.lrs;
  j["grad_norms"] = h_.grad_norms;
  j["val_steps"] = h_.val_steps;
  j["val_losses"] = h_.val_losses;
  j["val_loss"] = h_.val_losses.back();  // gpt's final figure, in place of test_accuracy
  j["test_accuracy"] = nullptr;          // does not apply to a language model
  j["sample"] = sample_text_;
  j["prompt"] = cfg_.prompt;
  j["tokens_per_second"] = rate;
  j["samples_per_second"] = j.at("train_seconds").get<double>() > 0 ? rate / double(cfg_.block_size) : 0.0;  // windows/s
  return ordered(j, {"pattern", "device", "model", "parameters", "gpt", "data", "train_tokens", "world_size", "epochs",
                     "steps_per_epoch", "steps", "batch_size", "accum_steps", "precision", "optimizer", "lr", "min_lr",
                     "warmup_steps", "weight_decay", "betas", "grad_clip", "momentum", "seed", "threads",
                     "final_loss", "losses", "restored_losses", "learning_rates", "grad_norms", "val_steps",
                     "val_losses", "val_loss", "test_accuracy", "sample", "prompt", "train_seconds",
                     "epoch_seconds", "data_load_seconds", "median_step_ms", "step_ms", "tokens_per_second",
                     "samples_per_second"});
}

}  // namespace

std::unique_ptr<Task> make_gpt_task(Config& cfg) { return std::make_unique<GptTask>(cfg); }

}  // namespace axle_train
