// axle::nn::Module: the base of every layer, as torch.nn.Module.
//
//   struct Net : axle::nn::Module {
//     std::shared_ptr<axle::nn::Linear> fc1, fc2;
//     Net() { fc1 = register_module("fc1", std::make_shared<axle::nn::Linear>(784, 256));
//             fc2 = register_module("fc2", std::make_shared<axle::nn::Linear>(256, 10)); }
//     axle::Tensor forward(const axle::Tensor& x) override { return (*fc2)(axle::relu((*fc1)(x))); }
//   };
//
// Modules are held by std::shared_ptr. Parameters and buffers are listed in
// registration order, children recursively with dotted names ("fc1.weight", "0.bias").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "axle/tensor.h"

namespace axle::nn {

/// Ordered (name, tensor) pairs, as PyTorch's state_dict.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The layer's computation. The base version throws (a module without forward).
  virtual Tensor forward(const Tensor& x);
  /// forward(x), or, for a module a wrapper took over (an FSDP unit), the wrapper's forward:
  /// a parent that calls its child as (*child)(x) reaches the wrapper.
  Tensor operator()(const Tensor& x) { return forward_wrapper_ ? forward_wrapper_->forward(x) : forward(x); }
  /// Type name used in messages and str() ("Linear", "Sequential", ...).
  virtual std::string name() const { return "Module"; }
  /// One-line description of the layer's configuration, e.g. "in_features=784, out_features=256".
  virtual std::string extra_repr() const { return ""; }
  /// PyTorch-style multi-line description of the module tree.
  std::string str() const;

  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  /// Total number of parameter elements.
  int64_t num_parameters() const;

  /// Parameters then buffers of each module (PyTorch's order: a module's own
  /// parameters, its own buffers, then each child's entries), with PyTorch's names.
  StateDict state_dict() const;
  /// Copies values into the existing tensors (their identity is kept, so an optimizer
  /// built on the parameters stays valid), cast to each tensor's dtype and device.
  /// strict: every key must match exactly, except the optional keys below (as PyTorch's
  /// BatchNorm num_batches_tracked: one the state dict leaves out keeps its value).
  /// Throws axle::Error, before changing anything, listing every missing key, every
  /// unexpected key (strict only) and every shape mismatch (key and both shapes; an error
  /// even when not strict), together in one message, as PyTorch.
  void load_state_dict(const StateDict& sd, bool strict = true);
  /// The state_dict() keys a strict load_state_dict lets a state dict leave out (each
  /// module's optional_state(), with its dotted prefix).
  std::vector<std::string> optional_state_keys() const;

  /// Training mode (Dropout active, BatchNorm batch statistics), recursively.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer (and any gradient) to device `d` / dtype `t`
  /// (floating tensors only for dtypes). The tensors keep their identity: handles
  /// held in members (Linear::weight, ...) see the change. Optimizer state is NOT
  /// moved: create optimizers after model->to(device), as in PyTorch/XLA.
  /// Returns this module's shared_ptr (null for a module not held by one), so
  /// `auto model = std::make_shared<Net>()->to("xla");` chains as in PyTorch; the
  /// result is a ModulePtr: use nn::to(ptr, device) to keep the derived type.
  std::shared_ptr<Module> to(Device d);
  std::shared_ptr<Module> to(DType t);

  /// Sets every parameter's gradient to undefined.
  void zero_grad();

 protected:
  /// Adds a parameter (a leaf that requires grad unless requires_grad is false) and returns it.
  /// An undefined `t` registers nothing (e.g. Linear without bias) and returns it.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Adds a buffer (state saved in state_dict but not trained, e.g. running_mean).
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    register_module_impl(name, std::static_pointer_cast<Module>(m));
    return m;
  }
  void register_module_impl(const std::string& name, std::shared_ptr<Module> m);

  // For wrappers that take a module over in place (FSDP, axle/fsdp.h). Static, so a wrapper
  // can apply them to any module of the tree it wraps.
  /// Removes m's own parameter `name` from its list (the tensor lives on in other handles).
  static void unregister_parameter(Module& m, const std::string& name);
  /// Puts `replacement` in the place of m's child `name` (same name, same position).
  static void replace_child(Module& m, const std::string& name, std::shared_ptr<Module> replacement);
  /// Makes m's operator() call wrapper->forward (null: m.forward again).
  static void set_forward_wrapper(Module& m, Module* wrapper) { m.forward_wrapper_ = wrapper; }
  static Module* forward_wrapper(const Module& m) { return m.forward_wrapper_; }

  /// This module's own buffer names that a state dict may leave out (BatchNorm's
  /// num_batches_tracked, as PyTorch's _BatchNorm._load_from_state_dict); default none.
  virtual std::vector<std::string> optional_state() const { return {}; }

  /// Appends str() of this module, each line after the first indented by `indent` more
  /// spaces (PyTorch's __repr__; ModuleList overrides it to fold repeated children).
  virtual void str_into(std::string& out, int indent) const;

  bool training_ = true;

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void collect_params(const std::string& prefix, bool recurse,
                      std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_buffers(const std::string& prefix, bool recurse,
                       std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_state(const std::string& prefix, StateDict& out) const;
  void collect_optional(const std::string& prefix, std::vector<std::string>& out) const;
  /// Names the xla parameters and buffers for AXLE_DEBUG ("parameter fc1.weight").
  void label_tensors() const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  Module* forward_wrapper_ = nullptr;  ///< see set_forward_wrapper
};

using ModulePtr = std::shared_ptr<Module>;

/// `module->to(d)` that keeps the module's type:
/// `std::shared_ptr<Net> model = nn::to(std::make_shared<Net>(), "xla");`
template <class M>
std::shared_ptr<M> to(std::shared_ptr<M> module, Device d) {
  AXLE_CHECK(module != nullptr, "[nn::to] expected a module, got a null pointer");
  module->to(d);
  return module;
}
template <class M>
std::shared_ptr<M> to(std::shared_ptr<M> module, DType t) {
  AXLE_CHECK(module != nullptr, "[nn::to] expected a module, got a null pointer");
  module->to(t);
  return module;
}

}  // namespace axle::nn
