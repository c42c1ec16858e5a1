#include "spmd_fixture.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xs.h"
#include "dist/spmd_mode.h"
#include "lazy/ir.h"
#include "spmd/device_count.h"

namespace axle::test {

void SpmdFixture::SetUp() { reset(); }

void SpmdFixture::TearDown() {
  xs::set_global_mesh(std::nullopt);
  dist::detail::set_spmd_mode(false);
  unsetenv("AXLE_CPU_DEVICES");
  spmd::reset_device_count();
}

void SpmdFixture::reset() {
  metrics::reset();
  lazy::clear_graph_cache();
}

void SpmdFixture::devices(int n) {
  setenv("AXLE_CPU_DEVICES", std::to_string(n).c_str(), 1);
  spmd::reset_device_count();
  runtime::use_spmd();
}

void SpmdFixture::spmd_off() { dist::detail::set_spmd_mode(false); }

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

}  // namespace axle::test
