// The graph executor: cuts the pending IR of some tensors into a graph, finds or
// compiles its executable, runs it and writes the results back.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "compiler/disk_cache.h"
#include "backend/backend.h"
#include "dist/spmd_mode.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
namespace {
using namespace detail;

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


}  // namespace

namespace detail {

// ---- Phase 1: collect roots. One root per distinct value; several tensors may share one.
Roots collect_roots(const std::vector<std::shared_ptr<LazyTensor>>& targets) {
  Roots r;
  std::unordered_map<const Node*, std::vector<std::pair<int, size_t>>> root_of;
  r.which.resize(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    const Value& v = targets[t]->ir;
    auto& slots = root_of[v.node.get()];
    size_t k = r.values.size();
    for (auto [idx, j] : slots)
      if (idx == v.index) k = j;
    if (k == r.values.size()) {
      slots.push_back({v.index, k});
      r.values.push_back(v);
    }
    r.which[t] = k;
  }
  return r;
}

// ---- Phase 2: cut + hash (build_graph: the nodes' hashes were made at record time).
// ---- Phase 3: cache lookup; a compile()d function may refuse a new graph here.
backend::ExecutablePtr lookup(const Graph& g, const std::string& name, TraceContext* ctx) {
  if (ctx && ctx->on_graph) {
    // The explanation costs a walk over the graph: made only when a limit is hit.
    ctx->on_graph(g.hash, [&] {
      std::lock_guard<std::mutex> lock(debug_mu());
      auto it = last_summary().find(name);
      return it == last_summary().end() ? std::string("first graph") : explain_difference(it->second, summarize(g));
    });
  }
  backend::ExecutablePtr ex = cache().get(g.hash);
  // A compile()d function's graphs are also counted under its name ("CachedCompile::train_step").
  if (ex) {
    stats().cached.add();
    if (ctx) metrics::counter_add("CachedCompile::" + name);
  }
  return ex;
}

// ---- Phase 4: compile (from the disk cache if it has the graph), and cache the result.
backend::ExecutablePtr compile(const Graph& g, const std::string& name, const char* cause,
                                                    bool eager, bool named) {
  metrics::ScopedTimer t(eager ? stats().eager_compile : stats().compile);
  backend::ExecutablePtr ex;
  const std::string dir = compiler::disk_cache_dir();
  std::optional<compiler::Program> stored;
  const Device dev{DeviceType::XLA, 0};  // the lazy device (one per process today)
  backend::Backend& be = backend::backend_for(dev);
  const uint64_t disk_key = dir.empty() ? 0 : compiler::disk_cache_key(g.hash, be.cache_tag());
  if (!dir.empty()) {
    stored = compiler::disk_cache_load(dir, disk_key);
    metrics::counter_add(stored ? "PersistentCacheHit" : "PersistentCacheMiss");
  }
  if (stored) {
    ex = be.lower(*stored, dev);
  } else {
    compiler::Program p = to_program(g, name);
    be.pipeline().run(p);
    ex = be.lower(p, dev);
    if (!dir.empty()) compiler::disk_cache_store(dir, disk_key, p);
    stats().uncached.add();
    if (named) metrics::counter_add("UncachedCompile::" + name);
    on_uncached_compile(g, name, cause);
  }
  cache().put(g.hash, ex);
  return ex;
}

// ---- Phase 5: execute. `donate`: a full sync, after which no IR survives; buffers of
// tensors that no longer exist are handed to the executable, which may overwrite them.
Job make_job(const Graph& g, const Roots& roots, backend::ExecutablePtr ex,
             const std::string& name, bool eager, bool donate) {
  Job job;
  job.ex = std::move(ex);
  job.name = name;
  job.eager = eager;
  job.inputs.reserve(g.inputs.size());
  job.pending.resize(g.inputs.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    Node* n = g.nodes[size_t(g.inputs[i])];
    AXLE_CHECK(n->shards.empty(), "[execute] input ", i, (n->label.empty() ? "" : " (" + n->label + ")"),
               " is SPMD data (one shard per device) but SPMD is off; compute it under SPMD or read it with .cpu()");
    const bool give = donate && n->has_owner && n->owner.expired();
    if (n->pending) job.pending[i] = give ? std::move(n->pending) : n->pending;
    job.inputs.push_back(give ? std::move(n->data) : n->data);
  }
  if (ops::checking_numerics()) [[unlikely]]
    for (const Value& v : roots.values)
      job.root_ops.push_back(v.node->kind == NodeKind::Op ? ops::op_name(v.node->op) : "data");
  return job;
}

std::vector<Tensor> run_job(Job& job) {
  for (size_t i = 0; i < job.pending.size(); ++i) {
    std::shared_ptr<PendingBuffer>& pb = job.pending[i];
    if (!pb) continue;
    // Its producer was dispatched earlier: on the device thread it has already run.
    Execution& e = *pb->producer;
    e.wait();
    if (e.error) {
      try {
        std::rethrow_exception(e.error);
      } catch (const std::exception& err) {
        AXLE_CHECK(false, "[execute] graph '", job.name, "' not run: its input ", i, " comes from graph ", e.graph,
                   ", which failed: ", err.what());
      }
    }
    // Only this execution holds the buffer: hand it over, so it may be donated. (The
    // fence orders the move after the last other holder's release of its reference.)
    if (pb.use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      job.inputs[i] = std::move(pb->value);
    } else {
      job.inputs[i] = pb->value;
    }
    pb.reset();
  }
  if (const auto& hook = execute_hook()) [[unlikely]]
    hook(job.name);
  std::vector<Tensor> results;
  {
    metrics::ScopedTimer t(job.eager ? stats().eager_execute : stats().execute);
    results = backend::backend_for(job.ex->device()).run(*job.ex, std::move(job.inputs));
  }
  for (size_t r = 0; r < job.root_ops.size(); ++r)
    ops::check_finite(results[r], "graph '" + job.name + "' output " + std::to_string(r) + " (op '" +
                                      job.root_ops[r] + "')");
  return results;
}

void execute(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause, const std::string& name,
             bool donate) {
  if (targets.empty()) return;
  if (dist::detail::spmd_mode()) [[unlikely]]
    return execute_spmd(targets, cause, name, donate);
  std::optional<metrics::ScopedTimer> cut(std::in_place, stats().graph_cut);
  Roots roots = collect_roots(targets);
  Graph g = build_graph(roots.values);
  const bool eager = std::string_view(cause) == "eager op";
  TraceContext* ctx = current_context();
  backend::ExecutablePtr ex = lookup(g, name, ctx);
  cut.reset();
  if (!ex) ex = compile(g, name, cause, eager, ctx != nullptr);
  Job job = make_job(g, roots, std::move(ex), name, eager, donate);

  // Graphs with collectives run on the calling thread, as do all graphs in sync mode:
  // a collective never runs beside a host-side one (barrier, rendezvous) on another thread.
  // So do all graphs under AXLE_CHECK_NUMERICS, a debugging mode: its error comes from
  // the sync that ran the graph.
  const bool side_effects = std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node* n) {
    return n->kind == NodeKind::Op && ops::has_side_effects(n->op);
  });
  if (!async_enabled() || side_effects || ops::checking_numerics()) {
    std::vector<Tensor> results = run_job(job);
    // ---- Phase 6: write back.
    for (size_t t = 0; t < targets.size(); ++t) {
      targets[t]->buffer = results[roots.which[t]];
      targets[t]->pending.reset();
      targets[t]->ir = {};
      targets[t]->data_node.reset();
    }
    return;
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(g.hash));
  job.exec = std::make_shared<Execution>();
  job.exec->graph = "'" + name + "' (" + hash + ")";
  job.outs.resize(roots.values.size());
  for (auto& o : job.outs) o = std::make_shared<PendingBuffer>(PendingBuffer{job.exec, Tensor()});
  // ---- Phase 6 (async): the targets point at buffers the device thread will write.
  for (size_t t = 0; t < targets.size(); ++t) {
    targets[t]->pending = job.outs[roots.which[t]];
    targets[t]->buffer = Tensor();
    targets[t]->ir = {};
    targets[t]->data_node.reset();
  }
  dispatch(std::move(job));
}

}  // namespace detail
using namespace detail;

bool sync_all(const char* cause) {
  rethrow_async_error();  // an earlier asynchronous execution failed: say so before tracing on
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

void clear_graph_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.lru.clear();
  c.map.clear();
  clear_spmd_cache();
}

}  // namespace axle::lazy
