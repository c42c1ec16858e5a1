// axle::launch: re-executes this program once per rank (posix_spawn of /proc/self/exe
// with the same argv; fork() is unsafe once OpenMP / oneDNN threads exist). A child
// recognises itself by AXLE_LAUNCH_* variables when it reaches launch(), runs fn(rank)
// and exits. The parent supervises them (supervisor.h, shared with axle-run: each
// child's output lines with a "[rank N] " prefix, fail-fast), and on a failure (exception
// -> error file in the job directory, non-zero exit, signal) throws naming the rank.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string_view>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "axle/metrics.h"
#include "dist/dist_internal.h"
#include "dist/shm_allreduce.h"
#include "dist/supervisor.h"

extern char** environ;

namespace axle {
namespace {

namespace fs = std::filesystem;
using dist::detail::job;

int64_t mono_ns() { return dist::detail::monotonic_ns(); }

// Seed anti-pattern 1. What a process did with the xla device outside launched functions:
// axle::device() calls, and xla tensors (the counter, less those created by functions that
// launch() ran in this process).
std::atomic<bool> g_device_requested{false};
std::atomic<bool> g_in_launched_fn{false};
int64_t g_tensors_in_fns = 0;

void check_device_unused(const char* where) {
  const int64_t n = metrics::counter_value("CreateXlaTensor") - g_tensors_in_fns;
  const bool asked = g_device_requested;
  if (n <= 0 && !asked) return;
  std::string what = asked ? "called axle::device() (or xm::xla_device())" : "";
  if (n > 0) what += std::string(asked ? " and " : "") + "created " + std::to_string(n) + " xla tensor" + (n == 1 ? "" : "s");
  AXLE_FAIL("[launch] Don't call device() before launch() (anti-pattern 1 of the training-loop patterns): this process ",
            what, " ", where, ", and a device used before launch() breaks multi-process training (every process "
            "must set up its own device). Fix: call axle::device(), and create models and tensors on it, only inside "
            "the function you pass to launch(): launch([](int index) { auto dev = axle::device(); ... })");
}

// Runs a launched function in this process (one process, or an external launcher's rank):
// what it does with the device is not "before launch()" for a later launch() call.
void run_here(const std::function<void(int)>& fn, int index) {
  struct Scope {
    int64_t before = metrics::counter_value("CreateXlaTensor");
    bool asked = g_device_requested;
    Scope() { g_in_launched_fn = true; }
    ~Scope() {
      g_tensors_in_fns += metrics::counter_value("CreateXlaTensor") - before;
      g_device_requested = asked;
      g_in_launched_fn = false;
    }
  } scope;
  fn(index);
}

// The process count, and whether a setting chose it (nothing set: 1).
std::pair<int, bool> world_size_from(const LaunchOptions& o) {
  AXLE_CHECK(o.nprocs >= 0 && o.world_size >= 0, "[launch] expected nprocs >= 0 (0: from the environment), got ",
             o.nprocs ? o.nprocs : o.world_size);
  AXLE_CHECK(!(o.nprocs > 0 && o.world_size > 0 && o.nprocs != o.world_size),
             "[launch] nprocs and world_size (its older name) disagree: ", o.nprocs, " and ", o.world_size,
             "; set only nprocs");
  if (o.nprocs > 0) return {o.nprocs, true};
  if (o.world_size > 0) return {o.world_size, true};
  for (const char* name : {"AXLE_NUM_DEVICES", "CPU_NUM_DEVICES"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    AXLE_CHECK(end && *end == '\0' && n >= 1 && n <= 4096, "[launch] expected ", name,
               " to be a positive process count, got '", v, "'");
    return {int(n), true};
  }
  return {1, false};
}

// ---------------- child side ----------------

void write_error_file(const std::string& dir, int rank, const std::string& kind, const std::string& msg) {
  if (dir.empty()) return;
  const std::string path = dir + "/error." + std::to_string(rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << kind << "\n" << mono_ns() << "\n" << msg;
  }
  std::rename(tmp.c_str(), path.c_str());
}

[[noreturn]] void child_exit(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

std::atomic<bool> g_child_ran{false};

// A child that ends without reaching the launch() call its parent made (its code before
// launch() took another path) must not pass for a successful rank.
void child_never_launched() {
  if (g_child_ran) return;
  const dist::detail::Job& j = job();
  const std::string msg =
      "the process ended before it reached its launch() call; launch() re-runs this program in every child, so "
      "the code before launch() must take the same path in each process";
  write_error_file(j.dir, j.rank, "error", msg);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::fflush(nullptr);
  ::_exit(1);
}
[[maybe_unused]] const bool g_child_guard = [] {
  if (std::getenv(dist::detail::kEnvRank)) std::atexit(child_never_launched);
  return true;
}();

[[noreturn]] void run_child(const std::function<void(int)>& fn) {
  g_child_ran = true;
  dist::detail::Job& j = job();
  // Programs this rank starts are not ranks themselves.
  for (const char* v : {dist::detail::kEnvRank, dist::detail::kEnvWorld, dist::detail::kEnvDir,
                        dist::detail::kEnvParent, dist::detail::kEnvTimeout, dist::detail::kEnvSeq})
    if (std::string_view(v) != dist::detail::kEnvParent) ::unsetenv(v);
  // Die with the parent: no orphan keeps running if launch() is interrupted.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const char* p = std::getenv(dist::detail::kEnvParent); p && std::atol(p) != long(::getppid())) child_exit(3);
  ::unsetenv(dist::detail::kEnvParent);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto fail = [&](const std::string& msg) {
    const bool comm = dist::detail::had_comm_failure();
    write_error_file(j.dir, j.rank, comm ? "comm" : "error", msg);
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    try { dist::detail::shutdown_groups(); } catch (...) {}
    child_exit(1);
  };
  try {
    check_device_unused("before launch() reached this child");
    fn(j.rank);
    // Leave together, so no rank closes its connections while another still talks to it.
    if (dist::detail::default_group_created() && j.world > 1) dist::default_group().barrier();
    dist::detail::shutdown_groups();
  } catch (const std::exception& e) {
    fail(e.what());
  } catch (...) {
    fail("unknown exception");
  }
  child_exit(0);
}

// ---------------- parent side ----------------

std::vector<std::string> self_argv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string cur;
  for (char c : all) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return args;
}

struct Failure {
  int rank;
  bool primary;  // the cause, not a rank that lost its peers
  int64_t when;
  std::string msg;
};

// One multi-process launch(): a private rendezvous directory, the children (supervisor.h),
// and the report of a failure, which reads the error files the children left there.
class Job {
 public:
  Job(int world, const LaunchOptions& o, int seq) : world_(world), opts_(o), seq_(seq) {}
  ~Job() {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      ::shm_unlink(dist::detail::ShmAllReduce::name_for(dir_).c_str());  // if a child died before rank 0 unlinked it
    }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void run() {
    char tmpl[] = "/tmp/axle-launch-XXXXXX";
    AXLE_CHECK(::mkdtemp(tmpl), "[launch] cannot create a rendezvous directory in /tmp: ", std::strerror(errno));
    dir_ = tmpl;
    fs::create_directories(dir_ + "/store");
    // Children end their own lives with the parent (run_child: PR_SET_PDEATHSIG), so the
    // cheaper posix_spawn serves; a failure stops the others after 0.5 s with SIGKILL.
    const dist::detail::SuperviseResult res =
        dist::detail::supervise(specs(), {.prefix_output = opts_.prefix_output, .settle_s = 0.5, .grace_s = 0});
    if (res.first_failed >= 0) report(res);
  }

 private:
  std::vector<dist::detail::ChildSpec> specs() const {
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    AXLE_CHECK(n > 0, "[launch] cannot find this program (/proc/self/exe): ", std::strerror(errno));
    exe[n] = '\0';
    const std::vector<std::string> args = self_argv();
    AXLE_CHECK(!args.empty(), "[launch] cannot read this program's arguments (/proc/self/cmdline)");

    // Environment: ours, minus stale launch variables, plus the child's identity.
    std::vector<std::string> base;
    bool has_omp = false;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      if (kv.rfind("AXLE_LAUNCH_", 0) == 0) continue;
      if (kv.rfind("OMP_NUM_THREADS=", 0) == 0) has_omp = true;
      base.push_back(kv);
    }
    if (!has_omp) {
      // Share the cores instead of every rank spinning one OpenMP thread per core.
      const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
      base.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1u, hw / unsigned(world_))));
    }
    std::ostringstream timeout;
    timeout << opts_.timeout_s;

    std::vector<dist::detail::ChildSpec> out;
    for (int r = 0; r < world_; ++r) {
      dist::detail::ChildSpec c{.rank = r, .exe = exe, .argv = args, .env = base};
      c.env.push_back(std::string(dist::detail::kEnvRank) + "=" + std::to_string(r));
      c.env.push_back(std::string(dist::detail::kEnvWorld) + "=" + std::to_string(world_));
      c.env.push_back(std::string(dist::detail::kEnvDir) + "=" + dir_);
      c.env.push_back(std::string(dist::detail::kEnvParent) + "=" + std::to_string(::getpid()));
      c.env.push_back(std::string(dist::detail::kEnvTimeout) + "=" + timeout.str());
      c.env.push_back(std::string(dist::detail::kEnvSeq) + "=" + std::to_string(seq_));
      out.push_back(std::move(c));
    }
    return out;
  }

  [[noreturn]] void report(const dist::detail::SuperviseResult& res) const {
    std::vector<Failure> fails;
    for (const dist::detail::ChildResult& c : res.children) {
      if (!c.failed()) continue;
      Failure f{c.rank, true, c.exit_ns, "rank " + std::to_string(c.rank) + " " + dist::detail::describe_status(c.status)};
      std::ifstream in(dir_ + "/error." + std::to_string(c.rank));
      std::string kind, when;
      if (in && std::getline(in, kind) && std::getline(in, when)) {
        std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        f.primary = kind != "comm";
        f.when = std::atoll(when.c_str());
        f.msg = "rank " + std::to_string(c.rank) + " failed: " + msg;
      }
      fails.push_back(std::move(f));
    }
    std::stable_sort(fails.begin(), fails.end(), [](const Failure& a, const Failure& b) {
      if (a.primary != b.primary) return a.primary;
      return a.when < b.when;
    });
    std::string msg = "[launch] " + fails[0].msg;
    if (fails.size() > 1) {
      msg += " (also: ";
      for (size_t i = 1; i < fails.size(); ++i) msg += (i > 1 ? "; " : "") + fails[i].msg;
      msg += ")";
    }
    AXLE_FAIL(msg);
  }

  int world_;
  LaunchOptions opts_;
  int seq_;
  std::string dir_;
};

}  // namespace

void launch(const std::function<void(int)>& fn, const LaunchOptions& opts) {
  AXLE_CHECK(fn, "[launch] expected a function to run, got an empty std::function");
  AXLE_CHECK(opts.timeout_s > 0, "[launch] expected a positive timeout_s, got ", opts.timeout_s);
  dist::detail::Job& j = job();
  // The n-th launch() of a process starts children that resume at their own n-th call:
  // earlier calls were done by the parent already, so a child skips them.
  static int calls = 0;
  const int seq = calls++;
  AXLE_CHECK(!g_child_ran && !g_in_launched_fn,
             "[launch] launch() called inside a launched function: nested launches are not supported");
  if (j.child) {
    const char* target = std::getenv(dist::detail::kEnvSeq);
    if (target && seq < std::atoi(target)) return;
    run_child(fn);  // does not return
  }
  if (dist::detail::spmd_mode()) {
    const int n = opts.nprocs ? opts.nprocs : opts.world_size;
    AXLE_CHECK(n <= 1, "[launch] SPMD drives all local devices from one process: run one process per host (got nprocs = ",
               n, ")");
    run_here(fn, 0);
    return;
  }
  check_device_unused("before launch()");
  if (j.external) {
    // torchrun-style: this process is one rank already.
    j.timeout_s = opts.timeout_s;
    run_here(fn, j.local);
    return;
  }
  if (opts.debug_single_process) {
    run_here(fn, 0);
    return;
  }
  const auto [world, chosen] = world_size_from(opts);
  if (world == 1) {
    static bool noted = false;
    const unsigned cores = std::thread::hardware_concurrency();
    if (!chosen && cores > 1 && !noted) {
      noted = true;
      std::fprintf(stderr,
                   "[launch] note: running 1 process, as nothing set the process count; this machine has %u cores: to run N "
                   "processes (one per device, about %u/N threads each) pass launch(fn, {.nprocs = N}) or set "
                   "AXLE_NUM_DEVICES=N ({.nprocs = 1} keeps one process without this note)\n",
                   cores, cores);
    }
    run_here(fn, 0);
    return;
  }
  Job job_(world, opts, seq);
  job_.run();
}

namespace xmp {
void spawn(const std::function<void(int)>& fn, int nprocs) { launch(fn, {.nprocs = nprocs}); }
}  // namespace xmp

namespace dist::detail {
void note_device_requested() {
  if (!g_in_launched_fn) g_device_requested = true;
}
}  // namespace dist::detail

}  // namespace axle
