// What the pool family's rules share with its kernels (src/backend/cpu/kernels/pool.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// A pooling window: kernel kh x kw, strides sh, sw, padding ph, pw, dilation dh, dw (max only),
/// output sizes rounded up (ceil) or down.
struct PoolWindow {
  int64_t kh, kw, sh, sw, ph, pw, dh = 1, dw = 1;
  bool ceil = false;
  /// The dilated kernel's extent.
  int64_t eh() const { return (kh - 1) * dh + 1; }
  int64_t ew() const { return (kw - 1) * dw + 1; }
};

struct PoolGeom {
  int64_t N, C, H, W, OH, OW;
};

/// max_pool2d's workspace dtype: an index inside the window.
inline DType ws_dtype(const PoolWindow& c) { return c.kh * c.kw < 256 ? kUInt8 : kInt32; }

/// Checks the window against input shape x [N, C, H, W] and gives the output size (PyTorch's
/// rule, ops.def).
PoolGeom pool_geom(const Shape& x, const PoolWindow& c, const char* op);

/// The padding past the input's right (bottom) edge the last window reaches: pad_w (pad_h) or
/// less with floor rounding, more where a ceil_mode window overhangs the padded input.
inline int64_t pad_right(int64_t in, int64_t out, int64_t stride, int64_t extent, int64_t pad) {
  return (out - 1) * stride + extent - in - pad;
}

}  // namespace axle::ops
