// N virtual devices in one process: the pool of device threads (run_on_devices) and the
// in-process collective groups over them (local_group_id).
//
// A collective on a subgroup runs in phases on one mutex and condition variable:
//   1. rendezvous: each member posts its buffers and what it asked for, then waits (blocking,
//      with the timeout) until every member has; the last to arrive checks that all asked for
//      the same collective. A timeout, a member that finished its program without arriving,
//      or a mismatch breaks the subgroup: every member throws the same message.
//   2. exchange: each member reads its peers' posted buffers and writes only its own.
//   3. a barrier, so no member frees or overwrites a buffer a peer still reads.
// Once phase 1 completed every member is committed: the exchange only copies and adds, so
// the barriers of phases 2-3 wait without timeout and cannot be aborted (a member leaving
// early would free a buffer its peers read).
//
// Failures: a device whose program throws aborts every local group (members waiting in a
// rendezvous throw at once); run_on_devices then reports the device whose error caused it.
//
// Several hosts (host_count() > 1: one process per host under an external launcher): this
// process runs only its own devices. A group whose subgroups all lie within one host runs
// as above, in shared memory. A group with a subgroup spanning hosts runs hierarchically:
// every local device posts its buffers at the group's host exchange; the last to arrive
// (the host's leader for this collective) reduces the local members of each subgroup in
// rank order, all-reduces those partial results across hosts over the default Gloo group
// (one process per host), and every local device copies its subgroup's result
// (broadcast within the host). The other collectives gather every host's local inputs
// over Gloo once, and each device then reads its peers' inputs as on one host.
#include "dist/local_devices.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <limits>

#include "axle/dist.h"
#include "axle/error.h"
#include "dist/dist_internal.h"

namespace axle::dist {
namespace {

constexpr int64_t kLocalGroupBase = 1000000;  // local group ids: kLocalGroupBase + index

thread_local int t_device = -1;

// How a device's failure relates to the others', lowest first when run_on_devices picks the
// one to report: its own error, a collective of its subgroup that failed (timeout, mismatch,
// a member that finished), or an abort because another device failed.
enum FailKind : int { kOwn = 0, kCollective = 1, kAborted = 2 };

class CollectiveFailure : public Error {
 public:
  CollectiveFailure(FailKind k, const std::string& msg) : Error(msg), kind(k) {}
  FailKind kind;
};
// The last collective failure this thread threw: recognised again if the program wraps it in
// an error of its own.
thread_local FailKind t_last_kind = kOwn;
thread_local std::string t_last_msg;

[[noreturn]] void fail(FailKind k, const std::string& msg) {
  t_last_kind = k;
  t_last_msg = msg;
  throw CollectiveFailure(k, msg);
}

// ---- the timeout ----
std::atomic<double> g_timeout{-1};

double env_timeout() {
  const char* v = std::getenv("AXLE_SPMD_TIMEOUT");
  if (!v || !*v) return 60;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  AXLE_CHECK(end && *end == '\0' && s > 0 && std::isfinite(s),
             "[spmd] expected a positive number of seconds in AXLE_SPMD_TIMEOUT, got '", v, "'");
  return s;
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

std::string list_str(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// ---- the state of the current run_on_devices call ----
struct RunState {
  std::mutex mu;
  int n = 0;                   ///< devices of the job (every host's)
  int first = 0, local = 0;    ///< this host's devices: first .. first+local-1
  std::vector<char> finished;  ///< device k's program returned or threw
  bool aborted = false;
  std::string reason;
};
RunState& run_state() {
  static RunState* r = new RunState();  // leaked on purpose: device threads outlive statics
  return *r;
}

// Whether device d will reach no more collectives in this run: 0 it may, 1 its program
// finished, 2 it is not running (run_on_devices started fewer devices).
int gone(int d) {
  RunState& r = run_state();
  std::lock_guard<std::mutex> g(r.mu);
  return d >= r.n ? 2 : r.finished[size_t(d)] ? 1 : 0;
}
int devices_running() {
  RunState& r = run_state();
  std::lock_guard<std::mutex> g(r.mu);
  return r.local;
}

// "" unless the run is aborted; then why.
std::string abort_reason() {
  RunState& r = run_state();
  std::lock_guard<std::mutex> g(r.mu);
  return r.aborted ? r.reason : std::string();
}

// ---- a collective's description: every member must ask for the same ----
struct Call {
  const char* kind = "";
  int64_t numel = 0;
  DType dtype = DType::Float32;
  int64_t extra = 0;                       ///< reduce op, root
  const std::vector<int>* perm = nullptr;  ///< permute's source_of
  std::string str() const {
    std::string s = std::string(kind);
    if (std::strcmp(kind, "barrier") == 0) return s;
    if (std::strcmp(kind, "all_reduce") == 0) s += " (" + std::string(detail::reduce_op_name(ReduceOp(extra))) + ")";
    if (std::strcmp(kind, "broadcast") == 0) s += " (root " + std::to_string(extra) + ")";
    if (perm) s += " (source_of {" + list_str(*perm) + "})";
    std::ostringstream os;
    os << " of " << numel << " " << dtype << (numel == 1 ? " element" : " elements");
    return s + os.str();
  }
  bool operator==(const Call& o) const {
    return std::strcmp(kind, o.kind) == 0 && numel == o.numel && dtype == o.dtype && extra == o.extra &&
           (perm == nullptr) == (o.perm == nullptr) && (!perm || *perm == *o.perm);
  }
};

// One subgroup: its devices in rank order and its rendezvous state.
struct Sub {
  std::vector<int> devices;
  std::mutex mu;
  std::condition_variable cv;
  // phase 1
  uint64_t round = 0;
  int arrived = 0;
  std::vector<char> here;
  std::vector<Call> calls;
  std::vector<const void*> in;
  std::vector<void*> out;
  std::string broken;  ///< a collective of this subgroup failed in this run: members throw this
  // the unconditional barrier of phases 2-3
  uint64_t sync_gen = 0;
  int sync_count = 0;

  std::string name() const { return "devices {" + list_str(devices) + "}"; }
  int size() const { return int(devices.size()); }

  void withdraw(int rank) {  // needs mu
    here[size_t(rank)] = 0;
    --arrived;
  }

  // Phase 1. Throws CollectiveFailure when the subgroup broke or the run was aborted.
  void arrive(int rank, const Call& c, const void* in_ptr, void* out_ptr, double timeout_s) {
    std::unique_lock<std::mutex> l(mu);
    if (!broken.empty()) fail(kCollective, broken);
    if (std::string why = abort_reason(); !why.empty()) fail(kAborted, why);
    calls[size_t(rank)] = c;
    in[size_t(rank)] = in_ptr;
    out[size_t(rank)] = out_ptr;
    here[size_t(rank)] = 1;
    const uint64_t my = round;
    if (++arrived == size()) {
      for (int r = 1; r < size(); ++r)
        if (!(calls[size_t(r)] == calls[0])) {
          broken = "[spmd] collectives over " + name() + " do not match: device " + std::to_string(devices[0]) +
                   " called " + calls[0].str() + ", device " + std::to_string(devices[size_t(r)]) + " called " +
                   calls[size_t(r)].str() + " (every device must run the same collectives in the same order)";
          withdraw(rank);
          cv.notify_all();
          fail(kCollective, broken);
        }
      arrived = 0;
      std::fill(here.begin(), here.end(), 0);
      ++round;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    while (round == my) {
      if (!broken.empty()) {
        withdraw(rank);
        fail(kCollective, broken);
      }
      if (std::string why = abort_reason(); !why.empty()) {
        withdraw(rank);
        fail(kAborted, why);
      }
      std::vector<int> finished, absent, missing;
      for (int r = 0; r < size(); ++r)
        if (!here[size_t(r)]) {
          const int d = devices[size_t(r)];
          missing.push_back(d);
          if (const int why = gone(d)) (why == 1 ? finished : absent).push_back(d);
        }
      if (!absent.empty()) {
        broken = "[spmd] " + c.str() + " over " + name() + " cannot complete: device" +
                 (absent.size() > 1 ? "s " : " ") + list_str(absent) + " not running (run_on_devices started " +
                 std::to_string(devices_running()) + ")";
      } else if (!finished.empty()) {
        broken = "[spmd] " + c.str() + " over " + name() + " cannot complete: device" +
                 (finished.size() > 1 ? "s " : " ") + list_str(finished) +
                 (finished.size() > 1 ? " finished their programs" : " finished its program") + " without reaching it";
      } else if (std::chrono::steady_clock::now() >= deadline) {
        broken = "[spmd] " + c.str() + " over " + name() + " timed out after " + seconds_str(timeout_s) +
                 ": device" + (missing.size() > 1 ? "s " : " ") + list_str(missing) +
                 " did not arrive (a device failed before it, or the devices ran different collectives; "
                 "AXLE_SPMD_TIMEOUT sets the timeout)";
      }
      if (!broken.empty()) {
        withdraw(rank);
        cv.notify_all();
        fail(kCollective, broken);
      }
      cv.wait_until(l, deadline);
    }
  }

  // Phases 2-3: every member waits for every other; never times out (see the file comment).
  void sync() {
    std::unique_lock<std::mutex> l(mu);
    const uint64_t g = sync_gen;
    if (++sync_count == size()) {
      sync_count = 0;
      ++sync_gen;
      cv.notify_all();
      return;
    }
    cv.wait(l, [&] { return sync_gen != g; });
  }

  void reset() {
    std::lock_guard<std::mutex> l(mu);
    broken.clear();
    arrived = 0;
    std::fill(here.begin(), here.end(), 0);
  }

  void wake() {
    std::lock_guard<std::mutex> l(mu);
    cv.notify_all();
  }
};

// A cross-host group's exchange point on this host: every local device posts its buffers;
// the last to arrive runs the host's part of the collective (Gloo), then all read `data`.
// Once every local device arrived they are committed: the waiters wait without timeout
// (the leader's Gloo call has the cross-host timeout), so no buffer is freed under it.
struct HostExchange {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t gen = 0;
  int arrived = 0;
  bool busy = false;  ///< every local device arrived; the leader is exchanging
  std::vector<char> here;
  std::vector<Call> calls;
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<char> data;  ///< the exchanged bytes of the last round
  std::string broken;      ///< a round failed in this run: every later one throws this
};

std::string host_range(int h, int local) {
  return "host " + std::to_string(h) + " (rank " + std::to_string(h) + ", devices " + std::to_string(h * local) + "-" +
         std::to_string(h * local + local - 1) + ")";
}

template <class F>
void dispatch_reduce(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::Int32: f(int32_t{}); return;
    case DType::UInt8: f(uint8_t{}); return;
    default: AXLE_FAIL("[", op, "] expected a float32, int64, int32 or uint8 buffer, got ", t);
  }
}

// An in-process group over device threads: one Sub per subgroup; rank() and size() are the
// calling device's.
class DeviceGroup final : public ProcessGroup {
 public:
  DeviceGroup(int64_t id, const std::vector<std::vector<int>>& groups) : id_(id) {
    int n = 0;
    for (const auto& g : groups) n += int(g.size());
    where_.assign(size_t(n), {-1, -1});
    for (size_t s = 0; s < groups.size(); ++s) {
      auto sub = std::make_unique<Sub>();
      sub->devices = groups[s];
      const size_t k = groups[s].size();
      sub->here.assign(k, 0);
      sub->calls.resize(k);
      sub->in.assign(k, nullptr);
      sub->out.assign(k, nullptr);
      for (size_t r = 0; r < k; ++r) where_[size_t(groups[s][r])] = {int(s), int(r)};
      subs_.push_back(std::move(sub));
    }
    hosts_ = host_count();
    if (hosts_ > 1 && n % hosts_ == 0) {
      local_ = n / hosts_;
      first_ = host_index() * local_;
      for (const auto& g : groups)
        for (int d : g) cross_ = cross_ || d / local_ != g[0] / local_;
      x_.here.assign(size_t(local_), 0);
      x_.calls.resize(size_t(local_));
      x_.in.assign(size_t(local_), nullptr);
      x_.out.assign(size_t(local_), nullptr);
    }
  }

  int rank() const override { return locate("rank").second; }
  int size() const override { return subs_[0]->size(); }
  int64_t id() const override { return id_; }
  void set_timeout(double s) override { set_local_timeout(s); }
  double timeout() const override { return local_timeout(); }

  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    AXLE_CHECK(op != ReduceOp::Mean || is_floating(t), "[all_reduce] mean expects a floating buffer, got ", t);
    AXLE_CHECK(n >= 0, "[all_reduce] expected a non-negative element count, got ", n);
    if (cross_) return cross_all_reduce(buf, n, t, op);
    dispatch_reduce(t, "all_reduce", [&](auto zero) {
      using T = decltype(zero);
      auto [s, rank] = sub_of("all_reduce");
      const int S = s.size();
      auto lo = [&](int r) { return n * r / S; };
      // This member reduces chunk `rank` of every member's buffer into `mine` (in rank
      // order: the same bits on every member and in every run), then copies every member's
      // reduced chunk into its own buffer.
      // Everything that can fail comes before the rendezvous: after it, every member is
      // committed to the exchange.
      std::vector<T> mine(static_cast<size_t>(lo(rank + 1) - lo(rank)));
      std::vector<const T*> src(static_cast<size_t>(S));
      const double timeout = local_timeout();
      s.arrive(rank, {"all_reduce", n, t, int64_t(op)}, buf, mine.data(), timeout);
      const int64_t off = lo(rank), len = int64_t(mine.size());
      for (int r = 0; r < S; ++r) src[size_t(r)] = static_cast<const T*>(s.in[size_t(r)]) + off;
      T* dst = mine.data();
#pragma omp parallel for if (len > (1 << 16))
      for (int64_t i = 0; i < len; ++i) {
        T v = src[0][i];
        for (int r = 1; r < S; ++r) {
          const T x = src[size_t(r)][i];
          if (op == ReduceOp::Min) v = x < v ? x : v;
          else if (op == ReduceOp::Max) v = x > v ? x : v;
          else v = T(v + x);
        }
        if (op == ReduceOp::Mean) v = T(v / T(S));
        dst[i] = v;
      }
      s.sync();  // every member's chunk is reduced; nobody reads the inputs any more
      for (int r = 0; r < S; ++r)
        if (lo(r + 1) > lo(r))
          std::memcpy(static_cast<T*>(buf) + lo(r), s.out[size_t(r)], size_t(lo(r + 1) - lo(r)) * sizeof(T));
      s.sync();  // nobody reads `mine` any more
    });
  }

  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    AXLE_CHECK(n >= 0, "[all_gather] expected a non-negative element count, got ", n);
    const size_t bytes = size_t(n) * itemsize(t);
    auto [s, rank] = sub_of("all_gather");
    if (cross_) {
      const char* all = gather_round({"all_gather", n, t}, in, bytes);
      for (int r = 0; r < s.size(); ++r)
        if (bytes) std::memcpy(static_cast<char*>(out) + size_t(r) * bytes, all + size_t(s.devices[size_t(r)]) * bytes, bytes);
      return;
    }
    s.arrive(rank, {"all_gather", n, t}, in, out, local_timeout());
    for (int r = 0; r < s.size(); ++r) {
      char* dst = static_cast<char*>(out) + size_t(r) * bytes;
      if (dst != s.in[size_t(r)] && bytes) std::memcpy(dst, s.in[size_t(r)], bytes);
    }
    s.sync();
  }

  void broadcast(void* buf, int64_t n, DType t, int root) override {
    AXLE_CHECK(root >= 0 && root < size(), "[broadcast] expected a source rank in [0, ", size(), "), got ", root);
    AXLE_CHECK(n >= 0, "[broadcast] expected a non-negative element count, got ", n);
    const size_t bytes = size_t(n) * itemsize(t);
    auto [s, rank] = sub_of("broadcast");
    if (cross_) {
      const char* all = gather_round({"broadcast", n, t, root}, buf, bytes);
      if (rank != root && bytes) std::memcpy(buf, all + size_t(s.devices[size_t(root)]) * bytes, bytes);
      return;
    }
    s.arrive(rank, {"broadcast", n, t, root}, buf, buf, local_timeout());
    if (rank != root && bytes) std::memcpy(buf, s.in[size_t(root)], bytes);
    s.sync();
  }

  void barrier() override {
    auto [s, rank] = sub_of("barrier");
    if (cross_) {
      gather_round({"barrier", 0, DType::UInt8}, nullptr, 0);
      return;
    }
    s.arrive(rank, {"barrier", 0, DType::UInt8}, nullptr, nullptr, local_timeout());
  }

  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    AXLE_CHECK(n >= 0, "[all_to_all] expected a non-negative chunk size, got ", n);
    auto [s, rank] = sub_of("all_to_all");
    const size_t bytes = size_t(n) * itemsize(t), total = bytes * size_t(s.size());
    const char *i0 = static_cast<const char*>(in), *o0 = static_cast<const char*>(out);
    AXLE_CHECK(total == 0 || i0 + total <= o0 || o0 + total <= i0,
               "[all_to_all] expected distinct input and output buffers (they overlap)");
    if (cross_) {
      const char* all = gather_round({"all_to_all", n, t}, in, total);
      for (int r = 0; r < s.size(); ++r)
        if (bytes)
          std::memcpy(static_cast<char*>(out) + size_t(r) * bytes,
                      all + size_t(s.devices[size_t(r)]) * total + size_t(rank) * bytes, bytes);
      return;
    }
    s.arrive(rank, {"all_to_all", n, t}, in, out, local_timeout());
    for (int r = 0; r < s.size(); ++r)
      if (bytes)
        std::memcpy(static_cast<char*>(out) + size_t(r) * bytes,
                    static_cast<const char*>(s.in[size_t(r)]) + size_t(rank) * bytes, bytes);
    s.sync();
  }

  void permute(const void* in, void* out, int64_t n, DType t, const std::vector<int>& source_of) override {
    AXLE_CHECK(n >= 0, "[permute] expected a non-negative element count, got ", n);
    AXLE_CHECK(int(source_of.size()) == size(), "[permute] expected ", size(), " source ranks (one per rank), got ",
               source_of.size());
    for (int src : source_of)
      AXLE_CHECK(src >= -1 && src < size(), "[permute] expected source ranks in [-1, ", size(), "), got ", src);
    const size_t bytes = size_t(n) * itemsize(t);
    const char *i0 = static_cast<const char*>(in), *o0 = static_cast<const char*>(out);
    AXLE_CHECK(bytes == 0 || i0 + bytes <= o0 || o0 + bytes <= i0,
               "[permute] expected distinct input and output buffers (they overlap)");
    auto [s, rank] = sub_of("permute");
    if (cross_) {
      const char* all = gather_round({"permute", n, t, 0, &source_of}, in, bytes);
      const int src = source_of[size_t(rank)];
      if (bytes) {
        if (src < 0) std::memset(out, 0, bytes);
        else std::memcpy(out, all + size_t(s.devices[size_t(src)]) * bytes, bytes);
      }
      return;
    }
    s.arrive(rank, {"permute", n, t, 0, &source_of}, in, out, local_timeout());
    const int src = source_of[size_t(rank)];
    if (bytes) {
      if (src < 0) std::memset(out, 0, bytes);
      else std::memcpy(out, s.in[size_t(src)], bytes);
    }
    s.sync();
  }

  void reset() {
    for (auto& s : subs_) s->reset();
    std::lock_guard<std::mutex> l(x_.mu);
    x_.broken.clear();
    x_.arrived = 0;
    x_.busy = false;
    std::fill(x_.here.begin(), x_.here.end(), 0);
  }
  void wake() {
    for (auto& s : subs_) s->wake();
    std::lock_guard<std::mutex> l(x_.mu);
    x_.cv.notify_all();
  }

 private:
  std::string devices_str() const {
    std::vector<int> all;
    for (const auto& s : subs_) all.insert(all.end(), s->devices.begin(), s->devices.end());
    std::sort(all.begin(), all.end());
    return all.size() > 8 ? "devices {0.." + std::to_string(all.size() - 1) + "}" : "devices {" + list_str(all) + "}";
  }

  // One round of the host exchange: the calling device posts (c, in, out); the last local
  // device to arrive runs leader() (outside the lock), which fills x_.data. Throws what
  // failed (a mismatch, a timeout before every local device arrived, the leader's error).
  template <class Leader>
  void host_round(const Call& c, const void* in, void* out, Leader&& leader) {
    const int k = t_device - first_;
    std::unique_lock<std::mutex> l(x_.mu);
    if (!x_.broken.empty()) fail(kCollective, x_.broken);
    if (std::string why = abort_reason(); !why.empty()) fail(kAborted, why);
    x_.calls[size_t(k)] = c;
    x_.in[size_t(k)] = in;
    x_.out[size_t(k)] = out;
    x_.here[size_t(k)] = 1;
    const uint64_t my = x_.gen;
    if (++x_.arrived == local_) {
      std::string err;
      for (int r = 1; r < local_; ++r)
        if (!(x_.calls[size_t(r)] == x_.calls[0]))
          err = "[spmd] collectives over " + devices_str() + " do not match: device " + std::to_string(first_) +
                " called " + x_.calls[0].str() + ", device " + std::to_string(first_ + r) + " called " +
                x_.calls[size_t(r)].str() + " (every device must run the same collectives in the same order)";
      x_.busy = true;
      if (err.empty()) {
        l.unlock();
        try {
          leader();
        } catch (const std::exception& e) {
          err = cross_host_failure(c, e.what());
        }
        l.lock();
      }
      x_.busy = false;
      x_.arrived = 0;
      std::fill(x_.here.begin(), x_.here.end(), 0);
      if (!err.empty()) x_.broken = err;
      ++x_.gen;
      x_.cv.notify_all();
      if (!err.empty()) fail(kCollective, err);
      return;
    }
    const double timeout_s = local_timeout();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    while (x_.gen == my) {
      if (!x_.busy) {
        std::string why = abort_reason();
        std::vector<int> missing;
        for (int r = 0; r < local_; ++r)
          if (!x_.here[size_t(r)]) missing.push_back(first_ + r);
        if (!x_.broken.empty()) why = x_.broken;
        else if (why.empty() && std::chrono::steady_clock::now() >= deadline)
          x_.broken = why = "[spmd] " + c.str() + " over " + devices_str() + " timed out after " +
                            seconds_str(timeout_s) + " on host " + std::to_string(host_index()) + ": local device" +
                            (missing.size() > 1 ? "s " : " ") + list_str(missing) + " did not arrive";
        if (!why.empty()) {
          x_.here[size_t(k)] = 0;
          --x_.arrived;
          x_.cv.notify_all();
          fail(why == x_.broken ? kCollective : kAborted, why);
        }
        x_.cv.wait_until(l, deadline);
      } else {
        x_.cv.wait(l);
      }
    }
    if (!x_.broken.empty()) fail(kCollective, x_.broken);
  }

  // The message of a failed cross-host exchange: which host and rank went away.
  std::string cross_host_failure(const Call& c, const std::string& what) const {
    const int me = host_index();
    std::string peers;
    for (int h = 0; h < hosts_; ++h)
      if (h != me) peers += (peers.empty() ? "" : ", ") + host_range(h, local_);
    return "[spmd] " + c.str() + " over " + devices_str() + " failed across hosts on " + host_range(me, local_) +
           ": " + (hosts_ == 2 ? peers : "one of " + peers) +
           " did not answer within the timeout or lost its connection (killed or failed; AXLE_SPMD_TIMEOUT sets the "
           "timeout): " + what;
  }

  // Gathers every device's `bytes` of input (every host's local devices, over Gloo) and
  // returns them in global device order; valid until the caller's next collective.
  const char* gather_round(const Call& c, const void* in, size_t bytes) {
    host_round(c, in, nullptr, [&] {
      std::vector<char> mine(bytes * size_t(local_));
      for (int k = 0; k < local_; ++k)
        if (bytes) std::memcpy(mine.data() + size_t(k) * bytes, x_.in[size_t(k)], bytes);
      x_.data.assign(mine.size() * size_t(hosts_) + 1, 0);
      ProcessGroup& g = default_group();
      if (bytes) g.all_gather(mine.data(), x_.data.data(), int64_t(mine.size()), DType::UInt8);
      else g.barrier();
    });
    return x_.data.data();
  }

  // Reduce within the host (each subgroup's local members, rank order), all-reduce across
  // hosts, broadcast within the host.
  void cross_all_reduce(void* buf, int64_t n, DType t, ReduceOp op) {
    dispatch_reduce(t, "all_reduce", [&](auto zero) {
      using T = decltype(zero);
      const auto [sub, rank] = locate("all_reduce");
      (void)rank;
      const size_t nsub = subs_.size();
      host_round({"all_reduce", n, t, int64_t(op)}, buf, buf, [&] {
        const T identity = op == ReduceOp::Min   ? std::numeric_limits<T>::max()
                           : op == ReduceOp::Max ? std::numeric_limits<T>::lowest()
                                                 : T(0);
        x_.data.assign(nsub * size_t(n) * sizeof(T) + 1, 0);
        T* packed = reinterpret_cast<T*>(x_.data.data());
        std::fill(packed, packed + nsub * size_t(n), identity);
        for (size_t s = 0; s < nsub; ++s)
          for (int d : subs_[s]->devices) {
            if (d < first_ || d >= first_ + local_) continue;
            const T* src = static_cast<const T*>(x_.in[size_t(d - first_)]);
            T* dst = packed + s * size_t(n);
            for (int64_t i = 0; i < n; ++i) {
              if (op == ReduceOp::Min) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
              else if (op == ReduceOp::Max) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
              else dst[i] = T(dst[i] + src[i]);
            }
          }
        if (n > 0) default_group().all_reduce(packed, int64_t(nsub) * n, t, op == ReduceOp::Mean ? ReduceOp::Sum : op);
      });
      const T* mine = reinterpret_cast<const T*>(x_.data.data()) + size_t(sub) * size_t(n);
      T* dst = static_cast<T*>(buf);
      const T size = T(subs_[size_t(sub)]->size());
      for (int64_t i = 0; i < n; ++i) dst[i] = op == ReduceOp::Mean ? T(mine[i] / size) : mine[i];
    });
  }

  std::pair<int, int> locate(const char* what) const {
    const int d = t_device;
    AXLE_CHECK(d >= 0, "[spmd] ", what, " of an in-process device group called outside a device thread (call it "
               "inside dist::run_on_devices)");
    AXLE_CHECK(d < int(where_.size()), "[spmd] device ", d, " is not in in-process group ", id_, " (devices 0..",
               where_.size() - 1, ")");
    return where_[size_t(d)];
  }
  std::pair<Sub&, int> sub_of(const char* what) {
    auto [s, r] = locate(what);
    return {*subs_[size_t(s)], r};
  }

  int64_t id_;
  std::vector<std::unique_ptr<Sub>> subs_;
  std::vector<std::pair<int, int>> where_;  ///< device -> (subgroup, rank)
  int hosts_ = 1, local_ = 0, first_ = 0;   ///< several hosts: this host's devices
  bool cross_ = false;                      ///< a subgroup spans hosts: collectives go through x_
  HostExchange x_;
};

// ---- the registry of local groups ----
struct Groups {
  std::mutex mu;
  std::map<std::vector<std::vector<int>>, int64_t> ids;
  std::vector<std::unique_ptr<DeviceGroup>> groups;  ///< index = id - kLocalGroupBase; never removed
};
Groups& groups() {
  static Groups* g = new Groups();  // leaked on purpose: ids stay valid until exit
  return *g;
}
std::vector<DeviceGroup*> all_groups() {
  Groups& g = groups();
  std::lock_guard<std::mutex> l(g.mu);
  std::vector<DeviceGroup*> out;
  for (auto& p : g.groups) out.push_back(p.get());
  return out;
}

// ---- the device threads ----
struct Pool {
  std::mutex run_mu;  ///< one run_on_devices at a time
  std::mutex mu;
  std::condition_variable work, done;
  std::vector<std::thread> threads;
  uint64_t job = 0;
  int n = 0, first = 0, threads_per_device = 1, remaining = 0;  ///< n: this host's devices, from `first`
  const std::function<void(int)>* fn = nullptr;
  std::vector<std::string> errors;  ///< per device: "" or what it threw
  std::vector<int> kinds;
  std::vector<char> failed;
};
Pool& pool() {
  static Pool* p = new Pool();  // leaked on purpose: its threads block in it until exit
  return *p;
}

void abort_all(const std::string& why) {
  {
    RunState& r = run_state();
    std::lock_guard<std::mutex> g(r.mu);
    if (r.aborted) return;
    r.aborted = true;
    r.reason = why;
  }
  for (DeviceGroup* g : all_groups()) g->wake();
}

void device_finished(int k) {
  {
    RunState& r = run_state();
    std::lock_guard<std::mutex> g(r.mu);
    r.finished[size_t(k)] = 1;
  }
  for (DeviceGroup* g : all_groups()) g->wake();  // peers waiting for k fail now
}

void device_main(int k) {
  Pool& p = pool();
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    int tpd, first;
    {
      std::unique_lock<std::mutex> l(p.mu);
      p.work.wait(l, [&] { return p.job != seen; });
      seen = p.job;
      if (k >= p.n) continue;
      fn = p.fn;
      tpd = p.threads_per_device;
      first = p.first;
    }
    std::string err;
    int kind = kOwn;
    bool failed = false;
    const int dev = first + k;  // its global index
    t_device = dev;
    t_last_msg.clear();
    omp_set_num_threads(tpd);
    try {
      (*fn)(dev);
    } catch (const CollectiveFailure& e) {
      failed = true;
      err = e.what();
      kind = e.kind;
    } catch (const std::exception& e) {
      failed = true;
      err = e.what();
      // A collective failure the program wrapped in an error of its own.
      if (!t_last_msg.empty() && err.find(t_last_msg) != std::string::npos) kind = t_last_kind;
    } catch (...) {
      failed = true;
      err = "unknown exception";
    }
    t_device = -1;
    if (failed) abort_all("[spmd] aborted: device " + std::to_string(dev) + " failed: " + err);
    device_finished(dev);
    std::lock_guard<std::mutex> l(p.mu);
    p.errors[size_t(k)] = err;
    p.kinds[size_t(k)] = kind;
    p.failed[size_t(k)] = failed;
    if (--p.remaining == 0) p.done.notify_all();
  }
}

}  // namespace

int this_device() { return t_device; }

int host_count() {
  const detail::Job& j = detail::job();
  return detail::spmd_mode() && j.external ? j.world : 1;
}

int host_index() { return host_count() > 1 ? detail::job().rank : 0; }

int first_local_device(int n) {
  const int h = host_count();
  AXLE_CHECK(n % h == 0, "[spmd] ", n, " devices do not divide over ", h, " hosts");
  return host_index() * (n / h);
}

std::vector<std::vector<char>> gather_hosts(const std::vector<char>& mine) {
  const int h = host_count();
  if (h == 1) return {mine};
  ProcessGroup& g = default_group();
  int64_t size = int64_t(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(h));
  g.all_gather(&size, sizes.data(), 1, DType::Int64);
  const int64_t most = *std::max_element(sizes.begin(), sizes.end());
  std::vector<char> padded(mine);
  padded.resize(size_t(most) + 1);
  std::vector<char> all(size_t(most + 1) * size_t(h));
  g.all_gather(padded.data(), all.data(), most + 1, DType::UInt8);
  std::vector<std::vector<char>> out(static_cast<size_t>(h));
  for (int i = 0; i < h; ++i) {
    const char* b = all.data() + size_t(i) * size_t(most + 1);
    out[size_t(i)].assign(b, b + sizes[size_t(i)]);
  }
  return out;
}

void run_on_devices(int n, const std::function<void(int)>& fn, int threads_per_device) {
  AXLE_CHECK(n >= 1, "[spmd] expected at least one device, got ", n);
  AXLE_CHECK(threads_per_device >= 1, "[spmd] expected at least one thread per device, got ", threads_per_device);
  AXLE_CHECK(t_device < 0, "[spmd] run_on_devices called from device thread ", t_device, " (it is not reentrant)");
  const int first = first_local_device(n), local = n / host_count();
  // Several hosts: the cross-host group exists before any device needs it (a rendezvous),
  // and its collectives time out as the local ones do.
  if (host_count() > 1) {
    static std::once_flag once;
    std::call_once(once, [] {
      try {
        default_group().set_timeout(local_timeout());
      } catch (const std::exception& e) {
        AXLE_FAIL("[spmd] the rendezvous of the ", host_count(), " hosts (one SPMD process per host: host h is rank h) "
                  "failed on host ", host_index(), ": ", e.what());
      }
    });
  }
  Pool& p = pool();
  std::lock_guard<std::mutex> run(p.run_mu);
  {
    RunState& r = run_state();
    std::lock_guard<std::mutex> g(r.mu);
    r.n = n;
    r.first = first;
    r.local = local;
    r.finished.assign(size_t(n), 0);
    r.aborted = false;
    r.reason.clear();
  }
  for (DeviceGroup* g : all_groups()) g->reset();
  {
    std::unique_lock<std::mutex> l(p.mu);
    while (int(p.threads.size()) < local) {
      const int k = int(p.threads.size());
      p.threads.emplace_back(device_main, k);
      p.threads.back().detach();  // the pool lives until exit
    }
    p.n = local;
    p.first = first;
    p.fn = &fn;
    p.threads_per_device = threads_per_device;
    p.remaining = local;
    p.errors.assign(size_t(local), "");
    p.kinds.assign(size_t(local), kOwn);
    p.failed.assign(size_t(local), 0);
    ++p.job;
    p.work.notify_all();
    p.done.wait(l, [&] { return p.remaining == 0; });
    p.fn = nullptr;
  }
  // The device that caused the failure: its own error first, then a failed collective, then
  // an abort; the lowest device among equals.
  int worst = -1;
  for (int k = 0; k < local; ++k)
    if (p.failed[size_t(k)] && (worst < 0 || p.kinds[size_t(k)] < p.kinds[size_t(worst)])) worst = k;
  if (worst >= 0) AXLE_FAIL("[spmd] device ", first + worst, " failed: ", p.errors[size_t(worst)]);
}

int64_t local_group_id(const std::vector<std::vector<int>>& groups_in) {
  AXLE_CHECK(!groups_in.empty() && !groups_in[0].empty(), "[spmd] expected at least one non-empty device group");
  int n = 0;
  for (const auto& g : groups_in) {
    AXLE_CHECK(g.size() == groups_in[0].size(), "[spmd] expected device groups of one size, got sizes ",
               groups_in[0].size(), " and ", g.size());
    n += int(g.size());
  }
  std::vector<char> seen(size_t(n), 0);
  for (const auto& g : groups_in)
    for (int d : g) {
      AXLE_CHECK(d >= 0 && d < n, "[spmd] expected the device groups to partition devices 0..", n - 1, ", got device ",
                 d);
      AXLE_CHECK(!seen[size_t(d)], "[spmd] device ", d, " is in more than one device group");
      seen[size_t(d)] = 1;
    }
  Groups& g = groups();
  std::lock_guard<std::mutex> l(g.mu);
  if (auto it = g.ids.find(groups_in); it != g.ids.end()) return it->second;
  const int64_t id = kLocalGroupBase + int64_t(g.groups.size());
  g.groups.push_back(std::make_unique<DeviceGroup>(id, groups_in));
  g.ids[groups_in] = id;
  return id;
}

void set_local_timeout(double seconds) {
  AXLE_CHECK(seconds > 0 && std::isfinite(seconds), "[spmd] expected a positive timeout, got ", seconds, " s");
  g_timeout = seconds;
}

double local_timeout() {
  double t = g_timeout.load();
  if (t < 0) {
    t = env_timeout();
    double unset = -1;
    g_timeout.compare_exchange_strong(unset, t);
    t = g_timeout.load();
  }
  return t;
}

namespace detail {
ProcessGroup* local_group_by_id(int64_t id) {
  if (id < kLocalGroupBase) return nullptr;
  Groups& g = groups();
  std::lock_guard<std::mutex> l(g.mu);
  const int64_t i = id - kLocalGroupBase;
  AXLE_CHECK(i < int64_t(g.groups.size()), "[dist] unknown process group id ", id,
             " (no in-process device group has it)");
  return g.groups[size_t(i)].get();
}
}  // namespace detail

}  // namespace axle::dist
