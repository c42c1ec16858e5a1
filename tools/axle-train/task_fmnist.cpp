// Fashion-MNIST: mlp / cnn / cnn-bn classifiers (tasks.h).
#include <cstdio>
#include <future>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "axle/xm.h"
#include "models.h"
#include "tasks.h"

namespace axle_train {

using namespace axle;

namespace {

/// Tensor parallelism on a mesh's "model" axis, Megatron style: the linear layers in pairs,
/// the first split by output features (weight rows and bias: column-parallel), the second by
/// input features (weight columns: row-parallel, its output a partial sum the compiler
/// all-reduces). The parameters keep these shardings across steps.
void shard_linear_layers(nn::Module& model, const xs::Mesh& mesh) {
  const auto params = model.named_parameters();
  auto bias_of = [&](const std::string& weight_name) -> Tensor {
    const std::string bias = weight_name.substr(0, weight_name.size() - 6) + "bias";
    for (const auto& [n, p] : params)
      if (n == bias) return p;
    return {};
  };
  int k = 0;
  for (const auto& [name, p] : params) {
    if (p.dim() != 2 || name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) continue;
    Tensor w = p, b = bias_of(name);
    if (k++ % 2 == 0) {
      xs::mark_sharding(w, mesh, {"model", xs::None});
      if (b.defined()) xs::mark_sharding(b, mesh, {"model"});
    } else {
      xs::mark_sharding(w, mesh, {xs::None, "model"});
    }
  }
}

class FmnistTask : public Task {
 public:
  explicit FmnistTask(Config& cfg) : cfg_(cfg) {}

  void load_data() override {
    // The test split decodes on another thread while this one inflates the training images.
    auto test_future = std::async(std::launch::async, [&] { return std::make_shared<data::FashionMNIST>(cfg_.data, false); });
    try {
      train_set_ = std::make_shared<data::FashionMNIST>(cfg_.data, true);
    } catch (...) {
      try { test_future.get(); } catch (...) {}
      throw;
    }
    test_set_ = test_future.get();
  }
  size_t input_dims() const override { return 4; }  // images [B, 1, 28, 28]
  nn::ModulePtr make_model() override { return axle_train::make_model(cfg_.model); }
  void shard_model(nn::Module& model, const Strategy& s) override {
    const SpmdLayout& l = s.layout();
    if (l.mesh && l.axes.size("model")) shard_linear_layers(model, *l.mesh);
  }
  fsdp::AutoWrapPolicy wrap_policy() const override {
    // Every layer with parameters in axle-train's models, a unit of its own.
    return fsdp::transformer_auto_wrap_policy({"Linear", "Conv2d"});
  }
  std::unique_ptr<optim::Optimizer> make_optimizer(const Strategy& s, std::string& desc) override;
  data::DataLoader& make_loader(const Process& p) override;
  void print_header(const Process& p, const Strategy& s, int64_t parameters, const std::string& opt_desc,
                    double load_s) override;

  int64_t steps_per_epoch() const override { return loader_->size(); }
  int64_t total_steps() const override {
    const int64_t all = steps_per_epoch() * cfg_.epochs;
    return cfg_.max_steps > 0 ? std::min(cfg_.max_steps, all) : all;
  }
  Tensor loss(nn::Module& net, const Tensor& x, const Tensor& y) override { return cross_entropy(net(x), y); }
  std::string end_of_epoch() override {
    test_accuracy_ = evaluate();
    return fmt::format(", test accuracy {:.4f}", test_accuracy_);
  }
  void finish(const RunState& st) override;
  std::string result_figure() const override { return fmt::format("test accuracy {:.4f}", test_accuracy_); }
  const char* rate_unit() const override { return "samples"; }
  std::string resume_position(int64_t skip) const override { return fmt::format("batch {}", skip); }
  std::vector<double> restore(const std::map<std::string, std::string>& metadata, const std::string& file) override;
  nlohmann::ordered_json report(nlohmann::ordered_json j, double rate, const RunState&) const override {
    j["test_accuracy"] = test_accuracy_;
    j["samples_per_second"] = rate;
    return ordered(j, {"pattern", "device", "model", "parameters", "world_size", "epochs", "steps", "batch_size",
                       "precision", "optimizer", "lr", "momentum", "seed", "threads", "final_loss", "losses", "restored_losses",
                       "test_accuracy", "train_seconds", "epoch_seconds", "data_load_seconds", "median_step_ms",
                       "step_ms", "samples_per_second"});
  }

 private:
  double evaluate() const;

  Config& cfg_;
  std::shared_ptr<data::FashionMNIST> train_set_, test_set_;
  std::unique_ptr<data::DataLoader> loader_;
  const Strategy* strategy_ = nullptr;
  double test_accuracy_ = 0;
};

std::unique_ptr<optim::Optimizer> FmnistTask::make_optimizer(const Strategy& s, std::string& desc) {
  strategy_ = &s;  // what the evaluation runs on
  if (cfg_.optimizer == "sgd") {
    desc = fmt::format("sgd (lr {}, momentum {})", cfg_.lr, cfg_.momentum);
    return std::make_unique<optim::SGD>(s.net()->parameters(), optim::SGDOptions{.lr = cfg_.lr, .momentum = cfg_.momentum});
  }
  desc = fmt::format("adamw (lr {})", cfg_.lr);
  return std::make_unique<optim::AdamW>(s.net()->parameters(), optim::AdamWOptions{.lr = cfg_.lr});
}

data::DataLoader& FmnistTask::make_loader(const Process& p) {
  // Each rank reads its own shard, reshuffled every epoch (DistributedSampler); one process reads all.
  std::shared_ptr<data::Sampler> shard;
  if (p.world > 1)
    shard = std::make_shared<data::DistributedSampler>(train_set_->size(), p.world, p.rank, true, cfg_.seed);
  loader_ = std::make_unique<data::DataLoader>(
      train_set_, data::DataLoaderOptions{.batch_size = cfg_.batch_size, .shuffle = p.world == 1, .seed = cfg_.seed},
      shard);
  return *loader_;
}

void FmnistTask::print_header(const Process& p, const Strategy& s, int64_t parameters, const std::string& opt_desc,
                              double load_s) {
  std::printf("axle-train: pattern %s, device %s, model %s (%lld parameters), %s, batch %lld, %lld epoch%s%s, "
              "%d thread%s\n",
              pattern_name(cfg_.pattern).c_str(), cfg_.device.c_str(), cfg_.model.c_str(),
              static_cast<long long>(parameters), opt_desc.c_str(), static_cast<long long>(cfg_.batch_size),
              static_cast<long long>(cfg_.epochs), cfg_.epochs == 1 ? "" : "s",
              cfg_.max_steps > 0 ? fmt::format(" (at most {} steps)", cfg_.max_steps).c_str() : "", p.threads,
              p.threads == 1 ? "" : "s");
  s.print_layout(input_dims());
  std::printf("data: %lld train / %lld test images from %s in %.2f s\n", static_cast<long long>(train_set_->size()),
              static_cast<long long>(test_set_->size()), cfg_.data.c_str(), load_s);
}

/// Test accuracy: eval mode, no gradients, batches of 1000, on the training device (under
/// SPMD with the images sharded as the training batches are).
double FmnistTask::evaluate() const {
  nn::Module& model = *strategy_->net();
  const Device dev = strategy_->device();
  model.eval();
  NoGradGuard no_grad;
  autocast region(dev, DType::BFloat16, cfg_.autocast());  // evaluated as trained
  data::DataLoader loader(test_set_, {.batch_size = 1000});
  int64_t correct = 0, total = 0;
  for (const data::Example& b : loader) {
    const Tensor x = dev.is_cpu() ? b.data : xm::send_cpu_data_to_device({b.data}, dev, strategy_->layout().input())[0];
    const Tensor pred = argmax(model(x), 1);
    correct += static_cast<int64_t>(sum(eq(pred, b.target.to(dev))).item());
    total += b.target.size(0);
  }
  model.train();
  return total > 0 ? double(correct) / double(total) : 0.0;
}

void FmnistTask::finish(const RunState& st) {
  if (cfg_.resume.empty() || st.trained() > 0) return;
  // The checkpoint's run had finished: report its figures, the accuracy from the restored model.
  test_accuracy_ = evaluate();
  std::printf("nothing left to train: the run in %s had already finished (step %lld); its figures follow "
              "(losses from the checkpoint, test accuracy of the restored model)\n",
              cfg_.resume.c_str(), static_cast<long long>(st.steps));
}

std::vector<double> FmnistTask::restore(const std::map<std::string, std::string>& metadata, const std::string& file) {
  const auto it = metadata.find(kLossesKey);
  if (it == metadata.end()) return {};
  const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(j.is_array(), "[axle-train] ", file, ": metadata ", kLossesKey, " is not a list of losses");
  return j.get<std::vector<double>>();
}

}  // namespace

std::unique_ptr<Task> make_fmnist_task(Config& cfg) { return std::make_unique<FmnistTask>(cfg); }

}  // namespace axle_train
