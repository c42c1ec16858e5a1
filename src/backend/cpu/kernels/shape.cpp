// Shape op kernels on cpu: reshape, permute, expand, slice are views (no copy) where
// the layout allows; slice_backward writes the gradient into zeros.
#include <optional>

#include "axle/ops.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/shape.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

Tensors reshape_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  if (auto st = view_strides(x.shape(), x.strides(), a.ints)) return {make_view(x, a.ints, *st, x.storage_offset())};
  Tensor c = make_tensor(x.shape(), x.dtype());
  cpu::copy_into(c, x);
  return {make_view(c, a.ints, contiguous_strides(a.ints), 0)};
}

Tensors permute_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  Shape st(a.ints.size());
  for (size_t i = 0; i < a.ints.size(); ++i) st[i] = x.strides()[size_t(a.ints[i])];
  return {make_view(x, m[0].shape, st, x.storage_offset())};
}

Tensors expand_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  const Shape& s = a.ints;
  const size_t off = s.size() - size_t(x.dim());
  Shape st(s.size(), 0);
  for (size_t i = 0; i < size_t(x.dim()); ++i) st[i + off] = x.shape()[i] == 1 && s[i + off] != 1 ? 0 : x.strides()[i];
  return {make_view(x, s, st, x.storage_offset())};
}

Tensors slice_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x = in[0];
  const size_t d = size_t(a.ints[0]);
  Shape st = x.strides();
  int64_t off = x.storage_offset() + (m[0].shape[d] > 0 ? a.ints[1] * st[d] : 0);
  st[d] *= a.ints[3];
  return {make_view(x, m[0].shape, st, off)};
}

Tensors slice_backward_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  Tensor out = zeros(m[0].shape, {.dtype = m[0].dtype});
  Attrs sa{.ints = {a.ints[0], a.ints[1], a.ints[2], a.ints[3]}};
  Tensor region = slice_cpu({out}, sa, {{slice_shape(m[0].shape, sa), m[0].dtype}})[0];
  cpu::copy_into(region, in[0]);
  return {out};
}

}  // namespace

void register_cpu_shape_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::Reshape, reshape_cpu);
  reg(OpKind::Permute, permute_cpu);
  reg(OpKind::Expand, expand_cpu);
  reg(OpKind::Slice, slice_cpu);
  reg(OpKind::SliceBackward, slice_backward_cpu);
}

}  // namespace axle::cpu
