// Seed Pattern 5: MpDeviceLoader. Batches are assembled and moved to the device by
// background threads while the step runs; the loop receives them on `xla` already.
//
//   build/bin/example_05_device_loader [steps]        (AXLE_NUM_DEVICES=2 for two processes)
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"

using namespace axle;

int main(int argc, char** argv) try {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;

  axle::launch([&](int index) {
    Device device = axle::device();
    manual_seed(0);
    auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10)});
    model->to(device);
    optim::SGD optimizer(model->parameters(), {.lr = 0.01, .momentum = 0.9});

    auto train = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, /*train=*/true);
    auto sampler = std::make_shared<data::DistributedSampler>(train->size(), runtime::world_size(),
                                                              runtime::global_ordinal(), /*shuffle=*/true);
    data::DataLoader train_loader(train, {.batch_size = 128}, sampler);
    pl::MpDeviceLoader mp_loader(train_loader, device);

    int64_t steps = 0;
    Tensor loss, first_loss;
    for (const data::Example& batch : mp_loader) {  // batch.data and batch.target are on xla
      auto step = axle::step();
      optimizer.zero_grad();
      Tensor output = (*model)(batch.data);
      loss = cross_entropy(output, batch.target);
      if (steps == 0) first_loss = loss;
      loss.backward();
      xm::optimizer_step(optimizer);
      if (++steps == max_steps) break;
    }
    xm::master_print("device loader: ", steps, " steps, last loss ", loss.item(), "\n", metrics::short_report());

    // The examples run as tests, so each checks what its pattern promises. Here: the batches
    // arrive on the device already, so every step is the same graph, compiled once; one
    // all-reduce per step; and each replica learns.
    const int64_t compiles = metrics::counter_value("UncachedCompile");
    const int64_t all_reduces = metrics::counter_value("CollectiveAllReduce");
    AXLE_CHECK(steps == max_steps && compiles == 1 && all_reduces == (runtime::world_size() > 1 ? steps : 0),
               "[example] process ", index, ": expected ", max_steps,
               " steps, 1 compile and one all-reduce per step, got ", steps, " steps, ", compiles, " compiles, ",
               all_reduces, " all-reduces");
    AXLE_CHECK(loss.item() < first_loss.item(), "[example] process ", index, ": the loss did not fall: ",
               first_loss.item(), " -> ", loss.item());
    xm::master_print("PASS: first loss ", first_loss.item());
  });
  return 0;
} catch (const std::exception& e) {  // launch() throws naming the rank that failed
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
