// nn::Module: registration, traversal, state_dict, train/eval, device/dtype moves.
#include "axle/nn/module.h"

#include <unordered_map>
#include <unordered_set>

#include "axle/autograd.h"
#include "axle/ops.h"
#include "core/rebind.h"
#include "core/tensor_impl.h"
#include "lazy/ir.h"

namespace axle::nn {

namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += "\"" + keys[i] + "\"";
  }
  return out;
}

}  // namespace

Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  AXLE_FAIL("[", name(), "] forward() is not implemented: override Module::forward in your module");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  AXLE_CHECK(!name.empty(), "[", this->name(), "] ", what, " name must not be empty");
  AXLE_CHECK(name.find('.') == std::string::npos, "[", this->name(), "] ", what, " name must not contain '.', got \"",
             name, "\"");
  auto taken = [&](const auto& v) {
    for (const auto& e : v)
      if (e.first == name) return true;
    return false;
  };
  AXLE_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "[", this->name(), "] ", what, " \"", name,
             "\" is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  if (!t.defined()) return t;
  check_new_name(name, "parameter");
  AXLE_CHECK(t.is_leaf(), "[", this->name(), "] parameter \"", name,
             "\" must be a leaf tensor (use .detach() on the result of an op)");
  if (requires_grad) t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  if (!t.defined()) return t;
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::register_module_impl(const std::string& name, std::shared_ptr<Module> m) {
  AXLE_CHECK(m != nullptr, "[", this->name(), "] register_module(\"", name, "\") got a null module");
  AXLE_CHECK(m.get() != this, "[", this->name(), "] a module cannot be its own child");
  check_new_name(name, "module");
  children_.emplace_back(name, std::move(m));
}

void Module::unregister_parameter(Module& m, const std::string& name) {
  const auto n = std::erase_if(m.params_, [&](const auto& e) { return e.first == name; });
  AXLE_CHECK(n == 1, "[", m.name(), "] unregister_parameter: no parameter \"", name, "\"");
}

void Module::replace_child(Module& m, const std::string& name, std::shared_ptr<Module> replacement) {
  AXLE_CHECK(replacement != nullptr && replacement.get() != &m, "[", m.name(), "] replace_child(\"", name,
             "\"): expected another module, got ", replacement ? "the module itself" : "a null pointer");
  for (auto& [n, c] : m.children_)
    if (n == name) {
      c = std::move(replacement);
      return;
    }
  AXLE_FAIL("[", m.name(), "] replace_child: no child \"", name, "\"");
}

void Module::collect_params(const std::string& prefix, bool recurse,
                            std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, c] : children_) c->collect_params(prefix + n + ".", true, out);
}

void Module::collect_buffers(const std::string& prefix, bool recurse,
                             std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, c] : children_) c->collect_buffers(prefix + n + ".", true, out);
}

void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

// A tensor shared by two modules (weight tying) is listed once, as PyTorch does.
static std::vector<std::pair<std::string, Tensor>> dedup(std::vector<std::pair<std::string, Tensor>> v) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(v.size());
  for (auto& e : v)
    if (seen.insert(e.second.impl()).second) out.push_back(std::move(e));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_params("", recurse, out);
  return dedup(std::move(out));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& e : named_parameters(recurse)) out.push_back(e.second);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_buffers("", recurse, out);
  return dedup(std::move(out));
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& e : named_buffers(recurse)) out.push_back(e.second);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& e : children_) out.push_back(e.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

StateDict Module::state_dict() const {
  StateDict out;
  collect_state("", out);
  return out;
}

void Module::collect_optional(const std::string& prefix, std::vector<std::string>& out) const {
  for (const auto& n : optional_state()) out.push_back(prefix + n);
  for (const auto& [n, c] : children_) c->collect_optional(prefix + n + ".", out);
}

std::vector<std::string> Module::optional_state_keys() const {
  std::vector<std::string> out;
  collect_optional("", out);
  return out;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  StateDict own = state_dict();
  std::unordered_map<std::string, size_t> given;
  for (size_t i = 0; i < sd.size(); ++i) {
    AXLE_CHECK(given.emplace(sd[i].first, i).second, "[load_state_dict] key \"", sd[i].first,
               "\" appears twice in the state dict");
  }
  std::vector<std::string> missing, unexpected, mismatch;
  std::unordered_set<std::string> own_keys;
  std::vector<std::pair<Tensor, Tensor>> copies;
  const std::vector<std::string> opt = optional_state_keys();
  const std::unordered_set<std::string> optional(opt.begin(), opt.end());
  for (const auto& [key, dst] : own) {
    own_keys.insert(key);
    auto it = given.find(key);
    if (it == given.end()) {
      if (!optional.count(key)) missing.push_back(key);
      continue;
    }
    const Tensor& src = sd[it->second].second;
    if (!src.defined()) {
      mismatch.push_back("\"" + key + "\" is an undefined tensor in the state dict");
    } else if (src.shape() != dst.shape()) {
      mismatch.push_back("size mismatch for \"" + key + "\": copying a tensor of shape " + shape_str(src.shape()) +
                         " from the state dict, the shape in the current model is " + shape_str(dst.shape()));
    } else {
      copies.emplace_back(dst, src);
    }
  }
  for (const auto& [key, t] : sd)
    if (!own_keys.count(key)) unexpected.push_back(key);

  // PyTorch's order: missing keys, unexpected keys, then each size mismatch.
  std::string err;
  if (strict && !missing.empty()) err += "\n  missing key(s): " + join_keys(missing);
  if (strict && !unexpected.empty()) err += "\n  unexpected key(s): " + join_keys(unexpected);
  for (const auto& m : mismatch) err += "\n  " + m;
  AXLE_CHECK(err.empty(), "[load_state_dict] error(s) in loading state dict for ", name(), ":", err);

  NoGradGuard ng;
  for (auto& [dst, src] : copies) {
    Tensor v = src.detach();
    if (v.device() != dst.device()) v = v.to(dst.device());
    if (v.dtype() != dst.dtype()) v = cast(v, dst.dtype());
    // A private copy: the module must not share storage with the caller's tensors.
    dst.set_data(v.clone());
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

std::shared_ptr<Module> Module::to(Device d) {
  NoGradGuard ng;
  std::unordered_set<const TensorImpl*> done;
  auto move = [&](const Tensor& t) {
    if (!done.insert(t.impl()).second || t.device() == d) return;
    Tensor moved = t.detach().to(d);
    if (moved.impl()->storage == t.impl()->storage) moved = moved.clone();
    Tensor g = t.grad();
    rebind_data(t, moved);
    if (g.defined()) t.impl()->meta().grad = g.to(d);
  };
  for (const auto& [n, p] : named_parameters()) move(p);
  for (const auto& [n, b] : named_buffers()) move(b);
  label_tensors();
  return weak_from_this().lock();
}

std::shared_ptr<Module> Module::to(DType dt) {
  AXLE_CHECK(is_floating(dt), "[", name(), ".to] expected a floating-point dtype, got ", dt);
  NoGradGuard ng;
  std::unordered_set<const TensorImpl*> done;
  auto conv = [&](const Tensor& t) {
    if (!done.insert(t.impl()).second || t.dtype() == dt || !is_floating(t.dtype())) return;
    Tensor c = cast(t.detach(), dt);
    Tensor g = t.grad();
    rebind_data(t, c);
    if (g.defined()) t.impl()->meta().grad = cast(g, dt);
  };
  for (const auto& [n, p] : named_parameters()) conv(p);
  for (const auto& [n, b] : named_buffers()) conv(b);
  label_tensors();
  return weak_from_this().lock();
}

void Module::label_tensors() const {
  // Graph inputs are named after these in AXLE_DEBUG explanations.
  for (const auto& [n, p] : named_parameters()) lazy::set_label(p, "parameter " + n, lazy::kLabelModule);
  for (const auto& [n, b] : named_buffers()) lazy::set_label(b, "buffer " + n, lazy::kLabelModule);
}

void Module::zero_grad() {
  for (const auto& p : parameters())
    if (p.impl()->autograd) p.impl()->autograd->grad = Tensor();
}

void Module::str_into(std::string& out, int indent) const {
  out += name() + "(";
  if (children_.empty()) {
    out += extra_repr() + ")";
    return;
  }
  std::string pad(size_t(indent + 2), ' ');
  std::string extra = extra_repr();
  if (!extra.empty()) out += "\n" + pad + extra;
  for (const auto& [n, c] : children_) {
    out += "\n" + pad + "(" + n + "): ";
    c->str_into(out, indent + 2);
  }
  out += "\n" + std::string(size_t(indent), ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

}  // namespace axle::nn
