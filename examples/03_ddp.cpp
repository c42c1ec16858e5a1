// Seed Pattern 3: DistributedDataParallel with the "xla" process group. DDP broadcasts
// rank 0's parameters when it is built and averages the gradients over processes as
// backward() finishes, so the loop calls the optimizer's own step().
//
//   AXLE_NUM_DEVICES=2 build/bin/example_03_ddp [steps]
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"

using namespace axle;

int main(int argc, char** argv) try {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;

  axle::launch([&](int index) {
    dist::init_process_group("xla", "xla://");  // rank and world size from the runtime
    manual_seed(uint64_t(index));  // deliberately different: DDP copies rank 0's weights
    auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10)});
    model->to(axle::device());
    nn::parallel::DistributedDataParallel ddp_model(model, {.gradient_as_bucket_view = true});
    optim::SGD optimizer(ddp_model.parameters(), {.lr = 0.01, .momentum = 0.9});

    auto train = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, /*train=*/true);
    auto sampler = std::make_shared<data::DistributedSampler>(train->size(), runtime::world_size(),
                                                              runtime::global_ordinal(), /*shuffle=*/true);
    data::DataLoader train_loader(train, {.batch_size = 128}, sampler);

    int64_t steps = 0;
    Tensor loss, first_loss;
    for (const data::Example& batch : train_loader) {
      auto step = axle::step();
      Tensor inputs = batch.data.to(axle::device()), labels = batch.target.to(axle::device());
      optimizer.zero_grad();
      Tensor outputs = ddp_model(inputs);
      loss = cross_entropy(outputs, labels);
      if (steps == 0) first_loss = loss;
      loss.backward();
      optimizer.step();
      if (++steps == max_steps) break;
    }
    xm::master_print("ddp, ", runtime::world_size(), " processes: ", steps, " steps, last loss ", loss.item());

    // The examples run as tests, so each checks what its pattern promises. Here: the replicas,
    // seeded differently, hold identical parameters (rank 0's, then the same averaged updates);
    // and each replica learns.
    for (const auto& [name, p] : model->named_parameters()) {
      const Tensor lo = dist::all_reduce(p, dist::ReduceOp::Min), hi = dist::all_reduce(p, dist::ReduceOp::Max);
      const double spread = amax(hi - lo).item();
      AXLE_CHECK(spread == 0, "[example] process ", index, ": ", name, " differs across replicas by up to ", spread);
    }
    AXLE_CHECK(steps == max_steps && loss.item() < first_loss.item(), "[example] process ", index, ": ", steps,
               " steps, loss ", first_loss.item(), " -> ", loss.item());
    xm::master_print("PASS: first loss ", first_loss.item());
  });
  return 0;
} catch (const std::exception& e) {  // launch() throws naming the rank that failed
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
