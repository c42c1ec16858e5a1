// Seeded random numbers: a counter-based Philox4x32-10 generator, so results are
// the same for a seed whatever the thread count, and the state is two integers.
#pragma once
#include <cstdint>

namespace axle {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  uint64_t seed() const { return seed_; }
  /// Number of 128-bit blocks consumed so far; (seed, offset) is the whole state.
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  /// Reserves `blocks` blocks of 4 random uint32 and returns the first block's counter.
  uint64_t reserve(uint64_t blocks) { uint64_t o = offset_; offset_ += blocks; return o; }
  /// 4 random uint32 for block `counter` (pure function of seed and counter).
  void block(uint64_t counter, uint32_t out[4]) const;
  /// One uniform uint64 (consumes a block).
  uint64_t next_u64();

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

/// The process-wide generator used when none is passed.
Generator& default_generator();
/// Seeds the default generator.
void manual_seed(uint64_t seed);

}  // namespace axle
