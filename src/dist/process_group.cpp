// ProcessGroup on Gloo (TCP transport), the group registry and the job description.
//
// One host (children of axle::launch): rendezvous through a gloo FileStore in the
// job's private directory. External launchers: AXLE_RENDEZVOUS_DIR (a fresh shared
// directory) or MASTER_ADDR:MASTER_PORT through axle's TCP store (tcp_store.cpp).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "axle/metrics.h"
#include "dist/dist_internal.h"
#include "dist/shm_allreduce.h"
#include "dist/tcp_store.h"

namespace axle::dist {
namespace detail {

namespace {
int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  AXLE_CHECK(end && *end == '\0', "[dist] expected an integer in ", name, ", got '", v, "'");
  return int(x);
}
std::atomic<bool> g_comm_failure{false};
}  // namespace

Job& job() {
  static Job* j = [] {
    auto* j = new Job();
    if (const char* r = std::getenv(kEnvRank); r && *r) {
      j->child = true;
      j->rank = env_int(kEnvRank, 0);
      j->world = env_int(kEnvWorld, 1);
      j->local = j->rank;
      if (const char* d = std::getenv(kEnvDir)) j->dir = d;
      if (const char* t = std::getenv(kEnvTimeout); t && *t) j->timeout_s = std::atof(t);
    } else if (std::getenv("RANK") && std::getenv("WORLD_SIZE")) {
      j->external = true;
      j->rank = env_int("RANK", 0);
      j->world = env_int("WORLD_SIZE", 1);
      j->local = env_int("LOCAL_RANK", j->rank);
    }
    AXLE_CHECK(j->world >= 1 && j->rank >= 0 && j->rank < j->world, "[dist] expected 0 <= rank < world size, got rank ",
               j->rank, " of ", j->world);
    return j;
  }();
  return *j;
}

void note_comm_failure() { g_comm_failure = true; }
bool had_comm_failure() { return g_comm_failure; }

}  // namespace detail

namespace {

using detail::job;

// ---- a group of one: collectives are copies ----
class LocalGroup final : public ProcessGroup {
 public:
  explicit LocalGroup(int64_t id) : id_(id) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int64_t id() const override { return id_; }
  void set_timeout(double s) override { timeout_ = s; }
  double timeout() const override { return timeout_; }
  void all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    if (in != out) std::memcpy(out, in, size_t(n) * itemsize(t));
  }
  void broadcast(void*, int64_t, DType, int root) override {
    AXLE_CHECK(root == 0, "[broadcast] expected a source rank in [0, 1), got ", root);
  }
  void barrier() override {}

 private:
  int64_t id_;
  double timeout_ = 300;
};

template <class F>
auto dispatch_type(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Int64: return f(int64_t{});
    case DType::Int32: return f(int32_t{});
    case DType::UInt8: return f(uint8_t{});
    default: AXLE_FAIL("[", op, "] expected a float32, int64, int32 or uint8 tensor, got ", t);
  }
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// ---- Gloo ----
class GlooGroup final : public ProcessGroup {
 public:
  /// `shm_name`: the ranks share this host (launch() children): all-reduce through a
  /// shared-memory segment of that name instead of TCP (AXLE_SHM=0 keeps Gloo's TCP path).
  GlooGroup(int64_t id, int rank, int size, gloo::rendezvous::Store& store, const std::string& host, double timeout_s,
            const std::string& shm_name = "")
      : id_(id), timeout_s_(timeout_s) {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
      ctx->setTimeout(ms());
      ctx->connectFullMesh(store, device_);
      ctx_ = std::move(ctx);
    } catch (const gloo::Exception& e) {
      detail::note_comm_failure();
      AXLE_FAIL("[dist] rendezvous of ", size, " ranks failed on rank ", rank, " (timeout ", timeout_s_,
                " s): not every rank arrived, or a rank failed before it; gloo: ", e.what());
    }
    const char* use_shm = std::getenv("AXLE_SHM");
    if (!shm_name.empty() && !(use_shm && std::string(use_shm) == "0")) setup_shm(shm_name);
  }
  ~GlooGroup() override {
    try {
      if (ctx_) ctx_->closeConnections();
    } catch (...) {}
  }
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  int64_t id() const override { return id_; }
  void set_timeout(double s) override {
    AXLE_CHECK(s > 0, "[dist] expected a positive timeout, got ", s, " s");
    std::lock_guard<std::mutex> g(mu_);
    timeout_s_ = s;
    ctx_->setTimeout(ms());
  }
  double timeout() const override { return timeout_s_; }

  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    AXLE_CHECK(op != ReduceOp::Mean || is_floating(t), "[all_reduce] mean expects a floating tensor, got ", t);
    if (n == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    static metrics::Counter& calls = metrics::counter("CollectiveAllReduce");
    calls.add();
    if (shm_) {
      static metrics::Counter& shm_calls = metrics::counter("CollectiveAllReduceShm");
      shm_calls.add();
      shm_->all_reduce(buf, n, t, op, timeout_s_);
      return;
    }
    run("all_reduce", [&] {
      dispatch_type(t, "all_reduce", [&](auto zero) {
        using T = decltype(zero);
        gloo::AllreduceOptions o(ctx_);
        o.setOutput(static_cast<T*>(buf), size_t(n));
        o.setTag(next_tag());
        o.setTimeout(ms());
        void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<T>;
        if (op == ReduceOp::Min) fn = &gloo::min<T>;
        if (op == ReduceOp::Max) fn = &gloo::max<T>;
        o.setReduceFunction(fn);
        gloo::allreduce(o);
        if (op == ReduceOp::Mean) {
          T* p = static_cast<T*>(buf);
          const T s = T(1) / T(ctx_->size);
#pragma omp parallel for if (n > (1 << 16))
          for (int64_t i = 0; i < n; ++i) p[i] *= s;
        }
        return 0;
      });
    });
  }

  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    if (n == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    static metrics::Counter& calls = metrics::counter("CollectiveAllGather");
    calls.add();
    run("all_gather", [&] {
      dispatch_type(t, "all_gather", [&](auto zero) {
        using T = decltype(zero);
        gloo::AllgatherOptions o(ctx_);
        o.setInput(const_cast<T*>(static_cast<const T*>(in)), size_t(n));
        o.setOutput(static_cast<T*>(out), size_t(n) * size_t(ctx_->size));
        o.setTag(next_tag());
        o.setTimeout(ms());
        gloo::allgather(o);
        return 0;
      });
    });
  }

  void broadcast(void* buf, int64_t n, DType t, int root) override {
    AXLE_CHECK(root >= 0 && root < ctx_->size, "[broadcast] expected a source rank in [0, ", ctx_->size, "), got ",
               root);
    if (n == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    static metrics::Counter& calls = metrics::counter("CollectiveBroadcast");
    calls.add();
    run("broadcast", [&] {
      dispatch_type(t, "broadcast", [&](auto zero) {
        using T = decltype(zero);
        gloo::BroadcastOptions o(ctx_);
        o.setOutput(static_cast<T*>(buf), size_t(n));
        o.setRoot(root);
        o.setTag(next_tag());
        o.setTimeout(ms());
        gloo::broadcast(o);
        return 0;
      });
    });
  }

  void barrier() override {
    std::lock_guard<std::mutex> g(mu_);
    static metrics::Counter& calls = metrics::counter("CollectiveBarrier");
    calls.add();
    run("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(next_tag());
      o.setTimeout(ms());
      gloo::barrier(o);
    });
  }

 private:
  // Every rank runs the same sequence whatever fails locally; the ranks then agree (a min
  // all-reduce over Gloo) whether every one of them mapped the segment.
  void setup_shm(const std::string& name) {
    const int rank = ctx_->rank, size = ctx_->size;
    std::string why;
    auto attempt = [&](bool create) {
      try {
        shm_ = detail::ShmAllReduce::open(name, rank, size, create);
      } catch (const Error& e) {
        why = e.what();
      }
    };
    if (rank == 0) attempt(true);
    barrier_locked();
    if (rank != 0) attempt(false);
    int32_t ok = shm_ ? 1 : 0;
    run("all_reduce", [&] {
      gloo::AllreduceOptions o(ctx_);
      o.setOutput(&ok, 1);
      o.setTag(next_tag());
      o.setTimeout(ms());
      void (*fn)(void*, const void*, const void*, size_t) = &gloo::min<int32_t>;
      o.setReduceFunction(fn);
      gloo::allreduce(o);
    });
    if (rank == 0) ::shm_unlink(name.c_str());  // mapped everywhere (or given up): drop the name
    if (!ok) {
      shm_.reset();
      if (!why.empty())
        std::fprintf(stderr, "[dist] rank %d: shared-memory all-reduce unavailable, using Gloo's TCP path: %s\n", rank,
                     why.c_str());
    }
  }
  void barrier_locked() {
    run("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(next_tag());
      o.setTimeout(ms());
      gloo::barrier(o);
    });
  }

  std::chrono::milliseconds ms() const { return std::chrono::milliseconds(int64_t(std::ceil(timeout_s_ * 1000))); }
  uint32_t next_tag() { return tag_++; }
  template <class F>
  void run(const char* what, F&& f) {
    try {
      f();
    } catch (const gloo::Exception& e) {
      detail::note_comm_failure();
      const std::string msg = e.what();
      const bool timeout = msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
      if (timeout)
        AXLE_FAIL("[", what, "] timed out after ", timeout_s_, " s on rank ", ctx_->rank, " of ", ctx_->size,
                  ": another rank did not join (it may have failed, or the ranks called different collectives); gloo: ",
                  msg);
      AXLE_FAIL("[", what, "] failed on rank ", ctx_->rank, " of ", ctx_->size,
                ": lost the connection to another rank (it probably failed); gloo: ", msg);
    }
  }

  int64_t id_;
  double timeout_s_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> ctx_;
  std::unique_ptr<detail::ShmAllReduce> shm_;
  std::mutex mu_;
  uint32_t tag_ = 1;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ProcessGroup>> groups;  // index = id
  double pending_timeout = -1;
  // Stores outlive the groups that rendezvoused through them.
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefix;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::string local_host() {
  if (const char* h = std::getenv("AXLE_GLOO_HOST"); h && *h) return h;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) == 0 && buf[0]) return buf;
  return "127.0.0.1";
}

std::shared_ptr<ProcessGroup> make_default_group(Registry& r) {
  detail::Job& j = job();
  const double timeout = r.pending_timeout > 0 ? r.pending_timeout : j.timeout_s;
  if (j.world == 1) {
    auto g = std::make_shared<LocalGroup>(0);
    g->set_timeout(timeout);
    return g;
  }
  std::string host = "127.0.0.1", shm_name;
  if (j.child) {
    shm_name = detail::ShmAllReduce::name_for(j.dir);
    AXLE_CHECK(!j.dir.empty(), "[dist] launched child without a rendezvous directory (", detail::kEnvDir, ")");
    r.store = std::make_unique<gloo::rendezvous::FileStore>(j.dir + "/store");
  } else if (const char* d = std::getenv("AXLE_RENDEZVOUS_DIR"); d && *d) {
    r.store = std::make_unique<gloo::rendezvous::FileStore>(d);
    host = local_host();
  } else {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    AXLE_CHECK(addr && *addr && port && *port, "[dist] world size ", j.world,
               " without axle::launch needs MASTER_ADDR and MASTER_PORT (or AXLE_RENDEZVOUS_DIR, a fresh directory "
               "every rank can see)");
    r.store = detail::make_tcp_store(addr, std::atoi(port), j.rank == 0, j.world, timeout);
    host = local_host();
  }
  r.prefix = std::make_unique<gloo::rendezvous::PrefixStore>("default", *r.store);
  return std::make_shared<GlooGroup>(0, j.rank, j.world, *r.prefix, host, timeout, shm_name);
}

}  // namespace

ProcessGroup& default_group() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (r.groups.empty()) r.groups.push_back(make_default_group(r));
  return *r.groups[0];
}

void init_process_group(const std::string& backend, const std::string& init_method) {
  AXLE_CHECK(backend == "xla" || backend == "gloo", "[init_process_group] expected backend \"xla\" or \"gloo\", got \"",
             backend, "\"");
  AXLE_CHECK(init_method == "xla://" || init_method == "env://" || init_method.empty(),
             "[init_process_group] expected init_method \"xla://\" or \"env://\", got \"", init_method, "\"");
  default_group();
}

void set_timeout(double seconds) {
  AXLE_CHECK(seconds > 0, "[dist] expected a positive timeout, got ", seconds, " s");
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.pending_timeout = seconds;
  for (auto& grp : r.groups) grp->set_timeout(seconds);
}

namespace detail {

ProcessGroup& group_by_id(int64_t id) {
  if (id == 0) return default_group();
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  AXLE_CHECK(id >= 0 && id < int64_t(r.groups.size()) && r.groups[size_t(id)], "[dist] unknown process group id ", id);
  return *r.groups[size_t(id)];
}

bool default_group_created() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return !r.groups.empty();
}

void shutdown_groups() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.groups.clear();
  r.prefix.reset();
  r.store.reset();
}

}  // namespace detail

}  // namespace axle::dist

namespace axle::runtime {
int world_size() { return dist::detail::job().world; }
int global_ordinal() { return dist::detail::job().rank; }
int local_ordinal() { return dist::detail::job().local; }
}  // namespace axle::runtime

namespace axle::dist::detail {
const char* reduce_op_name(ReduceOp op) { return reduce_name(op); }
}  // namespace axle::dist::detail
