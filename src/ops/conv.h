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

}  // namespace axle::ops
