// The supervisor of local processes (supervisor.h): start, relay output, fail fast, reap.
#include "dist/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <thread>

#include "axle/error.h"

namespace axle::dist::detail {

int64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    return "was killed by signal " + std::to_string(s) + " (" + ::strsignal(s) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped (status " + std::to_string(status) + ")";
}

namespace {

volatile std::sig_atomic_t g_signal = 0;
void note_signal(int sig) { g_signal = sig; }
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// Installs the forwarding handlers for its lifetime.
class SignalForwarding {
 public:
  explicit SignalForwarding(bool on) : on_(on) {
    if (!on_) return;
    g_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &old_[i]);
  }
  ~SignalForwarding() {
    if (!on_) return;
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &old_[i], nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  bool on_;
  struct sigaction old_[std::size(kForwarded)] = {};
};

struct Child {
  ChildResult r;
  int fd[2] = {-1, -1};  // stdout, stderr read ends
  std::string buf[2];
  bool running = true;
};

void emit(int stream, int rank, const std::string& line, bool prefix) {
  const std::string s = prefix ? "[rank " + std::to_string(rank) + "] " + line + "\n" : line + "\n";
  FILE* f = stream == 0 ? stdout : stderr;
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

// Reads what is available and relays whole lines; at end of file closes the pipe.
void pump(Child& c, int stream, bool prefix) {
  char tmp[65536];
  const ssize_t n = ::read(c.fd[stream], tmp, sizeof tmp);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  std::string& b = c.buf[stream];
  if (n <= 0) {
    if (!b.empty()) emit(stream, c.r.rank, b, prefix);
    b.clear();
    ::close(c.fd[stream]);
    c.fd[stream] = -1;
    return;
  }
  b.append(tmp, size_t(n));
  size_t start = 0, nl;
  while ((nl = b.find('\n', start)) != std::string::npos) {
    emit(stream, c.r.rank, b.substr(start, nl - start), prefix);
    start = nl + 1;
  }
  b.erase(0, start);
}

class Supervisor {
 public:
  explicit Supervisor(const SuperviseOptions& o) : o_(o) {}
  ~Supervisor() {
    kill_all(SIGKILL);
    for (Child& c : children_)
      for (int& fd : c.fd)
        if (fd >= 0) ::close(fd);
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void start(const ChildSpec& s) {
    Child c;
    c.r.rank = s.rank;
    int out[2], err[2];
    AXLE_CHECK(::pipe2(out, O_CLOEXEC) == 0, "[launch] pipe() failed: ", std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      AXLE_FAIL("[launch] pipe() failed: ", std::strerror(e));
    }
    std::vector<std::string> args = s.argv, env = s.env;
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = o_.die_with_parent ? fork_exec(s.exe, argv, envp, out[1], err[1], &pid)
                                      : spawn(s.exe, argv, envp, out[1], err[1], &pid);
    ::close(out[1]);
    ::close(err[1]);
    if (rc != 0) {
      ::close(out[0]);
      ::close(err[0]);
      AXLE_FAIL("[launch] cannot start rank ", s.rank, " (", s.exe, "): ", std::strerror(rc));
    }
    c.r.pid = pid;
    c.fd[0] = out[0];
    c.fd[1] = err[0];
    children_.push_back(std::move(c));
  }

  SuperviseResult run() {
    SuperviseResult res;
    while (!all_done() && first_failed() < 0 && g_signal == 0) {
      pump_all(50);
      reap(false);
    }
    if (g_signal != 0 && o_.forward_signals) {
      res.signal = g_signal;
      stop(res.signal);
    } else if (first_failed() >= 0) {
      // Let the others end on their own first (a lost peer), then stop what still runs.
      wait_until(o_.settle_s);
      stop(SIGTERM);
    }
    // Relay what the children wrote before they ended.
    for (int i = 0; i < 100; ++i) {
      bool open = false;
      for (const Child& c : children_) open = open || c.fd[0] >= 0 || c.fd[1] >= 0;
      if (!open) break;
      pump_all(10);
    }
    res.first_failed = first_failed();
    for (const Child& c : children_) res.children.push_back(c.r);
    return res;
  }

 private:
  // Child side of fork(): only async-signal-safe calls until execve.
  static int fork_exec(const std::string& exe, std::vector<char*>& argv, std::vector<char*>& envp, int out, int err,
                       pid_t* pid_out) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return errno;
    const pid_t parent = ::getpid();
    const char* path = exe.c_str();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      ::close(report[0]);
      ::close(report[1]);
      return e;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) ::sigaction(sig, &dfl, nullptr);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execve(path, argv.data(), envp.data());
      const int e = errno;
      [[maybe_unused]] const ssize_t w = ::write(report[1], &e, sizeof e);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we might signal it
    ::close(report[1]);
    int e = 0;
    ssize_t n;
    do n = ::read(report[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    ::close(report[0]);
    if (n == ssize_t(sizeof e)) {
      ::waitpid(pid, nullptr, 0);
      return e;
    }
    *pid_out = pid;
    return 0;
  }

  static int spawn(const std::string& exe, std::vector<char*>& argv, std::vector<char*>& envp, int out, int err,
                   pid_t* pid) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group: signalling -pid also stops anything the child started.
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigemptyset(&all);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&all, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = ::posix_spawn(pid, exe.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc;
  }

  void reap(bool block) {
    for (Child& c : children_) {
      if (!c.running) continue;
      int st = 0;
      const pid_t p = ::waitpid(c.r.pid, &st, block ? 0 : WNOHANG);
      if (p == c.r.pid) {
        c.running = false;
        c.r.status = st;
        c.r.exit_ns = monotonic_ns();
      }
    }
  }

  // Signals every running child's process group (and the child, should it have left it).
  void kill_all(int sig) {
    for (Child& c : children_) {
      if (!c.running) continue;
      c.r.stopped_by_us = true;
      ::kill(-c.r.pid, sig);
      ::kill(c.r.pid, sig);
    }
    if (sig == SIGKILL) reap(/*block=*/true);
  }

  // `sig` to every child still running; SIGKILL after the grace period.
  void stop(int sig) {
    if (o_.grace_s > 0 && sig != SIGKILL) {
      kill_all(sig);
      wait_until(o_.grace_s);
    }
    kill_all(SIGKILL);
  }

  // Relays output and reaps until every child ended or `seconds` passed.
  void wait_until(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!all_done() && std::chrono::steady_clock::now() < until) {
      pump_all(20);
      reap(false);
    }
  }

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
      if (fds[i].revents) pump(*who[i].first, who[i].second, o_.prefix_output);
  }

  int first_failed() const {
    int first = -1;
    for (size_t i = 0; i < children_.size(); ++i) {
      const Child& c = children_[i];
      if (c.running || !c.r.failed()) continue;
      if (first < 0 || c.r.exit_ns < children_[size_t(first)].r.exit_ns) first = int(i);
    }
    return first;
  }
  bool all_done() const {
    for (const Child& c : children_)
      if (c.running) return false;
    return true;
  }

  SuperviseOptions o_;
  std::vector<Child> children_;
};

}  // namespace

SuperviseResult supervise(const std::vector<ChildSpec>& specs, const SuperviseOptions& opts) {
  g_signal = 0;
  SignalForwarding forwarding(opts.forward_signals);
  Supervisor s(opts);
  for (const ChildSpec& spec : specs) s.start(spec);
  return s.run();
}

}  // namespace axle::dist::detail
