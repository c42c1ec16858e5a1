// The SPMD program the multi-host tests (test_multihost_spmd.cpp) and bench/multihost.sh
// run: one process per host, each with AXLE_CPU_DEVICES local devices, or one process with
// all of them. Under an external launcher's variables (torchrun's RANK / WORLD_SIZE /
// MASTER_ADDR, Slurm's, MPI's) the processes are the hosts of one job.
//
//   multihost_spmd_worker MODE STEPS OUT [DIR]
//     MODE  cnn    a small cnn with BatchNorm, data parallel on the mesh "data" (all devices)
//           fsdp   the mlp in SpmdFullyShardedDataParallel on the mesh "fsdp" (FSDP v2)
//           save   cnn for STEPS steps, then distributed_checkpoint::save(state, DIR)
//           load   the cnn's state from DIR (distributed_checkpoint::load), no training
//           save-fsdp, load-fsdp: the same with the fsdp model
//           ddp    the cnn with DDP instead: AXLE_NUM_DEVICES processes (axle::launch), each
//                  its slice of the same global batches (for bench/multihost.sh)
//     OUT   JSON written by host 0: hosts, devices, losses, parameters (every value), the
//           seconds per step after the first; `OUT.ready` appears after step 1 on every host
//           (the fault tests wait for it)
// Environment: AXLE_MH_RDZV_TIMEOUT (seconds, the hosts' rendezvous timeout, default 60).
// Exit status 0, or 2 with "multihost_spmd_worker: error: ..." on stderr.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "axle/distributed_checkpoint.h"
#include "axle/fsdp.h"
#include "axle/xs.h"

using namespace axle;

namespace {

// The same model on every host: the seed fixes it.
nn::ModulePtr make_model(const std::string& mode) {
  if (mode == "fsdp")
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, 10)});
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 14 * 14, 10)});
}

// The global batches, the same on every host (each host keeps only its devices' shards):
// at most 32 distinct ones, step s trains on batch s % 32.
std::vector<std::pair<Tensor, Tensor>> batches(int steps) {
  manual_seed(1234);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int i = 0; i < std::min(steps, 32); ++i) {
    Tensor x = randn({128, 1, 28, 28});
    data.emplace_back(x, argmax(x.reshape({128, 784}).narrow(1, 0, 10), 1));
  }
  return data;
}

void write_json(const std::string& out, const std::vector<double>& losses, const std::vector<double>& step_s,
                const nn::Module& model) {
  nlohmann::json j;
  j["hosts"] = runtime::world_size();
  j["devices"] = runtime::is_spmd() ? runtime::global_runtime_device_count() : runtime::world_size();
  j["addressable"] = runtime::is_spmd() ? runtime::addressable_runtime_device_count() : 1;
  j["losses"] = losses;
  j["step_seconds"] = step_s;
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, t] : model.state_dict()) {  // split ones are gathered from every host
    const Tensor c = t.detach().cpu().to(kFloat32).contiguous();
    params[name] = c.to_vector<float>();
  }
  j["state"] = params;
  j["counters"] = {{"SpmdAllReduce", metrics::counter_value("SpmdAllReduce")},
                   {"SpmdAllGather", metrics::counter_value("SpmdAllGather")},
                   {"SpmdReduceScatter", metrics::counter_value("SpmdReduceScatter")}};
  if (runtime::global_ordinal() == 0) std::ofstream(out) << j.dump() << "\n";
}

// DDP: rank r trains on rows [r*B/w, (r+1)*B/w) of each global batch; gradients all-reduced.
void ddp(int steps, const std::string& out) {
  omp_set_num_threads(1);
  const int w = runtime::world_size(), r = runtime::global_ordinal();
  manual_seed(0);
  auto model = make_model("cnn");
  model->to(device());
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  const auto data = batches(steps);
  std::vector<double> losses, step_s;
  const int64_t rows = 128 / w;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      auto st = axle::step();
      const auto& [bx, by] = data[size_t(s) % data.size()];
      Tensor x = bx.narrow(0, r * rows, rows).to(device());
      Tensor y = by.narrow(0, r * rows, rows).to(device());
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      xm::optimizer_step(opt);
      losses.push_back(loss.item());
    }
    if (s > 0) step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  write_json(out, losses, step_s, *model);
}

int run(int argc, char** argv) {
  if (argc < 4) throw Error("usage: multihost_spmd_worker cnn|fsdp|save|load STEPS OUT [DIR]");
  std::string mode = argv[1];
  const std::string out = argv[3], dir = argc > 4 ? argv[4] : "";
  // save-fsdp / load-fsdp: the FSDP v2 model (parameters split over every host's devices).
  const bool fsdp_model = mode == "fsdp" || (mode.size() > 5 && mode.substr(mode.size() - 5) == "-fsdp");
  if (mode != "fsdp" && fsdp_model) mode = mode.substr(0, mode.size() - 5);
  const int steps = std::atoi(argv[2]);
  if (mode == "ddp") {
    axle::launch([&](int) { ddp(steps, out); }, {.nprocs = 0});
    return 0;
  }
  if (const char* t = std::getenv("AXLE_MH_RDZV_TIMEOUT"); t && *t) dist::set_timeout(std::atof(t));
  omp_set_num_threads(1);  // one kernel thread per device
  runtime::use_spmd();
  const int64_t n = runtime::global_runtime_device_count();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  const xs::Mesh mesh(ids, {n}, {fsdp_model ? "fsdp" : "data"});

  manual_seed(0);
  std::shared_ptr<nn::Module> model = make_model(fsdp_model ? "fsdp" : "cnn");
  model->to(device());
  if (fsdp_model)
    model = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(model,
                                                                 fsdp::SpmdFullyShardedDataParallelOptions{.mesh = mesh});
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});

  const auto data = batches(mode == "load" ? 0 : steps);
  const xs::ShardingSpec input(mesh, {mesh.axis_names()[0], xs::None, xs::None, xs::None});

  if (mode == "load") experimental::distributed_checkpoint::load(model->state_dict(), dir);
  std::vector<double> losses, step_s;
  for (int s = 0; s < (mode == "load" ? 0 : steps); ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      auto st = axle::step();
      const auto& [bx, by] = data[size_t(s) % data.size()];
      Tensor x = bx.to(device()), y = by.to(device());
      input.apply(x);
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
    if (s > 0) step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (s == 0) std::ofstream(out + ".ready." + std::to_string(runtime::global_ordinal())) << "1\n";
  }
  if (mode == "save") experimental::distributed_checkpoint::save(model->state_dict(), dir);

  write_json(out, losses, step_s, *model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multihost_spmd_worker: error: %s\n", e.what());
    return 2;
  }
}
