// One strategy per training-loop pattern: how the model is wrapped (DDP, FSDP v1/v2), laid out
// (SPMD mesh, input sharding), fed (the device loader) and stepped. A task gives the loss; the
// strategy's step() runs forward, backward, the gradient reduction, clipping and the
// optimizer step as its pattern does.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/fsdp.h"
#include "axle/serialize.h"
#include "axle/xs.h"
#include "config.h"

namespace axle_train {

/// SPMD (seed Pattern 5 with input_sharding): one process drives every device. The mesh's
/// "data" axis (fsdp-spmd: its one "fsdp" axis over every device) splits each batch's dim 0;
/// a "model" axis splits the layers. Empty for the other patterns.
struct SpmdLayout {
  MeshAxes axes;
  std::optional<axle::xs::Mesh> mesh;
  std::optional<axle::xs::ShardingSpec> input_sharding;  ///< of the batch's inputs ([B, ...])
  const axle::xs::ShardingSpec* input() const { return input_sharding ? &*input_sharding : nullptr; }
};

/// One optimizer step's figures, still on the device: the mean loss over the micro-batches
/// and the gradients' global norm before clipping (undefined without clipping).
struct StepOut {
  axle::Tensor loss, grad_norm;
};

/// The loss of one micro-batch through `net` (what the steps and the evaluation call).
using LossFn = std::function<axle::Tensor(axle::nn::Module& net, const axle::Tensor& x, const axle::Tensor& y)>;

class Strategy {
 public:
  /// The strategy of cfg.pattern. Under SPMD this switches the runtime to SPMD mode (before
  /// any tensor is on the device) and builds the mesh; `input_dims` is a batch input's rank.
  static std::unique_ptr<Strategy> make(const Config& cfg, size_t input_dims);
  Strategy(const Config& cfg, size_t input_dims);  ///< make() picks the pattern's subclass
  virtual ~Strategy() = default;

  const Config& config() const { return cfg_; }
  axle::Device device() const { return dev_; }
  const SpmdLayout& layout() const { return layout_; }
  /// "spmd: ..." for the run's header (nothing without a mesh).
  void print_layout(size_t input_dims) const;

  /// After model->to(device()): FSDP wraps it (v1 over the "xla" process group, v2 on the
  /// mesh's "fsdp" axis) in units chosen by `policy`; eager mode starts. Before the optimizer:
  /// v1's optimizer holds the shards.
  virtual void wrap(const axle::nn::ModulePtr& model, const axle::fsdp::AutoWrapPolicy& policy);
  /// After the optimizer and the loader: DDP wraps the model (parameters broadcast from rank
  /// 0); the device loader starts (loader, spmd, fsdp-spmd).
  virtual void attach(axle::data::DataLoader& loader);

  /// The plain model.
  const axle::nn::ModulePtr& model() const { return model_; }
  /// The model or its FSDP wrapper: what the optimizer and the evaluation see.
  const axle::nn::ModulePtr& net() const { return net_; }
  /// What the training forward calls: net(), or DDP's wrapper.
  virtual axle::nn::ModulePtr train_net() const { return net_; }
  /// FSDP v1's wrapper (null for the other patterns).
  virtual std::shared_ptr<axle::fsdp::XlaFullyShardedDataParallel> fsdp_v1() const { return nullptr; }
  /// The device loader, or null: batches come from the host loader.
  axle::pl::MpDeviceLoader* device_loader() const { return mp_loader_.get(); }

  /// The file a checkpoint in `dir` is read from ("resumed from ..."; checkpoints.h).
  virtual std::string checkpoint_file(const std::string& dir) const;
  /// Writes the checkpoint `c` (c.model: the plain model) into `dir` in the pattern's layout;
  /// every process calls it.
  virtual void save_checkpoint(const std::string& dir, const axle::Checkpoint& c);
  /// Reads the checkpoint in `dir` into what `into` points at; every process calls it.
  virtual axle::Checkpoint load_checkpoint(const std::string& dir, axle::Checkpoint into);

  /// One optimizer step over the micro-batches (each on the host or the device already):
  /// zero_grad, forward and backward of loss / n each (gradient sync only on the last),
  /// the pattern's gradient reduction, clipping to `clip` (none when unset), opt.step().
  StepOut step(const std::vector<axle::data::Example>& micro, axle::optim::Optimizer& opt, const LossFn& loss,
               std::optional<double> clip);

 protected:
  /// Runs the whole step: in a step boundary (axle::step()) on the lazy device.
  virtual StepOut run(const std::function<StepOut(const std::vector<axle::Tensor>&, const std::vector<axle::Tensor>&)>& body,
                      const std::vector<axle::Tensor>& xs, const std::vector<axle::Tensor>& ys);
  /// Runs a micro-batch's forward and backward without the gradient sync (all but the last
  /// micro-batch under DDP and FSDP v1).
  virtual void without_sync(const std::function<void()>& fwd_bwd) { fwd_bwd(); }
  /// After the backward passes: average the gradients over the processes where the pattern
  /// does it by hand (multiprocess, loader).
  virtual void reduce(axle::optim::Optimizer&) {}
  /// The gradients' global norm, clipped to `max_norm`.
  virtual axle::Tensor clip(axle::optim::Optimizer& opt, double max_norm);
  void start_device_loader(axle::data::DataLoader& loader);

  const Config& cfg_;
  axle::Device dev_;
  SpmdLayout layout_;
  axle::nn::ModulePtr model_, net_;
  std::unique_ptr<axle::pl::MpDeviceLoader> mp_loader_;
};

}  // namespace axle_train
