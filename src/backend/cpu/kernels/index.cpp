// Index op kernels on cpu: cat, index_select, index_add, gather, scatter_add, scatter.
#include <algorithm>
#include <cstring>

#include "axle/ops.h"
#include "backend/cpu/dnnl.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/loops.h"
#include "ops/kernels.h"
#include "ops/op.h"
#include "ops/index.h"

namespace axle::cpu {
using namespace axle::ops;
namespace {

constexpr int64_t kGrain = cpu::kParallelGrain;

/// [O, R, I] sizes of `s` around dim `d`.
void split3(const Shape& s, int64_t d, int64_t& O, int64_t& R, int64_t& I) {
  O = R = I = 1;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) (i < d ? O : i == d ? R : I) *= s[size_t(i)];
}

/// Index tensor as contiguous int64, checked against [0, n).
Tensor checked_index(const Tensor& idx, int64_t n, const char* op) {
  Tensor c = cpu::contiguous_as(idx, kInt64);
  const int64_t* p = c.data<int64_t>();
  const int64_t k = c.numel();
  for (int64_t i = 0; i < k; ++i)
    AXLE_CHECK(p[i] >= 0 && p[i] < n, "[", op, "] expected index values in [0, ", n, "), got ", p[i],
               " at position ", i);
  return c;
}

/// The cat as a view when its parts already lie side by side in one buffer that nothing but
/// them holds (a graph's values at their last use, e.g. attention's dq, dk, dv, which
/// sdpa_bwd_cpu writes interleaved so that the packed qkv gradient needs no copy): same dtype
/// and strides, each part starting where the previous one ends along `d`, and the whole a
/// non-overlapping layout. Anything a caller still holds is copied, as cat always does.
Tensor cat_view(const Tensors& in, int64_t d, const Meta& m) {
  const Tensor* first = nullptr;
  int64_t off = 0, holders = 0;
  for (const Tensor& t : in) {
    if (cat_skip(t, int64_t(m.shape.size()))) continue;
    const TensorImpl* ti = t.impl();
    if (!ti || !ti->storage || t.dtype() != m.dtype || t.numel() == 0 || t.impl_ptr().use_count() != 1) return {};
    if (!first) {
      first = &t;
    } else if (ti->storage != first->impl()->storage || t.strides() != first->strides() ||
               t.storage_offset() != first->storage_offset() + off * first->strides()[size_t(d)]) {
      return {};
    }
    off += t.shape()[size_t(d)];
    ++holders;
  }
  if (!first || first->impl()->storage.use_count() != holders) return {};
  const Shape& st = first->strides();
  for (size_t i = 0; i < st.size(); ++i)
    if (m.shape[i] > 1 && st[i] <= 0) return {};
  if (!dnnl_glue::non_interleaving(m.shape, st)) return {};
  return make_view(*first, m.shape, st, first->storage_offset());
}

Tensors cat_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const int64_t nd = int64_t(m[0].shape.size());
  const int64_t d = wrap_dim(a.ints[0], nd, "cat");
  if (Tensor v = cat_view(in, d, m[0]); v.defined()) return {v};
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  int64_t off = 0;
  for (const Tensor& t : in) {
    if (cat_skip(t, nd)) continue;
    const int64_t len = t.shape()[size_t(d)];
    if (len > 0 && t.numel() > 0) {
      Tensor region = make_view(out, t.shape(), out.strides(), off * out.strides()[size_t(d)]);
      cpu::copy_into(region, t);
    }
    off += len;
  }
  return {out};
}

Tensors index_select_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Tensor& x0 = in[0];
  const int64_t d = index_dim(x0, a, "index_select");
  const int64_t n = x0.dim() == 0 ? 1 : x0.shape()[size_t(d)];
  Tensor idx = checked_index(in[1], n, "index_select");
  Tensor x = cpu::contiguous_as(x0, x0.dtype());
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  if (out.numel() == 0) return {out};
  int64_t O, R, I;
  split3(x.shape(), d, O, R, I);
  const int64_t K = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  const size_t isz = itemsize(x.dtype());
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const size_t row = size_t(I) * isz;
#pragma omp parallel for schedule(static) if (O * K * I >= kGrain)
  for (int64_t t = 0; t < O * K; ++t) {
    const int64_t o = t / K, k = t % K;
    std::memcpy(dst + size_t(t) * row, src + (size_t(o * R + ip[k])) * row, row);
  }
  return {out};
}

template <class T>
void index_add_kernel(const T* g, const int64_t* ip, T* out, int64_t O, int64_t R, int64_t I, int64_t K) {
  if (O > 1) {
#pragma omp parallel for schedule(static) if (O * K * I >= kGrain)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < K; ++k) {
        const T* src = g + (o * K + k) * I;
        T* dst = out + (o * R + ip[k]) * I;
        for (int64_t i = 0; i < I; ++i) dst[i] += src[i];
      }
    return;
  }
  // O == 1 (embedding backward): rows may repeat, so split the columns across threads.
  constexpr int64_t TW = 512;
  const int64_t tiles = (I + TW - 1) / TW;
#pragma omp parallel for schedule(static) if (K * I >= kGrain && tiles > 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t c0 = t * TW, w = std::min(TW, I - c0);
    for (int64_t k = 0; k < K; ++k) {
      const T* src = g + k * I + c0;
      T* dst = out + ip[k] * I + c0;
      for (int64_t i = 0; i < w; ++i) dst[i] += src[i];
    }
  }
}

Tensors index_add_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Shape& s = m[0].shape;
  const int64_t d = s.empty() ? 0 : a.ints[0];
  Tensor idx = checked_index(in[1], s.empty() ? 1 : s[size_t(d)], "index_add");
  Tensor g = cpu::contiguous_as(in[0], m[0].dtype);
  Tensor out = zeros(s, {.dtype = m[0].dtype});
  if (g.numel() == 0) return {out};
  int64_t O, R, I;
  split3(s, d, O, R, I);
  const int64_t K = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  switch (m[0].dtype) {
    case DType::Float32: index_add_kernel(g.data<float>(), ip, out.data<float>(), O, R, I, K); break;
    case DType::Int64: index_add_kernel(g.data<int64_t>(), ip, out.data<int64_t>(), O, R, I, K); break;
    case DType::Int32: index_add_kernel(g.data<int32_t>(), ip, out.data<int32_t>(), O, R, I, K); break;
    default: AXLE_FAIL("[index_add] dtype ", m[0].dtype, " is not supported on cpu");
  }
  return {out};
}

/// Calls f(index position i, element offset in x) for every index element, rows in parallel
/// when `parallel` (gather) and serially otherwise (scatter, where targets may collide).
template <class F>
void for_each_index(const Shape& is, const Shape& xstrides, int64_t d, const int64_t* ip, bool parallel, F f) {
  const int64_t nd = int64_t(is.size());
  if (nd == 0) {
    f(int64_t(0), ip[0] * 0);
    return;
  }
  const int64_t inner = is.back();
  const int64_t rows = inner == 0 ? 0 : shape_numel(is) / inner;
  const int64_t last = nd - 1;
  const int64_t sl = xstrides[size_t(last)], sd = xstrides[size_t(d)];
#pragma omp parallel for schedule(static) if (parallel && rows * inner >= kGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, base = 0;
    for (int64_t k = last - 1; k >= 0; --k) {
      const int64_t i = rem % is[size_t(k)];
      rem /= is[size_t(k)];
      if (k != d) base += i * xstrides[size_t(k)];
    }
    const int64_t* row = ip + r * inner;
    if (last == d) {
      for (int64_t j = 0; j < inner; ++j) f(r * inner + j, base + row[j] * sd);
    } else {
      for (int64_t j = 0; j < inner; ++j) f(r * inner + j, base + j * sl + row[j] * sd);
    }
  }
}

template <class T>
void gather_typed(const Tensor& x, const Tensor& idx, const Tensor& out, int64_t d) {
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  for_each_index(idx.shape(), x.strides(), d, idx.data<int64_t>(), true,
                 [&](int64_t i, int64_t off) { op[i] = xp[off]; });
}

Tensors gather_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const int64_t d = gather_check(in[0].shape(), in[1], a, "gather");
  const int64_t n = in[0].dim() == 0 ? 1 : in[0].shape()[size_t(d)];
  Tensor idx = checked_index(in[1], n, "gather");
  Tensor x = cpu::contiguous_as(in[0], in[0].dtype());
  Tensor out = make_tensor(m[0].shape, m[0].dtype);
  if (out.numel() == 0) return {out};
  switch (x.dtype()) {
    case DType::Float32: gather_typed<float>(x, idx, out, d); break;
    case DType::BFloat16: gather_typed<bfloat16>(x, idx, out, d); break;
    case DType::Int64: gather_typed<int64_t>(x, idx, out, d); break;
    case DType::Int32: gather_typed<int32_t>(x, idx, out, d); break;
    case DType::Bool:
    case DType::UInt8: {
      const uint8_t* xp = static_cast<const uint8_t*>(x.data_ptr());
      uint8_t* op = static_cast<uint8_t*>(out.data_ptr());
      for_each_index(idx.shape(), x.strides(), d, idx.data<int64_t>(), true,
                     [&](int64_t i, int64_t off) { op[i] = xp[off]; });
      break;
    }
    default: AXLE_FAIL("[gather] dtype ", x.dtype(), " is not supported on cpu");
  }
  return {out};
}

template <class T>
void scatter_typed(const Tensor& g, const Tensor& idx, const Tensor& out, int64_t d) {
  const T* gp = g.data<T>();
  T* op = out.data<T>();
  for_each_index(idx.shape(), out.strides(), d, idx.data<int64_t>(), false,
                 [&](int64_t i, int64_t off) { op[off] += gp[i]; });
}

Tensors scatter_add_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const Shape& s = m[0].shape;
  const int64_t d = gather_check(s, in[1], a, "scatter_add");
  Tensor idx = checked_index(in[1], s.empty() ? 1 : s[size_t(d)], "scatter_add");
  Tensor g = cpu::contiguous_as(in[0], m[0].dtype);
  Tensor out = zeros(s, {.dtype = m[0].dtype});
  if (g.numel() == 0) return {out};
  switch (m[0].dtype) {
    case DType::Float32: scatter_typed<float>(g, idx, out, d); break;
    case DType::Int64: scatter_typed<int64_t>(g, idx, out, d); break;
    case DType::Int32: scatter_typed<int32_t>(g, idx, out, d); break;
    default: AXLE_FAIL("[scatter_add] dtype ", m[0].dtype, " is not supported on cpu");
  }
  return {out};
}

template <class T>
void scatter_into(const Tensor& src, const Tensor& idx, const Tensor& out, int64_t d, bool add) {
  const T* sp = static_cast<const T*>(src.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  if (add)
    for_each_index(idx.shape(), out.strides(), d, idx.data<int64_t>(), false,
                   [&](int64_t i, int64_t off) { op[off] += sp[i]; });
  else
    for_each_index(idx.shape(), out.strides(), d, idx.data<int64_t>(), false,
                   [&](int64_t i, int64_t off) { op[off] = sp[i]; });
}

// (x, index, src): a copy of x, then src's elements written (or added, in index order) at index.
Tensors scatter_cpu(const Tensors& in, const Attrs& a, const std::vector<Meta>& m) {
  const attr::Scatter at = attr::Scatter::of(a);
  const char* op = at.add ? "scatter_add" : "scatter";
  const Shape& s = m[0].shape;
  const int64_t d = gather_check(s, in[1], a, op);
  Tensor idx = checked_index(in[1], s.empty() ? 1 : s[size_t(d)], op);
  Tensor out = make_tensor(s, m[0].dtype);  // a copy of x: never written into the input's storage
  if (out.numel() > 0) cpu::copy_into(out, in[0]);
  if (idx.numel() == 0) return {out};
  Tensor src = cpu::contiguous_as(in[2], m[0].dtype);
  switch (m[0].dtype) {
    case DType::Float32: scatter_into<float>(src, idx, out, d, at.add); break;
    case DType::Int64: scatter_into<int64_t>(src, idx, out, d, at.add); break;
    case DType::Int32: scatter_into<int32_t>(src, idx, out, d, at.add); break;
    case DType::Bool:
    case DType::UInt8:
      AXLE_CHECK(!at.add, "[scatter_add] dtype ", m[0].dtype, " is not supported on cpu");
      scatter_into<uint8_t>(src, idx, out, d, false);
      break;
    default: AXLE_FAIL("[", op, "] dtype ", m[0].dtype, " is not supported on cpu");
  }
  return {out};
}

}  // namespace

void register_cpu_index_kernels() {
  auto reg = [](OpKind k, ops::KernelFn f) { ops::register_kernel("cpu", k, f); };
  reg(OpKind::Cat, cat_cpu);
  reg(OpKind::IndexSelect, index_select_cpu);
  reg(OpKind::IndexAdd, index_add_cpu);
  reg(OpKind::Gather, gather_cpu);
  reg(OpKind::ScatterAdd, scatter_add_cpu);
  reg(OpKind::Scatter, scatter_cpu);
}

}  // namespace axle::cpu
