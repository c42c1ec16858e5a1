#include "axle/generator.h"

namespace axle {
namespace {
inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  constexpr uint64_t M0 = 0xD2511F53, M1 = 0xCD9E8D57;
  uint64_t p0 = M0 * c[0], p1 = M1 * c[2];
  uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
}
}  // namespace

void Generator::block(uint64_t counter, uint32_t out[4]) const {
  uint32_t c[4] = {uint32_t(counter), uint32_t(counter >> 32), 0, 0};
  uint32_t k[2] = {uint32_t(seed_), uint32_t(seed_ >> 32)};
  for (int r = 0; r < 10; ++r) {
    philox_round(c, k);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

uint64_t Generator::next_u64() {
  uint32_t b[4];
  block(reserve(1), b);
  return (uint64_t(b[0]) << 32) | b[1];
}

Generator& default_generator() {
  static Generator global(0);
  return global;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace axle
