// When a loop is worth an OpenMP team (core's fills and the cpu kernels, backend/cpu/loops.h).
#pragma once
#include <omp.h>

#include <cstdint>

namespace axle {

/// Elements below this run on one thread.
constexpr int64_t kParallelGrain = 32768;

/// Whether `work` elements (at least `grain`) are worth an OpenMP team: never inside one (a
/// kernel run by a thread of an outer team, as attention's chunks are, gets no nested team).
/// Callers run the loop inline otherwise: libgomp allocates and frees a team even for a
/// one-thread region.
inline bool use_team(int64_t work, int64_t grain = kParallelGrain) {
  return work >= grain && omp_get_max_threads() > 1 && !omp_in_parallel();
}

}  // namespace axle
