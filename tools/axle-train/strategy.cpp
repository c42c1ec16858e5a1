// The training-loop patterns' strategies (strategy.h): one class per pattern.
#include "strategy.h"

#include <cstdio>
#include <numeric>

#include "axle/compile.h"
#include "axle/dist.h"
#include "axle/nn/utils.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "checkpoints.h"

namespace axle_train {

using namespace axle;

Strategy::Strategy(const Config& cfg, size_t input_dims) : cfg_(cfg), dev_(Device::parse(cfg.device)) {
  if (!spmd_pattern(cfg.pattern)) return;
  runtime::use_spmd();  // before any tensor is on the device
  layout_.axes = cfg.pattern == Pattern::FsdpSpmd ? MeshAxes{{"fsdp"}, {cfg.devices}} : parse_mesh(cfg);
  std::vector<int64_t> ids(static_cast<size_t>(cfg.devices));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  layout_.mesh.emplace(ids, layout_.axes.sizes, layout_.axes.names);
  const std::string batch_axis = layout_.axes.size("data") ? "data" : layout_.axes.size("fsdp") ? "fsdp" : "";
  if (!batch_axis.empty()) {
    xs::PartitionSpec spec(input_dims, xs::None);
    spec[0] = batch_axis;
    layout_.input_sharding.emplace(*layout_.mesh, spec);
  }
}

void Strategy::print_layout(size_t input_dims) const {
  if (!layout_.mesh) return;
  std::string spec = "none (replicated)";
  if (layout_.input_sharding) {
    spec = "(" + layout_.input_sharding->partition_spec[0].items()[0];
    for (size_t i = 1; i < input_dims; ++i) spec += ", None";
    spec += ")";
  }
  std::printf("spmd: %d devices, mesh %s, input sharding %s\n", cfg_.devices, mesh_text(layout_.axes).c_str(),
              spec.c_str());
}

void Strategy::wrap(const nn::ModulePtr& model, const fsdp::AutoWrapPolicy&) { model_ = net_ = model; }

void Strategy::attach(data::DataLoader&) {}

void Strategy::start_device_loader(data::DataLoader& loader) {
  pl::MpDeviceLoaderOptions o;
  if (layout_.input_sharding) o.input_sharding = *layout_.input_sharding;  // the targets stay replicated
  mp_loader_ = std::make_unique<pl::MpDeviceLoader>(loader, dev_, o);
}

std::string Strategy::checkpoint_file(const std::string& dir) const { return plain_checkpoint_file(dir); }

void Strategy::save_checkpoint(const std::string& dir, const Checkpoint& c) { save_plain(dir, c); }

Checkpoint Strategy::load_checkpoint(const std::string& dir, Checkpoint into) { return load_plain(dir, into); }

StepOut Strategy::run(const std::function<StepOut(const std::vector<Tensor>&, const std::vector<Tensor>&)>& body,
                      const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  if (dev_.is_cpu()) return body(xs, ys);
  auto step = axle::step();
  return body(xs, ys);
}

Tensor Strategy::clip(optim::Optimizer& opt, double max_norm) {
  return nn::utils::clip_grad_norm_(opt.parameters(), max_norm);
}

StepOut Strategy::step(const std::vector<data::Example>& micro, optim::Optimizer& opt, const LossFn& loss,
                       std::optional<double> clip_to) {
  // On the lazy device the loss is read after the step boundary, so reading it never splits
  // the step's graph. The loader patterns' batches are on the device already (to() is then
  // a no-op).
  std::vector<Tensor> xs, ys;
  for (const data::Example& b : micro) {
    xs.push_back(dev_.is_cpu() ? b.data : b.data.to(dev_));
    ys.push_back(dev_.is_cpu() ? b.target : b.target.to(dev_));
  }
  const nn::ModulePtr fwd = train_net();
  auto body = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& y) -> StepOut {
    const size_t n = x.size();
    opt.zero_grad();
    Tensor total;
    for (size_t k = 0; k < n; ++k) {
      // Each micro-batch's loss / n is backpropagated: the gradients add up to the mean's.
      auto fwd_bwd = [&] {
        Tensor l;
        {
          // --precision bf16: forward and loss under autocast; backward outside it, as PyTorch
          // recommends (its vjps compute in the dtypes the forward used).
          autocast region(dev_, DType::BFloat16, cfg_.autocast());
          l = loss(*fwd, x[k], y[k]);
        }
        (n > 1 ? div(l, double(n)) : l).backward();
        Tensor d = l.detach();
        total = total.defined() ? add(total, d) : d;
      };
      if (k + 1 < n) without_sync(fwd_bwd);
      else fwd_bwd();
    }
    StepOut out{n > 1 ? div(total, double(n)) : total, Tensor()};
    reduce(opt);  // before clipping: the clipping sees the mean gradients
    if (clip_to) out.grad_norm = clip(opt, *clip_to);
    opt.step();
    return out;
  };
  return run(body, xs, ys);
}

namespace {

/// Seed Pattern 1 (single), also the eager cpu path: the base strategy as it is.
class SingleStrategy : public Strategy {
 public:
  using Strategy::Strategy;
};

/// Seed Pattern 6 (eager): each op runs as it is called.
class EagerStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  void wrap(const nn::ModulePtr& model, const fsdp::AutoWrapPolicy& policy) override {
    Strategy::wrap(model, policy);
    experimental::eager_mode(true);
  }
};

/// Seed Pattern 4: the whole step traced into one compiled graph.
class CompiledStrategy : public Strategy {
 public:
  using Strategy::Strategy;

 protected:
  using Body = std::function<StepOut(const std::vector<Tensor>&, const std::vector<Tensor>&)>;
  StepOut run(const Body& body, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) override {
    body_ = &body;
    return compiled_(xs, ys);
  }

 private:
  const Body* body_ = nullptr;
  CompiledFunction<std::function<StepOut(const std::vector<Tensor>&, const std::vector<Tensor>&)>> compiled_{
      [this](const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) { return (*body_)(xs, ys); },
      {.full_graph = true, .name = "train_step"}};
};

/// Seed Pattern 2: one process per device, gradients averaged by xm::reduce_gradients.
class MultiprocessStrategy : public Strategy {
 public:
  using Strategy::Strategy;

 protected:
  void reduce(optim::Optimizer& opt) override { xm::reduce_gradients(opt); }
};

/// Seed Pattern 5: multiprocess, the batches loaded onto the device while the step runs.
class LoaderStrategy : public MultiprocessStrategy {
 public:
  using MultiprocessStrategy::MultiprocessStrategy;
  void attach(data::DataLoader& loader) override { start_device_loader(loader); }
};

/// Seed Pattern 3: DDP over the "xla" process group averages the gradients as backward ends.
class DdpStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  void attach(data::DataLoader&) override {
    dist::init_process_group("xla", "xla://");
    ddp_ = std::make_shared<nn::parallel::DistributedDataParallel>(
        model_, nn::parallel::DistributedDataParallelOptions{.gradient_as_bucket_view = true});
  }
  nn::ModulePtr train_net() const override { return ddp_; }

 protected:
  void without_sync(const std::function<void()>& fwd_bwd) override {
    auto guard = ddp_->no_sync();
    fwd_bwd();
  }

 private:
  std::shared_ptr<nn::parallel::DistributedDataParallel> ddp_;
};

/// What the SPMD patterns share: one process drives every device, batches arrive from the
/// device loader split over the mesh, checkpoints keep each device's shards as they are.
class MeshStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  void attach(data::DataLoader& loader) override { start_device_loader(loader); }
  void save_checkpoint(const std::string& dir, const Checkpoint& c) override { save_distributed(dir, c); }
  Checkpoint load_checkpoint(const std::string& dir, Checkpoint into) override { return load_distributed(dir, into); }
};

/// SPMD: the batches split over the mesh's data axis, a model axis splits the layers (the
/// task shards them); the partitioner inserts the collectives.
class SpmdStrategy : public MeshStrategy {
 public:
  using MeshStrategy::MeshStrategy;
};

/// FSDP v1: one process per device; backward reduce-scatters each unit's gradients into its
/// shards, so the optimizer's own step() updates them (xm::optimizer_step would all-reduce
/// them again: an error).
class FsdpStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  void wrap(const nn::ModulePtr& model, const fsdp::AutoWrapPolicy& policy) override {
    model_ = model;
    dist::init_process_group("xla", "xla://");
    fsdp::XlaFullyShardedDataParallelOptions o;
    o.auto_wrap_policy = policy;
    fsdp_ = std::make_shared<fsdp::XlaFullyShardedDataParallel>(model, o);
    net_ = fsdp_;
  }
  std::shared_ptr<fsdp::XlaFullyShardedDataParallel> fsdp_v1() const override { return fsdp_; }
  std::string checkpoint_file(const std::string& dir) const override { return fsdp_checkpoint_file(dir); }
  void save_checkpoint(const std::string& dir, const Checkpoint& c) override { save_fsdp(dir, *fsdp_, c); }
  Checkpoint load_checkpoint(const std::string& dir, Checkpoint into) override { return load_fsdp(dir, *fsdp_, into); }

 protected:
  void without_sync(const std::function<void()>& fwd_bwd) override {
    auto guard = fsdp_->no_sync();
    fwd_bwd();
  }
  Tensor clip(optim::Optimizer&, double max_norm) override { return fsdp_->clip_grad_norm_(max_norm); }

 private:
  std::shared_ptr<fsdp::XlaFullyShardedDataParallel> fsdp_;
};

/// FSDP v2 (fsdp-spmd): one process; parameters sharded on the mesh's "fsdp" axis, each
/// unit's output on dim 0; the partitioner inserts the all-gathers and reduce-scatters.
class FsdpSpmdStrategy : public MeshStrategy {
 public:
  using MeshStrategy::MeshStrategy;
  void wrap(const nn::ModulePtr& model, const fsdp::AutoWrapPolicy& policy) override {
    model_ = model;
    fsdp::SpmdFullyShardedDataParallelOptions o;
    o.mesh = *layout_.mesh;
    o.auto_wrap_policy = policy;
    net_ = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(model, o);
  }
};

}  // namespace

std::unique_ptr<Strategy> Strategy::make(const Config& cfg, size_t input_dims) {
  switch (cfg.pattern) {
    case Pattern::Single: return std::make_unique<SingleStrategy>(cfg, input_dims);
    case Pattern::Eager: return std::make_unique<EagerStrategy>(cfg, input_dims);
    case Pattern::Compiled: return std::make_unique<CompiledStrategy>(cfg, input_dims);
    case Pattern::Multiprocess: return std::make_unique<MultiprocessStrategy>(cfg, input_dims);
    case Pattern::Loader: return std::make_unique<LoaderStrategy>(cfg, input_dims);
    case Pattern::Ddp: return std::make_unique<DdpStrategy>(cfg, input_dims);
    case Pattern::Spmd: return std::make_unique<SpmdStrategy>(cfg, input_dims);
    case Pattern::Fsdp: return std::make_unique<FsdpStrategy>(cfg, input_dims);
    case Pattern::FsdpSpmd: return std::make_unique<FsdpSpmdStrategy>(cfg, input_dims);
  }
  throw std::logic_error("Strategy::make: a Pattern without a strategy");
}

}  // namespace axle_train
