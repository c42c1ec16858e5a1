// Starts a set of local processes and supervises them with fail-fast semantics: the one
// supervisor of axle, used by launch() (launch.cpp, which re-executes the program once per
// rank) and by the axle-run tool (tools/axle-run, torchrun-style: any program).
//
// Each child runs in its own process group (so stopping it stops what it started). Its
// output lines are relayed, prefixed with "[rank N] ". When a child fails (non-zero exit,
// or a signal the supervisor did not send), or when this process gets SIGINT / SIGTERM /
// SIGHUP (forward_signals), every other child is stopped: settle_s for them to end on
// their own (a rank that lost its peer fails by itself, and the report can tell the cause
// from its consequences), then SIGTERM (a forwarded signal: that signal) to each group,
// then after grace_s SIGKILL. Nothing is left running when supervise() returns or throws.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace axle::dist::detail {

struct ChildSpec {
  int rank = 0;                   ///< the "[rank N] " of its output and of reports
  std::string exe;                ///< the file to execute (a path; no PATH search)
  std::vector<std::string> argv;  ///< argv[0] included
  std::vector<std::string> env;   ///< the whole environment, "NAME=value"
};

struct SuperviseOptions {
  bool prefix_output = true;  ///< "[rank N] " before each relayed line
  double settle_s = 0.5;      ///< after a failure: time for the others to end on their own
  double grace_s = 0;         ///< after SIGTERM: time before SIGKILL (<= 0: SIGKILL at once)
  /// Start children with fork + exec and PR_SET_PDEATHSIG (SIGKILL), so they die with this
  /// process even when it is killed with SIGKILL. Otherwise posix_spawn (cheaper in a large
  /// multi-threaded process) and the child sees to it itself (launch's children do).
  bool die_with_parent = false;
  /// Forward SIGINT / SIGTERM / SIGHUP to every child's process group, then stop them all as
  /// after a failure; the previous handlers are restored on return.
  bool forward_signals = false;
};

struct ChildResult {
  int rank = 0;
  pid_t pid = -1;
  int status = 0;              ///< waitpid status
  bool stopped_by_us = false;  ///< still running when the supervisor signalled it
  int64_t exit_ns = 0;         ///< monotonic_ns() when it was reaped
  /// Failed on its own: a non-zero exit or a signal the supervisor did not send.
  bool failed() const { return !stopped_by_us && status != 0; }
};

struct SuperviseResult {
  std::vector<ChildResult> children;  ///< in the order of the specs
  int first_failed = -1;              ///< index of the child that failed first, -1 if none
  int signal = 0;                     ///< the forwarded signal that stopped the job, 0 if none
};

/// Runs the children to the end as described above. Throws axle::Error when a child cannot
/// be started (naming its rank and the reason; those started are stopped first).
SuperviseResult supervise(const std::vector<ChildSpec>& specs, const SuperviseOptions& opts);

/// "exited with status 3", "was killed by signal 9 (Killed)".
std::string describe_status(int status);

/// CLOCK_MONOTONIC in nanoseconds.
int64_t monotonic_ns();

}  // namespace axle::dist::detail
