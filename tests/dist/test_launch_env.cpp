// The launcher resolver (src/dist/launch_env.h): every family of variables (torchrun,
// Open MPI, MPICH/PMI, Slurm), the precedence between them, the master address (MASTER_ADDR,
// the first host of a Slurm node list, the default port) and the errors. Each case reads
// a map, never this process's environment.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "axle/error.h"
#include "dist/launch_env.h"

using axle::dist::detail::first_host_of_nodelist;
using axle::dist::detail::LauncherEnv;
using axle::dist::detail::resolve_launcher_env;

namespace {

using Env = std::map<std::string, std::string>;

LauncherEnv resolve(const Env& env) {
  return resolve_launcher_env([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The message resolve() throws ("" if it does not).
std::string error_of(const Env& env) {
  try {
    resolve(env);
  } catch (const axle::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LaunchEnv, NothingSetIsNoLauncher) {
  const LauncherEnv e = resolve({{"MASTER_ADDR", "h"}, {"SLURM_NODELIST", "n[1-2]"}, {"PMI_LOCAL_RANK", "0"}});
  EXPECT_FALSE(e.found);
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
}

TEST(LaunchEnv, EachFamilyGivesRankWorldAndLocalRank) {
  struct Case {
    Env env;
    std::string family;
    int rank, world, local;
  };
  const Case cases[] = {
      {{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}}, "torchrun", 3, 4, 1},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "6"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
       "Open MPI", 2, 6, 0},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}}, "MPICH/PMI", 5, 8, 1},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"PMI_LOCAL_RANK", "3"}}, "MPICH/PMI", 5, 8, 3},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}, "Slurm", 1, 2, 0},
      // No local rank: it is the rank (one process per host, or one host).
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "3"}}, "Slurm", 1, 3, 1},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}}, "torchrun", 0, 1, 0},
  };
  for (const Case& c : cases) {
    const LauncherEnv e = resolve(c.env);
    EXPECT_TRUE(e.found) << c.family;
    EXPECT_EQ(e.family, c.family);
    EXPECT_EQ(e.rank, c.rank) << c.family;
    EXPECT_EQ(e.world, c.world) << c.family;
    EXPECT_EQ(e.local, c.local) << c.family;
  }
}

TEST(LaunchEnv, PrecedenceTorchrunThenOpenMpiThenPmiThenSlurm) {
  // torchrun started by srun on each of 2 nodes, 4 processes each: torchrun's ranks win.
  Env env = {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
             {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  LauncherEnv e = resolve(env);
  EXPECT_EQ(e.family, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local, 1);
  // mpirun inside a Slurm allocation: the allocation's SLURM_* describe the batch step.
  env = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
         {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}};
  e = resolve(env);
  EXPECT_EQ(e.family, "Open MPI");
  EXPECT_EQ(e.rank, 3);
  env.erase("OMPI_COMM_WORLD_RANK");
  env.erase("OMPI_COMM_WORLD_SIZE");
  e = resolve(env);
  EXPECT_EQ(e.family, "MPICH/PMI");
  EXPECT_EQ(e.rank, 1);
  // srun --mpi=pmi2 sets both; they agree.
  e = resolve({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(e.family, "MPICH/PMI");
  // A partial family after a complete one is ignored (a batch step's leftovers).
  e = resolve({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}});
  EXPECT_EQ(e.family, "torchrun");
  EXPECT_EQ(e.rank, 1);
}

TEST(LaunchEnv, MasterFromMasterAddrElseFirstSlurmHostAndDefaultPort) {
  LauncherEnv e = resolve({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "node[01-04,07],gpu5"}});
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, axle::dist::detail::kDefaultMasterPort);
  EXPECT_EQ(axle::dist::detail::kDefaultMasterPort, 29500);
  EXPECT_NE(e.master_source.find("SLURM_NODELIST=node[01-04,07],gpu5"), std::string::npos) << e.master_source;
  // The step's own node list before the job's.
  e = resolve({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a[1-9]"},
               {"SLURM_STEP_NODELIST", "b[3-4]"}});
  EXPECT_EQ(e.master_addr, "b3");
  e = resolve({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a[1-9]"}});
  EXPECT_EQ(e.master_addr, "a1");
  // MASTER_ADDR / MASTER_PORT win.
  e = resolve({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "node[01-04]"},
               {"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "4242"}});
  EXPECT_EQ(e.master_addr, "10.0.0.9");
  EXPECT_EQ(e.master_port, 4242);
  EXPECT_EQ(e.master_source, "MASTER_ADDR");
  // MPI has no node list: only MASTER_ADDR names the master.
  e = resolve({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_NODELIST", "n1"}});
  EXPECT_EQ(e.master_addr, "");
  e = resolve({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h0"}});
  EXPECT_EQ(e.master_addr, "h0");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, FirstHostOfSlurmNodeLists) {
  EXPECT_EQ(first_host_of_nodelist("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(first_host_of_nodelist("gpu5,node[01-04]"), "gpu5");
  EXPECT_EQ(first_host_of_nodelist("n7"), "n7");
  EXPECT_EQ(first_host_of_nodelist("node[007,009-010]"), "node007");
  EXPECT_EQ(first_host_of_nodelist("rack[2-3]-n[5,1]"), "rack2-n5");
  EXPECT_EQ(first_host_of_nodelist("a-b[10-11].c"), "a-b10.c");
  for (const char* bad : {"", "node[01-04", "node01]", "node[]", "[x]", ",n1"}) {
    try {
      first_host_of_nodelist(bad, "SLURM_NODELIST");
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const axle::Error& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_NODELIST"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchEnv, PartialFamiliesAreErrorsNamingBothVariables) {
  struct Case {
    Env env;
    std::string set, missing;
  };
  const Case cases[] = {
      {{{"SLURM_PROCID", "0"}}, "SLURM_PROCID=0", "SLURM_NTASKS"},
      {{{"SLURM_NTASKS", "2"}}, "SLURM_NTASKS=2", "SLURM_PROCID"},
      {{{"RANK", "1"}}, "RANK=1", "WORLD_SIZE"},
      {{{"WORLD_SIZE", "2"}}, "WORLD_SIZE=2", "RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}}, "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE"},
      {{{"PMI_SIZE", "4"}}, "PMI_SIZE=4", "PMI_RANK"},
      // A partial family before a complete one is an error too: which was meant is unclear.
      {{{"RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}, "RANK=1", "WORLD_SIZE"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.env);
    EXPECT_NE(msg.find(c.set + " is set but " + c.missing + " is not"), std::string::npos) << msg;
  }
}

TEST(LaunchEnv, DisagreeingAndOutOfRangeValuesAreErrors) {
  // RANK exported in a batch script that srun starts on both nodes: both would be rank 0.
  std::string msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(msg.find("torchrun and Slurm disagree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RANK=0, WORLD_SIZE=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SLURM_PROCID=1, SLURM_NTASKS=2"), std::string::npos) << msg;

  msg = error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"PMI_LOCAL_RANK", "1"}});
  EXPECT_NE(msg.find("MPI_LOCALRANKID=0 and PMI_LOCAL_RANK=1 disagree"), std::string::npos) << msg;

  msg = error_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(msg.find("expected 0 <= SLURM_PROCID < SLURM_NTASKS (Slurm), got SLURM_PROCID=2, SLURM_NTASKS=2"),
            std::string::npos)
      << msg;
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_NE(msg.find("expected a positive world size in WORLD_SIZE"), std::string::npos) << msg;
  msg = error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("expected an integer in RANK, got 'one'"), std::string::npos) << msg;
  msg = error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
  EXPECT_NE(msg.find("expected 0 <= OMPI_COMM_WORLD_LOCAL_RANK < OMPI_COMM_WORLD_SIZE"), std::string::npos) << msg;
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(msg.find("expected a TCP port (1..65535) in MASTER_PORT, got 70000"), std::string::npos) << msg;
  msg = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "n[1-2"}});
  EXPECT_NE(msg.find("a '[' without its ']'"), std::string::npos) << msg;
}
