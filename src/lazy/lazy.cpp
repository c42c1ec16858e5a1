// Lazy tensors: recording, the live-tensor registry, transfers, and sync().
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "backend/backend.h"
#include "compiler/disk_cache.h"
#include "dist/dist_internal.h"
#include "lazy/graph.h"
#include "lazy/ir.h"

namespace axle::lazy {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<LazyTensor>> pending;  ///< tensors created with IR since the last sync
  size_t prune_at = 4096;  ///< a program that never syncs (eager mode, value reads) is pruned here
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// The in-memory compilation cache: least recently used graphs are evicted beyond
// AXLE_CACHE_SIZE entries (default 1024).
struct Cache {
  using Entry = std::pair<uint64_t, backend::ExecutablePtr>;
  std::mutex mu;
  std::list<Entry> lru;  ///< most recent first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> map;
  size_t capacity = [] {
    const char* v = std::getenv("AXLE_CACHE_SIZE");
    long n = v ? std::atol(v) : 0;
    return n > 0 ? size_t(n) : size_t(1024);
  }();

  backend::ExecutablePtr get(uint64_t h) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(h);
    if (it == map.end()) return nullptr;
    lru.splice(lru.begin(), lru, it->second);
    return it->second->second;
  }
  void put(uint64_t h, backend::ExecutablePtr ex) {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = map.find(h); it != map.end()) lru.erase(it->second);
    lru.emplace_front(h, std::move(ex));
    map[h] = lru.begin();
    while (lru.size() > capacity) {
      map.erase(lru.back().first);
      lru.pop_back();
    }
  }
};
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

thread_local TraceContext* g_context = nullptr;

// Handles to the hot counters and timers (a lookup by name costs a lock).
struct Stats {
  metrics::Counter& create = metrics::counter("CreateXlaTensor");
  metrics::Counter& destroy = metrics::counter("DestroyXlaTensor");
  metrics::Counter& mark_step = metrics::counter("MarkStep");
  metrics::Counter& cached = metrics::counter("CachedCompile");
  metrics::Counter& uncached = metrics::counter("UncachedCompile");
  metrics::Timer& compile = metrics::timer("CompileTime");
  metrics::Timer& execute = metrics::timer("ExecuteTime");
  metrics::Timer& eager_compile = metrics::timer("EagerOpCompileTime");
  metrics::Timer& eager_execute = metrics::timer("EagerOpExecuteTime");
  metrics::Timer& to_device = metrics::timer("TransferToDeviceTime");
  metrics::Timer& trace = metrics::timer("TraceTime");
  metrics::Timer& graph_cut = metrics::timer("GraphCutTime");  // build, hash, cache lookup
  metrics::Timer& from_device = metrics::timer("TransferFromDeviceTime");
};
Stats& stats() {
  static Stats* s = new Stats();
  return *s;
}
std::atomic<bool> g_eager{false};

Tensor make_xla(const Shape& shape, DType dtype, Device dev, std::shared_ptr<LazyTensor> lt) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->device = dev;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->refresh();
  impl->lazy = std::move(lt);
  return Tensor(std::move(impl));
}

NodePtr data_node_for(const std::shared_ptr<LazyTensor>& lt, const Shape& shape, DType dtype) {
  if (!lt->data_node) {
    auto n = std::make_shared<Node>();
    n->kind = NodeKind::Data;
    n->outs = {{shape, dtype}};
    n->data = lt->buffer;
    n->owner = lt;
    n->has_owner = true;
    n->label = lt->label;
    lt->data_node = std::move(n);
  }
  return lt->data_node;
}

Value value_of(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* ti = t.impl();
  if (ti->device.is_cpu()) {
    // A 0-d cpu scalar: 0 and +-1 are constants; any other value is a graph input,
    // so a changing learning rate does not change the graph.
    double v = t.item();
    auto n = std::make_shared<Node>();
    n->outs = {{{}, ti->dtype}};
    if (v == 0.0 || v == 1.0 || v == -1.0) {
      n->kind = NodeKind::Constant;
      n->scalar = v;
    } else {
      n->kind = NodeKind::Data;
      n->data = t.contiguous();
      n->label = "a cpu scalar made a graph input, e.g. a learning rate";
    }
    return {n, 0};
  }
  if (ti->lazy->ir) return ti->lazy->ir;
  return {data_node_for(ti->lazy, ti->shape, ti->dtype), 0};
}

void track(const std::shared_ptr<LazyTensor>& lt) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (r.pending.size() >= r.prune_at) {
    // Drop dead and already materialised tensors, so the list stays proportional to live work.
    std::erase_if(r.pending, [](const std::weak_ptr<LazyTensor>& w) {
      auto l = w.lock();
      return !l || !l->ir;
    });
    r.prune_at = std::max<size_t>(4096, 2 * r.pending.size());
  }
  r.pending.push_back(lt);
}

// Runs the graph for `targets` and stores each result in its LazyTensor.
// --- AXLE_DEBUG / AXLE_SAVE_GRAPHS: explain and save each uncached compile.
struct Summary {
  std::vector<std::string> inputs, labels, nodes;
};
std::string meta_str(const ops::Meta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }
Summary summarize(const Graph& g) {
  Summary s;
  for (int i : g.inputs) {
    const Node* n = g.nodes[size_t(i)];
    s.inputs.push_back(meta_str(n->outs[0]));
    s.labels.push_back(!n->label.empty() ? n->label : n->has_owner ? "device data computed earlier" : "");
  }
  for (const Node* n : g.nodes) {
    if (n->kind != NodeKind::Op) continue;
    std::string d = ops::op_name(n->op);
    for (const auto& m : n->outs) d += " " + meta_str(m);
    s.nodes.push_back(d);
  }
  return s;
}
constexpr size_t kExplainLines = 8;  // changed inputs listed before "... and N more"
std::string join_capped(const std::vector<std::string>& lines, const char* what) {
  if (lines.size() == 1) return lines[0];
  std::string out = std::to_string(lines.size()) + " " + what + " changed:";
  for (size_t i = 0; i < lines.size() && i < kExplainLines; ++i) out += "\n  " + lines[i];
  if (lines.size() > kExplainLines) out += "\n  ... and " + std::to_string(lines.size() - kExplainLines) + " more";
  return out;
}
// Every changed input, named by what it is; failing that, the first op that differs.
std::string explain_difference(const Summary& prev, const Summary& cur) {
  std::vector<std::string> changed;
  for (size_t i = 0; i < std::min(prev.inputs.size(), cur.inputs.size()); ++i)
    if (prev.inputs[i] != cur.inputs[i]) {
      const std::string& label = cur.labels[i].empty() ? prev.labels[i] : cur.labels[i];
      changed.push_back("input " + std::to_string(i) + (label.empty() ? "" : " (" + label + ")") + " changed from " +
                        prev.inputs[i] + " to " + cur.inputs[i]);
    }
  if (prev.inputs.size() != cur.inputs.size())
    changed.push_back("number of inputs changed from " + std::to_string(prev.inputs.size()) + " to " +
                      std::to_string(cur.inputs.size()));
  if (!changed.empty()) return join_capped(changed, "inputs");
  for (size_t i = 0; i < std::min(prev.nodes.size(), cur.nodes.size()); ++i)
    if (prev.nodes[i] != cur.nodes[i]) return "op " + std::to_string(i) + " changed from " + prev.nodes[i] + " to " + cur.nodes[i];
  if (prev.nodes.size() != cur.nodes.size())
    return "number of ops changed from " + std::to_string(prev.nodes.size()) + " to " + std::to_string(cur.nodes.size());
  return "same structure, different attributes or constants";
}
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}
std::mutex& debug_mu() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::map<std::string, Summary>& last_summary() {
  static auto* m = new std::map<std::string, Summary>();
  return *m;
}
std::string& last_explanation_text() {  // guarded by debug_mu()
  static auto* s = new std::string();
  return *s;
}
void on_uncached_compile(const Graph& g, const std::string& name, const char* cause) {
  std::lock_guard<std::mutex> lock(debug_mu());
  auto& last = last_summary();
  Summary cur = summarize(g);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(g.hash));
  std::string why = "first graph of this name";
  if (auto it = last.find(name); it != last.end()) why = explain_difference(it->second, cur);
  last_explanation_text() = why;
  if (env_flag("AXLE_DEBUG")) {
    std::fprintf(stderr, "[axle] compile graph '%s' %s (cause: %s; %zu ops, %zu inputs): %s\n", name.c_str(), hash,
                 cause, cur.nodes.size(), cur.inputs.size(), why.c_str());
  }
  if (const char* dir = std::getenv("AXLE_SAVE_GRAPHS"); dir && *dir) {
    std::filesystem::create_directories(dir);
    // The program's text before and after each pass is saved by compiler::PassPipeline::run.
    std::ofstream(std::string(dir) + "/" + name + "-" + hash + ".dot") << g.dot(name);
  }
  last[name] = std::move(cur);
}

// `donate`: a full sync, after which no IR survives; buffers of tensors that no
// longer exist are handed to the executable, which may overwrite them.
void execute(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause, const std::string& name,
             bool donate = false) {
  if (targets.empty()) return;
  std::optional<metrics::ScopedTimer> cut(std::in_place, stats().graph_cut);
  // One root per distinct value; several tensors may share a value.
  std::vector<Value> roots;
  std::unordered_map<const Node*, std::vector<std::pair<int, size_t>>> root_of;
  std::vector<size_t> which(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    const Value& v = targets[t]->ir;
    auto& slots = root_of[v.node.get()];
    size_t r = roots.size();
    for (auto [idx, k] : slots)
      if (idx == v.index) r = k;
    if (r == roots.size()) {
      slots.push_back({v.index, r});
      roots.push_back(v);
    }
    which[t] = r;
  }
  Graph g = build_graph(roots);
  const bool eager = std::string_view(cause) == "eager op";
  TraceContext* ctx = current_context();
  if (ctx && ctx->on_graph) {
    // The explanation costs a walk over the graph: made only when a limit is hit.
    ctx->on_graph(g.hash, [&] {
      std::lock_guard<std::mutex> lock(debug_mu());
      auto it = last_summary().find(name);
      return it == last_summary().end() ? std::string("first graph") : explain_difference(it->second, summarize(g));
    });
  }
  const Device dev{DeviceType::XLA, 0};  // the lazy device (one per process today)
  backend::Backend& be = backend::backend_for(dev);
  backend::ExecutablePtr ex = cache().get(g.hash);
  // A compile()d function's graphs are also counted under its name ("CachedCompile::train_step").
  const bool named = ctx != nullptr;
  if (ex) {
    stats().cached.add();
    if (named) metrics::counter_add("CachedCompile::" + name);
  }
  cut.reset();
  if (!ex) {
    metrics::ScopedTimer t(eager ? stats().eager_compile : stats().compile);
    const std::string dir = compiler::disk_cache_dir();
    std::optional<compiler::Program> stored;
    if (!dir.empty()) {
      stored = compiler::disk_cache_load(dir, g.hash);
      metrics::counter_add(stored ? "PersistentCacheHit" : "PersistentCacheMiss");
    }
    if (stored) {
      ex = be.lower(*stored, dev);
    } else {
      compiler::Program p = compiler::Program::from_graph(g, name);
      be.pipeline().run(p);
      ex = be.lower(p, dev);
      if (!dir.empty()) compiler::disk_cache_store(dir, g.hash, p);
      stats().uncached.add();
      if (named) metrics::counter_add("UncachedCompile::" + name);
      on_uncached_compile(g, name, cause);
    }
    cache().put(g.hash, ex);
  }
  std::vector<Tensor> inputs;
  inputs.reserve(g.inputs.size());
  for (int i : g.inputs) {
    Node* n = g.nodes[size_t(i)];
    if (donate && n->has_owner && n->owner.expired()) inputs.push_back(std::move(n->data));
    else inputs.push_back(n->data);
  }
  std::vector<Tensor> results;
  {
    metrics::ScopedTimer t(eager ? stats().eager_execute : stats().execute);
    results = be.run(*ex, std::move(inputs));
  }
  if (ops::checking_numerics()) [[unlikely]]
    for (size_t r = 0; r < roots.size(); ++r) {
      const Node* n = roots[r].node.get();
      ops::check_finite(results[r], "graph '" + name + "' output " + std::to_string(r) + " (op '" +
                                        (n->kind == NodeKind::Op ? ops::op_name(n->op) : "data") + "')");
    }
  for (size_t t = 0; t < targets.size(); ++t) {
    targets[t]->buffer = results[which[t]];
    targets[t]->ir = {};
    targets[t]->data_node.reset();
  }
}

}  // namespace

LazyTensor::~LazyTensor() { stats().destroy.add(); }

ops::Tensors record(ops::OpKind k, const ops::Tensors& in, const ops::Attrs& a, const std::vector<ops::Meta>& metas,
                    Device dev) {
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::Op;
  n->op = k;
  n->attrs = a;
  n->outs = metas;
  n->operands.reserve(in.size());
  for (const Tensor& t : in) n->operands.push_back(value_of(t));
  ops::Tensors out;
  out.reserve(metas.size());
  for (size_t j = 0; j < metas.size(); ++j) {
    auto lt = std::make_shared<LazyTensor>();
    lt->ir = {n, int(j)};
    track(lt);
    out.push_back(make_xla(metas[j].shape, metas[j].dtype, dev, std::move(lt)));
  }
  stats().create.add(int64_t(metas.size()));
  return out;
}

Tensor to_device(const Tensor& t, Device dev) {
  metrics::ScopedTimer timer(stats().to_device);
  auto lt = std::make_shared<LazyTensor>();
  lt->buffer = backend::backend_for(dev).to_device(t, dev);
  lt->label = "copied from cpu with .to()";
  lt->label_rank = kLabelOrigin;
  stats().create.add();
  return make_xla(t.shape(), t.dtype(), dev, std::move(lt));
}

void set_label(const Tensor& t, const std::string& label, LabelRank rank) {
  if (!t.defined() || !t.device().is_xla()) return;
  LazyTensor& lt = *t.impl()->lazy;
  if (lt.label_rank > rank) return;
  lt.label = label;
  lt.label_rank = rank;
  if (lt.data_node) lt.data_node->label = label;
}

std::string label_of(const Tensor& t) {
  return t.defined() && t.device().is_xla() ? t.impl()->lazy->label : std::string();
}

std::string last_explanation() {
  std::lock_guard<std::mutex> lock(debug_mu());
  return last_explanation_text();
}

TraceContext* current_context() { return g_context; }
void set_current_context(TraceContext* c) { g_context = c; }

Tensor to_cpu(const Tensor& t, const char* reason) {
  auto lt = t.impl()->lazy;
  if (lt->ir) {
    TraceContext* ctx = current_context();
    AXLE_CHECK(!ctx || !ctx->full_graph, "[", reason, "] reads a value inside compiled function '", ctx->name,
               "' (full_graph=true), which would split its graph; return the tensor from the function and read "
               "it after the call, or compile with full_graph=false");
    execute({lt}, "value read", ctx ? ctx->name : "step");
  }
  metrics::ScopedTimer timer(stats().from_device);
  return backend::backend_for(t.device()).to_host(lt->buffer);
}

bool sync_all(const char* cause) {
  std::vector<std::shared_ptr<LazyTensor>> targets;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    for (auto& w : r.pending)
      if (auto lt = w.lock(); lt && lt->ir) targets.push_back(std::move(lt));
    r.pending.clear();
  }
  if (targets.empty()) return false;
  TraceContext* ctx = current_context();
  try {
    execute(targets, cause, ctx ? ctx->name : "step", /*donate=*/true);
  } catch (...) {
    // Nothing ran: keep the tensors pending so a later sync still sees them.
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    for (auto& lt : targets) r.pending.push_back(lt);
    throw;
  }
  return true;
}

metrics::Timer& trace_timer() { return stats().trace; }

size_t pending_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.pending.size();
}

void clear_graph_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.lru.clear();
  c.map.clear();
}

bool eager_active() { return g_eager.load(std::memory_order_relaxed) && current_context() == nullptr; }

void run_eagerly(const ops::Tensors& outs) {
  std::vector<std::shared_ptr<LazyTensor>> targets;
  for (const Tensor& t : outs) targets.push_back(t.impl()->lazy);
  execute(targets, "eager op", "eager");
}

}  // namespace axle::lazy

namespace axle {

Device device() {
  dist::detail::note_device_requested();  // launch() refuses a parent that asked (anti-pattern 1)
  return Device{DeviceType::XLA, 0};
}

namespace lazy {
void mark_step(const char* cause) {
  stats().mark_step.add();
  sync_all(cause);
}
}  // namespace lazy
using lazy::mark_step;

void sync() { mark_step("user sync"); }

namespace experimental {
void eager_mode(bool on) { lazy::g_eager.store(on); }
bool is_eager_mode() { return lazy::g_eager.load(); }
}  // namespace experimental

namespace {
thread_local int g_step_depth = 0;
}  // namespace

StepGuard::StepGuard() : uncaught_(std::uncaught_exceptions()) {
  mark_step("step start");
  ++g_step_depth;
}

StepGuard::~StepGuard() noexcept(false) {
  --g_step_depth;
  if (std::uncaught_exceptions() > uncaught_) {
    // Unwinding: still cut the step, but never throw a second exception.
    try { mark_step("step end (unwinding)"); } catch (...) {}
    return;
  }
  mark_step("step end");
}

}  // namespace axle

namespace axle::xm {
void mark_step() {
  AXLE_CHECK(g_step_depth == 0, "[mark_step] called inside an axle::step() scope, which already marks the step "
             "boundary; don't mix xm::mark_step() with axle::step(): use one (axle::step() is preferred)");
  axle::sync();
}
Device xla_device() { return axle::device(); }
}  // namespace axle::xm
