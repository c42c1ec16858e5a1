// What the conv family's rules share with its kernels (src/backend/cpu/kernels/conv.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// A 2-D convolution's sizes: input [N, C, H, W], weight [O, C/g, kh, kw], output [N, O, OH, OW],
/// strides sh/sw, padding ph/pw, dilation dh/dw, groups g.
struct ConvGeom {
  int64_t N, C, H, W, O, kh, kw, OH, OW, sh, sw, ph, pw, dh, dw, g;
  Shape src() const { return {N, C, H, W}; }
  Shape dst() const { return {N, O, OH, OW}; }
  Shape wei() const { return {O, C / g, kh, kw}; }
};

/// Geometry from input [N, C, H, W], weight [O, C/g, kh, kw] shapes and the 7 conv ints.
ConvGeom conv_geom(const Shape& x, const Shape& w, const Attrs& a, const char* op);

/// conv_transpose2d's geometry, in conv2d's terms (the transposed conv runs as conv2d's input
/// gradient): its input x [N, C, H, W] is conv2d's output (N, O = C, OH = H, OW = W), its weight
/// [C, O'/g, kh, kw] is conv2d's weight, its output [N, O', H', W'] is conv2d's input (src()),
/// H' = (H-1)*sh - 2*ph + dh*(kh-1) + output_padding_h + 1. Attributes: ops.def's 9 ints.
ConvGeom conv_transpose_geom(const Shape& x, const Shape& w, const Attrs& a, const char* op);

}  // namespace axle::ops
