// Internals shared by the lazy runtime's files (tracer, executor, transfers,
// explanations, eager mode, runtime API). Not part of any public API.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "axle/metrics.h"
#include "backend/backend.h"
#include "lazy/graph.h"
#include "lazy/ir.h"
#include "spmd/partition.h"

namespace axle::lazy::detail {

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
Stats& stats();

// tracer.cpp
extern std::atomic<int64_t> g_live_lazy;  ///< LazyTensor states alive now
Tensor make_xla(const Shape& shape, DType dtype, Device dev, std::shared_ptr<LazyTensor> lt);

// explain.cpp
struct Summary {
  std::vector<std::string> inputs, labels, nodes;
  std::vector<std::string> shardings;  ///< per input under SPMD ("{replicated}" when unannotated); else empty
};
Summary summarize(const Graph& g);
std::string explain_difference(const Summary& prev, const Summary& cur);
std::mutex& debug_mu();
std::map<std::string, Summary>& last_summary();
std::string& last_explanation_text();  ///< guarded by debug_mu()
void on_uncached_compile(const Graph& g, const std::string& name, const char* cause);

// executor.cpp
/// One root per distinct value; several tensors may share one.
struct Roots {
  std::vector<Value> values;
  std::vector<size_t> which;  ///< per target, its root
};
Roots collect_roots(const std::vector<std::shared_ptr<LazyTensor>>& targets);
// `donate`: a full sync, after which no IR survives; buffers of tensors that no
// longer exist are handed to the executable, which may overwrite them.
void execute(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause, const std::string& name,
             bool donate = false);

// tracer.cpp: the live-tensor registry
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<LazyTensor>> pending;  ///< tensors created with IR since the last sync
  size_t prune_at = 4096;  ///< a program that never syncs (eager mode, value reads) is pruned here
};
Registry& registry();

// eager.cpp
extern std::atomic<bool> g_eager;

// spmd_exec.cpp: the executor's path under SPMD (runtime::is_spmd()): the graph is
// partitioned for the devices and run on each (Backend::run_replicated).
void execute_spmd(const std::vector<std::shared_ptr<LazyTensor>>& targets, const char* cause,
                  const std::string& name, bool donate);
/// Compiles (or finds in the cache) the SPMD graph of `targets` without running it.
std::shared_ptr<const SpmdProgram> compile_spmd(const std::vector<std::shared_ptr<LazyTensor>>& targets,
                                                const std::string& name);
/// The sharding an SPMD execution of `lt`'s pending graph would give it (propagation
/// only, nothing runs): xs::inferred_sharding.
spmd::Sharding infer_sharding(const std::shared_ptr<LazyTensor>& lt);
/// A materialised SPMD tensor's value on the host (assembles its shards; ReplicateShardedData).
Tensor spmd_to_host(const LazyTensor& lt, const Shape& global);
/// Several hosts: `host` (one entry per global device) holds this host's shards, devices
/// first .. first+local-1, on the host; returns it with every other host's filled in. A
/// collective of every host (each reads the value at the same point of its program).
std::vector<Tensor> gather_host_shards(std::vector<Tensor> host, int first, int local);
/// The devices of this process's SPMD runs (runtime::global_runtime_device_count()).
int spmd_devices();
void clear_spmd_cache();

}  // namespace axle::lazy::detail

namespace axle::lazy {
/// One graph execution handed to the device thread; done once it ran (or failed).
struct Execution {
  std::string graph;  ///< "'step' (hash 0123abcd...)", for errors
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;         ///< guarded by mu
  std::exception_ptr error;  ///< set before done; read after wait()
  void wait();
};
}  // namespace axle::lazy

namespace axle::lazy::detail {

// executor.cpp, phase "execute": what one execution needs, on whichever thread runs it.
struct Job {
  std::shared_ptr<Execution> exec;  ///< null when run inline (sync mode)
  backend::ExecutablePtr ex;
  std::string name;  ///< graph name
  bool eager = false;
  /// Input i is inputs[i], or, when pending[i] is set, that buffer once its producer ran.
  std::vector<Tensor> inputs;
  std::vector<std::shared_ptr<PendingBuffer>> pending;
  std::vector<std::string> root_ops;  ///< per root, for AXLE_CHECK_NUMERICS messages
  std::vector<std::shared_ptr<PendingBuffer>> outs;  ///< async: one per root, written when done
  /// async: what the device thread must take from the tracing thread to compute the same
  /// bits (Backend::thread_settings, captured at dispatch); empty when nothing.
  std::function<void()> thread_settings;
};
/// Runs `job`: resolves its inputs, runs the executable (ExecuteTime), checks numerics.
std::vector<Tensor> run_job(Job& job);

// async.cpp: the device thread. Executions run one at a time in dispatch order, so
// every rank runs its graphs (and their collectives) in the order it traced them.
bool async_enabled();
void set_async(bool on);  ///< waits for dispatched executions first
/// Queues `job` on the device thread (started on first use).
void dispatch(Job job);
/// Waits until every dispatched execution ran (does not throw).
void drain();
/// Throws (once) the first error of an asynchronous execution not yet reported.
void rethrow_async_error();
/// Test hook: called with the graph name on the executing thread before each execution; may throw.
void set_execute_hook(std::function<void(const std::string&)> hook);
const std::function<void(const std::string&)>& execute_hook();

}  // namespace axle::lazy::detail

namespace axle::lazy {
/// A compiled SPMD graph: the local program lowered once for every device, and what the
/// partitioner said about it (collectives, opaque ops, warnings).
struct SpmdProgram {
  backend::ExecutablePtr ex;
  std::vector<spmd::Sharding> inputs, outputs;  ///< per program input and output
  std::vector<spmd::CollectiveNote> collectives;
  std::vector<std::string> opaque_ops, warnings;
  int64_t devices = 1;
  std::string table;  ///< spmd::explain_table (AXLE_DEBUG, xs::explain)
};
}  // namespace axle::lazy
