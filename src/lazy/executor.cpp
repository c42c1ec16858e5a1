// The graph executor: cuts the pending IR of some tensors into a graph, finds or
// compiles its executable, runs it and writes the results back.
#include <cstdlib>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "compiler/disk_cache.h"
#include "compiler/executable.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
namespace {
using namespace detail;

// The in-memory compilation cache: least recently used graphs are evicted beyond
// AXLE_CACHE_SIZE entries (default 1024).
struct Cache {
  using Entry = std::pair<uint64_t, std::shared_ptr<const compiler::Executable>>;
  std::mutex mu;
  std::list<Entry> lru;  ///< most recent first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> map;
  size_t capacity = [] {
    const char* v = std::getenv("AXLE_CACHE_SIZE");
    long n = v ? std::atol(v) : 0;
    return n > 0 ? size_t(n) : size_t(1024);
  }();

  std::shared_ptr<const compiler::Executable> get(uint64_t h) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(h);
    if (it == map.end()) return nullptr;
    lru.splice(lru.begin(), lru, it->second);
    return it->second->second;
  }
  void put(uint64_t h, std::shared_ptr<const compiler::Executable> ex) {
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

void execute(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause, const std::string& name,
             bool donate) {
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
  std::shared_ptr<const compiler::Executable> ex = cache().get(g.hash);
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
      ex = compiler::lower(*stored);
    } else {
      compiler::Program p = compiler::Program::from_graph(g);
      compiler::PassPipeline::standard().run(p);
      ex = compiler::lower(p);
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
    results = ex->run(std::move(inputs));
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

}  // namespace detail
using namespace detail;

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

void clear_graph_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.lru.clear();
  c.map.clear();
}

}  // namespace axle::lazy
