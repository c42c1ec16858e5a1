// Training parity: the same seed on the lazy xla device and the eager cpu path gives
// the same losses and parameters (the lazy path runs the same kernels, fused).
#include <gtest/gtest.h>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "lazy/ir.h"

using namespace axle;

namespace {

nn::ModulePtr make(const std::string& name) {
  if (name == "mlp")
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
                                                               std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
};

TrainRun train(const std::string& model_name, Device dev, int steps, const std::string& opt_name) {
  manual_seed(0);
  auto model = make(model_name);
  model->to(dev);
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "sgd") opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  else opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-3});
  static auto ds = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, true);
  data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .seed = 7});
  TrainRun r;
  std::vector<Tensor> losses;
  int i = 0;
  for (const auto& b : loader) {
    if (i++ == steps) break;
    if (dev.is_xla()) {
      auto s = axle::step();
      Tensor x = b.data.to(dev), y = b.target.to(dev);
      opt->zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt->step();
      losses.push_back(loss);
    } else {
      opt->zero_grad();
      Tensor loss = cross_entropy((*model)(b.data), b.target);
      loss.backward();
      opt->step();
      losses.push_back(loss);
    }
  }
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const Tensor& p : model->parameters()) {
    EXPECT_EQ(p.device(), dev);
    r.params.push_back(p.cpu());
  }
  return r;
}

// Trains on the lazy device from a cold graph cache and checks that the lazy path ran:
// graphs were compiled (at most `max_graphs`, the step's shapes being fixed) and one
// graph executed per step at least, and the parameters live on the device.
TrainRun train_lazy(const std::string& model_name, int steps, const std::string& opt_name, int max_graphs) {
  metrics::reset();
  lazy::clear_graph_cache();
  TrainRun r = train(model_name, device(), steps, opt_name);
  const int64_t uncached = metrics::counter_value("UncachedCompile");
  EXPECT_GE(uncached, 1);
  EXPECT_LE(uncached, max_graphs);
  EXPECT_GE(uncached + metrics::counter_value("CachedCompile"), steps);
  EXPECT_GE(metrics::timer_count("ExecuteTime"), steps);
  EXPECT_EQ(metrics::counter_value("MarkStep"), 2 * steps);  // step() at each start and end
  return r;
}

void expect_parity(const TrainRun& a, const TrainRun& b, double tol) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], tol * std::abs(b.losses[i])) << "step " << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t k = 0; k < a.params.size(); ++k) {
    auto x = a.params[k].to_vector<float>(), y = b.params[k].to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - y[i]) / (1e-3 + std::abs(y[i])));
    EXPECT_LT(worst, 1e-4) << "parameter " << k;
  }
}

}  // namespace

TEST(Parity, MlpSgdXlaMatchesCpu) {
  TrainRun cpu = train("mlp", kCPU, 20, "sgd");
  // The step compiles a graph for the first step (momentum buffers start) and one for the rest.
  TrainRun xla = train_lazy("mlp", 20, "sgd", 3);
  expect_parity(xla, cpu, 1e-5);
}

TEST(Parity, CnnSgdXlaMatchesCpu) {
  TrainRun cpu = train("cnn", kCPU, 20, "sgd");
  TrainRun xla = train_lazy("cnn", 20, "sgd", 3);
  expect_parity(xla, cpu, 1e-5);
}

TEST(Parity, MlpAdamWXlaMatchesCpu) {
  TrainRun cpu = train("mlp", kCPU, 20, "adamw");
  TrainRun xla = train_lazy("mlp", 20, "adamw", 3);
  expect_parity(xla, cpu, 1e-5);
}
