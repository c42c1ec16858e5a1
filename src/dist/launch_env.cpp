// The launcher resolver (launch_env.h): which family of variables names this process's
// rank, and where the master is.
#include "dist/launch_env.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <vector>

#include "axle/error.h"

namespace axle::dist::detail {
namespace {

struct Family {
  const char* name;
  const char* rank;
  const char* size;
  std::vector<const char*> local;  // the first one set wins; two set must agree
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"torchrun", "RANK", "WORLD_SIZE", {"LOCAL_RANK"}},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_LOCAL_RANK"}},
      {"MPICH/PMI", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID"}},
  };
  return f;
}

using Get = std::function<const char*(const char*)>;

const char* value(const Get& get, const char* name) {
  const char* v = get(name);
  return v && *v ? v : nullptr;
}

long integer(const Get& get, const char* name) {
  const char* v = value(get, name);
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  AXLE_CHECK(end && *end == '\0' && errno == 0 && x >= -(1L << 30) && x <= (1L << 30), "[dist] expected an integer in ",
             name, ", got '", v, "'");
  return x;
}

std::string assignment(const Get& get, const char* name) { return std::string(name) + "=" + value(get, name); }

// Parses one complete family; throws on values out of range.
LauncherEnv read_family(const Get& get, const Family& f) {
  LauncherEnv e;
  e.found = true;
  e.family = f.name;
  const long rank = integer(get, f.rank), world = integer(get, f.size);
  e.vars = assignment(get, f.rank) + ", " + assignment(get, f.size);
  AXLE_CHECK(world >= 1, "[dist] expected a positive world size in ", f.size, " (", f.name, "), got ", world);
  AXLE_CHECK(rank >= 0 && rank < world, "[dist] expected 0 <= ", f.rank, " < ", f.size, " (", f.name, "), got ", e.vars);
  e.rank = int(rank);
  e.world = int(world);
  e.local = e.rank;
  const char* local_from = nullptr;
  for (const char* name : f.local) {
    if (!value(get, name)) continue;
    const long l = integer(get, name);
    if (local_from) {
      AXLE_CHECK(l == e.local, "[dist] ", assignment(get, local_from), " and ", assignment(get, name),
                 " disagree on this process's local rank (", f.name, ")");
      continue;
    }
    AXLE_CHECK(l >= 0 && l < world, "[dist] expected 0 <= ", name, " < ", f.size, " (", f.name, "), got ",
               assignment(get, name), ", ", assignment(get, f.size));
    e.local = int(l);
    local_from = name;
  }
  if (local_from) e.vars += ", " + assignment(get, local_from);
  return e;
}

}  // namespace

std::string first_host_of_nodelist(const std::string& nodelist, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    AXLE_FAIL("[dist] expected a Slurm host list in ", what, " (such as \"node[01-04,07],gpu5\"), got '", nodelist,
              "': ", why);
  };
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    const char c = nodelist[i];
    if (c == ']') bad("a ']' without its '['");
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) bad("a '[' without its ']'");
    const std::string range = nodelist.substr(i + 1, close - i - 1);
    const std::string first = range.substr(0, range.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
      bad("expected a number to start the range [" + range + "]");
    host += first;
    i = close + 1;
  }
  if (host.empty()) bad("no host before the first ','");
  return host;
}

LauncherEnv resolve_launcher_env(const std::function<const char*(const char*)>& get_in) {
  const Get get = get_in ? get_in : Get([](const char* n) -> const char* { return std::getenv(n); });
  std::vector<LauncherEnv> complete;
  for (const Family& f : families()) {
    const char* r = value(get, f.rank);
    const char* s = value(get, f.size);
    if (r && s) {
      complete.push_back(read_family(get, f));
    } else if ((r || s) && complete.empty()) {
      const char* set = r ? f.rank : f.size;
      const char* unset = r ? f.size : f.rank;
      AXLE_FAIL("[dist] ", assignment(get, set), " is set but ", unset, " is not: ", f.name,
                "'s rank needs both (set the missing one, or unset ", set, " if no ", f.name,
                " launcher started this process)");
    }
  }
  if (complete.empty()) return {};
  LauncherEnv e = complete[0];
  // A later family describing a job of the same size must agree on the rank: if it does not,
  // one of them is stale (a RANK exported in a batch script srun starts on every node).
  for (size_t i = 1; i < complete.size(); ++i) {
    const LauncherEnv& o = complete[i];
    AXLE_CHECK(o.world != e.world || o.rank == e.rank, "[dist] ", e.family, " and ", o.family,
               " disagree on this process's rank for a job of ", e.world, " processes: ", e.vars, " but ", o.vars,
               "; both name every process's rank, so one of them is stale (", e.family,
               " would win): unset the stale variables");
  }

  if (const char* addr = value(get, "MASTER_ADDR")) {
    e.master_addr = addr;
    e.master_source = "MASTER_ADDR";
  } else if (e.family == "Slurm") {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
      if (const char* list = value(get, name)) {
        e.master_addr = first_host_of_nodelist(list, name);
        e.master_source = std::string("the first host of ") + name + "=" + list;
        break;
      }
    }
  }
  if (value(get, "MASTER_PORT")) {
    const long p = integer(get, "MASTER_PORT");
    AXLE_CHECK(p >= 1 && p <= 65535, "[dist] expected a TCP port (1..65535) in MASTER_PORT, got ", p);
    e.master_port = int(p);
  }
  return e;
}

}  // namespace axle::dist::detail
