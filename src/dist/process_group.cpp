// ProcessGroup on Gloo (TCP transport), the group registry and the job description.
//
// One host (children of axle::launch): rendezvous through a gloo FileStore in the
// job's private directory, loopback addresses, all-reduce through shared memory.
// External launchers (torchrun-style RANK / WORLD_SIZE, possibly several hosts):
// AXLE_RENDEZVOUS_DIR (a fresh shared directory) or MASTER_ADDR:MASTER_PORT through
// axle's TCP store (tcp_store.cpp); before Gloo connects, the ranks agree through the
// store on the address each one advertises and check that every rank reaches every
// other (see agree_on_addresses), so a rank that cannot join fails the whole job at
// once with one message. These ranks always use Gloo's TCP path: nothing tells them
// they share a host's memory.
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "axle/metrics.h"
#include "dist/dist_internal.h"
#include "dist/launch_env.h"
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
    } else if (const LauncherEnv e = resolve_launcher_env(); e.found) {
      j->external = true;
      j->rank = e.rank;
      j->world = e.world;
      j->local = e.local;
      j->launcher = e.family;
      j->launcher_vars = e.vars;
      j->master_addr = e.master_addr;
      j->master_port = e.master_port;
      j->master_source = e.master_source;
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
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    if (in != out && n > 0) std::memcpy(out, in, size_t(n) * itemsize(t));
  }
  void permute(const void* in, void* out, int64_t n, DType t, const std::vector<int>& source_of) override {
    AXLE_CHECK(source_of.size() == 1 && (source_of[0] == 0 || source_of[0] == -1),
               "[permute] expected one source rank (0 or -1) for a group of one, got ", source_of.size(), " entries");
    if (n == 0) return;
    if (source_of[0] == -1) std::memset(out, 0, size_t(n) * itemsize(t));
    else if (in != out) std::memcpy(out, in, size_t(n) * itemsize(t));
  }

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
/// Gloo's TCP pairs send with writev, which raises SIGPIPE when the peer's end is closed: a
/// killed rank took a rank writing to it down too (status 141, seen in the ASan run of
/// MultiHostSpmd.AHostKilledMidStepEndsEveryProcessNamingIt) instead of its collective failing
/// with a message naming the dead rank. So SIGPIPE is set to ignored, once, where it still has
/// its default action (a program's own handler is kept): the write fails with EPIPE and Gloo
/// throws. (Python ignores SIGPIPE from startup, so PyTorch's Gloo users never meet this.)
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, nullptr);
  });
}

class GlooGroup final : public ProcessGroup {
 public:
  /// `shm_name`: the ranks share this host (launch() children): all-reduce through a
  /// shared-memory segment of that name instead of TCP (AXLE_SHM=0 keeps Gloo's TCP path).
  GlooGroup(int64_t id, int rank, int size, gloo::rendezvous::Store& store, const std::string& host, double timeout_s,
            const std::string& shm_name = "")
      : id_(id), timeout_s_(timeout_s) {
    ignore_sigpipe();
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

  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    if (n == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    static metrics::Counter& calls = metrics::counter("CollectiveAllToAll");
    calls.add();
    run("all_to_all", [&] {
      dispatch_type(t, "all_to_all", [&](auto zero) {
        using T = decltype(zero);
        gloo::AlltoallOptions o(ctx_);
        o.setInput(const_cast<T*>(static_cast<const T*>(in)), size_t(n) * size_t(ctx_->size));
        o.setOutput(static_cast<T*>(out), size_t(n) * size_t(ctx_->size));
        o.setTag(next_tag());
        o.setTimeout(ms());
        gloo::alltoall(o);
        return 0;
      });
    });
  }

  void permute(const void*, void*, int64_t, DType, const std::vector<int>&) override {
    AXLE_FAIL("[permute] not supported by the gloo process group (collective_permute runs on in-process SPMD "
              "device groups)");
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

// ---- external launchers: which address each rank advertises ----

// Ranks with the same identity reach each other over loopback: the same boot of the same
// machine, and the same network namespace.
std::string host_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (boot.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    boot = host;
  }
  return boot + " " + (n > 0 ? std::string(ns, size_t(n)) : std::string("net:?"));
}

bool is_loopback(const std::string& a) { return a.rfind("127.", 0) == 0 || a == "::1" || a.empty(); }

// The address of interface `name` (IPv4 first, then global IPv6, then link-local IPv6);
// "" if it has none. `seen` lists the interfaces that have one, for messages.
std::string interface_address(const std::string& name, std::string& seen) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string v4, v6, v6_link;
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const std::string ifname = i->ifa_name;
    if ((" " + seen + ",").find(" " + ifname + ",") == std::string::npos) seen += (seen.empty() ? "" : ", ") + ifname;
    if (ifname != name) continue;
    const bool v4_addr = i->ifa_addr->sa_family == AF_INET;
    const std::string a = detail::numeric_host(i->ifa_addr, v4_addr ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    std::string& slot = v4_addr ? v4 : a.find('%') != std::string::npos ? v6_link : v6;
    if (slot.empty()) slot = a;
  }
  ::freeifaddrs(all);
  return !v4.empty() ? v4 : !v6.empty() ? v6 : v6_link;
}

// The first address `host` resolves to, numeric; "" if none.
std::string resolve(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  const std::string a = detail::numeric_host(res->ai_addr, unsigned(res->ai_addrlen));
  ::freeaddrinfo(res);
  return a;
}

addrinfo* numeric_addr(const std::string& addr, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return nullptr;
  return res;
}

std::string bracket(const std::string& a) { return a.find(':') != std::string::npos ? "[" + a + "]" : a; }

// A listening socket on addr (any port) that the other ranks connect to once, to prove
// they can reach the address before Gloo relies on it.
struct Probe {
  int fd = -1, port = 0;
  ~Probe() {
    if (fd >= 0) ::close(fd);
  }
  std::string listen_on(const std::string& addr) {
    addrinfo* a = numeric_addr(addr, 0);
    if (!a) return "not a numeric address";
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    std::string err;
    if (fd < 0 || ::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 256) != 0) err = std::strerror(errno);
    ::freeaddrinfo(a);
    if (!err.empty()) return "cannot listen on " + bracket(addr) + ": " + err;
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&sa)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
    return "";
  }
};

// "" if a TCP connection to addr:port opens within `seconds`, else why not.
std::string try_connect(const std::string& addr, int port, double seconds) {
  addrinfo* a = numeric_addr(addr, port);
  if (!a) return "not a numeric address";
  const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  std::string err;
  if (fd < 0) {
    err = std::strerror(errno);
  } else if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = std::strerror(errno);
    } else {
      pollfd p{fd, POLLOUT, 0};
      const int rc = ::poll(&p, 1, int(seconds * 1000));
      int so = 0;
      socklen_t len = sizeof so;
      if (rc == 0) err = "no answer within " + std::to_string(int(seconds)) + " s";
      else if (rc < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0) err = std::strerror(errno);
      else if (so != 0) err = std::strerror(so);
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(a);
  return err;
}

// Steps every rank takes together through the store: each publishes a value per step and
// waits for everyone's. A rank that times out, or finds a step failed, stores one message
// under "abort"; every rank then throws that same message.
class Agreement {
 public:
  Agreement(gloo::rendezvous::Store& store, std::function<bool(const std::string&)> has, int rank, int world,
            double timeout_s, std::string where)
      : store_(store), has_(std::move(has)), rank_(rank), world_(world), timeout_s_(timeout_s),
        where_(std::move(where)),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000))) {}

  std::vector<std::string> exchange(const std::string& step, const std::string& value) {
    set(key(step, rank_), value);
    std::vector<std::string> got(static_cast<size_t>(world_));
    std::vector<bool> have(static_cast<size_t>(world_), false);
    while (true) {
      int missing = 0;
      for (int r = 0; r < world_; ++r) {
        if (have[size_t(r)]) continue;
        if (has_(key(step, r))) {
          got[size_t(r)] = get(key(step, r));
          have[size_t(r)] = true;
          if (step == "join") joined_.push_back(r);
        } else {
          ++missing;
        }
      }
      if (!missing) return got;
      if (has_("axle.abort")) fail("");
      if (std::chrono::steady_clock::now() > deadline_) {
        std::string who;
        for (int r = 0; r < world_; ++r)
          if (!have[size_t(r)]) who += (who.empty() ? "" : ", ") + std::to_string(r);
        fail(std::string("rank") + (missing > 1 ? "s " : " ") + who + " of " + std::to_string(world_) +
             (step == "join" ? " did not join" : " did not finish the rendezvous (step " + step + ")") +
             " within the " + fmt_seconds() + " timeout" +
             (step == "join" ? " (not started, failed before it joined, or cannot reach " + where_ + ")" : ""));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  /// Stores `why` as the job's failure unless one is stored already, then throws the stored
  /// one ("" : just throw the stored one).
  [[noreturn]] void fail(const std::string& why) {
    detail::note_comm_failure();
    std::string msg = "[dist] rendezvous of " + std::to_string(world_) + " ranks at " + where_ + " failed: " +
                      (why.empty() ? "another rank failed, and its message was lost with the store" : why);
    try {
      if (!has_("axle.abort")) set("axle.abort", msg);
      msg = get("axle.abort");
      set(key("ack", rank_), "");
      // Rank 0 serves the TCP store: it stays until the ranks that joined have read the message.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      if (rank_ == 0)
        for (int r : joined_)
          while (!has_(key("ack", r)) && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const std::exception&) {
      // The store is gone (its rank failed): our own message it is.
    }
    AXLE_FAIL(msg);
  }

 private:
  static std::string key(const std::string& step, int r) { return "axle." + step + "." + std::to_string(r); }
  // Values carry a leading '=': gloo's FileStore refuses empty ones.
  void set(const std::string& k, const std::string& v) {
    const std::string s = "=" + v;
    store_.set(k, std::vector<char>(s.begin(), s.end()));
  }
  std::string get(const std::string& k) {
    const std::vector<char> v = store_.get(k);
    return v.empty() ? std::string() : std::string(v.begin() + 1, v.end());
  }
  std::string fmt_seconds() const {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", timeout_s_);
    return b;
  }

  gloo::rendezvous::Store& store_;
  std::function<bool(const std::string&)> has_;
  int rank_, world_;
  double timeout_s_;
  std::string where_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<int> joined_;
};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0, nl;
  while ((nl = s.find('\n', start)) != std::string::npos) {
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  out.push_back(s.substr(start));
  return out;
}

// The address this rank advertises to Gloo, agreed with every other rank: GLOO_SOCKET_IFNAME
// (as PyTorch: the interface's address), else AXLE_GLOO_HOST, else the local address of the
// connection to the TCP store (the address this host reaches MASTER_ADDR from), else what this
// host's name resolves to. Never a loopback address when the ranks span hosts: the rank that
// serves the store then takes the address the remote ranks reached it at. Every rank then
// connects to every other's address once; any failure fails every rank with one message.
std::string agree_on_addresses(Agreement& a, int rank, int world, const std::string& store_local,
                               const std::string& store_master, double timeout_s) {
  const std::string me = host_identity();
  const std::vector<std::string> joins = a.exchange("join", me + "\n" + store_master);
  std::vector<std::string> ids, masters;
  for (const std::string& j : joins) {
    const auto lines = split_lines(j);
    ids.push_back(lines[0]);
    masters.push_back(lines.size() > 1 ? lines[1] : "");
  }
  bool spans_hosts = false;
  for (const std::string& id : ids) spans_hosts = spans_hosts || id != ids[0];

  std::string addr, source, err;
  if (const char* ifn = std::getenv("GLOO_SOCKET_IFNAME"); ifn && *ifn) {
    std::string name = ifn;
    name = name.substr(0, name.find(','));  // PyTorch takes a list; one interface here
    std::string seen;
    addr = interface_address(name, seen);
    source = "GLOO_SOCKET_IFNAME=" + std::string(ifn);
    if (addr.empty()) err = "no interface '" + name + "' with an IP address on this host (it has: " + seen + ")";
  } else if (const char* h = std::getenv("AXLE_GLOO_HOST"); h && *h) {
    addr = resolve(h);
    source = "AXLE_GLOO_HOST=" + std::string(h);
    if (addr.empty()) err = "'" + std::string(h) + "' does not resolve";
  } else if (!store_local.empty()) {
    addr = store_local;
    source = "the local address of its connection to MASTER_ADDR";
    if (spans_hosts && is_loopback(addr) && ids[size_t(rank)] == ids[0]) {
      // This rank shares rank 0's host, which it reached over loopback: advertise the
      // address the ranks on other hosts reached it at.
      for (int r = 0; r < world && is_loopback(addr); ++r)
        if (ids[size_t(r)] != ids[0] && !is_loopback(masters[size_t(r)])) {
          addr = masters[size_t(r)];
          source = "the address rank " + std::to_string(r) + " reached MASTER_ADDR at";
        }
    }
  } else {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    addr = resolve(host);
    source = "this host's name '" + std::string(host) + "'";
    if (addr.empty()) err = "'" + std::string(host) + "' does not resolve";
  }
  if (err.empty() && spans_hosts && is_loopback(addr))
    err = "it would advertise " + addr + " (from " + source + "), a loopback address, but the ranks run on " +
          "more than one host; set GLOO_SOCKET_IFNAME to the network interface the other hosts reach it on";
  Probe probe;
  if (err.empty()) {
    const std::string why = probe.listen_on(addr);
    if (!why.empty()) err = why + " (address from " + source + ")";
  }
  const std::vector<std::string> addrs =
      a.exchange("addr", err.empty() ? addr + "\n" + std::to_string(probe.port) : "!" + err);
  std::string errors;
  for (int r = 0; r < world; ++r)
    if (addrs[size_t(r)].rfind('!', 0) == 0)
      errors += (errors.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " cannot take part: ") +
                addrs[size_t(r)].substr(1);
  if (!errors.empty()) a.fail(errors);

  std::string unreachable;
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    const auto lines = split_lines(addrs[size_t(r)]);
    const int port = lines.size() > 1 ? std::atoi(lines[1].c_str()) : 0;
    const std::string why = try_connect(lines[0], port, std::min(timeout_s, 10.0));
    if (!why.empty())
      unreachable += (unreachable.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + " cannot connect to rank " +
                                                           std::to_string(r) + " at " + bracket(lines[0]) + ":" +
                                                           std::to_string(port) + ": " + why);
  }
  const std::vector<std::string> probes = a.exchange("probe", unreachable);
  for (const std::string& p : probes)
    if (!p.empty()) errors += (errors.empty() ? "" : "; ") + p;
  if (!errors.empty())
    a.fail(errors + " (each rank advertises the local address of its connection to MASTER_ADDR unless "
                    "GLOO_SOCKET_IFNAME names an interface)");
  return addr;
}

// The FileStore's check(), which gloo keeps protected.
class CheckedFileStore final : public gloo::rendezvous::FileStore {
 public:
  using gloo::rendezvous::FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
};

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
  } else {
    std::function<bool(const std::string&)> has;
    std::string where, local, master;
    if (const char* d = std::getenv("AXLE_RENDEZVOUS_DIR"); d && *d) {
      auto fs = std::make_unique<CheckedFileStore>(d);
      has = [p = fs.get()](const std::string& k) { return p->has(k); };
      r.store = std::move(fs);
      where = "AXLE_RENDEZVOUS_DIR " + std::string(d);
    } else {
      AXLE_CHECK(!j.master_addr.empty(), "[dist] world size ", j.world, " from ", j.launcher, " (", j.launcher_vars,
                 ") without axle::launch needs MASTER_ADDR (MASTER_PORT defaults to ", detail::kDefaultMasterPort,
                 "; under Slurm the first host of SLURM_NODELIST serves) or AXLE_RENDEZVOUS_DIR, a fresh directory "
                 "every rank can see");
      auto ts = detail::make_tcp_store(j.master_addr, j.master_port, j.rank == 0, timeout);
      local = ts->local_address();
      master = ts->master_address();
      has = [p = ts.get()](const std::string& k) { return p->check(k); };
      r.store = std::move(ts);
      where = j.master_addr + ":" + std::to_string(j.master_port) + " (" +
              (j.master_source == "MASTER_ADDR" ? std::string("MASTER_ADDR:MASTER_PORT") : j.master_source) +
              (j.launcher == "torchrun" ? "" : "; ranks from " + j.launcher + ": " + j.launcher_vars) + ")";
    }
    Agreement agreement(*r.store, has, j.rank, j.world, timeout, where);
    host = agree_on_addresses(agreement, j.rank, j.world, local, master, timeout);
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
  AXLE_CHECK(!(backend == "xla" && detail::spmd_mode()),
             "[init_process_group] backend \"xla\" is not available under SPMD: the partitioner inserts all "
             "collectives; use \"gloo\" for checkpoint coordination");
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
  if (ProcessGroup* g = local_group_by_id(id)) return *g;
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
