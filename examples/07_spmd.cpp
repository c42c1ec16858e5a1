// Seed Pattern 5 with SPMD input sharding: one process drives every device; the loader
// shards each batch over the mesh's "data" axis as it moves it, and the compiler turns the
// step into one program per device with the collectives data parallelism needs.
//
//   AXLE_CPU_DEVICES=2 build/bin/example_07_spmd [steps]
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "axle/axle.h"
#include "axle/xs.h"

using namespace axle;

int main(int argc, char** argv) try {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 100;

  runtime::use_spmd();
  const int64_t n = runtime::global_runtime_device_count();
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  xs::Mesh mesh(ids, {n, 1}, {"data", "model"});

  Device device = axle::device();
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
  model->to(device);  // parameters replicated on every device
  optim::SGD optimizer(model->parameters(), {.lr = 0.01, .momentum = 0.9});

  auto train = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, /*train=*/true);
  data::DataLoader train_loader(train, {.batch_size = 128, .shuffle = true});
  // The seed's snippet: images [128, 1, 28, 28] split over "data"; the rank-1 labels do not
  // match the spec's length, so they arrive replicated (torch_xla's rule).
  pl::MpDeviceLoader mp_loader(train_loader, device,
                               {.input_sharding = xs::ShardingSpec(mesh, {"data", xs::None, xs::None, xs::None})});

  int64_t steps = 0;
  Tensor loss, first_loss;
  std::string data_sharding, target_sharding;
  for (const data::Example& batch : mp_loader) {  // already on the devices, already sharded
    if (steps == 0) {
      data_sharding = xs::get_sharding_spec(batch.data);
      target_sharding = xs::get_sharding_spec(batch.target);
    }
    auto step = axle::step();
    optimizer.zero_grad();
    Tensor output = (*model)(batch.data);
    loss = cross_entropy(output, batch.target);
    if (steps == 0) first_loss = loss;
    loss.backward();
    xm::optimizer_step(optimizer);  // one process: the partitioner inserted the gradient all-reduces
    if (++steps == max_steps) break;
  }
  std::printf("spmd: %lld devices, %lld steps, last loss %f\n  images %s, labels %s\n%s\n", static_cast<long long>(n),
              static_cast<long long>(steps), loss.item(), data_sharding.c_str(), target_sharding.c_str(),
              metrics::short_report().c_str());

  // The examples run as tests, so each checks what its pattern promises. Here: batches arrive
  // sharded on dim 0 (labels replicated), every step is the same graph, compiled once, whose
  // gradients the partitioner all-reduces over the devices, and the model learns.
  std::string want = "{devices=[" + std::to_string(n) + ",1,1,1]";
  for (int64_t i = 0; i < n; ++i) want += (i ? "," : "") + std::to_string(i);
  want += "}";
  if (n == 1) want = "{replicated}";  // one device: nothing to split
  AXLE_CHECK(data_sharding == want && target_sharding == "{replicated}", "[example] expected images ", want,
             " and labels {replicated}, got ", data_sharding, " and ", target_sharding);
  const int64_t compiles = metrics::counter_value("UncachedCompile");
  const int64_t all_reduces = metrics::counter_value("SpmdAllReduce");
  AXLE_CHECK(steps == max_steps && compiles == 1 && (n == 1 || all_reduces >= steps), "[example] expected ", max_steps,
             " steps, 1 compile and all-reduces in every step, got ", steps, " steps, ", compiles, " compiles, ",
             all_reduces, " all-reduces");
  AXLE_CHECK(loss.item() < first_loss.item(), "[example] the loss did not fall: ", first_loss.item(), " -> ",
             loss.item());
  std::printf("PASS: first loss %f\n", first_loss.item());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
