// axle-run: starts N local processes of a program with torchrun's variables and
// supervises them (torchrun --nproc-per-node, with its fail-fast semantics).
//
//   axle-run --nproc-per-node 2 axle-train --pattern ddp --model mlp
//   axle-run --nproc-per-node 4 --nnodes 2 --node-rank 1 --master-addr node01 PROGRAM ARGS...
//
// Each child gets RANK (node_rank * nproc + local), LOCAL_RANK, WORLD_SIZE (nnodes * nproc),
// LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), MASTER_ADDR, MASTER_PORT, and, unless set,
// OMP_NUM_THREADS (this machine's cores / nproc). Its output lines come back prefixed with
// "[rank N] ". The supervisor is axle::launch's (src/dist/supervisor.h): when a child fails
// (non-zero exit or a signal) the others get SIGTERM, then SIGKILL after --grace-period; a
// SIGINT / SIGTERM / SIGHUP to axle-run is forwarded to every child; children die with
// axle-run even when it is killed (PR_SET_PDEATHSIG), each in its own process group.
//
// Exit status: 0 when every child exited 0; the failed child's exit status, or 128 + its
// signal; 128 + the signal axle-run got and forwarded; 2 for bad flags or a program that
// cannot be started.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "axle/error.h"
#include "dist/launch_env.h"
#include "dist/supervisor.h"

extern char** environ;

namespace {

namespace d = axle::dist::detail;

int fail(const std::string& msg, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "axle-run: error: %s\n", msg.c_str());
  return status;
}

bool executable(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// PROGRAM as execvp would find it: a name with a '/' as is, else the first match in PATH.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!executable(name)) throw axle::Error("cannot run '" + name + "': not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(p)) return p;
    start = end + 1;
  }
  throw axle::Error("cannot run '" + name + "': no executable of that name in PATH");
}

std::string signal_name(int sig) { return "signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")"; }

}  // namespace

int main(int argc, char** argv) {
  int nproc = 1, nnodes = 1, node_rank = 0, port = 0;
  std::string master_addr;
  double grace = 5;
  bool no_prefix = false;
  CLI::App app{"axle-run: start N local processes of PROGRAM with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, "
               "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and supervise them: when one fails the others "
               "are stopped, and axle-run exits non-zero naming it",
               "axle-run"};
  app.add_option("--nproc-per-node,--nproc_per_node", nproc, "processes to start on this node")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--nnodes", nnodes, "nodes in the job (each runs its own axle-run)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--node-rank,--node_rank", node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  app.add_option("--master-addr,--master_addr", master_addr,
                 "address of node 0, where rank 0 serves the rendezvous (default: MASTER_ADDR if set, else 127.0.0.1 "
                 "for one node; required for several)");
  app.add_option("--master-port,--master_port", port,
                 "port of the rendezvous (default: MASTER_PORT if set, else " + std::to_string(d::kDefaultMasterPort) + ")")
      ->check(CLI::Range(1, 65535));
  app.add_option("--grace-period", grace, "seconds between SIGTERM and SIGKILL when stopping the children")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-prefix", no_prefix, "relay the children's output lines without \"[rank N] \"");
  app.prefix_command();  // the first argument that is not an option, and all after it: PROGRAM ARGS...
  app.footer("usage: axle-run [OPTIONS] PROGRAM [ARGS...]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::vector<std::string> program = app.remaining();
  if (program.empty()) return fail("expected PROGRAM [ARGS...] after the options (axle-run --help)", 2);

  std::string exe;
  try {
    if (node_rank < 0 || node_rank >= nnodes)
      throw axle::Error("expected 0 <= --node-rank < --nnodes, got --node-rank " + std::to_string(node_rank) +
                        " with --nnodes " + std::to_string(nnodes));
    if (master_addr.empty()) {
      const char* env = std::getenv("MASTER_ADDR");
      if (env && *env) master_addr = env;
      else if (nnodes == 1) master_addr = "127.0.0.1";
      else
        throw axle::Error("--nnodes " + std::to_string(nnodes) +
                          " needs --master-addr (or MASTER_ADDR): the address of node 0, which every node reaches");
    }
    if (port == 0) {
      const char* env = std::getenv("MASTER_PORT");
      port = d::kDefaultMasterPort;
      if (env && *env) {
        char* end = nullptr;
        const long p = std::strtol(env, &end, 10);
        if (!end || *end || p < 1 || p > 65535)
          throw axle::Error("expected a TCP port (1..65535) in MASTER_PORT, got '" + std::string(env) + "'");
        port = int(p);
      }
    }
    exe = find_program(program[0]);
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  }

  // The children's environment: ours, less any rank identity we replace.
  const std::vector<std::string> ours = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK",  "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> base;
  bool has_omp = false;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (std::find(ours.begin(), ours.end(), name) != ours.end() || name.rfind("AXLE_LAUNCH_", 0) == 0) continue;
    has_omp = has_omp || name == "OMP_NUM_THREADS";
    base.push_back(kv);
  }
  if (!has_omp) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    base.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1u, hw / unsigned(nproc))));
  }
  const int world = nnodes * nproc;
  std::vector<d::ChildSpec> specs;
  for (int local = 0; local < nproc; ++local) {
    const int rank = node_rank * nproc + local;
    d::ChildSpec s{.rank = rank, .exe = exe, .argv = program, .env = base};
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"RANK", std::to_string(rank)},
             {"LOCAL_RANK", std::to_string(local)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
             {"GROUP_RANK", std::to_string(node_rank)},
             {"MASTER_ADDR", master_addr},
             {"MASTER_PORT", std::to_string(port)}})
      s.env.push_back(k + "=" + v);
    specs.push_back(std::move(s));
  }

  d::SuperviseResult res;
  try {
    res = d::supervise(specs, {.prefix_output = !no_prefix,
                               .settle_s = 0,
                               .grace_s = grace,
                               .die_with_parent = true,
                               .forward_signals = true});
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  }
  const auto count = [](size_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
  size_t stopped = 0;
  for (const d::ChildResult& c : res.children) stopped += c.stopped_by_us ? 1 : 0;
  if (res.signal != 0) {
    fail("got " + signal_name(res.signal) + ": forwarded it to " + count(stopped) + " still running", 0);
    return 128 + res.signal;
  }
  if (res.first_failed < 0) return 0;
  const d::ChildResult& f = res.children[size_t(res.first_failed)];
  std::string msg = "rank " + std::to_string(f.rank) + " (local rank " + std::to_string(f.rank - node_rank * nproc) +
                    ", pid " + std::to_string(f.pid) + ", " + program[0] + ") " + d::describe_status(f.status);
  std::string also;
  for (size_t i = 0; i < res.children.size(); ++i) {
    const d::ChildResult& c = res.children[i];
    if (int(i) != res.first_failed && c.failed())
      also += (also.empty() ? "" : "; ") + ("rank " + std::to_string(c.rank) + " " + d::describe_status(c.status));
  }
  if (!also.empty()) msg += " (then: " + also + ")";
  if (stopped > 0) msg += "; stopped the other " + count(stopped);
  fail(msg, 0);
  return WIFSIGNALED(f.status) ? 128 + WTERMSIG(f.status) : std::max(1, WEXITSTATUS(f.status));
}
