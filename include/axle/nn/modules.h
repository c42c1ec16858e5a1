// Standard layers with PyTorch's default initialisation (drawn from axle's default
// generator: seed it with axle::manual_seed).
//
//   auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
//       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
//       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "axle/nn/module.h"
#include "axle/ops.h"

namespace axle::nn {

/// A pair of ints (height, width) that also accepts one int for both: `3` or `{3, 1}`.
struct Int2 {
  int64_t h = 0, w = 0;
  Int2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose
  Int2(int64_t a, int64_t b) : h(a), w(b) {}
  std::vector<int64_t> vec() const { return {h, w}; }
};

/// y = x W^T + b. weight [out, in], bias [out]; both U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  /// Re-draws weight and bias as PyTorch's reset_parameters().
  void reset_parameters();
  int64_t in_features, out_features;
  Tensor weight, bias;
};

struct Conv2dOptions {
  Int2 stride = 1, padding = 0, dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

/// 2-D convolution (NCHW). weight [out, in/groups, kh, kw], bias [out];
/// both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in/groups*kh*kw.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Conv2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  void reset_parameters();
  int64_t in_channels, out_channels;
  Int2 kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

struct ConvTranspose2dOptions {
  Int2 stride = 1, padding = 0, output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Int2 dilation = 1;
};

/// 2-D transposed convolution (NCHW), as torch.nn.ConvTranspose2d. weight [in, out/groups, kh, kw],
/// bias [out]; both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with PyTorch's fan_in = out/groups*kh*kw.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, ConvTranspose2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  void reset_parameters();
  int64_t in_channels, out_channels;
  Int2 kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

/// Batch normalisation per channel (torch.nn's _BatchNorm): weight 1, bias 0 (with affine;
/// bias=false: no bias, as PyTorch 2.x's keyword), running_mean 0, running_var 1,
/// num_batches_tracked 0 (int64, 0-d: PyTorch's buffers, names and order, so a PyTorch state
/// dict loads strictly; without track_running_stats there are none). Training: batch
/// statistics; num_batches_tracked counts the training forwards and the running statistics
/// are updated with `momentum` (unset: the cumulative average over num_batches_tracked
/// batches, as PyTorch's momentum=None; the running variance is unbiased). Eval: the running
/// statistics (the batch's without track_running_stats).
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats, use_bias;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  BatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine, bool track_running_stats,
            bool bias);
  /// Throws unless x has a rank this variant takes (1d: [N, C] or [N, C, L]; 2d: [N, C, H, W]).
  virtual void check_input(const Tensor& x) const = 0;
  /// num_batches_tracked (with track_running_stats): a state dict may leave it out, as PyTorch's.
  std::vector<std::string> optional_state() const override;
};

/// Batch normalisation over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, bool bias = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats, bias) {}
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input(const Tensor& x) const override;
};

/// Batch normalisation over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, bool bias = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats, bias) {}
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input(const Tensor& x) const override;
};

/// Group normalisation of [N, C, ...]: `num_groups` must divide num_channels. weight 1, bias 0 [C]
/// (with affine; bias=false: no bias, PyTorch 2.x's keyword).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;
};

/// Layer normalisation over the trailing `normalized_shape` dims. weight 1, bias 0 (with
/// elementwise_affine; bias=false: no bias, as PyTorch 2.x).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

/// Zeroes elements with probability p (scaling the rest by 1/(1-p)) in training mode; identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

/// Exact (erf) GELU.
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='none'"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid"; }
};

/// x * sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string name() const override { return "SiLU"; }
};

/// log(1 + exp(beta x)) / beta (x where beta x > threshold).
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1, double threshold = 20) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta, threshold); }
  std::string name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  double beta, threshold;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1, double max_val = 1) : min_val(min_val), max_val(max_val) {}
  Tensor forward(const Tensor& x) override { return hardtanh(x, min_val, max_val); }
  std::string name() const override { return "Hardtanh"; }
  std::string extra_repr() const override;
  double min_val, max_val;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "Identity"; }
};

/// Max pooling; stride defaults to kernel_size.
class MaxPool2d : public Module {
 public:
  MaxPool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0, Int2 dilation = 1,
            bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  /// The output and where each maximum came from (torch.nn.MaxPool2d(return_indices=True)),
  /// the indices MaxUnpool2d takes.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

/// The partial inverse of MaxPool2d, as torch.nn.MaxUnpool2d: stride defaults to kernel_size.
/// forward(x) alone throws: it needs the indices.
class MaxUnpool2d : public Module {
 public:
  MaxUnpool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0);
  /// x written at `indices` (MaxPool2d::forward_with_indices') of zero planes of output_size
  /// ([H, W] or the full shape; default: (H - 1) * stride - 2 * padding + kernel_size).
  Tensor forward(const Tensor& x, const Tensor& indices, const std::vector<int64_t>& output_size = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxUnpool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

/// Average pooling; stride defaults to kernel_size.
class AvgPool2d : public Module {
 public:
  AvgPool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0,
            bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Int2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Int2 output_size;
};

/// Resizes with interpolate, as torch.nn.Upsample: give size or scale_factor (one value for
/// every spatial dim, or one each); the modes of interpolate.
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions o) : options(std::move(o)) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  InterpolateOptions options;
};

/// Flattens dims start..end (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

/// Lookup table: forward(indices) -> weight rows. weight [num_embeddings, dim] ~ N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

/// Runs its children in order; they are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> modules);
  Sequential(std::initializer_list<ModulePtr> modules);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  /// Appends a module named by its index.
  void push_back(ModulePtr m);
  size_t size() const { return modules_.size(); }
  const ModulePtr& operator[](size_t i) const;
  const std::vector<ModulePtr>& modules() const { return modules_; }

 private:
  std::vector<ModulePtr> modules_;
};

/// Holds modules in a list, as torch.nn.ModuleList: children named "0", "1", ... (so
/// parameters are "0.weight", ...); it has no forward of its own (calling it throws):
/// iterate it in the owner's forward.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<ModulePtr> modules);
  ModuleList(std::initializer_list<ModulePtr> modules);
  std::string name() const override { return "ModuleList"; }
  /// Appends a module named by its index.
  void push_back(ModulePtr m);
  size_t size() const { return modules_.size(); }
  /// The i-th module; an index out of range throws (naming the size).
  const ModulePtr& operator[](size_t i) const;
  std::vector<ModulePtr>::const_iterator begin() const { return modules_.begin(); }
  std::vector<ModulePtr>::const_iterator end() const { return modules_.end(); }

 protected:
  /// PyTorch's ModuleList repr: runs of equal children folded into "(0-2): 3 x Linear(...)".
  void str_into(std::string& out, int indent) const override;

 private:
  std::vector<ModulePtr> modules_;
};

/// Holds modules by name in insertion order, as torch.nn.ModuleDict (children named by their
/// keys); it has no forward of its own (calling it throws).
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(std::vector<std::pair<std::string, ModulePtr>> modules);
  std::string name() const override { return "ModuleDict"; }
  /// Adds a module under `key` (a key already there: replaced in its place, as PyTorch).
  void insert(const std::string& key, ModulePtr m);
  bool contains(const std::string& key) const;
  /// The module under `key`; a missing key throws (naming the keys there are).
  const ModulePtr& operator[](const std::string& key) const;
  size_t size() const { return items_.size(); }
  std::vector<std::string> keys() const;
  const std::vector<std::pair<std::string, ModulePtr>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, ModulePtr>> items_;
};

}  // namespace axle::nn
