// The one SPMD test fixture: every SPMD test starts from zero counters, a cold graph cache,
// SPMD off and no global mesh, and leaves the process so (virtual device count included).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace axle::test {

/// Base of the SPMD tests' fixtures (TEST_F(Spmd, ...) with `using Spmd = SpmdFixture;`).
class SpmdFixture : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  /// Zero counters and a cold graph cache.
  static void reset();
  /// Turns SPMD on with `n` virtual cpu devices (AXLE_CPU_DEVICES=n).
  static void devices(int n);
  /// Turns SPMD off again (the devices stay).
  static void spmd_off();
};

/// 0, 1, ..., n-1: the device ids of a mesh over n devices.
std::vector<int64_t> iota(int64_t n);

}  // namespace axle::test
