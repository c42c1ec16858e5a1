// The fused programs' parsed form, shared by their shape rules (src/ops/fused.cpp) and the
// kernels that run them (src/backend/cpu/kernels/fused.cpp).
#pragma once
#include <utility>
#include <vector>

#include "ops/op.h"

namespace axle::ops {

struct FOp {
  OpKind kind;
  DType out, compute;
  std::vector<int64_t> refs;
};

struct FProgram {
  Shape shape;
  std::vector<std::pair<DType, bool>> inputs;
  std::vector<FOp> ops;
  std::vector<int64_t> outputs;
  std::vector<std::pair<int64_t, int64_t>> donate;
};

// ---- FusedSum
struct SumSpec {
  bool keepdim = false;
  std::vector<bool> mask;  ///< per dim of S: summed
  size_t program = 0;      ///< where the tile program starts in ints
};

/// The tile program starting at ints[first].
FProgram parse(const Attrs& a, size_t first = 0);
/// FusedSum's leading ints.
SumSpec parse_sum(const Attrs& a);

}  // namespace axle::ops
