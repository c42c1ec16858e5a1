// Seed Pattern 2: multi-process data parallelism with axle::launch. Each process trains
// a replica on its shard of the data on its own `xla:0`; xm::optimizer_step averages the
// gradients over processes (one all-reduce) and steps.
//
//   AXLE_NUM_DEVICES=2 build/bin/example_02_multiprocess [steps]
//
// launch() re-runs this program once per process: code before it runs in every
// process, so it stays cheap and never touches the device.
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"
#include "axle/metrics.h"

using namespace axle;

int main(int argc, char** argv) try {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;

  axle::launch([&](int index) {  // torch_xla.launch(_mp_fn): world size from AXLE_NUM_DEVICES
    Device device = axle::device();  // each process sees xla:0
    manual_seed(0);                  // the same initial model in every process
    auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10)});
    model->to(device);
    optim::SGD optimizer(model->parameters(), {.lr = 0.01, .momentum = 0.9});

    auto train = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, /*train=*/true);
    auto sampler = std::make_shared<data::DistributedSampler>(train->size(), runtime::world_size(),
                                                              runtime::global_ordinal(), /*shuffle=*/true);
    data::DataLoader train_loader(train, {.batch_size = 128}, sampler);

    int64_t steps = 0;
    Tensor loss, first_loss;
    for (const data::Example& batch : train_loader) {
      auto step = axle::step();
      Tensor inputs = batch.data.to(device), labels = batch.target.to(device);
      optimizer.zero_grad();
      Tensor outputs = (*model)(inputs);
      loss = cross_entropy(outputs, labels);
      if (steps == 0) first_loss = loss;
      loss.backward();
      xm::optimizer_step(optimizer);  // all_reduce + step
      if (++steps == max_steps) break;
    }
    xm::master_print("process ", index, " of ", runtime::world_size(), ": ", steps, " steps, last loss ",
                     loss.item());

    // The examples run as tests, so each checks what its pattern promises. Here: one
    // all-reduce per step (all gradients in one call); and each replica learns.
    const int64_t all_reduces = metrics::counter_value("CollectiveAllReduce");
    AXLE_CHECK(steps == max_steps && all_reduces == (runtime::world_size() > 1 ? steps : 0),
               "[example] process ", index, ": expected ", max_steps, " steps with one all-reduce each, got ", steps,
               " steps and ", all_reduces, " all-reduces");
    AXLE_CHECK(loss.item() < first_loss.item(), "[example] process ", index, ": the loss did not fall: ",
               first_loss.item(), " -> ", loss.item());
    xm::master_print("PASS: first loss ", first_loss.item());
  });
  return 0;
} catch (const std::exception& e) {  // launch() throws naming the rank that failed
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
