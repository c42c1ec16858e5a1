// XlaFullyShardedDataParallel, FSDP v1 (include/axle/fsdp.h).
//
// A unit owns the parameters of its module not already owned by an inner unit. Each one
// (or, with flatten_parameters, each group: trainable / frozen) becomes a FlatParam: the
// shard (this rank's slice of the flattened, padded value: a new leaf registered on the
// unit) and the "fulls", the wrapped modules' own parameter tensors, which are removed
// from their modules' lists but stay the handles the modules' forward reads.
//
// forward: under no_grad each full := unflatten(all_gather(shard)) (core's rebind_data:
// the full keeps its identity and autograd meta, only its value changes shape); the module
// runs, autograd saving detached aliases of the fulls (aliases share the full's LazyTensor).
// With reshard_after_forward on the xla device, the output passes a pre-backward node: when
// backward reaches the unit (before any of its vjps are recorded), that LazyTensor is
// pointed at a second all-gather (lazy::replace_value) whose input passes an optimization
// barrier together with the output's gradient, so the re-gather is ordered after the
// backward got there, backward's ops read it, and the forward gather dies at its last
// forward use. A
// post-accumulate-grad hook on each trainable full reduce-scatters (mean over ranks) the
// flattened, padded gradient into the shard's gradient, drops the full gradient and points
// the full at its 1-element placeholder. Frozen fulls are freed at the end of forward.
#include "axle/fsdp.h"

#include <cmath>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "axle/autograd.h"
#include "axle/dist.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "autograd/node.h"
#include "core/rebind.h"
#include "core/tensor_impl.h"
#include "lazy/replace_value.h"

namespace axle::fsdp {

using nn::Module;
using nn::ModulePtr;

namespace {

// ---- what FSDP made of a tensor (param_role), keyed by TensorImpl; entries of dead
// tensors are recognised by their expired weak pointer and pruned.
struct RoleEntry {
  std::weak_ptr<TensorImpl> impl;
  ParamRole role = ParamRole::None;
  std::string name;
};
std::mutex g_mu;
std::unordered_map<const TensorImpl*, RoleEntry>& roles() {
  static auto* m = new std::unordered_map<const TensorImpl*, RoleEntry>();
  return *m;
}
// Modules whose own parameters a unit took (a second wrap of them is an error).
std::unordered_map<const Module*, std::weak_ptr<const Module>>& taken_modules() {
  static auto* m = new std::unordered_map<const Module*, std::weak_ptr<const Module>>();
  return *m;
}

void set_role(const Tensor& t, ParamRole r, const std::string& name) {
  std::lock_guard<std::mutex> g(g_mu);
  auto& m = roles();
  if (m.size() >= 4096 && m.size() % 1024 == 0)
    std::erase_if(m, [](const auto& e) { return e.second.impl.expired(); });
  m[t.impl()] = RoleEntry{t.impl_ptr(), r, name};
}

RoleEntry find_role(const Tensor& p) {
  if (!p.defined()) return {};
  std::lock_guard<std::mutex> g(g_mu);
  auto& m = roles();
  auto it = m.find(p.impl());
  if (it == m.end() || it->second.impl.lock() != p.impl_ptr()) return {};
  return it->second;
}

void mark_taken(const Module& m) {
  std::lock_guard<std::mutex> g(g_mu);
  taken_modules()[&m] = m.weak_from_this();
}

bool is_taken(const Module& m) {
  std::lock_guard<std::mutex> g(g_mu);
  auto& t = taken_modules();
  auto it = t.find(&m);
  if (it == t.end()) return false;
  auto w = m.weak_from_this();
  // A module held by no shared_ptr has an empty weak pointer: the address alone decides.
  return w.expired() || it->second.lock() == w.lock();
}

using FSDPImpl = XlaFullyShardedDataParallel;

bool is_unit(const Module& m) { return dynamic_cast<const FSDPImpl*>(&m) != nullptr; }

// Calls fn(module, dotted path prefix) for `m` and every module below it that is not
// behind an FSDP unit (units own what is below them).
void walk_unowned(Module& m, const std::string& prefix, const std::function<void(Module&, const std::string&)>& fn) {
  fn(m, prefix);
  for (auto& [name, child] : m.named_children())
    if (!is_unit(*child)) walk_unowned(*child, prefix + name + ".", fn);
}

int64_t unwrapped_numel(Module& m) {
  int64_t n = 0;
  std::unordered_set<const TensorImpl*> seen;
  walk_unowned(m, "", [&](Module& mod, const std::string&) {
    for (auto& [name, t] : mod.named_parameters(false))
      if (seen.insert(t.impl()).second) n += t.numel();
  });
  return n;
}

// Keeps the compiler from merging or moving values across (CSE would merge a unit's
// forward and backward gathers: same op, same operand).
std::vector<Tensor> barrier(std::vector<Tensor> ts) { return optimization_barrier(std::move(ts)); }

// A node that runs `fn(gradient)` when backward reaches the tensor it made, before the
// vjps of the ops that produced that tensor are recorded (a pre-backward hook).
struct PreBackward final : autograd::Node {
  std::function<void(const Tensor&)> fn;
  ops::Tensors apply(ops::Tensors&& grads) override {
    if (fn) std::exchange(fn, nullptr)(grads[0]);
    return std::move(grads);
  }
  std::string name() const override { return "FsdpPreBackward"; }
};

// `y`'s value with PreBackward(fn) between it and its grad_fn.
Tensor with_pre_backward(const Tensor& y, std::function<void(const Tensor&)> fn) {
  if (!y.defined() || !y.requires_grad()) return y;
  auto node = std::make_shared<PreBackward>();
  node->fn = std::move(fn);
  node->next = {autograd::gradient_edge(y)};
  Tensor out = y.detach();
  AutogradMeta& m = out.impl()->meta();
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  m.output_nr = 0;
  return out;
}

std::string flat_name(const std::string& dotted) {
  std::string s = dotted;
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

}  // namespace

ParamRole param_role(const Tensor& p) { return find_role(p).role; }
std::string param_name(const Tensor& p) { return find_role(p).name; }

// ---------------------------------------------------------------- the unit

struct XlaFullyShardedDataParallel::NoSyncGuard::State {
  int no_sync_depth = 0;  ///< live NoSyncGuards covering this unit
};

namespace {
struct FlatParam {
  Tensor shard;                      ///< this rank's slice (registered on the unit)
  std::string shard_name;            ///< its name on the unit
  std::vector<Tensor> fulls;         ///< the wrapped modules' own parameter tensors
  std::vector<std::string> names;    ///< their names below the unit's module
  std::vector<Shape> shapes;
  std::vector<Tensor> placeholders;  ///< what a freed full holds (1 element)
  bool dim0 = false;                 ///< shard_param_on_dim_0 (one full, sharded on dim 0)
  int64_t padded = 0;                ///< flattened: padded numel; dim0: padded dim-0 size
  bool trainable = true;
  /// reshard_after_forward: aliases of the fulls as forward left them (sharing the
  /// LazyTensor autograd saved), repointed at the re-gather when backward arrives.
  std::vector<Tensor> saved;
};
}  // namespace

struct XlaFullyShardedDataParallel::Unit {
  std::vector<FlatParam> params;
  std::shared_ptr<NoSyncGuard::State> state = std::make_shared<NoSyncGuard::State>();
  std::vector<std::pair<Tensor, int64_t>> hooks;  ///< (full, hook id)
  int world = 1;
  int rank = 0;
  bool on_xla = false;
  std::optional<DType> compute;  ///< compute_dtype: the fulls' dtype (the shards keep theirs)

  // The full values of fp gathered from the shards (no autograd); `after`, when defined,
  // passes an optimization barrier with the shard, so the gather runs after it is computed.
  std::vector<Tensor> gather(const FlatParam& fp, const Tensor& after = {}) const {
    Tensor src = fp.shard.detach();
    if (after.defined()) src = barrier({src, after})[0];
    if (compute && src.dtype() != *compute) src = cast(src, *compute);  // gathered in the compute dtype
    // world 1: a copy, so that a full never shares the shard's value.
    const Tensor g = world > 1 ? dist::all_gather(src) : src.clone();
    std::vector<Tensor> out;
    if (fp.dim0) {
      out.push_back(fp.padded > fp.shapes[0][0] ? g.narrow(0, 0, fp.shapes[0][0]) : g);
      return out;
    }
    int64_t off = 0;
    for (const Shape& s : fp.shapes) {
      const int64_t n = shape_numel(s);
      out.push_back(g.narrow(0, off, n).reshape(s));
      off += n;
    }
    return out;
  }

  // The flattened (dim0: row-) padded gradient of fp's fulls, reduce-scattered into the shard's.
  void reduce_grads(FlatParam& fp) const {
    NoGradGuard no_grad;
    Tensor flat;
    if (fp.dim0) {
      flat = fp.fulls[0].grad();
      const int64_t rows = fp.shapes[0][0];
      if (fp.padded > rows) {
        Shape pad = fp.shapes[0];
        pad[0] = fp.padded - rows;
        flat = cat({flat, zeros(pad, {.dtype = flat.dtype(), .device = flat.device()})}, 0);
      }
    } else {
      std::vector<Tensor> parts;
      int64_t n = 0;
      for (const Tensor& f : fp.fulls) {
        parts.push_back(f.grad().reshape({-1}));
        n += f.grad().numel();
      }
      if (fp.padded > n)
        parts.push_back(zeros({fp.padded - n}, {.dtype = parts[0].dtype(), .device = parts[0].device()}));
      flat = parts.size() == 1 ? parts[0] : cat(parts, 0);
    }
    // compute_dtype: the gradient reduced in the shard's dtype (float32), as torch_xla's fp32_reduce_scatter.
    if (flat.dtype() != fp.shard.dtype()) flat = cast(flat, fp.shard.dtype());
    const Tensor g = world > 1 ? dist::reduce_scatter(flat, dist::ReduceOp::Mean) : flat.clone();
    fp.shard.set_grad(fp.shard.grad().defined() ? add(fp.shard.grad(), g) : g);
    for (size_t i = 0; i < fp.fulls.size(); ++i) {
      fp.fulls[i].set_grad(Tensor());
      rebind_data(fp.fulls[i], fp.placeholders[i]);
    }
  }

  void free_fulls(FlatParam& fp) const {
    for (size_t i = 0; i < fp.fulls.size(); ++i) rebind_data(fp.fulls[i], fp.placeholders[i]);
  }
};

XlaFullyShardedDataParallel::XlaFullyShardedDataParallel(ModulePtr module, XlaFullyShardedDataParallelOptions o)
    : module_(std::move(module)), opts_(std::move(o)), unit_(std::make_shared<Unit>()) {
  const char* me = "[XlaFullyShardedDataParallel]";
  AXLE_CHECK(module_ != nullptr, me, " expected a module, got a null pointer");
  AXLE_CHECK(!is_unit(*module_) && forward_wrapper(*module_) == nullptr, me, " cannot wrap a module (",
             module_->name(), ") that is already wrapped with FSDP: wrap each module once");
  walk_unowned(*module_, "", [&](Module& m, const std::string& path) {
    AXLE_CHECK(!is_taken(m), me, " cannot wrap this ", module_->name(), ": its module '",
               path.empty() ? std::string("(itself)") : path.substr(0, path.size() - 1), "' (", m.name(),
               ") is already wrapped with FSDP (its parameters belong to another unit); wrap each module once");
  });
  AXLE_CHECK(opts_.shard_size_multiple >= 1, me, " expected shard_size_multiple >= 1, got ", opts_.shard_size_multiple);
  AXLE_CHECK(!(opts_.flatten_parameters && opts_.shard_param_on_dim_0), me,
             " flatten_parameters and shard_param_on_dim_0 exclude each other (dim-0 sharding keeps each parameter's shape)");
  for (const auto& [what, d] : {std::pair{"compute_dtype", opts_.compute_dtype}, {"buffer_dtype", opts_.buffer_dtype}})
    AXLE_CHECK(!d || *d == kFloat32 || *d == kBFloat16, me, " expected ", what, " float32 or bfloat16, got ", *d);
  if (!opts_.buffer_dtype) opts_.buffer_dtype = opts_.compute_dtype;  // torch_xla: buffers default to compute_dtype
  Unit& u = *unit_;
  u.world = runtime::world_size();
  u.rank = runtime::global_ordinal();
  u.compute = opts_.compute_dtype;
  register_module("_fsdp_wrapped_module", module_);
  training_ = module_->is_training();

  // Auto-wrap: children first, each picked child replaced in its parent by its own unit.
  if (opts_.auto_wrap_policy) {
    XlaFullyShardedDataParallelOptions inner = opts_;
    inner.auto_wrap_policy = nullptr;
    inner.auto_wrapper_callable = nullptr;
    std::function<void(Module&)> wrap_children = [&](Module& m) {
      for (auto& [name, child] : m.named_children()) {
        if (is_unit(*child)) continue;
        if (opts_.auto_wrap_policy(*child, true, unwrapped_numel(*child))) wrap_children(*child);
        const int64_t n = unwrapped_numel(*child);
        if (n == 0 || !opts_.auto_wrap_policy(*child, false, n)) continue;
        ModulePtr w = opts_.auto_wrapper_callable ? opts_.auto_wrapper_callable(child)
                                                  : std::make_shared<XlaFullyShardedDataParallel>(child, inner);
        AXLE_CHECK(w != nullptr, me, " auto_wrapper_callable returned a null module for '", name, "'");
        replace_child(m, name, w);
      }
    };
    wrap_children(*module_);
  }

  // The parameters this unit takes: those not behind an inner unit (a tied one once).
  struct Taken {
    Tensor t;
    std::string name;
    std::vector<std::pair<Module*, std::string>> owners;  ///< (module, its local name)
  };
  std::vector<Taken> taken;
  std::unordered_map<const TensorImpl*, size_t> index;
  walk_unowned(*module_, "", [&](Module& m, const std::string& prefix) {
    for (auto& [name, t] : m.named_parameters(false)) {
      auto [it, fresh] = index.emplace(t.impl(), taken.size());
      if (fresh) taken.push_back({t, prefix + name, {}});
      taken[it->second].owners.emplace_back(&m, name);
    }
  });
  for (const Taken& tk : taken) {
    AXLE_CHECK((tk.t.dtype() == kFloat32 || tk.t.dtype() == kBFloat16) && tk.t.dtype() == taken[0].t.dtype(), me,
               " expected float32 or bfloat16 parameters of one dtype (", taken[0].t.dtype(), " for '", taken[0].name,
               "'), got ", tk.t.dtype(), " for '", tk.name, "'");
    AXLE_CHECK(tk.t.device() == taken[0].t.device(), me, " every parameter must be on one device: '", taken[0].name,
               "' is on ", taken[0].t.device(), ", '", tk.name, "' on ", tk.t.device());
  }

  // Group: one FlatParam per parameter, or (flatten_parameters) trainable / frozen.
  if (opts_.flatten_parameters) {
    for (bool trainable : {true, false}) {
      FlatParam fp;
      fp.trainable = trainable;
      fp.shard_name = trainable ? "_fsdp_flat_param" : "_fsdp_flat_param_frozen";
      for (const Taken& tk : taken)
        if (tk.t.requires_grad() == trainable) {
          fp.fulls.push_back(tk.t);
          fp.names.push_back(tk.name);
        }
      if (!fp.fulls.empty()) u.params.push_back(std::move(fp));
    }
  } else {
    for (const Taken& tk : taken) {
      FlatParam fp;
      fp.trainable = tk.t.requires_grad();
      fp.shard_name = "_fsdp_shard_" + flat_name(tk.name);
      fp.fulls = {tk.t};
      fp.names = {tk.name};
      fp.dim0 = opts_.shard_param_on_dim_0 && tk.t.dim() >= 1;
      u.params.push_back(std::move(fp));
    }
  }

  // Shard: flatten (or keep dim 0), pad to a multiple of world (* shard_size_multiple),
  // keep slice `rank`. Every rank starts from rank 0's values (as DDP).
  {
    NoGradGuard no_grad;
    for (FlatParam& fp : u.params) {
      const Device dev = fp.fulls[0].device();
      u.on_xla = u.on_xla || dev.is_xla();
      for (const Tensor& f : fp.fulls) fp.shapes.push_back(f.shape());
      Tensor whole;
      int64_t local = 0;
      if (fp.dim0) {
        const int64_t rows = fp.shapes[0][0];
        local = (rows + u.world - 1) / u.world;
        fp.padded = local * u.world;
        whole = fp.fulls[0].detach();
        if (fp.padded > rows) {
          Shape pad = fp.shapes[0];
          pad[0] = fp.padded - rows;
          whole = cat({whole, zeros(pad, {.device = dev})}, 0);
        }
      } else {
        std::vector<Tensor> parts;
        int64_t n = 0;
        for (const Tensor& f : fp.fulls) {
          parts.push_back(f.detach().reshape({-1}));
          n += f.numel();
        }
        const int64_t m = int64_t(u.world) * opts_.shard_size_multiple;
        fp.padded = (n + m - 1) / m * m;
        if (fp.padded > n) parts.push_back(zeros({fp.padded - n}, {.device = dev}));
        whole = parts.size() == 1 ? parts[0] : cat(parts, 0);
        local = fp.padded / u.world;
      }
      if (u.world > 1) whole = dist::broadcast(whole, 0);
      fp.shard = whole.narrow(0, int64_t(u.rank) * local, local).clone();
      register_parameter(fp.shard_name, fp.shard, fp.trainable);
      set_role(fp.shard, ParamRole::Shard, fp.shard_name);
      for (size_t i = 0; i < fp.fulls.size(); ++i) {
        fp.placeholders.push_back(zeros({1}, {.device = dev}));
        set_role(fp.fulls[i], ParamRole::Full, fp.names[i]);
      }
    }
    for (const Taken& tk : taken)
      for (auto& [m, name] : tk.owners) {
        unregister_parameter(*m, name);
        mark_taken(*m);
      }
    for (FlatParam& fp : u.params) u.free_fulls(fp);
    if (u.on_xla) axle::sync();  // the shards exist now, not inside the first step's graph
  }

  // buffer_dtype: this unit's floating buffers (inner units cast their own) in that dtype.
  if (opts_.buffer_dtype) {
    NoGradGuard no_grad;
    walk_unowned(*module_, "", [&](Module& m, const std::string&) {
      for (auto& [name, b] : m.named_buffers(false))
        if (b.defined() && is_floating(b.dtype()) && b.dtype() != *opts_.buffer_dtype)
          rebind_data(b, cast(b, *opts_.buffer_dtype));
    });
  }

  // Gradients: reduce-scattered into the shard once every trainable full of fp has one.
  std::weak_ptr<Unit> weak = unit_;
  for (size_t fi = 0; fi < u.params.size(); ++fi) {
    if (!u.params[fi].trainable) continue;
    for (const Tensor& f : u.params[fi].fulls) {
      const int64_t id = autograd::register_post_accumulate_grad_hook(f, [weak, fi](const Tensor&) {
        auto unit = weak.lock();
        if (!unit || unit->state->no_sync_depth > 0) return;  // no_sync: the full gradient accumulates
        FlatParam& fp = unit->params[fi];
        for (const Tensor& g : fp.fulls)
          if (!g.grad().defined()) return;  // flatten_parameters: wait for the others
        unit->reduce_grads(fp);
      });
      u.hooks.emplace_back(f, id);
    }
  }
  set_forward_wrapper(*module_, this);
}

XlaFullyShardedDataParallel::~XlaFullyShardedDataParallel() {
  for (auto& [p, id] : unit_->hooks) autograd::remove_hook(p, id);
  if (module_ && forward_wrapper(*module_) == this) set_forward_wrapper(*module_, nullptr);
}

Tensor XlaFullyShardedDataParallel::forward(const Tensor& x) {
  Unit& u = *unit_;
  const bool grad = grad_enabled();
  {
    NoGradGuard no_grad;
    for (FlatParam& fp : u.params) {
      const std::vector<Tensor> full = u.gather(fp);
      for (size_t i = 0; i < fp.fulls.size(); ++i) rebind_data(fp.fulls[i], full[i]);
    }
  }
  Tensor in = x;
  // compute_dtype: a floating input cast to it (autograd-recorded: its gradient comes back in x's dtype).
  if (u.compute && in.defined() && is_floating(in.dtype()) && in.dtype() != *u.compute) in = cast(in, *u.compute);
  if (opts_.optimization_barrier_in_forward) in = barrier({in})[0];
  Tensor out = module_->forward(in);
  // Backward reads a re-gather; the forward gather dies at its last forward use. (On cpu
  // the saved values keep the gathered storage: nothing to gain.)
  const bool reshard = grad && opts_.reshard_after_forward && u.on_xla && out.requires_grad();
  for (FlatParam& fp : u.params) {
    fp.saved.clear();
    if (reshard)
      for (const Tensor& f : fp.fulls) fp.saved.push_back(f.detach());
    // Trainable fulls are freed by their gradient hook; the rest now.
    if (!grad || !fp.trainable) u.free_fulls(fp);
  }
  if (opts_.optimization_barrier_in_forward) out = barrier({out})[0];
  if (reshard) {
    std::weak_ptr<Unit> weak = unit_;
    const bool with_barrier = opts_.optimization_barrier_in_backward;
    out = with_pre_backward(out, [weak, with_barrier](const Tensor& grad_out) {
      auto unit = weak.lock();
      if (!unit) return;
      NoGradGuard no_grad;
      for (FlatParam& fp : unit->params) {
        if (fp.saved.empty()) continue;
        // The dependency is a scalar of the gradient: a barrier's outputs may outlive it, and
        // the gradient itself must die at its last use.
        const std::vector<Tensor> again =
            unit->gather(fp, with_barrier && grad_out.defined() ? grad_out.sum() : Tensor());
        for (size_t i = 0; i < fp.saved.size(); ++i) lazy::replace_value(fp.saved[i], again[i]);
        fp.saved.clear();
      }
    });
  }
  return out;
}

// ---------------------------------------------------------------- no_sync

XlaFullyShardedDataParallel::NoSyncGuard::NoSyncGuard(std::vector<std::shared_ptr<State>> s) : states_(std::move(s)) {
  for (auto& st : states_) ++st->no_sync_depth;
}
XlaFullyShardedDataParallel::NoSyncGuard::~NoSyncGuard() {
  for (auto& st : states_) --st->no_sync_depth;
}

namespace {
// Every unit of the tree rooted at `root` (root first).
std::vector<const FSDPImpl*> units_of(const FSDPImpl& root) {
  std::vector<const FSDPImpl*> out{&root};
  std::function<void(const Module&)> walk = [&](const Module& m) {
    for (auto& [name, child] : m.named_children()) {
      if (auto* u = dynamic_cast<const FSDPImpl*>(child.get())) out.push_back(u);
      walk(*child);
    }
  };
  walk(root);
  return out;
}
}  // namespace

XlaFullyShardedDataParallel::NoSyncGuard XlaFullyShardedDataParallel::no_sync() {
  std::vector<std::shared_ptr<NoSyncGuard::State>> states;
  for (const FSDPImpl* u : units_of(*this)) states.push_back(u->unit_->state);
  return NoSyncGuard(std::move(states));
}

// ---------------------------------------------------------------- clip_grad_norm_

Tensor XlaFullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  const char* me = "[XlaFullyShardedDataParallel::clip_grad_norm_]";
  AXLE_CHECK(max_norm >= 0, me, " expected max_norm >= 0, got ", max_norm);
  AXLE_CHECK(norm_type > 0, me, " expected norm_type > 0 (or infinity), got ", norm_type);
  std::vector<Tensor> with_grad;
  for (const Tensor& p : parameters())
    if (p.grad().defined()) with_grad.push_back(p);
  const bool inf = std::isinf(norm_type);
  NoGradGuard no_grad;
  const Device dev = with_grad.empty() ? (parameters().empty() ? Device(kCPU) : parameters()[0].device())
                                       : with_grad[0].device();
  // Padding holds zero gradients, so the shards' norms combine into the unsharded norm.
  Tensor local = zeros({}, {.device = dev});
  for (const Tensor& p : with_grad) {
    const Tensor a = abs(p.grad());
    local = inf ? maximum(local, max(a)) : add(local, pow(a, norm_type).sum());
  }
  Tensor total = local;
  if (unit_->world > 1) total = dist::all_reduce(local, inf ? dist::ReduceOp::Max : dist::ReduceOp::Sum);
  if (!inf) total = pow(total, 1.0 / norm_type);
  const Tensor coef = clamp(div(full_like(total, max_norm), add(total, 1e-6)), -1.0, 1.0);
  for (Tensor& p : with_grad) p.set_grad(mul(p.grad(), coef));
  return total;
}

// ---------------------------------------------------------------- metadata

ShardMetadata XlaFullyShardedDataParallel::get_shard_metadata() const {
  ShardMetadata md;
  md.world_size = unit_->world;
  md.rank = unit_->rank;
  // wp: the state_dict prefix in the wrapped tree; up: the same module's prefix unwrapped.
  std::function<void(const FSDPImpl&, const std::string&, const std::string&)> unit;
  std::function<void(const Module&, const std::string&, const std::string&)> walk = [&](const Module& m,
                                                                                       const std::string& wp,
                                                                                       const std::string& up) {
    for (auto& [n, b] : m.named_buffers(false)) md.buffer_names.push_back(up + n);
    for (auto& [c, child] : m.named_children()) {
      if (auto* f = dynamic_cast<const FSDPImpl*>(child.get())) unit(*f, wp + c + ".", up + c + ".");
      else walk(*child, wp + c + ".", up + c + ".");
    }
  };
  unit = [&](const FSDPImpl& f, const std::string& wp, const std::string& up) {
    for (const FlatParam& fp : f.unit_->params) {
      ShardMetadata::Param p;
      p.shard_name = wp + fp.shard_name;
      for (const std::string& n : fp.names) p.names.push_back(up + n);
      p.shapes = fp.shapes;
      p.dim0 = fp.dim0;
      p.padded_numel = fp.padded;
      md.params.push_back(std::move(p));
    }
    walk(*f.module_, wp + "_fsdp_wrapped_module.", up);
  };
  unit(*this, "", "");
  return md;
}

// ---------------------------------------------------------------- policies

AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params) {
  return [min_num_params](nn::Module&, bool recurse, int64_t unwrapped_params) {
    return recurse || unwrapped_params >= min_num_params;
  };
}

AutoWrapPolicy transformer_auto_wrap_policy(std::set<std::string> layer_names) {
  return [names = std::move(layer_names)](nn::Module& m, bool recurse, int64_t) {
    return recurse || names.count(m.name()) > 0;
  };
}

}  // namespace axle::fsdp
