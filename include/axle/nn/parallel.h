// DistributedDataParallel: data-parallel training of one model replica per process.
//
//   axle::launch([&](int) {                               // model, loader: built in this process
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
// rank's parameter names, shapes, dtypes and requires_grad flags are checked to agree).
// A forward() with gradients enabled (outside no_sync()) arms the reduction: when the
// backward() through it finishes, the gradients are averaged over ranks, one all-reduce
// per bucket (parameters in reverse registration order, grouped by dtype and device, up
// to bucket_cap_mb each). On the xla device these all-reduces are ops of the step's
// graph. Every rank must run the same forward/backward sequence: a rank whose backward
// reaches none of the parameters leaves the others waiting until the collective timeout.
// By default every parameter must get a gradient in every armed backward (an unused one
// is an error naming it); with find_unused_parameters, unused ones count as zeros on that
// rank, and a parameter no rank used keeps an undefined gradient (optimizers skip it).
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
  /// Allow parameters without a gradient in a backward pass (one more small all-reduce
  /// per pass finds which parameters any rank used).
  bool find_unused_parameters = false;
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

  struct Reducer;  // implementation (src/nn/parallel.cpp)

  /// Parameter names in each bucket, in all-reduce order.
  std::vector<std::vector<std::string>> bucket_names() const;

  /// Forwards run while it is alive do not arm the reduction: their backward() only
  /// accumulates gradients locally, and the first armed backward() after it averages the
  /// accumulated gradients (gradient accumulation, as PyTorch's no_sync()):
  ///   { auto guard = ddp_model.no_sync(); ddp_model(x1)...backward(); }  ddp_model(x2)...backward();
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSyncGuard(std::shared_ptr<Reducer> r);
    std::shared_ptr<Reducer> reducer_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(reducer_); }

 private:
  ModulePtr module_;
  DistributedDataParallelOptions opts_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace axle::nn::parallel
