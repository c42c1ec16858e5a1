// axle::launch: re-executes this program once per rank (posix_spawn of /proc/self/exe
// with the same argv; fork() is unsafe once OpenMP / oneDNN threads exist). A child
// recognises itself by AXLE_LAUNCH_* variables when it reaches launch(), runs fn(rank)
// and exits. The parent forwards each child's output lines with a "[rank N] " prefix,
// watches for failures (exception -> error file in the job directory, non-zero exit,
// signal), kills every other child's process group, and throws naming the rank.
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

extern char** environ;

namespace axle {
namespace {

namespace fs = std::filesystem;
using dist::detail::job;

int64_t mono_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

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

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd[2] = {-1, -1};  // stdout, stderr read ends
  std::string buf[2];
  bool running = true;
  int status = 0;
  bool killed_by_us = false;
  int64_t exit_ns = 0;
};

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

void emit(int stream, int rank, const std::string& line, bool prefix) {
  std::string s = prefix ? "[rank " + std::to_string(rank) + "] " + line + "\n" : line + "\n";
  FILE* f = stream == 0 ? stdout : stderr;
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

// Reads what is available; returns false at end of file.
bool pump(Child& c, int stream, bool prefix) {
  char tmp[65536];
  ssize_t n = ::read(c.fd[stream], tmp, sizeof tmp);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!c.buf[stream].empty()) emit(stream, c.rank, c.buf[stream], prefix);
    c.buf[stream].clear();
    ::close(c.fd[stream]);
    c.fd[stream] = -1;
    return false;
  }
  std::string& b = c.buf[stream];
  b.append(tmp, size_t(n));
  size_t start = 0, nl;
  while ((nl = b.find('\n', start)) != std::string::npos) {
    emit(stream, c.rank, b.substr(start, nl - start), prefix);
    start = nl + 1;
  }
  b.erase(0, start);
  return true;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    return "was killed by signal " + std::to_string(s) + " (" + ::strsignal(s) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped (status " + std::to_string(status) + ")";
}

struct Failure {
  int rank;
  bool primary;  // the cause, not a rank that lost its peers
  int64_t when;
  std::string msg;
};

class Job {
 public:
  Job(int world, const LaunchOptions& o, int seq) : world_(world), opts_(o), seq_(seq) {}
  ~Job() {
    kill_all();
    for (Child& c : children_) {
      for (int& fd : c.fd)
        if (fd >= 0) ::close(fd);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      ::shm_unlink(dist::detail::ShmAllReduce::name_for(dir_).c_str());  // if a child died before rank 0 unlinked it
    }
  }

  void run() {
    char tmpl[] = "/tmp/axle-launch-XXXXXX";
    AXLE_CHECK(::mkdtemp(tmpl), "[launch] cannot create a rendezvous directory in /tmp: ", std::strerror(errno));
    dir_ = tmpl;
    fs::create_directories(dir_ + "/store");
    spawn_all();
    monitor();
  }

 private:
  void spawn_all() {
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    AXLE_CHECK(n > 0, "[launch] cannot find this program (/proc/self/exe): ", std::strerror(errno));
    exe[n] = '\0';
    std::vector<std::string> args = self_argv();
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

    for (int r = 0; r < world_; ++r) {
      Child c;
      c.rank = r;
      int out[2], err[2];
      AXLE_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "[launch] pipe() failed: ",
                 std::strerror(errno));
      std::vector<std::string> env = base;
      env.push_back(std::string(dist::detail::kEnvRank) + "=" + std::to_string(r));
      env.push_back(std::string(dist::detail::kEnvWorld) + "=" + std::to_string(world_));
      env.push_back(std::string(dist::detail::kEnvDir) + "=" + dir_);
      env.push_back(std::string(dist::detail::kEnvParent) + "=" + std::to_string(::getpid()));
      env.push_back(std::string(dist::detail::kEnvTimeout) + "=" + timeout.str());
      env.push_back(std::string(dist::detail::kEnvSeq) + "=" + std::to_string(seq_));
      std::vector<char*> envp, argv;
      for (auto& s : env) envp.push_back(s.data());
      envp.push_back(nullptr);
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);

      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_adddup2(&fa, out[1], 1);
      posix_spawn_file_actions_adddup2(&fa, err[1], 2);
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      // Its own process group: killing -pid also stops anything the child started.
      posix_spawnattr_setpgroup(&attr, 0);
      sigset_t none, all;
      sigemptyset(&none);
      sigemptyset(&all);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&all, sig);
      posix_spawnattr_setsigmask(&attr, &none);
      posix_spawnattr_setsigdefault(&attr, &all);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
      pid_t pid = -1;
      const int rc = ::posix_spawn(&pid, exe, &fa, &attr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
      posix_spawnattr_destroy(&attr);
      ::close(out[1]);
      ::close(err[1]);
      if (rc != 0) {
        ::close(out[0]);
        ::close(err[0]);
        AXLE_FAIL("[launch] cannot start rank ", r, " (", exe, "): ", std::strerror(rc));
      }
      c.pid = pid;
      c.fd[0] = out[0];
      c.fd[1] = err[0];
      children_.push_back(std::move(c));
    }
  }

  void reap(bool block) {
    for (Child& c : children_) {
      if (!c.running) continue;
      int st = 0;
      pid_t p = ::waitpid(c.pid, &st, block ? 0 : WNOHANG);
      if (p == c.pid) {
        c.running = false;
        c.status = st;
        c.exit_ns = mono_ns();
      }
    }
  }

  void kill_all() {
    for (Child& c : children_) {
      if (!c.running) continue;
      c.killed_by_us = true;
      ::kill(-c.pid, SIGKILL);
      ::kill(c.pid, SIGKILL);
    }
    reap(/*block=*/true);
  }

  // Forwards output until every pipe is closed or `until` passes.
  void pump_all(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, int>> who;
    for (Child& c : children_)
      for (int s = 0; s < 2; ++s)
        if (c.fd[s] >= 0) {
          fds.push_back({c.fd[s], POLLIN, 0});
          who.push_back({&c, s});
        }
    if (fds.empty()) {
      if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return;
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents) pump(*who[i].first, who[i].second, opts_.prefix_output);
  }

  bool any_failed() const {
    for (const Child& c : children_)
      if (!c.running && !c.killed_by_us && c.status != 0) return true;
    return false;
  }
  bool all_done() const {
    for (const Child& c : children_)
      if (c.running) return false;
    return true;
  }

  void monitor() {
    while (!all_done() && !any_failed()) {
      pump_all(50);
      reap(false);
    }
    if (any_failed()) {
      // Give the others a moment to fail on their own (a lost peer), so the report can
      // tell the cause from its consequences; then stop whatever still runs.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (!all_done() && std::chrono::steady_clock::now() < until) {
        pump_all(20);
        reap(false);
      }
      kill_all();
    }
    // Drain what the children wrote before they ended.
    for (int i = 0; i < 100; ++i) {
      bool open = false;
      for (const Child& c : children_) open = open || c.fd[0] >= 0 || c.fd[1] >= 0;
      if (!open) break;
      pump_all(10);
    }
    if (!any_failed()) return;

    std::vector<Failure> fails;
    for (const Child& c : children_) {
      if (c.killed_by_us || c.status == 0) continue;
      Failure f{c.rank, true, c.exit_ns, "rank " + std::to_string(c.rank) + " " + describe_status(c.status)};
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
  std::vector<Child> children_;
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
