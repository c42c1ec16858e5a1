// All-reduce over shared memory for the ranks of one host (children of axle::launch).
// Gloo has no shared-memory transport: its TCP loopback path copies every byte through
// the kernel several times. Here each rank copies its data into a shared slot, reduces
// its 1/world share of every slot (in rank order, so every rank gets bit-identical
// results), and copies every share out: about 3 passes over the data per rank.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "axle/dist.h"

namespace axle::dist::detail {

class ShmAllReduce {
 public:
  /// Creates (rank 0) or opens (the others) the segment `name` ("/axle-..."); every rank
  /// must call it, between two barriers of `barrier` (see make_shm_allreduce).
  static std::unique_ptr<ShmAllReduce> open(const std::string& name, int rank, int world, bool create);
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  /// In place: buf <- reduce over ranks (Mean: Sum, then * 1/world). Throws axle::Error
  /// naming the collective if another rank does not arrive within timeout_s.
  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op, double timeout_s);

  /// Name of the segment a launch() job with rendezvous directory `dir` uses.
  static std::string name_for(const std::string& dir);

 private:
  ShmAllReduce() = default;
  void barrier(double timeout_s);
  struct Header;
  Header* hdr_ = nullptr;
  char* data_ = nullptr;
  size_t map_bytes_ = 0;
  int rank_ = 0, world_ = 1;
  uint64_t barriers_ = 0;  ///< barriers passed (same sequence on every rank)
  uint64_t chunks_ = 0;    ///< chunks reduced: their parity picks the slot area
};

}  // namespace axle::dist::detail
