// FSDP's memory against DDP's on a stack of 8 Linear(1024,1024) with SGD momentum (issue 14):
// after a few training steps, the bytes of parameters, gradients and optimizer state each
// device holds, and each device's peak bytes. One JSON line on stdout.
//
//   build/bin/axle-fsdp-memory ddp|fsdp|fsdp-spmd [devices=2] [steps=3]
//
// ddp and fsdp (v1) run one process per device (axle::launch, global batch 32 split over
// them); fsdp-spmd (v2) one process driving `devices` virtual devices (AXLE_CPU_DEVICES).
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "axle/axle.h"
#include "axle/dtype.h"
#include "axle/fsdp.h"
#include "axle/xs.h"

using namespace axle;

namespace {

constexpr int64_t kWidth = 1024, kLayers = 8, kBatch = 32;

struct Figures {
  std::vector<int64_t> peak, parameters, gradients, optimizer;
};

int64_t bytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(itemsize(t.dtype())); }

// Adds t's bytes per device: under SPMD each device's shard (all of t where replicated).
void add(const Tensor& t, std::vector<int64_t>& per_device, bool spmd) {
  if (!t.defined()) return;
  if (!spmd) {
    per_device[0] += bytes(t);
    return;
  }
  const auto shards = xs::local_shards(t);
  for (size_t k = 0; k < shards.size(); ++k) per_device[k] += bytes(shards[k].data);
}

// Trains `steps` steps and returns this process's figures (one entry per device it drives).
Figures train(const std::string& mode, int devices, int steps) {
  const bool spmd = mode == "fsdp-spmd";
  const Device dev = axle::device();
  manual_seed(0);
  std::vector<nn::ModulePtr> layers;
  for (int64_t i = 0; i < kLayers; ++i) {
    layers.push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
    layers.push_back(std::make_shared<nn::ReLU>());
  }
  auto model = std::make_shared<nn::Sequential>(layers);
  model->to(dev);
  nn::ModulePtr net = model;
  std::optional<xs::Mesh> mesh;
  const auto policy = fsdp::transformer_auto_wrap_policy({"Linear"});
  fsdp::FSDPOptions v1;
  v1.auto_wrap_policy = policy;
  fsdp::SpmdFullyShardedDataParallelOptions v2;
  v2.auto_wrap_policy = policy;
  if (mode == "ddp") {
    dist::init_process_group("xla", "xla://");
    net = std::make_shared<nn::parallel::DistributedDataParallel>(model);
  } else if (mode == "fsdp") {
    dist::init_process_group("xla", "xla://");
    net = std::make_shared<fsdp::FSDP>(model, v1);
  } else {
    std::vector<int64_t> ids(static_cast<size_t>(devices));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    mesh.emplace(ids, std::vector<int64_t>{devices}, std::vector<std::string>{"fsdp"});
    v2.mesh = *mesh;
    net = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(model, v2);
  }
  optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  const int64_t batch = spmd ? kBatch : kBatch / runtime::world_size();
  for (int s = 0; s < steps; ++s) {
    auto step = axle::step();
    Tensor x = randn({batch, kWidth}).to(dev);
    if (mesh) xs::mark_sharding(x, *mesh, {"fsdp", xs::None});
    opt.zero_grad();
    Tensor out = (*net)(x);
    (out * out).mean().backward();
    opt.step();
  }
  axle::sync();
  const int n = spmd ? devices : 1;
  Figures f;
  for (int k = 0; k < n; ++k)
    f.peak.push_back(xm::get_memory_info(spmd ? Device(DeviceType::XLA, k) : dev).peak_bytes_used);
  f.parameters.assign(size_t(n), 0);
  f.gradients.assign(size_t(n), 0);
  f.optimizer.assign(size_t(n), 0);
  const auto params = opt.parameters();
  const auto state = opt.state_dict();
  for (size_t i = 0; i < params.size(); ++i) {
    add(params[i], f.parameters, spmd);
    add(params[i].grad(), f.gradients, spmd);
    for (const auto& [key, t] : state.state.at(i).tensors) add(t, f.optimizer, spmd);
  }
  return f;
}

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void print(const std::string& mode, const Figures& f) {
  std::printf("{\"mode\": \"%s\", \"devices\": %zu, \"peak_bytes_per_device\": %s, \"parameter_bytes_per_device\": %s, "
              "\"gradient_bytes_per_device\": %s, \"optimizer_bytes_per_device\": %s}\n",
              mode.c_str(), f.peak.size(), list(f.peak).c_str(), list(f.parameters).c_str(),
              list(f.gradients).c_str(), list(f.optimizer).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string mode = argc > 1 ? argv[1] : "fsdp";
  const int devices = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  AXLE_CHECK(mode == "ddp" || mode == "fsdp" || mode == "fsdp-spmd",
             "[axle-fsdp-memory] expected ddp, fsdp or fsdp-spmd, got '", mode, "'");
  AXLE_CHECK(devices >= 1 && steps >= 1, "[axle-fsdp-memory] expected devices >= 1 and steps >= 1");
  if (mode == "fsdp-spmd") {
    ::setenv("AXLE_CPU_DEVICES", std::to_string(devices).c_str(), 1);
    runtime::use_spmd();
    print(mode, train(mode, devices, steps));
    return 0;
  }
  axle::launch(
      [&](int) {
        const Figures mine = train(mode, devices, steps);
        // Rank 0 prints every rank's figures, in rank order.
        const auto all = xm::rendezvous("fsdp-memory", std::to_string(mine.peak[0]) + " " +
                                                           std::to_string(mine.parameters[0]) + " " +
                                                           std::to_string(mine.gradients[0]) + " " +
                                                           std::to_string(mine.optimizer[0]));
        Figures f;
        for (const std::string& p : all) {
          long long v[4] = {0, 0, 0, 0};
          AXLE_CHECK(std::sscanf(p.c_str(), "%lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3]) == 4, "bad figures");
          f.peak.push_back(v[0]);
          f.parameters.push_back(v[1]);
          f.gradients.push_back(v[2]);
          f.optimizer.push_back(v[3]);
        }
        if (runtime::global_ordinal() == 0) print(mode, f);
      },
      {.nprocs = devices, .prefix_output = false});
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "axle-fsdp-memory: %s\n", e.what());
  return 1;
}
