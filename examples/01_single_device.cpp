// Seed Pattern 1: single device. The model lives on the lazy `xla` device; each
// step is traced into one graph, compiled once, cached, and run at the step boundary.
//
//   build/bin/example_01_single_device [steps]
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"

using namespace axle;

int main(int argc, char** argv) {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
  auto train = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, /*train=*/true);
  data::DataLoader train_loader(train, {.batch_size = 128, .shuffle = true});

  model->to(axle::device());  // model.to('xla')
  optim::SGD optimizer(model->parameters(), {.lr = 0.01, .momentum = 0.9});

  int64_t steps = 0;
  Tensor loss, first_loss;
  for (const data::Example& batch : train_loader) {
    auto step = axle::step();  // with torch_xla.step():
    Tensor inputs = batch.data.to(axle::device()), labels = batch.target.to(axle::device());
    optimizer.zero_grad();
    Tensor outputs = (*model)(inputs);
    loss = cross_entropy(outputs, labels);
    if (steps == 0) first_loss = loss;
    loss.backward();
    optimizer.step();
    if (++steps == max_steps) break;
  }
  axle::sync();  // torch_xla.sync()

  if (std::getenv("AXLE_PROFILE")) std::printf("%s", metrics::report().c_str());
  std::printf("steps %lld, last loss %.4f\n%s\n", static_cast<long long>(steps), loss.item(),
              metrics::short_report().c_str());

  // The examples run as tests, so each checks what its pattern promises. Here: every step is
  // the same graph, compiled once and then taken from the cache; and the model learns.
  const bool ok = steps == max_steps && metrics::counter_value("UncachedCompile") == 1 &&
                  metrics::counter_value("CachedCompile") == steps - 1 && loss.item() < first_loss.item();
  std::printf("%s: first loss %.4f\n", ok ? "PASS" : "FAIL", first_loss.item());
  return ok ? 0 : 1;
}
