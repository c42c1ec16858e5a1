// The SPMD mode flag (runtime::use_spmd sets it; see spmd_mode.h).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "dist/dist_internal.h"

namespace axle::dist::detail {
namespace {
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}
std::atomic<bool>& flag() {
  static std::atomic<bool> on = [] {
    if (env_on("AXLE_USE_SPMD")) return true;
    if (env_on("XLA_USE_SPMD")) {
      std::fprintf(stderr, "[axle] warning: XLA_USE_SPMD is deprecated; set AXLE_USE_SPMD=1 or call "
                           "axle::runtime::use_spmd()\n");
      return true;
    }
    return false;
  }();
  return on;
}
}  // namespace

bool spmd_mode() { return flag().load(std::memory_order_relaxed); }
void set_spmd_mode(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace axle::dist::detail
