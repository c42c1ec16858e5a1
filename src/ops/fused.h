// Fused programs: the one structured type that the compiler's fusion pass builds
// (src/backend/cpu/fusion.cpp), the shape rules (src/ops/fused.cpp) and the kernels
// (src/backend/cpu/kernels/fused.cpp) read, and lowering extends with donations
// (src/backend/cpu/executable.cpp). A FusedElementwise / FusedSum node carries it encoded in
// its Attrs (so graphs hash, compare and cache it); only encode() and parse() know that layout.
#pragma once
#include <utility>
#include <vector>

#include "ops/op.h"

namespace axle::ops {

/// One op of a tile program.
struct FOp {
  OpKind kind;
  DType out, compute;
  std::vector<int64_t> refs;  ///< operands: ref >= 0 an op's result, ref < 0 input -(ref + 1)
  Attrs attrs{};              ///< the op's own attributes (clamp's bounds)
};

/// A tile program: elementwise ops over one iteration shape.
struct FProgram {
  Shape shape;                                        ///< the iteration shape S
  std::vector<std::pair<DType, bool>> inputs;         ///< (dtype, is a single broadcast element)
  std::vector<FOp> ops;                               ///< in execution order
  std::vector<int64_t> outputs;                       ///< op indices whose results leave
  std::vector<std::pair<int64_t, int64_t>> donate{};  ///< (output k, input j): k may be written over j
  /// Appends this program to `a` (FusedElementwise: into empty Attrs).
  void encode(Attrs& a) const;
};

// ---- FusedSum
struct SumSpec {
  bool keepdim = false;
  std::vector<bool> mask;  ///< per dim of S: summed
  size_t program = 0;      ///< where the tile program starts in ints
};

/// The tile program starting at ints[first] (its ops' float attributes: all of a.floats).
FProgram parse(const Attrs& a, size_t first = 0);
/// FusedSum's leading ints.
SumSpec parse_sum(const Attrs& a);
/// FusedSum's attributes: the sum's keepdim and mask, then program `p`.
Attrs encode_sum(bool keepdim, const std::vector<bool>& mask, const FProgram& p);

}  // namespace axle::ops
