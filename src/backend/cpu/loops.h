// Strided, broadcasting loops for axle's own cpu kernels (internal).
//
//   TensorIter it(out, {&a, &b});        // a, b broadcast to out's shape
//   it.run([](char** p, const int64_t* s, int64_t n) { ... n elements, byte strides s ... });
//
// Dimensions are coalesced so contiguous data runs as one flat loop; the outer
// index space (or the flat loop, if that is all there is) is split over OpenMP threads.
#pragma once
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <omp.h>
#include <initializer_list>

#include "core/parallel.h"
#include "core/tensor_impl.h"

namespace axle::cpu {

using axle::kParallelGrain;
using axle::use_team;

struct TensorIter {
  static constexpr int kMaxArgs = 4;
  static constexpr int kMaxDims = 12;
  int nargs = 0;
  int ndim = 0;
  int64_t numel = 1;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxArgs][kMaxDims];  // bytes
  char* ptrs[kMaxArgs];

  /// out first, then inputs broadcast (right-aligned) to out's shape.
  TensorIter(const Tensor& out, std::initializer_list<const Tensor*> ins);

  /// f(char** ptrs, const int64_t* byte_strides, int64_t n) handles a 1-D run.
  template <class F>
  void run(F&& f) const;
};

/// Copies any strided tensor into a contiguous one of the same dtype.
void copy_into(const Tensor& dst, const Tensor& src);
/// True if the tensor covers its memory exactly once (any dim order: e.g. channels-last).
bool is_dense(const Tensor& t);
/// A new tensor of `shape`: laid out like the first of `like` that has this shape and is
/// dense but not contiguous (so channels-last stays channels-last), else contiguous.
Tensor empty_like_dense(const Shape& shape, DType dt, std::initializer_list<const Tensor*> like);
/// Converts dtype (cpu, no autograd); keeps a dense layout.
Tensor cast_cpu(const Tensor& x, DType t);
/// Converts n elements from `from` to `to`: p[0] = out, p[1] = in, byte strides s.
void cast_raw(DType from, DType to, char** p, const int64_t* s, int64_t n);
/// Contiguous cpu tensor with dtype `t` (a cast and/or copy only if needed; no autograd).
Tensor contiguous_as(Tensor x, DType t);

// ------------------------------------------------------------------ implementation
template <class F>
void TensorIter::run(F&& f) const {
  if (numel == 0) return;
  const int64_t inner = sizes[ndim - 1];
  const int64_t outer = numel / inner;
  auto run_outer = [&](int64_t o, char** p) {
    int64_t rem = o;
    for (int a = 0; a < nargs; ++a) p[a] = ptrs[a];
    for (int d = ndim - 2; d >= 0; --d) {
      int64_t i = rem % sizes[d];
      rem /= sizes[d];
      for (int a = 0; a < nargs; ++a) p[a] += i * strides[a][d];
    }
  };
  int64_t inner_strides[kMaxArgs];
  for (int a = 0; a < nargs; ++a) inner_strides[a] = strides[a][ndim - 1];
  const bool serial = !use_team(numel);
  if (outer == 1) {
    if (serial) {
      char* p[kMaxArgs];
      for (int a = 0; a < nargs; ++a) p[a] = ptrs[a];
      f(p, inner_strides, numel);
      return;
    }
#pragma omp parallel
    {
      int nt = omp_get_num_threads(), t = omp_get_thread_num();
      int64_t chunk = (numel + nt - 1) / nt;
      chunk = (chunk + 15) & ~int64_t(15);
      int64_t b = std::min<int64_t>(numel, chunk * t), e = std::min<int64_t>(numel, b + chunk);
      if (b < e) {
        char* p[kMaxArgs];
        for (int a = 0; a < nargs; ++a) p[a] = ptrs[a] + b * inner_strides[a];
        f(p, inner_strides, e - b);
      }
    }
    return;
  }
  if (serial) {
    char* p[kMaxArgs];
    for (int64_t o = 0; o < outer; ++o) {
      run_outer(o, p);
      f(p, inner_strides, inner);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    char* p[kMaxArgs];
    run_outer(o, p);
    f(p, inner_strides, inner);
  }
}

}  // namespace axle::cpu
