// DistributedDataParallel: data-parallel training of one model replica per process.
//
//   axle::launch([](int) {
//     axle::dist::init_process_group("xla", "xla://");     // rank and world size from the runtime
//     model->to(axle::device());
//     axle::nn::parallel::DistributedDataParallel ddp_model(model, {.gradient_as_bucket_view = true});
//     optim::SGD opt(ddp_model.parameters(), {.lr = 0.01});
//     for (const auto& batch : loader) {
//       auto step = axle::step();
//       opt.zero_grad();
//       cross_entropy(ddp_model(batch.data.to(axle::device())), batch.target.to(axle::device())).backward();
//       opt.step();                                         // gradients are already averaged
//     }
//   });
//
// At construction rank 0's parameters and buffers are copied to every rank (and every
// rank's parameter names and shapes are checked to agree). When backward() finishes, the
// gradients are averaged over ranks: one all-reduce per bucket (parameters in reverse
// registration order, grouped by dtype and device, up to bucket_cap_mb each). On the xla
// device these all-reduces are ops of the step's graph. A parameter that got no gradient
// on a rank contributes zeros, so every rank issues the same collectives.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "axle/nn/module.h"

namespace axle::nn::parallel {

struct DistributedDataParallelOptions {
  /// Gradients are views into the all-reduced bucket buffers (no copy out of the bucket).
  bool gradient_as_bucket_view = false;
  /// Upper bound of one bucket, in MiB (a larger parameter gets a bucket of its own).
  double bucket_cap_mb = 25;
  /// In training mode, each forward() first copies rank 0's buffers (e.g. BatchNorm
  /// running statistics) to every rank.
  bool broadcast_buffers = true;
};

class DistributedDataParallel : public Module {
 public:
  /// Wraps `module` (registered as the child "module", as in PyTorch's state_dict names).
  explicit DistributedDataParallel(ModulePtr module, DistributedDataParallelOptions o = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "DistributedDataParallel"; }
  const ModulePtr& module() const { return module_; }
  const DistributedDataParallelOptions& options() const { return opts_; }

  /// Parameter names in each bucket, in all-reduce order.
  std::vector<std::vector<std::string>> bucket_names() const;

  /// While alive, backward() only accumulates gradients locally; the first backward()
  /// after it ends averages the accumulated gradients (gradient accumulation):
  ///   { auto guard = ddp_model.no_sync(); loss1.backward(); }  loss2.backward();
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSyncGuard(DistributedDataParallel& d);
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  struct Reducer;  // implementation (src/dist/ddp.cpp)

 private:
  ModulePtr module_;
  DistributedDataParallelOptions opts_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace axle::nn::parallel
