// Linear algebra: matmul (torch.matmul rules, batch broadcasting) and linear (x w^T + b):
// shape rules and vjps. The oneDNN kernels are in src/backend/cpu/kernels/linalg.cpp.
#include <algorithm>

#include "axle/ops.h"
#include "ops/op.h"
#include "ops/linalg.h"

namespace axle::ops {
namespace {

// ------------------------------------------------------------------ matmul
std::vector<Meta> matmul_infer(const Tensors& in, const Attrs&) {
  check_defined(in[0], "matmul", "self");
  check_defined(in[1], "matmul", "other");
  const Tensor &a = in[0], &b = in[1];
  AXLE_CHECK(a.dim() >= 2 && b.dim() >= 2, "[matmul] expected operands of at least 2 dims, got ", a.dim(), "-D and ",
             b.dim(), "-D");
  AXLE_CHECK(same_float(a, b), "[matmul] expected float32 or bfloat16 operands of one dtype, got ", a.dtype(),
             " and ", b.dtype());
  AXLE_CHECK(a.shape().back() == b.shape()[size_t(b.dim() - 2)], "[matmul] expected matching inner sizes, got ",
             shape_str(a.shape()), " @ ", shape_str(b.shape()));
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape s = broadcast_shape(ab, bb, "matmul");
  s.push_back(a.shape()[size_t(a.dim() - 2)]);
  s.push_back(b.shape().back());
  return {{s, a.dtype()}};
}

Tensors matmul_vjp(const VjpArgs& v) {
  const Tensor &a = v.in[0], &b = v.in[1], &g = v.grad[0];
  Tensor ga, gb;
  if (v.needs[0]) ga = sum_to(matmul(g, transpose(b, -1, -2)), a.shape());
  if (v.needs[1]) {
    if (b.dim() == 2 && a.dim() > 2) {  // one GEMM over all rows instead of a batch then a sum
      const int64_t K = a.shape().back(), N = g.shape().back();
      gb = matmul(transpose(reshape(a, {-1, K}), 0, 1), reshape(g, {-1, N}));
    } else {
      gb = sum_to(matmul(transpose(a, -1, -2), g), b.shape());
    }
  }
  return {ga, gb};
}

std::vector<Meta> linear_infer(const Tensors& in, const Attrs& a) {
  attr::Linear::of(a);  // no attributes, or the relu epilogue the compiler fused (ops.def: FLAG(relu))
  check_defined(in[0], "linear", "input");
  check_defined(in[1], "linear", "weight");
  const Tensor &x = in[0], &w = in[1];
  AXLE_CHECK(x.dim() >= 1, "[linear] expected an input of at least 1 dim, got 0-D");
  AXLE_CHECK(w.dim() == 2, "[linear] expected a 2-D weight [out, in], got ", shape_str(w.shape()));
  AXLE_CHECK(x.shape().back() == w.shape()[1], "[linear] expected input features ", w.shape()[1],
             " (weight ", shape_str(w.shape()), "), got input ", shape_str(x.shape()));
  AXLE_CHECK(same_float(x, w), "[linear] expected float32 or bfloat16 input and weight of one dtype, got ",
             x.dtype(), " and ", w.dtype());
  if (in.size() > 2 && in[2].defined()) {
    const Tensor& b = in[2];
    AXLE_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0], "[linear] expected a bias of shape [", w.shape()[0],
               "], got ", shape_str(b.shape()));
    AXLE_CHECK(b.dtype() == x.dtype(), "[linear] expected a ", x.dtype(), " bias (the input's dtype), got ", b.dtype());
  }
  Shape s(x.shape().begin(), x.shape().end() - 1);
  s.push_back(w.shape()[0]);
  return {{s, x.dtype()}};
}

Tensors linear_vjp(const VjpArgs& v) {
  AXLE_CHECK(v.attrs.ints.empty(), "[linear] internal: a compiler-fused linear has no gradient of its own");
  const Tensor &x = v.in[0], &w = v.in[1], &g = v.grad[0];
  Tensors r(v.in.size());
  if (v.needs[0]) r[0] = linear(g, w.t());
  if (v.needs[1]) {
    const int64_t O = w.shape()[0], I = w.shape()[1];
    r[1] = matmul(transpose(reshape(g, {-1, O}), 0, 1), reshape(x, {-1, I}));
  }
  if (v.in.size() > 2 && v.needs[2]) {
    if (g.dim() == 1) {
      r[2] = g;
    } else {
      Shape dims;
      for (int64_t i = 0; i + 1 < g.dim(); ++i) dims.push_back(i);
      r[2] = sum(g, dims);
    }
  }
  return r;
}

}  // namespace

void register_linalg_ops() {
  register_op(OpKind::Matmul, {.infer = matmul_infer, .vjp = matmul_vjp});
  register_op(OpKind::Linear, {.infer = linear_infer, .vjp = linear_vjp});
}

}  // namespace axle::ops

namespace axle {

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_defined(a, "matmul", "self");
  ops::check_defined(b, "matmul", "other");
  AXLE_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] expected operands of at least 1 dim, got ", a.dim(), "-D and ",
             b.dim(), "-D");
  if (a.dim() == 1 && b.dim() == 1) {
    AXLE_CHECK(a.shape()[0] == b.shape()[0], "[matmul] expected vectors of equal length, got ", a.shape()[0], " and ",
               b.shape()[0]);
    return reshape(ops::call1(ops::OpKind::Matmul, {unsqueeze(a, 0), unsqueeze(b, 1)}), {});
  }
  if (a.dim() == 1) return squeeze(ops::call1(ops::OpKind::Matmul, {unsqueeze(a, 0), b}), -2);
  if (b.dim() == 1) return squeeze(ops::call1(ops::OpKind::Matmul, {a, unsqueeze(b, 1)}), -1);
  return ops::call1(ops::OpKind::Matmul, {a, b});
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return ops::call1(ops::OpKind::Linear, {x, w, b});
}

}  // namespace axle
