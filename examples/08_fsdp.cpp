// Fully sharded data parallel, v1 (torch_xla's XlaFullyShardedDataParallel): one process per
// device, each keeping 1/N of every parameter, its gradient and its momentum. Each Linear is
// its own unit: forward all-gathers its parameters and frees them after use, backward
// reduce-scatters their gradients into this rank's shards, so the loop calls the
// optimizer's own step() (not xm::optimizer_step). docs/fsdp.md has v2 and checkpoints.
//
//   AXLE_NUM_DEVICES=2 build/bin/example_08_fsdp [steps]
#include <cstdio>
#include <cstdlib>

#include "axle/axle.h"
#include "axle/fsdp.h"

using namespace axle;

int main(int argc, char** argv) try {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;

  axle::launch([&](int index) {
    dist::init_process_group("xla", "xla://");
    manual_seed(0);  // the same initial model on every rank: each keeps its slice of it
    auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10)});
    const int64_t full = model->num_parameters();
    model->to(axle::device());
    fsdp::FSDPOptions options;
    options.auto_wrap_policy = fsdp::transformer_auto_wrap_policy({"Linear"});  // a unit per Linear
    auto fsdp_model = std::make_shared<fsdp::FSDP>(model, options);
    optim::SGD optimizer(fsdp_model->parameters(), {.lr = 0.01, .momentum = 0.9});  // the shards

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
      loss = cross_entropy((*fsdp_model)(inputs), labels);
      if (steps == 0) first_loss = loss;
      loss.backward();  // reduce-scatters each unit's gradients
      optimizer.step();
      if (++steps == max_steps) break;
    }
    xm::master_print("fsdp, ", runtime::world_size(), " processes: ", steps, " steps, last loss ", loss.item());

    // The examples run as tests, so each checks what its pattern promises. Here: this rank
    // holds about 1/N of the parameters (at most one padding element per tensor), and it learns.
    int64_t mine = 0;
    for (const Tensor& p : fsdp_model->parameters()) mine += p.numel();
    const int64_t world = runtime::world_size();
    AXLE_CHECK(mine * world >= full && mine <= full / world + 4, "[example] process ", index, " holds ", mine,
               " of ", full, " parameters");
    AXLE_CHECK(steps == max_steps && loss.item() < first_loss.item(), "[example] process ", index, ": ", steps,
               " steps, loss ", first_loss.item(), " -> ", loss.item());
    xm::master_print("PASS: ", mine, " of ", full, " parameters on each rank, first loss ", first_loss.item());
  });
  return 0;
} catch (const std::exception& e) {  // launch() throws naming the rank that failed
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
