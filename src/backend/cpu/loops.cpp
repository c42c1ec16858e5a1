#include "backend/cpu/loops.h"

#include "axle/error.h"

namespace axle::cpu {

TensorIter::TensorIter(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  const Shape& os = out.shape();
  const int nd = int(os.size());
  AXLE_CHECK(nd <= kMaxDims, "[loops] expected at most ", kMaxDims, " dimensions, got ", nd);
  nargs = 1 + int(ins.size());
  AXLE_CHECK(nargs <= kMaxArgs, "[loops] too many operands");
  // Full (uncoalesced) byte strides per operand.
  int64_t st[kMaxArgs][kMaxDims];
  const Tensor* all[kMaxArgs];
  all[0] = &out;
  int k = 1;
  for (const Tensor* t : ins) all[k++] = t;
  for (int a = 0; a < nargs; ++a) {
    const TensorImpl* ti = all[a]->impl();
    ptrs[a] = ti->data();
    const int64_t isz = int64_t(itemsize(ti->dtype));
    const int off = nd - int(ti->shape.size());
    for (int d = 0; d < nd; ++d) {
      int sd = d - off;
      st[a][d] = (sd < 0 || ti->shape[size_t(sd)] == 1) ? 0 : ti->strides[size_t(sd)] * isz;
    }
  }
  // Walk dims in the output's memory order (outermost first), so an output laid out
  // like its channels-last inputs runs as one flat loop.
  int order[kMaxDims];
  for (int d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order, order + nd, [&](int x, int y) { return st[0][x] > st[0][y]; });
  // Drop size-1 dims, merge dims that are contiguous with their inner neighbour for every operand.
  ndim = 0;
  numel = 1;
  for (int k = 0; k < nd; ++k) {
    const int d = order[k];
    numel *= os[size_t(d)];
    if (os[size_t(d)] == 1) continue;
    if (ndim > 0) {
      bool merge = true;
      for (int a = 0; a < nargs; ++a)
        if (strides[a][ndim - 1] != st[a][d] * os[size_t(d)]) { merge = false; break; }
      if (merge) {
        sizes[ndim - 1] *= os[size_t(d)];
        for (int a = 0; a < nargs; ++a) strides[a][ndim - 1] = st[a][d];
        continue;
      }
    }
    sizes[ndim] = os[size_t(d)];
    for (int a = 0; a < nargs; ++a) strides[a][ndim] = st[a][d];
    ++ndim;
  }
  if (ndim == 0) {
    ndim = 1;
    sizes[0] = 1;
    for (int a = 0; a < nargs; ++a) strides[a][0] = 0;
  }
}

void copy_into(const Tensor& dst, const Tensor& src) {
  AXLE_CHECK(dst.dtype() == src.dtype(), "[copy] dtype mismatch");
  TensorIter it(dst, {&src});
  const int64_t isz = int64_t(itemsize(dst.dtype()));
  it.run([isz](char** p, const int64_t* s, int64_t n) {
    if (s[0] == isz && s[1] == isz) {
      std::memcpy(p[0], p[1], size_t(n * isz));
      return;
    }
    switch (isz) {  // fixed-size moves (bf16 is 2 bytes: a per-element memcpy of size isz is a call)
      case 1:
        for (int64_t i = 0; i < n; ++i) p[0][i * s[0]] = p[1][i * s[1]];
        break;
      case 2:
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<uint16_t*>(p[0] + i * s[0]) = *reinterpret_cast<uint16_t*>(p[1] + i * s[1]);
        break;
      case 4:
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<uint32_t*>(p[0] + i * s[0]) = *reinterpret_cast<uint32_t*>(p[1] + i * s[1]);
        break;
      case 8:
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<uint64_t*>(p[0] + i * s[0]) = *reinterpret_cast<uint64_t*>(p[1] + i * s[1]);
        break;
      default:
        for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], size_t(isz));
    }
  });
}

namespace {
// bfloat16 converts through float (exact from bf16; round-to-nearest-even into bf16).
template <class T> struct Via { using type = T; };
template <> struct Via<bfloat16> { using type = float; };

template <class To, class From>
void cast_loop(char** p, const int64_t* s, int64_t n) {
  using F = typename Via<From>::type;
  using T = typename Via<To>::type;
  if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<To, bfloat16>) {
    if (s[0] == int64_t(sizeof(To)) && s[1] == int64_t(sizeof(From))) {  // contiguous: vectorisable
      To* __restrict o = reinterpret_cast<To*>(p[0]);
      const From* __restrict x = reinterpret_cast<const From*>(p[1]);
      for (int64_t i = 0; i < n; ++i) {
        const F v = static_cast<F>(x[i]);
        if constexpr (std::is_same_v<To, bool>) reinterpret_cast<uint8_t*>(o)[i] = v != F(0);
        else o[i] = To(static_cast<T>(v));
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const F v = static_cast<F>(*reinterpret_cast<const From*>(p[1] + i * s[1]));
    if constexpr (std::is_same_v<To, bool>) *reinterpret_cast<uint8_t*>(p[0] + i * s[0]) = v != F(0);
    else *reinterpret_cast<To*>(p[0] + i * s[0]) = To(static_cast<T>(v));
  }
}
template <class To>
void cast_from(DType from, char** p, const int64_t* s, int64_t n) {
  switch (from) {
    case DType::Float32: cast_loop<To, float>(p, s, n); break;
    case DType::BFloat16: cast_loop<To, bfloat16>(p, s, n); break;
    case DType::Int64: cast_loop<To, int64_t>(p, s, n); break;
    case DType::Int32: cast_loop<To, int32_t>(p, s, n); break;
    case DType::Bool:
    case DType::UInt8: cast_loop<To, uint8_t>(p, s, n); break;
    default: AXLE_FAIL("[cast] dtype ", from, " is not supported on cpu yet");
  }
}
}  // namespace

void cast_raw(DType from, DType t, char** p, const int64_t* s, int64_t n) {
  switch (t) {
    case DType::Float32: cast_from<float>(from, p, s, n); break;
    case DType::BFloat16: cast_from<bfloat16>(from, p, s, n); break;
    case DType::Int64: cast_from<int64_t>(from, p, s, n); break;
    case DType::Int32: cast_from<int32_t>(from, p, s, n); break;
    case DType::Bool: cast_from<bool>(from, p, s, n); break;
    case DType::UInt8: cast_from<uint8_t>(from, p, s, n); break;
    default: AXLE_FAIL("[cast] dtype ", t, " is not supported on cpu yet");
  }
}

bool is_dense(const Tensor& t) {
  const Shape& sh = t.shape();
  const Shape& st = t.strides();
  std::vector<size_t> idx(sh.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return st[a] > st[b]; });
  int64_t expect = 1;
  for (size_t k = idx.size(); k-- > 0;) {
    size_t d = idx[k];
    if (sh[d] == 1) continue;
    if (st[d] != expect) return false;
    expect *= sh[d];
  }
  return true;
}

Tensor empty_like_dense(const Shape& shape, DType dt, std::initializer_list<const Tensor*> like) {
  for (const Tensor* t : like) {
    if (!t || !t->defined() || t->shape() != shape || t->is_contiguous() || !is_dense(*t)) continue;
    Tensor base = make_tensor({t->numel()}, dt);
    return make_view(base, shape, t->strides(), 0);
  }
  return make_tensor(shape, dt);
}

Tensor cast_cpu(const Tensor& x, DType t) {
  Tensor out = empty_like_dense(x.shape(), t, {&x});
  if (x.dtype() == t) {
    copy_into(out, x);
    return out;
  }
  TensorIter it(out, {&x});
  DType from = x.dtype();
  it.run([from, t](char** p, const int64_t* s, int64_t n) { cast_raw(from, t, p, s, n); });
  return out;
}

Tensor contiguous_as(Tensor x, DType t) {
  if (x.is_contiguous()) return x.dtype() == t ? x : cast_cpu(x, t);
  if (x.dtype() != t) x = cast_cpu(x, t);
  if (x.is_contiguous()) return x;
  Tensor out = make_tensor(x.shape(), t, x.device());
  copy_into(out, x);
  return out;
}

}  // namespace axle::cpu
