// The executor's SPMD path (runtime::is_spmd()): the graph is cut as on one device, its
// inputs' shardings (null: replicated) and output pins join the cache key, the global
// program is partitioned (spmd::partition) into one local program lowered once, and the
// backend runs it replicated (Backend::run_replicated) on the devices' shards. Results are
// written back as one shard per device with the output's sharding.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "axle/xs.h"
#include "dist/local_devices.h"
#include "ops/schema.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
namespace detail {
namespace {

inline void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
}

struct SpmdStats {
  metrics::Counter& execute = metrics::counter("ExecuteReplicated");
  metrics::Timer& execute_time = metrics::timer("ExecuteReplicatedTime");
  metrics::Counter& alias = metrics::counter("InputOutputAliasCount");
  metrics::Counter& replicate = metrics::counter("ReplicateShardedData");
  metrics::Counter& all_reduce = metrics::counter("SpmdAllReduce");
  metrics::Counter& all_gather = metrics::counter("SpmdAllGather");
  metrics::Counter& reduce_scatter = metrics::counter("SpmdReduceScatter");
  metrics::Counter& all_to_all = metrics::counter("SpmdAllToAll");
  metrics::Counter& permute = metrics::counter("SpmdCollectivePermute");
  metrics::Counter& bytes = metrics::counter("SpmdCollectiveBytes");
  metrics::Counter& remat = metrics::counter("SpmdFullRematerialization");
  metrics::Counter& opaque = metrics::counter("SpmdOpaqueOp");
};
SpmdStats& spmd_stats() {
  static SpmdStats* s = new SpmdStats();
  return *s;
}

struct SpmdCache {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<const SpmdProgram>> map;
};
SpmdCache& spmd_cache() {
  static SpmdCache* c = new SpmdCache();
  return *c;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

const spmd::Sharding& replicated() {
  static const spmd::Sharding* r = new spmd::Sharding(spmd::Sharding::replicated());
  return *r;
}

// What one execution needs before the cache is consulted: the graph, its inputs'
// shardings, the outputs' pins and the key.
struct Plan {
  Roots roots;
  Graph g;
  std::vector<spmd::Sharding> inputs;
  std::vector<std::optional<spmd::Sharding>> pins;
  std::vector<bool> updates;  ///< per root: it updates one of the graph's inputs in place
  uint64_t key = 0;
  int devices = 1;
};

Plan make_plan(const std::vector<std::shared_ptr<LazyTensor>>& targets) {
  Plan pl;
  pl.devices = spmd_devices();
  pl.roots = collect_roots(targets);
  pl.g = build_graph(pl.roots.values);
  const Graph& g = pl.g;
  pl.inputs.reserve(g.inputs.size());
  for (int i : g.inputs) {
    const Node* n = g.nodes[size_t(i)];
    pl.inputs.push_back(n->sharding ? *n->sharding : replicated());
  }
  pl.pins.assign(pl.roots.values.size(), std::nullopt);
  pl.updates.assign(pl.roots.values.size(), false);
  for (size_t t = 0; t < targets.size(); ++t) {
    const LazyTensor& lt = *targets[t];
    const size_t r = pl.roots.which[t];
    // An in-place update of split data this graph reads: the output keeps the input's
    // sharding (so a parameter keeps its sharding and its buffer can be donated). A
    // replicated (or unannotated) input's update takes the propagated sharding, as XLA's
    // propagation to outputs: an optimizer's zero state follows its parameter's sharding
    // (FSDP v2's momentum is split like its weight, and the gradient reduce-scattered into
    // it); replicated stays replicated unless the graph splits it. Its own "replicated"
    // (what the last step left) pins nothing either, so the key is the same for an
    // unannotated input and the replicated one a step leaves (no recompile).
    const auto in = lt.updates.lock();
    const bool update =
        in && in->index >= 0 && size_t(in->index) < g.nodes.size() && g.nodes[size_t(in->index)] == in.get();
    const bool split_input = update && in->sharding && !in->sharding->is_replicated();
    pl.updates[r] = pl.updates[r] || update;
    if (lt.sharding && !pl.pins[r] && !(update && !split_input && lt.sharding->is_replicated()))
      pl.pins[r] = *lt.sharding;
    if (split_input && !pl.pins[r]) pl.pins[r] = *in->sharding;
  }
  uint64_t h = g.hash;
  mix(h, 0x53504D44ull);  // "SPMD"
  mix(h, uint64_t(pl.devices));
  for (const spmd::Sharding& s : pl.inputs) mix(h, s.hash());
  for (const auto& p : pl.pins) mix(h, p ? p->hash() : 0x6E6F6E65ull);
  pl.key = h;
  return pl;
}

// Everything replicated and nothing asking otherwise: the local program is the global one.
bool trivially_replicated(const compiler::Program& p, const Plan& pl) {
  for (const spmd::Sharding& s : pl.inputs)
    if (!s.is_replicated()) return false;
  for (const auto& pin : pl.pins)
    if (pin && !pin->is_replicated()) return false;
  for (const compiler::PNode& n : p.nodes) {
    if (n.dead || n.kind != compiler::NodeKind::Op) continue;
    const ops::ShardRule r = ops::shard_rule(n.op);
    // Constraints, collectives and device-reading ops: the partitioner decides.
    if (r == ops::ShardRule::Constraint || r == ops::ShardRule::Collective || r == ops::ShardRule::Device) return false;
  }
  return true;
}

// The global program with every node's sharding (AXLE_SAVE_GRAPHS).
std::string global_text(const compiler::Program& p, const Plan& pl, const spmd::PartitionOptions& o) {
  std::string out = "# global program, " + std::to_string(pl.devices) + " devices; inputs:\n";
  for (size_t i = 0; i < pl.inputs.size(); ++i) out += "#   input " + std::to_string(i) + ": " + pl.inputs[i].str() + "\n";
  std::vector<std::vector<spmd::Sharding>> sh;
  try {
    sh = spmd::propagate(p, pl.inputs, o);
  } catch (const std::exception& e) {
    out += "# propagation failed: " + std::string(e.what()) + "\n";
  }
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (p.nodes[i].dead) continue;
    out += p.node_text(i);
    if (i < sh.size()) {
      out += "    # ";
      for (size_t j = 0; j < sh[i].size(); ++j) out += (j ? ", " : "") + sh[i][j].str();
    }
    out += "\n";
  }
  return out;
}

std::shared_ptr<const SpmdProgram> compile(const Plan& pl, const std::string& name, const char* cause, bool named) {
  metrics::ScopedTimer timer(stats().compile);
  const Device dev{DeviceType::XLA, 0};
  backend::Backend& be = backend::backend_for(dev);
  compiler::Program p = to_program(pl.g, name);
  compiler::PassPipeline::standard().run(p);
  spmd::PartitionOptions o;
  o.output_pins = pl.pins;
  for (int i : pl.g.inputs) o.input_labels.push_back(pl.g.nodes[size_t(i)]->label);
  spmd::Partitioned part;
  if (trivially_replicated(p, pl)) {
    part.local = p;
    part.inputs = pl.inputs;
    part.outputs.assign(p.outputs.size(), replicated());
    part.devices = pl.devices;
  } else {
    part = spmd::partition(p, pl.inputs, o);
  }
  const char* dir = std::getenv("AXLE_SAVE_GRAPHS");
  if (dir && *dir) {
    std::filesystem::create_directories(dir);
    std::ofstream(std::string(dir) + "/" + p.name + ".global.txt") << global_text(p, pl, o);
  }
  part.local.name = p.name + ".local";
  compiler::PassPipeline local;
  be.add_passes(local);
  local.run(part.local);
  if (dir && *dir) {
    std::string text = "# local program (every device runs it); collectives:\n";
    for (const auto& c : part.collectives)
      text += "#   " + c.kind + " " + std::to_string(c.bytes_per_device) + " bytes/device: " + c.value + " " + c.from +
              " -> " + c.to + " (" + c.rule + ")\n";
    std::ofstream(std::string(dir) + "/" + p.name + ".local.txt") << text << part.local.text();
  }
  auto sp = std::make_shared<SpmdProgram>();
  sp->ex = be.lower(part.local, dev);
  sp->table = spmd::explain_table(part, name);
  sp->inputs = std::move(part.inputs);
  sp->outputs = std::move(part.outputs);
  sp->collectives = std::move(part.collectives);
  sp->opaque_ops = std::move(part.opaque_ops);
  sp->warnings = std::move(part.warnings);
  sp->devices = pl.devices;
  stats().uncached.add();
  if (named) metrics::counter_add("UncachedCompile::" + name);
  spmd_stats().opaque.add(int64_t(sp->opaque_ops.size()));
  spmd_stats().remat.add(int64_t(sp->warnings.size()));
  on_uncached_compile(pl.g, name, cause);
  if (env_flag("AXLE_DEBUG")) std::fprintf(stderr, "%s", sp->table.c_str());
  return sp;
}

std::shared_ptr<const SpmdProgram> find_or_compile(const Plan& pl, const std::string& name, const char* cause) {
  TraceContext* ctx = current_context();
  if (ctx && ctx->on_graph) {
    ctx->on_graph(pl.key, [&] {
      std::lock_guard<std::mutex> lock(debug_mu());
      auto it = last_summary().find(name);
      return it == last_summary().end() ? std::string("first graph") : explain_difference(it->second, summarize(pl.g));
    });
  }
  SpmdCache& c = spmd_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.map.find(pl.key); it != c.map.end()) {
      stats().cached.add();
      if (ctx) metrics::counter_add("CachedCompile::" + name);
      return it->second;
    }
  }
  auto sp = compile(pl, name, cause, ctx != nullptr);
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.map.size() >= 1024) c.map.erase(c.map.begin());  // bounded (SPMD programs seldom number this many)
  c.map[pl.key] = sp;
  return sp;
}

// Device d's buffer of data node `n`: its shard, or the unsharded buffer every device reads.
Tensor input_of(Node* n, int d, bool give) {
  if (!n->shards.empty()) return give ? std::move(n->shards[size_t(d)]) : n->shards[size_t(d)];
  if (n->pending) {
    Execution& e = *n->pending->producer;
    e.wait();
    if (e.error) std::rethrow_exception(e.error);
    n->data = n->pending->value;
    n->pending.reset();
  }
  return n->data;
}

}  // namespace

int spmd_devices() { return int(runtime::global_runtime_device_count()); }

void clear_spmd_cache() {
  SpmdCache& c = spmd_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.clear();
}

std::shared_ptr<const SpmdProgram> compile_spmd(const std::vector<std::shared_ptr<LazyTensor>>& targets,
                                                const std::string& name) {
  Plan pl = make_plan(targets);
  return find_or_compile(pl, name, "xs::explain");
}

void execute_spmd(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause, const std::string& name,
                  bool donate) {
  if (async_enabled()) drain();  // data computed before SPMD was turned on
  std::optional<metrics::ScopedTimer> cut(std::in_place, stats().graph_cut);
  Plan pl = make_plan(targets);
  cut.reset();
  std::shared_ptr<const SpmdProgram> sp = find_or_compile(pl, name, cause);
  const int n = pl.devices;
  const Graph& g = pl.g;

  // Per device, its inputs; shards of tensors that no longer exist may be donated.
  std::vector<std::vector<Tensor>> inputs(static_cast<size_t>(n));
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    Node* nd = g.nodes[size_t(g.inputs[i])];
    AXLE_CHECK(nd->shards.empty() || int(nd->shards.size()) == n, "[spmd] input ", i,
               (nd->label.empty() ? "" : " (" + nd->label + ")"), " holds ", nd->shards.size(),
               " shards but this process has ", n, " devices: data made under another device count");
    const bool give = donate && nd->has_owner && nd->owner.expired();
    for (int d = 0; d < n; ++d) inputs[size_t(d)].push_back(input_of(nd, d, give));
  }
  if (const auto& hook = execute_hook()) [[unlikely]]
    hook(name);
  std::vector<std::vector<Tensor>> results;
  backend::Backend& be = backend::backend_for(sp->ex->device());
  {
    metrics::ScopedTimer t(spmd_stats().execute_time);
    results = be.run_replicated(*sp->ex, std::move(inputs));
  }
  SpmdStats& st = spmd_stats();
  st.execute.add();
  int64_t aliased = 0;
  for (bool u : pl.updates) aliased += u;
  st.alias.add(aliased);
  for (const auto& c : sp->collectives) {
    if (c.kind == "all-reduce") st.all_reduce.add();
    else if (c.kind == "all-gather") st.all_gather.add();
    else if (c.kind == "reduce-scatter") st.reduce_scatter.add();
    else if (c.kind == "all-to-all") st.all_to_all.add();
    else if (c.kind == "collective-permute") st.permute.add();
    st.bytes.add(c.bytes_per_device);
  }
  if (ops::checking_numerics()) [[unlikely]]
    for (size_t r = 0; r < pl.roots.values.size(); ++r)
      for (int d = 0; d < n; ++d)
        if (results[size_t(d)].size() > r)  // this host's devices
          ops::check_finite(results[size_t(d)][r], "graph '" + name + "' output " + std::to_string(r) +
                                                       " on device " + std::to_string(d));
  // Write back: one shard per device, and the output's sharding.
  std::vector<std::shared_ptr<const spmd::Sharding>> out_sh(pl.roots.values.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    const size_t r = pl.roots.which[t];
    if (!out_sh[r]) out_sh[r] = std::make_shared<const spmd::Sharding>(sp->outputs[r]);
    LazyTensor& lt = *targets[t];
    lt.shards.resize(size_t(n));
    for (int d = 0; d < n; ++d)  // another host's devices: no shard here
      lt.shards[size_t(d)] = results[size_t(d)].empty() ? Tensor() : results[size_t(d)][r];
    lt.sharding = out_sh[r];
    lt.producer = sp;
    lt.buffer = Tensor();
    lt.pending.reset();
    lt.ir = {};
    lt.data_node.reset();
    lt.updates.reset();
  }
}

spmd::Sharding infer_sharding(const std::shared_ptr<LazyTensor>& lt) {
  Plan pl = make_plan({lt});
  compiler::Program p = to_program(pl.g, "inferred_sharding");
  compiler::PassPipeline::standard().run(p);
  if (trivially_replicated(p, pl)) return replicated();
  spmd::PartitionOptions o;
  o.output_pins = pl.pins;
  std::vector<std::vector<spmd::Sharding>> sh = spmd::propagate(p, pl.inputs, o);
  const compiler::Ref out = p.outputs.at(0);
  return sh.at(size_t(out.node)).at(size_t(out.index));
}

Tensor spmd_to_host(const LazyTensor& lt, const Shape& global) {
  const spmd::Sharding& s = lt.sharding ? *lt.sharding : replicated();
  backend::Backend& be = backend::backend_for(DeviceType::XLA);
  const int n = int(lt.shards.size()), first = dist::first_local_device(n), local = n / dist::host_count();
  if (s.is_replicated()) return be.to_host(lt.shards[size_t(first)]);
  AXLE_CHECK(s.kind != spmd::Sharding::Kind::Manual, "[to_cpu] a manual tensor holds one value per device: read it "
             "with xs::local_shards, or call xs::disable_manual_sharding first");
  spmd_stats().replicate.add();
  std::vector<Tensor> host(static_cast<size_t>(n));
  for (int d = first; d < first + local; ++d) host[size_t(d)] = be.to_host(lt.shards[size_t(d)]).contiguous();
  if (local < n) host = gather_host_shards(std::move(host), first, local);
  return spmd::assemble_host(host, s, global);
}

}  // namespace detail
}  // namespace axle::lazy
