// Seed Pattern 4: the whole training step compiled as one graph.
//
//   build/bin/example_04_compiled_step [steps]
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"

using namespace axle;

int main(int argc, char** argv) {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;
  manual_seed(0);
  Device device = axle::device();
  auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
  model->to(device);
  optim::SGD optimizer(model->parameters(), {.lr = 0.01});

  auto step_fn = [&](const Tensor& data, const Tensor& target) {
    optimizer.zero_grad();
    Tensor output = (*model)(data);
    Tensor loss = cross_entropy(output, target);
    loss.backward();
    optimizer.step();
    return loss;
  };
  auto compiled_step = axle::compile(step_fn, {.full_graph = true, .name = "train_step"});

  auto train = std::make_shared<data::FashionMNIST>();
  data::DataLoader loader(train, {.batch_size = 128, .shuffle = true});
  int64_t steps = 0;
  Tensor loss, first_loss;
  for (const data::Example& batch : loader) {
    loss = compiled_step(batch.data.to(device), batch.target.to(device));
    if (steps == 0) first_loss = loss;
    if (++steps == max_steps) break;
  }
  std::printf("steps %lld, last loss %.4f\n%s\n", static_cast<long long>(steps), loss.item(),
              metrics::short_report().c_str());

  // The examples run as tests, so each checks what its pattern promises. Here: each call runs
  // the whole step as one graph (one MarkStep), compiled on the first call only; and the model learns.
  const bool ok = steps == max_steps && metrics::counter_value("UncachedCompile") == 1 &&
                  metrics::counter_value("MarkStep") == steps && loss.item() < first_loss.item();
  std::printf("%s: first loss %.4f\n", ok ? "PASS" : "FAIL", first_loss.item());
  return ok ? 0 : 1;
}
