// Internal state shared by launch.cpp, process_group.cpp, collective ops and xm.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "axle/dist.h"

namespace axle::dist::detail {

/// What this process is in the job, read once from the environment.
struct Job {
  int rank = 0, world = 1, local = 0;
  bool child = false;     ///< started by axle::launch (AXLE_LAUNCH_* variables)
  bool external = false;  ///< started by an external launcher (launch_env.h: torchrun, Slurm, MPI)
  std::string dir;        ///< child: the job's private rendezvous directory
  double timeout_s = 300;
  // External launcher only (launch_env.h):
  std::string launcher;       ///< "torchrun", "Open MPI", "MPICH/PMI", "Slurm"
  std::string launcher_vars;  ///< the variables that set rank and world, for messages
  std::string master_addr;    ///< empty: nothing names one
  int master_port = 0;
  std::string master_source;  ///< where master_addr came from, for messages
};
Job& job();

/// The group a collective op's `group id` attribute names; throws if unknown.
ProcessGroup& group_by_id(int64_t id);
/// The in-process device group (local_devices.h) with this id; nullptr when `id` is not in
/// the range of local group ids, throws when it is but names no group.
ProcessGroup* local_group_by_id(int64_t id);
/// True once the default group exists (a rendezvous happened).
bool default_group_created();
/// Tears every group down (closes connections); used before a child exits.
void shutdown_groups();

/// Set when a collective failed because another rank went away or timed out: launch()
/// then reports that rank's failure as a consequence, not the cause.
void note_comm_failure();
bool had_comm_failure();

/// Called by axle::device() (and xm::xla_device()): outside a launched function that
/// makes a later launch() fail (seed anti-pattern 1).
void note_device_requested();

/// SPMD mode (runtime::use_spmd, AXLE_USE_SPMD=1; XLA_USE_SPMD=1 with a deprecation
/// warning): one process drives every local device, so init_process_group("xla") and
/// multi-process launch() refuse to run. The flag lives here, the lowest layer reading it.
bool spmd_mode();
void set_spmd_mode(bool on);

/// "sum", "mean", "min", "max".
const char* reduce_op_name(ReduceOp op);

/// Environment variables launch() hands its children.
inline constexpr const char* kEnvRank = "AXLE_LAUNCH_RANK";
inline constexpr const char* kEnvWorld = "AXLE_LAUNCH_WORLD_SIZE";
inline constexpr const char* kEnvDir = "AXLE_LAUNCH_DIR";
inline constexpr const char* kEnvParent = "AXLE_LAUNCH_PARENT";
inline constexpr const char* kEnvTimeout = "AXLE_LAUNCH_TIMEOUT";
inline constexpr const char* kEnvSeq = "AXLE_LAUNCH_SEQ";

}  // namespace axle::dist::detail
