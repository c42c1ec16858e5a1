// What the pool family's rules share with its kernels (src/backend/cpu/kernels/pool.cpp).
#pragma once
#include "ops/op.h"

namespace axle::ops {

/// A pooling window: kernel kh x kw, strides sh, sw, padding ph, pw.
struct PoolWindow {
  int64_t kh, kw, sh, sw, ph, pw;
};

struct PoolGeom {
  int64_t N, C, H, W, OH, OW;
};

/// max_pool2d's workspace dtype: an index inside the window.
inline DType ws_dtype(const PoolWindow& c) { return c.kh * c.kw < 256 ? kUInt8 : kInt32; }

/// Checks the window against input shape x [N, C, H, W] and gives the output size.
PoolGeom pool_geom(const Shape& x, const PoolWindow& c, const char* op);

}  // namespace axle::ops
