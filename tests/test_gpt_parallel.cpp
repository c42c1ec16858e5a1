// The GPT (axle/models/gpt.h) under the parallel patterns (issue 15 item 5): SPMD tensor
// parallelism over a "model" mesh axis (GPT::shard_tensor_parallel, Megatron's split), SPMD
// data x model meshes, FSDP v1 over processes (one unit per GPTBlock, the tied head) and
// FSDP v2 (SpmdFullyShardedDataParallel). Each trains a small GPT and must match one device
// within 1e-5; the SPMD runs also check the collectives the partitioner inserted.
//
// launch() re-executes this binary; a child runs only the test that launched it
// (tests/test_util.h launch_test_main).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/fsdp.h"
#include "axle/metrics.h"
#include "axle/models/gpt.h"
#include "axle/nn/utils.h"
#include "axle/optim/adam.h"
#include "axle/xs.h"
#include "dist/dist_internal.h"
#include "lazy/ir.h"
#include "lazy/lazy_internal.h"
#include "spmd/device_count.h"
#include "spmd/partition.h"
#include "gpt_harness.h"
#include "test_util.h"

using namespace axle;
using models::GPT;
using namespace axle::gpt_test;

namespace {

struct OneThread {  // one kernel thread per device (and for the reference): order-stable sums
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

enum class Layout { One, TensorParallel, Fsdp2 };

// `steps` steps of AdamW (two parameter groups) + clip_grad_norm_(1.0) on the xla device:
// Layout::One without SPMD; TensorParallel on the mesh `shape`/`names` (axes "data" and/or
// "model"), the batch sharded on "data" when there is one; Fsdp2 on the mesh fsdp=devices.
TrainRun train(Layout layout, int steps, std::vector<int64_t> shape = {}, std::vector<std::string> names = {}) {
  OneThread threads;
  std::optional<xs::Mesh> mesh;
  int64_t devices = 1;
  for (int64_t s : shape) devices *= s;
  if (layout == Layout::One) {
    dist::detail::set_spmd_mode(false);
  } else {
    setenv("AXLE_CPU_DEVICES", std::to_string(devices).c_str(), 1);
    spmd::reset_device_count();
    runtime::use_spmd();
    mesh = xs::Mesh(iota(devices), shape, names);
  }
  const bool data_axis = mesh && mesh->get_axis_name_idx(layout == Layout::Fsdp2 ? "fsdp" : "data").has_value();
  const std::string batch_axis = layout == Layout::Fsdp2 ? "fsdp" : "data";
  manual_seed(0);
  auto gpt = std::make_shared<GPT>(small());
  gpt->to(device());
  nn::ModulePtr m = gpt;
  if (layout == Layout::TensorParallel) gpt->shard_tensor_parallel(*mesh, "model");
  std::shared_ptr<fsdp::SpmdFullyShardedDataParallel> f2;
  if (layout == Layout::Fsdp2) {
    f2 = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(
        gpt, fsdp::SpmdFullyShardedDataParallelOptions{.mesh = *mesh,
                                                      .auto_wrap_policy = fsdp::transformer_auto_wrap_policy({"GPTBlock"})});
    m = f2;
  }
  optim::AdamW opt(gpt->param_groups(0.1), {.lr = 3e-3, .weight_decay = 0.1});
  TrainRun r;
  std::vector<Tensor> losses;
  for (int s = 0; s < steps; ++s) {
    const Batch b = batch_of(s);
    auto st = axle::step();
    Tensor x = b.x.to(device()), y = b.y.to(device());
    if (data_axis) {
      xs::mark_sharding(x, *mesh, {batch_axis, xs::None});
      xs::mark_sharding(y, *mesh, {batch_axis, xs::None});
    }
    opt.zero_grad();
    Tensor logits = (*m)(x);
    Tensor loss = cross_entropy(reshape(logits, {-1, kVocab}), reshape(y, {-1}));
    loss.backward();
    nn::utils::clip_grad_norm_(gpt->parameters(), 1.0);
    opt.step();
    losses.push_back(loss);
  }
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const auto& [wrapped_name, p] : gpt->named_parameters()) {
    std::string name = wrapped_name;  // the unwrapped model's name (FSDP v2 inserts "_orig_module.")
    for (size_t at; (at = name.find("_orig_module.")) != std::string::npos;) name.erase(at, 13);
    r.params[name] = p.cpu().contiguous().to_vector<float>();
    if (mesh) r.shardings[name] = xs::get_sharding_spec(p);
  }
  if (mesh) {
    const Tensor p = gpt->parameters()[0];
    r.table = xs::explain({p});
    EXPECT_TRUE(p.impl()->lazy->producer) << "the parameter is an output of the step's SPMD graph";
    if (p.impl()->lazy->producer) r.collectives = p.impl()->lazy->producer->collectives;
  }
  return r;
}

std::map<std::string, int> kinds(const std::vector<spmd::CollectiveNote>& c) {
  std::map<std::string, int> k;
  for (const auto& n : c) ++k[n.kind];
  return k;
}

class GptParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics::reset();
    lazy::clear_graph_cache();
  }
  void TearDown() override {
    xs::set_global_mesh(std::nullopt);
    dist::detail::set_spmd_mode(false);
    unsetenv("AXLE_CPU_DEVICES");
    spmd::reset_device_count();
  }
};

const TrainRun& reference(int steps) {
  static std::map<int, TrainRun> runs;
  if (!runs.count(steps)) runs[steps] = train(Layout::One, steps);
  return runs[steps];
}

}  // namespace

// ---------------------------------------------------------------- SPMD tensor parallel
TEST_F(GptParallel, TensorParallelOnModelAxisMatchesOneDevice) {
  const TrainRun& ref = reference(10);
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1);  // it learns
  const TrainRun tp = train(Layout::TensorParallel, 10, {2}, {"model"});
  std::cerr << tp.table;
  expect_same(tp, ref, 1e-5, "model=2");
  for (const auto& [k, v] : kinds(tp.collectives)) std::cerr << k << ": " << v << "\n";
}

TEST_F(GptParallel, DataTimesModelMeshMatchesOneDevice) {
  const TrainRun& ref = reference(10);
  const TrainRun tp = train(Layout::TensorParallel, 10, {2, 2}, {"data", "model"});
  std::cerr << tp.table;
  expect_same(tp, ref, 1e-5, "data=2,model=2");
}

// ---------------------------------------------------------------- FSDP v2
TEST_F(GptParallel, Fsdp2MatchesOneDevice) {
  const TrainRun& ref = reference(5);
  const TrainRun f = train(Layout::Fsdp2, 5, {2}, {"fsdp"});
  std::cerr << f.table;
  expect_same(f, ref, 1e-5, "fsdp=2");
}

int main(int argc, char** argv) { return axle::test::launch_test_main(argc, argv); }
