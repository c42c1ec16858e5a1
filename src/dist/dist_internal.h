// Internal state shared by the dist layer's files (launch.cpp, process_group.cpp, xm.cpp,
// ...): private to src/dist (the layering test fails on an include of a *_internal.h from
// another layer). What the layers above use is in groups.h and spmd_mode.h.
#pragma once
#include <cstdint>
#include <string>

#include "axle/dist.h"
#include "dist/groups.h"
#include "dist/spmd_mode.h"

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

/// Environment variables launch() hands its children.
inline constexpr const char* kEnvRank = "AXLE_LAUNCH_RANK";
inline constexpr const char* kEnvWorld = "AXLE_LAUNCH_WORLD_SIZE";
inline constexpr const char* kEnvDir = "AXLE_LAUNCH_DIR";
inline constexpr const char* kEnvParent = "AXLE_LAUNCH_PARENT";
inline constexpr const char* kEnvTimeout = "AXLE_LAUNCH_TIMEOUT";
inline constexpr const char* kEnvSeq = "AXLE_LAUNCH_SEQ";

}  // namespace axle::dist::detail
