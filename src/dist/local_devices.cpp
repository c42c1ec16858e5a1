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
  int n = 0;                   ///< devices running
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
  return r.n;
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
  }

  int rank() const override { return locate("rank").second; }
  int size() const override { return subs_[0]->size(); }
  int64_t id() const override { return id_; }
  void set_timeout(double s) override { set_local_timeout(s); }
  double timeout() const override { return local_timeout(); }

  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    AXLE_CHECK(op != ReduceOp::Mean || is_floating(t), "[all_reduce] mean expects a floating buffer, got ", t);
    AXLE_CHECK(n >= 0, "[all_reduce] expected a non-negative element count, got ", n);
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
    s.arrive(rank, {"broadcast", n, t, root}, buf, buf, local_timeout());
    if (rank != root && bytes) std::memcpy(buf, s.in[size_t(root)], bytes);
    s.sync();
  }

  void barrier() override {
    auto [s, rank] = sub_of("barrier");
    s.arrive(rank, {"barrier", 0, DType::UInt8}, nullptr, nullptr, local_timeout());
  }

  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    AXLE_CHECK(n >= 0, "[all_to_all] expected a non-negative chunk size, got ", n);
    auto [s, rank] = sub_of("all_to_all");
    const size_t bytes = size_t(n) * itemsize(t), total = bytes * size_t(s.size());
    const char *i0 = static_cast<const char*>(in), *o0 = static_cast<const char*>(out);
    AXLE_CHECK(total == 0 || i0 + total <= o0 || o0 + total <= i0,
               "[all_to_all] expected distinct input and output buffers (they overlap)");
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
  }
  void wake() {
    for (auto& s : subs_) s->wake();
  }

 private:
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
  int n = 0, threads_per_device = 1, remaining = 0;
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
    int tpd;
    {
      std::unique_lock<std::mutex> l(p.mu);
      p.work.wait(l, [&] { return p.job != seen; });
      seen = p.job;
      if (k >= p.n) continue;
      fn = p.fn;
      tpd = p.threads_per_device;
    }
    std::string err;
    int kind = kOwn;
    bool failed = false;
    t_device = k;
    t_last_msg.clear();
    omp_set_num_threads(tpd);
    try {
      (*fn)(k);
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
    if (failed) abort_all("[spmd] aborted: device " + std::to_string(k) + " failed: " + err);
    device_finished(k);
    std::lock_guard<std::mutex> l(p.mu);
    p.errors[size_t(k)] = err;
    p.kinds[size_t(k)] = kind;
    p.failed[size_t(k)] = failed;
    if (--p.remaining == 0) p.done.notify_all();
  }
}

}  // namespace

int this_device() { return t_device; }

void run_on_devices(int n, const std::function<void(int)>& fn, int threads_per_device) {
  AXLE_CHECK(n >= 1, "[spmd] expected at least one device, got ", n);
  AXLE_CHECK(threads_per_device >= 1, "[spmd] expected at least one thread per device, got ", threads_per_device);
  AXLE_CHECK(t_device < 0, "[spmd] run_on_devices called from device thread ", t_device, " (it is not reentrant)");
  Pool& p = pool();
  std::lock_guard<std::mutex> run(p.run_mu);
  {
    RunState& r = run_state();
    std::lock_guard<std::mutex> g(r.mu);
    r.n = n;
    r.finished.assign(size_t(n), 0);
    r.aborted = false;
    r.reason.clear();
  }
  for (DeviceGroup* g : all_groups()) g->reset();
  {
    std::unique_lock<std::mutex> l(p.mu);
    while (int(p.threads.size()) < n) {
      const int k = int(p.threads.size());
      p.threads.emplace_back(device_main, k);
      p.threads.back().detach();  // the pool lives until exit
    }
    p.n = n;
    p.fn = &fn;
    p.threads_per_device = threads_per_device;
    p.remaining = n;
    p.errors.assign(size_t(n), "");
    p.kinds.assign(size_t(n), kOwn);
    p.failed.assign(size_t(n), 0);
    ++p.job;
    p.work.notify_all();
    p.done.wait(l, [&] { return p.remaining == 0; });
    p.fn = nullptr;
  }
  // The device that caused the failure: its own error first, then a failed collective, then
  // an abort; the lowest device among equals.
  int worst = -1;
  for (int k = 0; k < n; ++k)
    if (p.failed[size_t(k)] && (worst < 0 || p.kinds[size_t(k)] < p.kinds[size_t(worst)])) worst = k;
  if (worst >= 0) AXLE_FAIL("[spmd] device ", worst, " failed: ", p.errors[size_t(worst)]);
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
