// Linear algebra kernels on cpu: matmul and linear run on the oneDNN matmul primitive with
// strided memory descriptors, so transposed views (w.t(), grad.t() in backward) are read in
// place without copies; linear fuses its bias (and a compiler-fused relu).
#include <algorithm>
#include <optional>

#include "axle/ops.h"
#include "backend/cpu/dnnl.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/linalg.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

namespace dg = cpu::dnnl_glue;

struct MatmulEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, bias, dst;
  size_t scratch = 0;
  bool slow = false;  ///< oneDNN picked its reference kernel for these strides
};

// An operand right-aligned to `nd` dims.
struct Operand {
  Shape dims, strides;
};

Operand padded(const Tensor& t, size_t nd) {
  Operand o{Shape(nd, 1), Shape(nd, 0)};
  const size_t off = nd - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i) {
    o.dims[i + off] = t.shape()[i];
    o.strides[i + off] = t.strides()[i];
  }
  return o;
}

// Normalises strides of size-1 dims and checks the matrix part is row- or column-major.
bool normalise(Operand& o) {
  const size_t n = o.dims.size();
  int64_t r = o.dims[n - 2], c = o.dims[n - 1];
  int64_t &sr = o.strides[n - 2], &sc = o.strides[n - 1];
  if (r == 1) sr = (sc == 1) ? c : 1;
  if (c == 1) sc = (sr == 1 && r != 1) ? r : 1;
  if (!((sc == 1 && sr >= c) || (sr == 1 && sc >= r))) return false;
  for (int64_t i = int64_t(n) - 3; i >= 0; --i) {
    if (o.dims[size_t(i)] != 1) {
      if (o.strides[size_t(i)] <= 0) return false;
      continue;
    }
    int64_t m = 1;
    for (size_t j = size_t(i) + 1; j < n; ++j) m = std::max(m, o.dims[j] * o.strides[j]);
    o.strides[size_t(i)] = m;
  }
  return dg::non_interleaving(o.dims, o.strides);  // else the operand is copied
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = make_tensor(t.shape(), t.dtype());
  cpu::copy_into(c, t);
  return c;
}

// Whether a's batch dims and M merge into one row dim (row stride stays uniform).
bool foldable(const Tensor& a) {
  const int64_t nd = a.dim();
  const int64_t M = a.shape()[size_t(nd - 2)];
  if (M <= 1) return false;
  int64_t expected = a.strides()[size_t(nd - 2)] * M;
  for (int64_t i = nd - 3; i >= 0; --i) {
    if (a.shape()[size_t(i)] == 1) continue;
    if (a.strides()[size_t(i)] != expected) return false;
    expected *= a.shape()[size_t(i)];
  }
  return true;
}

// out (contiguous, a's dtype: float32, or bfloat16 with float32 accumulation) = a @ b (+ bias [N], broadcast over rows), then relu if `relu` (a oneDNN
// post-op: the epilogue the compiler fuses into linear). a [..., M, K], b [..., K, N] with batch
// dims broadcasting to out's; K > 0 and out non-empty.
void matmul_into(Tensor a, Tensor b, const Tensor& bias, const Tensor& out, bool relu = false) {
  a = dg::describable(a);
  b = dg::describable(b);
  const size_t nd = size_t(out.dim());
  const int64_t N = out.shape()[nd - 1], K = a.shape()[size_t(a.dim() - 1)];
  // b broadcasts over every batch dim: fold a's batch dims into its rows (one large GEMM).
  if (nd > 2 && a.dim() == int64_t(nd) && foldable(a)) {
    bool b_flat = true;
    for (int64_t i = 0; i < b.dim() - 2; ++i)
      if (b.shape()[size_t(i)] != 1 && b.strides()[size_t(i)] != 0) b_flat = false;
    if (b_flat) {
      const int64_t rows = out.numel() / N;
      Tensor a2 = make_view(a, {rows, K}, {a.strides()[nd - 2], a.strides()[nd - 1]}, a.storage_offset());
      const size_t bn = size_t(b.dim());
      Tensor b2 = make_view(b, {K, N}, {b.strides()[bn - 2], b.strides()[bn - 1]}, b.storage_offset());
      matmul_into(a2, b2, bias, make_view(out, {rows, N}, {N, 1}, out.storage_offset()), relu);
      return;
    }
  }
  // oneDNN's rank limit is this backend's, not matmul's (the op table's shape rule has none).
  AXLE_CHECK(nd <= size_t(DNNL_MAX_NDIMS), "[matmul] expected at most ", DNNL_MAX_NDIMS,
             " dims on the cpu backend (oneDNN's limit), got ", nd, " (output ", shape_str(out.shape()), ")");
  Operand oa = padded(a, nd), ob = padded(b, nd);
  bool both_expanded = false;
  for (size_t i = 0; i + 2 < nd; ++i) {
    for (Operand* o : {&oa, &ob})
      if (o->strides[i] == 0 || o->dims[i] == 1) o->dims[i] = 1;
    if (oa.dims[i] == 1 && ob.dims[i] == 1 && out.shape()[i] != 1) both_expanded = true;
  }
  if (both_expanded) {  // both operands are expanded views along one dim: materialise a
    Shape s = out.shape();
    s[nd - 1] = K;
    matmul_into(contiguous_copy(expand(a, s)), b, bias, out, relu);
    return;
  }
  if (!normalise(oa)) return matmul_into(contiguous_copy(a), b, bias, out, relu);
  if (!normalise(ob)) return matmul_into(a, contiguous_copy(b), bias, out, relu);

  // oneDNN's matmul kernels read the bias densely whatever its descriptor says.
  if (bias.defined() && !bias.is_contiguous()) return matmul_into(a, b, contiguous_copy(bias), out, relu);
  Shape bias_dims(nd, 1), bias_strides(nd, 1);
  if (bias.defined()) {
    bias_dims[nd - 1] = N;
    for (size_t i = 0; i + 1 < nd; ++i) bias_strides[i] = N;
  }
  dg::Key key("matmul");
  key << oa.dims << oa.strides << ob.dims << ob.strides << out.shape() << int64_t(bias.defined())
      << bias_strides << int64_t(relu) << int64_t(a.dtype()) << int64_t(bias.defined() ? bias.dtype() : a.dtype());
  auto e = dg::cached<MatmulEntry>(key, [&] {
    auto e = std::make_shared<MatmulEntry>();
    e->a = dg::strided_desc(oa.dims, oa.strides, a.dtype());
    e->b = dg::strided_desc(ob.dims, ob.strides, b.dtype());
    e->dst = dg::strided_desc(out.shape(), contiguous_strides(out.shape()), out.dtype());
    std::optional<dnnl::matmul::desc> d;
    if (bias.defined()) {
      e->bias = dg::strided_desc(bias_dims, bias_strides, bias.dtype());
      d.emplace(e->a, e->b, e->bias, e->dst);
    } else {
      d.emplace(e->a, e->b, e->dst);
    }
    dnnl::primitive_attr attr = dg::default_attr();
    if (relu) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(*d, attr, dg::engine());
    e->prim = dnnl::matmul(pd);
    e->scratch = pd.scratchpad_desc().get_size();
    e->slow = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
    return e;
  });
  if (e->slow && (!a.is_contiguous() || !b.is_contiguous())) {
    matmul_into(a.is_contiguous() ? a : contiguous_copy(a), b.is_contiguous() ? b : contiguous_copy(b), bias, out,
                relu);
    return;
  }
  dg::Exec ex;
  ex.arg(DNNL_ARG_SRC, ex.wrap(e->a, a));
  ex.arg(DNNL_ARG_WEIGHTS, ex.wrap(e->b, b));
  if (bias.defined()) ex.arg(DNNL_ARG_BIAS, ex.wrap(e->bias, bias));
  ex.arg(DNNL_ARG_DST, ex.wrap(e->dst, out));
  ex.run(e->prim, e->scratch);
}

void fill_bias_or_zero(const Tensor& out, const Tensor& bias) {
  float* o = out.data<float>();
  const int64_t n = out.numel();
  if (!bias.defined()) {
    std::fill(o, o + n, 0.0f);
    return;
  }
  Tensor bc = cpu::contiguous_as(bias, kFloat32);
  const float* b = bc.data<float>();
  const int64_t N = bc.numel();
  for (int64_t i = 0; i < n; i += N) std::copy(b, b + N, o + i);
}

Tensors matmul_cpu(const Tensors& in, const Attrs&, const std::vector<Meta>& m) {
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  if (out.numel() == 0) return {out};
  if (in[0].shape().back() == 0) {
    fill_bias_or_zero(out, {});
    return {out};
  }
  matmul_into(in[0], in[1], {}, out);
  return {out};
}

Tensors linear_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const bool relu = linear_relu(a);
  Tensor x = in[0];
  const Tensor& w = in[1];
  Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const int64_t I = w.shape()[1], O = w.shape()[0];
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  if (out.numel() == 0) return {out};
  const int64_t rows = out.numel() / O;
  Tensor out2 = make_view(out, {rows, O}, {O, 1}, 0);
  if (I == 0) {
    fill_bias_or_zero(out, bias);
    if (relu)
      for (float* o = out.data<float>(), *e = o + out.numel(); o != e; ++o) *o = *o > 0.0f ? *o : 0.0f;
    return {out};
  }
  // x as [rows, I]: a view when its leading dims merge, else a copy.
  Tensor x2;
  if (x.dim() == 1) {
    x2 = make_view(x, {1, I}, {I * x.strides()[0], x.strides()[0]}, x.storage_offset());
  } else if (x.dim() == 2) {
    x2 = x;
  } else {
    if (foldable(x))
      x2 = make_view(x, {rows, I}, {x.strides()[size_t(x.dim() - 2)], x.strides().back()}, x.storage_offset());
    else
      x2 = make_view(contiguous_copy(x), {rows, I}, {I, 1}, 0);
  }
  Tensor wt = make_view(w, {I, O}, {w.strides()[1], w.strides()[0]}, w.storage_offset());
  matmul_into(x2, wt, bias, out2, relu);
  return {out};
}

}  // namespace

void register_cpu_linalg_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::Matmul, matmul_cpu);
  reg(OpKind::Linear, linear_cpu);
}

}  // namespace axle::cpu
