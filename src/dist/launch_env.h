// Which rank this process is, read from the variables an external launcher sets: the one
// place axle decides it (job() in process_group.cpp calls resolve_launcher_env once;
// launch(), the process groups, the runtime queries, axle-run and the Python package all
// read that Job). docs/distributed.md states the rules for users.
//
// Families, in precedence order (the first whose rank and size are both set wins):
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK                    (also axle-run's children)
//   Open MPI   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH/PMI  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID or PMI_LOCAL_RANK
//   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; SLURM_NODELIST names the master
// Why this order: the most specific launcher wins. torchrun (or axle-run) started under
// srun or mpirun sets the ranks of the processes it starts, while the Slurm / MPI
// variables it inherited describe the launcher's own processes; mpirun inside a Slurm
// allocation likewise inherits the allocation's SLURM_* variables.
//
// Errors (axle::Error, naming the variables): a family with its rank but not its size, or
// the other way round, unless a family before it is complete; a value that is not an
// integer; rank or local rank out of range; two complete families with the same world size
// but different ranks (e.g. RANK exported in a batch script that srun starts twice).
// The master: MASTER_ADDR / MASTER_PORT when set; else, under Slurm, the first host of
// SLURM_NODELIST (SLURM_JOB_NODELIST); the port defaults to kDefaultMasterPort.
#pragma once
#include <functional>
#include <string>

namespace axle::dist::detail {

/// torchrun's default MASTER_PORT, used when nothing sets one.
inline constexpr int kDefaultMasterPort = 29500;

struct LauncherEnv {
  bool found = false;    ///< a launcher's variables name this process's rank
  int rank = 0, world = 1, local = 0;
  std::string family;    ///< "torchrun", "Open MPI", "MPICH/PMI", "Slurm" (empty when !found)
  std::string vars;      ///< the variables that decided, as "SLURM_PROCID=1, SLURM_NTASKS=2"
  std::string master_addr;  ///< empty when nothing names one
  int master_port = kDefaultMasterPort;
  std::string master_source;  ///< "MASTER_ADDR", "the first host of SLURM_NODELIST=...", ...
};

/// Reads the variables through `get` (nullptr or "" when unset; std::getenv by default).
LauncherEnv resolve_launcher_env(const std::function<const char*(const char*)>& get = nullptr);

/// The first host of a Slurm host list: "node[01-04,07],gpu5" -> "node01",
/// "rack[1-2]-n[3,5]" -> "rack1-n3". Throws naming `what` (the variable) when malformed.
std::string first_host_of_nodelist(const std::string& nodelist, const std::string& what = "SLURM_NODELIST");

}  // namespace axle::dist::detail
