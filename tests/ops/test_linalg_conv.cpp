// oneDNN kernels: matmul, linear, conv2d (+ backwards), pooling. Forward results against
// plain double-precision loops, gradients against central finite differences, and the
// primitive cache (a repeated configuration creates no new primitive).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "axle/axle.h"
#include "backend/cpu/dnnl.h"
#include "random.h"

using namespace axle;
namespace dg = axle::cpu::dnnl_glue;

namespace {

using axle::test::rand_vec;  // tests/support/random.h
size_t numel_of(const Shape& s) {
  size_t n = 1;
  for (auto d : s) n *= size_t(d);
  return n;
}
Tensor rt(const Shape& s, uint32_t seed) { return from_vector(rand_vec(numel_of(s), seed), s); }

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

// Row-major strides of a logical shape.
std::vector<int64_t> cstrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = int64_t(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i + 1)] * s[size_t(i + 1)];
  return st;
}

// ---- double-precision references (inputs as logical row-major vectors)
std::vector<double> ref_matmul(const std::vector<float>& a, const Shape& as, const std::vector<float>& b,
                               const Shape& bs, Shape& os) {
  const size_t nd = std::max(as.size(), bs.size());
  auto pad = [&](const Shape& s) {
    Shape p(nd - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  Shape ap = pad(as), bp = pad(bs);
  os.assign(nd, 0);
  for (size_t i = 0; i + 2 < nd; ++i) os[i] = std::max(ap[i], bp[i]);
  const int64_t M = ap[nd - 2], K = ap[nd - 1], N = bp[nd - 1];
  os[nd - 2] = M;
  os[nd - 1] = N;
  auto ast = cstrides(ap), bst = cstrides(bp), ost = cstrides(os);
  std::vector<double> out(numel_of(os), 0.0);
  const size_t batches = numel_of(os) / size_t(M * N);
  for (size_t bi = 0; bi < batches; ++bi) {
    int64_t rem = int64_t(bi), ao = 0, bo = 0;
    for (int64_t d = int64_t(nd) - 3; d >= 0; --d) {
      int64_t idx = rem % os[size_t(d)];
      rem /= os[size_t(d)];
      if (ap[size_t(d)] != 1) ao += idx * ast[size_t(d)];
      if (bp[size_t(d)] != 1) bo += idx * bst[size_t(d)];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[size_t(ao + m * K + k)]) * b[size_t(bo + k * N + n)];
        out[bi * size_t(M * N) + size_t(m * N + n)] = acc;
      }
  }
  return out;
}

struct ConvCfg {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, g;
  bool bias;
};
std::vector<double> ref_conv(const ConvCfg& c, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, int64_t& OH, int64_t& OW) {
  OH = (c.H + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
  OW = (c.W + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
  const int64_t cg = c.C / c.g, og = c.O / c.g;
  std::vector<double> y(size_t(c.N * c.O * OH * OW));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = c.bias ? b[size_t(o)] : 0.0;
          const int64_t grp = o / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < c.kh; ++p)
              for (int64_t q = 0; q < c.kw; ++q) {
                int64_t h = i * c.sh - c.ph + p * c.dh, ww = j * c.sw - c.pw + q * c.dw;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                acc += double(x[size_t(((n * c.C + grp * cg + ci) * c.H + h) * c.W + ww)]) *
                       w[size_t(((o * cg + ci) * c.kh + p) * c.kw + q)];
              }
          y[size_t(((n * c.O + o) * OH + i) * OW + j)] = acc;
        }
  return y;
}

std::vector<double> ref_pool(const std::vector<float>& x, const Shape& s, int64_t kh, int64_t kw, int64_t sh,
                             int64_t sw, int64_t ph, int64_t pw, bool is_max, bool include_pad, Shape& os) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const int64_t OH = (H + 2 * ph - kh) / sh + 1, OW = (W + 2 * pw - kw) / sw + 1;
  os = {N, C, OH, OW};
  std::vector<double> y;
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        double acc = is_max ? -INFINITY : 0.0;
        int64_t cnt = 0;
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t b = 0; b < kw; ++b) {
            int64_t h = i * sh - ph + a, w = j * sw - pw + b;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x[size_t((p * H + h) * W + w)];
            acc = is_max ? std::max(acc, v) : acc + v;
            ++cnt;
          }
        y.push_back(is_max ? acc : acc / double(include_pad ? kh * kw : cnt));
      }
  return y;
}

// Central finite differences of loss = sum(f(inputs) * r) w.r.t. every element of input `which`.
std::vector<double> numeric_grad(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                 std::vector<std::vector<float>> vals, const std::vector<Shape>& shapes, size_t which,
                                 const std::vector<float>& r, float eps) {
  auto loss = [&]() {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < vals.size(); ++i) ts.push_back(from_vector(vals[i], shapes[i]));
    auto y = f(ts).to_vector<float>();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += double(y[i]) * r[i];
    return l;
  };
  std::vector<double> g(vals[which].size());
  for (size_t i = 0; i < g.size(); ++i) {
    const float v = vals[which][i];
    vals[which][i] = v + eps;
    double lp = loss();
    vals[which][i] = v - eps;
    double lm = loss();
    vals[which][i] = v;
    g[i] = (lp - lm) / (2.0 * double(eps));
  }
  return g;
}

// Checks autograd gradients of sum(f(inputs) * r) against finite differences for every input.
void check_grads(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Shape>& shapes,
                 uint32_t seed, float eps, double tol, const char* what,
                 std::vector<std::vector<float>> vals = {}) {
  if (vals.empty())
    for (size_t i = 0; i < shapes.size(); ++i) vals.push_back(rand_vec(numel_of(shapes[i]), seed + uint32_t(i)));
  std::vector<Tensor> ts;
  for (size_t i = 0; i < vals.size(); ++i) ts.push_back(from_vector(vals[i], shapes[i], {.requires_grad = true}));
  Tensor y = f(ts);
  auto r = rand_vec(size_t(y.numel()), seed + 100);
  (y * from_vector(r, y.shape())).sum().backward();
  for (size_t i = 0; i < ts.size(); ++i) {
    ASSERT_TRUE(ts[i].grad().defined()) << what << ": no gradient for input " << i;
    auto num = numeric_grad(f, vals, shapes, i, r, eps);
    SCOPED_TRACE(std::string(what) + ", input " + std::to_string(i));
    expect_close(ts[i].grad().to_vector<float>(), num, tol, what);
  }
}

class ConvModes : public ::testing::TestWithParam<dg::ConvMode> {
 protected:
  void SetUp() override {
    prev_ = dg::conv_mode();
    dg::set_conv_mode(GetParam());
  }
  void TearDown() override { dg::set_conv_mode(prev_); }
  dg::ConvMode prev_;
};

}  // namespace

// ------------------------------------------------------------------ matmul / linear
TEST(Matmul, ForwardShapesAndBroadcasting) {
  struct Case { Shape a, b; };
  std::vector<Case> cases = {{{5, 7}, {7, 3}},       {{1, 4}, {4, 1}},          {{2, 3, 4}, {4, 5}},
                             {{3, 4}, {2, 4, 6}},    {{2, 1, 3, 4}, {5, 4, 2}}, {{4, 2, 3}, {4, 3, 2}},
                             {{6, 8}, {8, 1}},       {{2, 3, 4}, {1, 4, 5}}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    auto av = rand_vec(numel_of(c.a), seed++), bv = rand_vec(numel_of(c.b), seed++);
    Shape os;
    auto want = ref_matmul(av, c.a, bv, c.b, os);
    Tensor y = matmul(from_vector(av, c.a), from_vector(bv, c.b));
    EXPECT_EQ(y.shape(), os) << shape_str(c.a) << " @ " << shape_str(c.b);
    expect_close(y.to_vector<float>(), want, 1e-5, "matmul");
  }
}

TEST(Matmul, OneDimensionalOperands) {
  Tensor v = from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor m = from_vector(std::vector<float>{1, 0, 2, 1, 0, 3}, {3, 2});  // [[1,0],[2,1],[0,3]]
  Tensor d = matmul(v, v);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_FLOAT_EQ(d.item<float>(), 14.0f);
  Tensor vm = matmul(v, m);
  EXPECT_EQ(vm.shape(), (Shape{2}));
  EXPECT_EQ(vm.to_vector<float>(), (std::vector<float>{5, 11}));
  Tensor mv = matmul(m.t(), v);
  EXPECT_EQ(mv.shape(), (Shape{2}));
  EXPECT_EQ(mv.to_vector<float>(), (std::vector<float>{5, 11}));
  Tensor bv = matmul(expand(unsqueeze(m.t(), 0), {4, 2, 3}), v);
  EXPECT_EQ(bv.shape(), (Shape{4, 2}));
}

TEST(Matmul, TransposedSlicedAndExpandedViews) {
  auto av = rand_vec(6 * 8, 11), bv = rand_vec(8 * 10, 12);
  Tensor A = from_vector(av, {6, 8}), B = from_vector(bv, {8, 10});
  Shape os;
  auto want = ref_matmul(av, {6, 8}, bv, {8, 10}, os);
  // (B^T)^T and (A^T)^T are transposed views of transposed copies: strided, no contiguous input.
  Tensor At = A.t().contiguous().t(), Bt = B.t().contiguous().t();
  EXPECT_FALSE(At.is_contiguous());
  expect_close(matmul(At, B).to_vector<float>(), want, 1e-5, "a transposed");
  expect_close(matmul(A, Bt).to_vector<float>(), want, 1e-5, "b transposed");
  expect_close(matmul(At, Bt).to_vector<float>(), want, 1e-5, "both transposed");
  // Strided slices (every other column) and a batch broadcast through expand (stride 0).
  Tensor wide = from_vector(rand_vec(6 * 16, 13), {6, 16});
  Tensor sl = slice(wide, 1, 0, 16, 2);
  auto slv = sl.to_vector<float>();
  expect_close(matmul(sl, B).to_vector<float>(), ref_matmul(slv, {6, 8}, bv, {8, 10}, os), 1e-5, "sliced");
  Tensor ex = expand(unsqueeze(A, 0), {3, 6, 8});
  Tensor bb = from_vector(rand_vec(3 * 8 * 10, 14), {3, 8, 10});
  auto exv = ex.to_vector<float>();
  expect_close(matmul(ex, bb).to_vector<float>(), ref_matmul(exv, {3, 6, 8}, bb.to_vector<float>(), {3, 8, 10}, os),
               1e-5, "expanded");
  Tensor ex2 = expand(unsqueeze(B, 0), {3, 8, 10});
  expect_close(matmul(ex, ex2).to_vector<float>(),
               ref_matmul(exv, {3, 6, 8}, ex2.to_vector<float>(), {3, 8, 10}, os), 1e-5, "both expanded");
  // A permuted batch (batch dim not outermost in memory).
  Tensor p = permute(from_vector(rand_vec(6 * 3 * 8, 15), {6, 3, 8}), {1, 0, 2});
  auto pv = p.to_vector<float>();
  expect_close(matmul(p, B).to_vector<float>(), ref_matmul(pv, {3, 6, 8}, bv, {8, 10}, os), 1e-5, "permuted");
}

TEST(Matmul, EmptyAndErrors) {
  Tensor y = matmul(zeros({3, 0}), zeros({0, 4}));
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(matmul(zeros({0, 5}), zeros({5, 4})).shape(), (Shape{0, 4}));
  try {
    matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul(zeros({2, 2, 3}), zeros({3, 3, 5})), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 5})), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), Error);
}

TEST(Linear, ForwardWithAndWithoutBias) {
  auto xv = rand_vec(2 * 3 * 5, 21), wv = rand_vec(4 * 5, 22), bv = rand_vec(4, 23);
  Tensor x = from_vector(xv, {2, 3, 5}), w = from_vector(wv, {4, 5}), b = from_vector(bv, {4});
  Shape os;
  auto wt = w.t().contiguous().to_vector<float>();
  auto want = ref_matmul(xv, {2, 3, 5}, wt, {5, 4}, os);
  expect_close(linear(x, w).to_vector<float>(), want, 1e-5, "linear no bias");
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 4];
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  expect_close(y.to_vector<float>(), want, 1e-5, "linear bias");
  // Weight given as a transposed view; input as a permuted (non-foldable) view; 1-D input.
  Tensor w2 = w.t().contiguous().t();
  expect_close(linear(x, w2, b).to_vector<float>(), want, 1e-5, "linear transposed weight");
  Tensor xp = permute(from_vector(x.permute({1, 0, 2}).contiguous().to_vector<float>(), {3, 2, 5}), {1, 0, 2});
  expect_close(linear(xp, w, b).to_vector<float>(), want, 1e-5, "linear permuted input");
  // A strided bias (every other element of a longer vector, NaN in the gaps).
  std::vector<float> gapped(8, NAN);
  for (size_t i = 0; i < 4; ++i) gapped[2 * i] = bv[i];
  Tensor bstr = slice(from_vector(gapped, {8}), 0, 0, 8, 2);
  expect_close(linear(x, w, bstr).to_vector<float>(), want, 1e-5, "linear strided bias");
  Tensor y1 = linear(from_vector(std::vector<float>(xv.begin(), xv.begin() + 5), {5}), w, b);
  EXPECT_EQ(y1.shape(), (Shape{4}));
  expect_close(y1.to_vector<float>(), std::vector<double>(want.begin(), want.begin() + 4), 1e-5, "linear 1-D");
}

TEST(Linear, Gradients) {
  check_grads([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {{3, 5}, {4, 5}, {4}}, 31, 0.25f,
              2e-3, "linear 2-D");
  check_grads([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {{2, 3, 5}, {4, 5}, {4}}, 32,
              0.25f, 2e-3, "linear 3-D");
  check_grads([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); }, {{5}, {4, 5}}, 33, 0.25f, 2e-3,
              "linear 1-D no bias");
}

TEST(Matmul, Gradients) {
  auto mm = [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); };
  check_grads(mm, {{3, 4}, {4, 5}}, 41, 0.25f, 2e-3, "2-D");
  check_grads(mm, {{2, 3, 4}, {4, 5}}, 42, 0.25f, 2e-3, "batched @ 2-D");
  check_grads(mm, {{3, 4}, {2, 4, 5}}, 43, 0.25f, 2e-3, "2-D @ batched");
  check_grads(mm, {{2, 1, 3, 4}, {3, 4, 2}}, 44, 0.25f, 2e-3, "broadcast batches");
  check_grads(mm, {{4}, {4, 3}}, 45, 0.25f, 2e-3, "vector @ matrix");
  check_grads([](const std::vector<Tensor>& t) { return matmul(t[0].t(), t[1]); }, {{4, 3}, {4, 5}}, 46, 0.25f, 2e-3,
              "transposed view");
}

// ------------------------------------------------------------------ conv2d
TEST_P(ConvModes, ForwardMatchesReference) {
  std::vector<ConvCfg> cfgs = {
      {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},   // same padding
      {2, 4, 9, 8, 6, 3, 2, 2, 3, 1, 0, 1, 1, 2, false},  // strides, groups, rectangular kernel
      {1, 2, 10, 9, 3, 3, 3, 1, 2, 2, 1, 2, 3, 1, true},  // dilation
      {3, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, true},   // depthwise
      {2, 1, 8, 8, 5, 1, 1, 2, 2, 0, 0, 1, 1, 1, false},  // 1x1, stride 2
      {1, 2, 8, 7, 2, 3, 3, 3, 3, 0, 0, 1, 1, 1, true},   // stride 3 (negative right padding)
  };
  uint32_t seed = 50;
  for (const auto& c : cfgs) {
    auto xv = rand_vec(size_t(c.N * c.C * c.H * c.W), seed++);
    auto wv = rand_vec(size_t(c.O * (c.C / c.g) * c.kh * c.kw), seed++);
    auto bv = rand_vec(size_t(c.O), seed++);
    int64_t OH, OW;
    auto want = ref_conv(c, xv, wv, bv, OH, OW);
    Conv2dFuncOptions o{.stride = {c.sh, c.sw}, .padding = {c.ph, c.pw}, .dilation = {c.dh, c.dw}, .groups = c.g};
    Tensor x = from_vector(xv, {c.N, c.C, c.H, c.W}), w = from_vector(wv, {c.O, c.C / c.g, c.kh, c.kw});
    Tensor b = c.bias ? from_vector(bv, {c.O}) : Tensor();
    Tensor y = conv2d(x, w, b, o);
    ASSERT_EQ(y.shape(), (Shape{c.N, c.O, OH, OW}));
    expect_close(y.to_vector<float>(), want, 1e-4, "conv2d");
    if (c.bias) {  // strided bias with NaN gaps
      std::vector<float> gapped(size_t(2 * c.O), NAN);
      for (size_t i = 0; i < size_t(c.O); ++i) gapped[2 * i] = bv[i];
      Tensor bstr = slice(from_vector(gapped, {2 * c.O}), 0, 0, 2 * c.O, 2);
      expect_close(conv2d(x, w, bstr, o).to_vector<float>(), want, 1e-4, "conv2d strided bias");
    }
    // Channels-last input (NCHW shape, NHWC strides) and a strided (sliced) input view.
    Tensor xcl = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
    expect_close(conv2d(xcl, w, b, o).to_vector<float>(), want, 1e-4, "conv2d channels-last input");
    Tensor big = from_vector(rand_vec(size_t(c.N * c.C * c.H * 2 * c.W), seed++), {c.N, c.C, c.H, 2 * c.W});
    Tensor xs = slice(big, 3, 0, 2 * c.W, 2);
    int64_t oh2, ow2;
    auto want2 = ref_conv(c, xs.to_vector<float>(), wv, bv, oh2, ow2);
    expect_close(conv2d(xs, w, b, o).to_vector<float>(), want2, 1e-4, "conv2d sliced input");
  }
}

TEST_P(ConvModes, Gradients) {
  auto conv = [](Conv2dFuncOptions o, bool bias) {
    return [o, bias](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], bias ? t[2] : Tensor(), o); };
  };
  check_grads(conv({.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1}, true),
              {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, 61, 0.25f, 2e-3, "conv pad 1 bias");
  check_grads(conv({.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}, .groups = 2}, false),
              {{1, 4, 6, 5}, {2, 2, 2, 3}}, 62, 0.25f, 2e-3, "conv stride groups dilation");
  check_grads(conv({.stride = {1, 1}, .padding = {0, 0}, .dilation = {1, 1}, .groups = 1}, true),
              {{2, 2, 4, 4}, {3, 2, 1, 1}, {3}}, 63, 0.25f, 2e-3, "conv 1x1");
  // Only the bias needs a gradient: summed over N, H, W.
  Tensor x = rt({2, 3, 4, 4}, 64), w = rt({5, 3, 3, 3}, 65);
  Tensor b = zeros({5}, {.requires_grad = true});
  conv2d(x, w, b, {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1}).sum().backward();
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(5, 32.0f));
}

TEST_P(ConvModes, ChannelsLastResultsFlowIntoPooling) {
  // conv -> relu -> max_pool -> conv, the cnn pattern, checked against contiguous inputs.
  Tensor x = rt({2, 3, 8, 8}, 71), w1 = rt({4, 3, 3, 3}, 72), w2 = rt({5, 4, 3, 3}, 73);
  Conv2dFuncOptions o{.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  Tensor h = max_pool2d(relu(conv2d(x, w1, {}, o)), {.kernel = {2, 2}});
  Tensor y = conv2d(h, w2, {}, o);
  Tensor hc = from_vector(h.to_vector<float>(), h.shape());
  Tensor yc = conv2d(hc, w2, {}, o);
  auto a = y.to_vector<float>(), b = yc.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5);
}

// ------------------------------------------------------------------ conv_transpose2d
namespace {
struct ConvTCfg {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, g;
  bool bias;
};
// Scatter form (every input element adds x * w into its output window), independent of conv2d's
// gather form: x [N, C, H, W], w [C, O/g, kh, kw].
std::vector<double> ref_conv_transpose(const ConvTCfg& c, const std::vector<float>& x, const std::vector<float>& w,
                                       const std::vector<float>& b, int64_t& OH, int64_t& OW) {
  OH = (c.H - 1) * c.sh - 2 * c.ph + c.dh * (c.kh - 1) + c.oph + 1;
  OW = (c.W - 1) * c.sw - 2 * c.pw + c.dw * (c.kw - 1) + c.opw + 1;
  const int64_t cg = c.C / c.g, og = c.O / c.g;
  std::vector<double> y(size_t(c.N * c.O * OH * OW), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t i = 0; i < OH * OW; ++i) y[size_t((n * c.O + o) * OH * OW + i)] = c.bias ? b[size_t(o)] : 0.0;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t ci = 0; ci < c.C; ++ci)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t ww = 0; ww < c.W; ++ww) {
          const double v = x[size_t(((n * c.C + ci) * c.H + h) * c.W + ww)];
          for (int64_t oo = 0; oo < og; ++oo)
            for (int64_t p = 0; p < c.kh; ++p)
              for (int64_t q = 0; q < c.kw; ++q) {
                const int64_t i = h * c.sh - c.ph + p * c.dh, j = ww * c.sw - c.pw + q * c.dw;
                if (i < 0 || i >= OH || j < 0 || j >= OW) continue;
                const int64_t o = (ci / cg) * og + oo;
                y[size_t(((n * c.O + o) * OH + i) * OW + j)] += v * w[size_t(((ci * og + oo) * c.kh + p) * c.kw + q)];
              }
        }
  return y;
}
ConvTranspose2dFuncOptions convt_opts(const ConvTCfg& c) {
  return {.stride = {c.sh, c.sw}, .padding = {c.ph, c.pw}, .output_padding = {c.oph, c.opw}, .groups = c.g,
          .dilation = {c.dh, c.dw}};
}
}  // namespace

TEST_P(ConvModes, TransposeMatchesReference) {
  std::vector<ConvTCfg> cfgs = {
      {2, 3, 5, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},   // "same" padding
      {2, 4, 4, 5, 6, 3, 2, 2, 3, 1, 0, 1, 2, 1, 1, 2, false},  // strides, output_padding, groups
      {1, 2, 4, 4, 3, 3, 3, 2, 1, 0, 1, 2, 0, 3, 2, 1, true},   // output_padding 2 >= stride 2 (< dilation 3)
      {3, 6, 3, 3, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6, true},   // depthwise, the U-Net upsampling shape
      {2, 1, 3, 3, 5, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, false},  // 1x1, stride 2 (zeros between)
      {1, 2, 4, 3, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, true},   // 2x2 stride 2: the common up-convolution
  };
  uint32_t seed = 150;
  for (const auto& c : cfgs) {
    SCOPED_TRACE(::testing::Message() << "config with seed " << seed);
    auto xv = rand_vec(size_t(c.N * c.C * c.H * c.W), seed++);
    auto wv = rand_vec(size_t(c.C * (c.O / c.g) * c.kh * c.kw), seed++);
    auto bv = rand_vec(size_t(c.O), seed++);
    int64_t OH, OW;
    auto want = ref_conv_transpose(c, xv, wv, bv, OH, OW);
    Tensor x = from_vector(xv, {c.N, c.C, c.H, c.W}), w = from_vector(wv, {c.C, c.O / c.g, c.kh, c.kw});
    Tensor b = c.bias ? from_vector(bv, {c.O}) : Tensor();
    Tensor y = conv_transpose2d(x, w, b, convt_opts(c));
    ASSERT_EQ(y.shape(), (Shape{c.N, c.O, OH, OW}));
    expect_close(y.to_vector<float>(), want, 1e-4, "conv_transpose2d");
    Tensor xcl = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
    expect_close(conv_transpose2d(xcl, w, b, convt_opts(c)).to_vector<float>(), want, 1e-4,
                 "conv_transpose2d channels-last input");
    Tensor big = from_vector(rand_vec(size_t(c.N * c.C * c.H * 2 * c.W), seed++), {c.N, c.C, c.H, 2 * c.W});
    Tensor xs = slice(big, 3, 1, 2 * c.W, 2);
    auto want2 = ref_conv_transpose(c, xs.to_vector<float>(), wv, bv, OH, OW);
    expect_close(conv_transpose2d(xs, w, b, convt_opts(c)).to_vector<float>(), want2, 1e-4,
                 "conv_transpose2d sliced input");
    // The transposed conv is conv2d's adjoint: <conv_transpose2d(x, w), z> = <x, conv2d(z, w)>.
    Tensor z = rt(y.shape(), seed++);
    Conv2dFuncOptions co{.stride = {c.sh, c.sw}, .padding = {c.ph, c.pw}, .dilation = {c.dh, c.dw}, .groups = c.g};
    Tensor cz = conv2d(z, w, {}, co);
    // conv2d of the output's size may see more rows than x has (output_padding >= stride): crop.
    cz = slice(slice(cz, 2, 0, c.H), 3, 0, c.W);
    const double lhs = sum(mul(conv_transpose2d(x, w, {}, convt_opts(c)), z)).item<float>();
    const double rhs = sum(mul(x, cz)).item<float>();
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(rhs)));
  }
  // Unbatched input.
  Tensor x = rt({2, 3, 3}, 170), w = rt({2, 4, 2, 2}, 171);
  EXPECT_EQ(conv_transpose2d(x, w, {}, {.stride = {2, 2}}).to_vector<float>(),
            squeeze(conv_transpose2d(unsqueeze(x, 0), w, {}, {.stride = {2, 2}}), 0).to_vector<float>());
}

TEST_P(ConvModes, TransposeGradients) {
  auto convt = [](ConvTranspose2dFuncOptions o, bool bias) {
    return [o, bias](const std::vector<Tensor>& t) { return conv_transpose2d(t[0], t[1], bias ? t[2] : Tensor(), o); };
  };
  check_grads(convt({.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}, true),
              {{2, 3, 3, 4}, {3, 2, 3, 3}, {2}}, 181, 0.25f, 2e-3, "conv_transpose stride 2 output_padding bias");
  check_grads(convt({.stride = {1, 2}, .padding = {0, 1}, .output_padding = {0, 1}, .groups = 2, .dilation = {2, 1}},
                    false),
              {{1, 4, 3, 3}, {4, 1, 2, 3}}, 182, 0.25f, 2e-3, "conv_transpose groups dilation");
  check_grads(convt({.stride = {2, 1}, .padding = {1, 0}, .output_padding = {2, 0}, .dilation = {3, 1}}, true),
              {{1, 2, 3, 3}, {2, 3, 3, 2}, {3}}, 183, 0.25f, 2e-3, "conv_transpose output_padding past stride");
}

TEST(ConvTranspose2d, Errors) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), {}, {.stride = {2, 2}, .output_padding = {2, 2}}); });
  EXPECT_NE(m.find("[conv_transpose2d] expected output_padding smaller than either stride or dilation, got "
                   "output_padding (2, 2) with stride (2, 2) and dilation (1, 1)"),
            std::string::npos)
      << m;
  m = message([] { conv_transpose2d(zeros({1, 3, 3, 3}), zeros({2, 2, 3, 3})); });
  EXPECT_NE(m.find("expected weight of shape [3, out_channels/1, kh, kw]"), std::string::npos) << m;
  EXPECT_NE(m.find("got [2, 2, 3, 3]"), std::string::npos) << m;
  m = message([] { conv_transpose2d(zeros({1, 2, 2, 2}), zeros({2, 2, 1, 1}), {}, {.padding = {1, 1}}); });
  EXPECT_NE(m.find("[conv_transpose2d] expected a positive output size, got 0x0"), std::string::npos) << m;
  m = message([] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), zeros({3})); });
  EXPECT_NE(m.find("expected a float32 bias of shape [2], got [3]"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ConvModes,
                         ::testing::Values(dg::ConvMode::Plain, dg::ConvMode::ChannelsLast, dg::ConvMode::Blocked),
                         [](const auto& info) {
                           switch (info.param) {
                             case dg::ConvMode::Plain: return std::string("nchw");
                             case dg::ConvMode::ChannelsLast: return std::string("nhwc");
                             default: return std::string("blocked");
                           }
                         });

TEST(Conv2d, Errors) {
  Conv2dFuncOptions o;
  try {
    conv2d(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3}), {}, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[conv2d]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3}), {}, o), Error);
  EXPECT_THROW(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), zeros({3}), o), Error);
  EXPECT_THROW(conv2d(zeros({1, 4, 5, 5}), zeros({4, 2, 3, 3}), {}, {.groups = 3}), Error);
  EXPECT_EQ(conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3}), {}, o).shape(), (Shape{4, 3, 3}));
}

// ------------------------------------------------------------------ pooling
TEST(Pool, MaxAndAvgMatchReference) {
  struct P { Shape s; int64_t kh, kw, sh, sw, ph, pw; };
  std::vector<P> ps = {{{2, 3, 8, 8}, 2, 2, 2, 2, 0, 0}, {{1, 2, 7, 9}, 3, 3, 2, 2, 1, 1},
                       {{2, 2, 5, 7}, 2, 3, 2, 1, 1, 1}, {{1, 3, 7, 7}, 2, 2, 2, 2, 0, 0}};
  uint32_t seed = 80;
  for (const auto& p : ps) {
    auto xv = rand_vec(numel_of(p.s), seed++);
    Tensor x = from_vector(xv, p.s);
    Pool2dOptions o{.kernel = {p.kh, p.kw}, .stride = {p.sh, p.sw}, .padding = {p.ph, p.pw}};
    Shape os;
    auto mx = ref_pool(xv, p.s, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, true, true, os);
    Tensor y = max_pool2d(x, o);
    ASSERT_EQ(y.shape(), os);
    expect_close(y.to_vector<float>(), mx, 1e-6, "max_pool2d");
    Tensor xcl = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
    expect_close(max_pool2d(xcl, o).to_vector<float>(), mx, 1e-6, "max_pool2d channels-last");
    for (bool inc : {true, false}) {
      o.count_include_pad = inc;
      auto av = ref_pool(xv, p.s, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, false, inc, os);
      expect_close(avg_pool2d(x, o).to_vector<float>(), av, 1e-5, "avg_pool2d");
      expect_close(avg_pool2d(xcl, o).to_vector<float>(), av, 1e-5, "avg_pool2d channels-last");
    }
  }
  // Default stride = kernel; unbatched input.
  Tensor x = from_vector(std::vector<float>{1, 5, 2, 0, 3, 4, 8, 1, 0, 0, 9, 2, 7, 6, 1, 3}, {1, 4, 4});
  EXPECT_EQ(max_pool2d(x).to_vector<float>(), (std::vector<float>{5, 8, 7, 9}));
  EXPECT_EQ(avg_pool2d(x).to_vector<float>(), (std::vector<float>{3.25f, 2.75f, 3.25f, 3.75f}));
}

TEST(Pool, AdaptiveAvg) {
  for (auto [H, W, oh, ow] : std::vector<std::array<int64_t, 4>>{{8, 6, 4, 3}, {7, 5, 3, 2}, {5, 5, 1, 1}, {4, 6, 5, 4}}) {
    auto xv = rand_vec(size_t(2 * 3 * H * W), uint32_t(90 + H + W));
    Tensor y = adaptive_avg_pool2d(from_vector(xv, {2, 3, H, W}), {oh, ow});
    ASSERT_EQ(y.shape(), (Shape{2, 3, oh, ow}));
    std::vector<double> want;
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh, w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xv[size_t((p * H + h) * W + w)];
          want.push_back(s / double((h1 - h0) * (w1 - w0)));
        }
    expect_close(y.to_vector<float>(), want, 1e-5, "adaptive_avg_pool2d");
  }
}

TEST(Pool, Gradients) {
  // Distinct, well separated values so max pooling has no ties within eps.
  auto spread = [](size_t n, uint32_t seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = 0.05f * float(i);
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return v;
  };
  Shape s{2, 2, 5, 6};
  check_grads([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {.kernel = {2, 2}}); }, {s}, 101, 0.01f, 2e-3,
              "max_pool2d", {spread(numel_of(s), 1)});
  check_grads(
      [](const std::vector<Tensor>& t) {
        return max_pool2d(t[0], {.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}});
      },
      {s}, 102, 0.01f, 2e-3, "max_pool2d padded", {spread(numel_of(s), 2)});
  check_grads([](const std::vector<Tensor>& t) {
    return max_pool2d(permute(t[0], {0, 3, 1, 2}), {.kernel = {2, 2}});  // channels-last input
  }, {{2, 5, 6, 2}}, 103, 0.01f, 2e-3, "max_pool2d channels-last", {spread(120, 3)});
  check_grads([](const std::vector<Tensor>& t) {  // channels-last, general window (oneDNN's kernel)
    return max_pool2d(permute(t[0], {0, 3, 1, 2}), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  }, {{2, 5, 6, 3}}, 106, 0.01f, 2e-3, "max_pool2d channels-last 3x3", {spread(180, 4)});
  for (bool inc : {true, false})
    check_grads(
        [inc](const std::vector<Tensor>& t) {
          return avg_pool2d(t[0], {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = inc});
        },
        {s}, 104, 0.25f, 2e-3, "avg_pool2d");
  for (auto os : std::vector<std::vector<int64_t>>{{5, 3}, {3, 4}})
    check_grads([os](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], os); }, {s}, 105, 0.25f, 2e-3,
                "adaptive_avg_pool2d");
}

// ceil_mode and dilation against plain loops with PyTorch's rules (ops.def), on NCHW, channels-last
// (oneDNN's kernel where it runs) and sliced inputs.
TEST(Pool, CeilModeAndDilationMatchReference) {
  struct P { Shape s; int64_t kh, kw, sh, sw, ph, pw, dh, dw; bool ceil; };
  std::vector<P> ps = {{{2, 3, 5, 7}, 2, 2, 2, 2, 0, 0, 1, 1, true},   // 2x2 with a partial last window
                       {{1, 4, 6, 6}, 3, 3, 2, 2, 1, 1, 1, 1, true},   // overhang past the padding
                       {{1, 4, 7, 7}, 3, 3, 2, 2, 1, 1, 1, 1, true},   // ceil == floor here
                       {{2, 2, 9, 8}, 3, 2, 1, 2, 1, 1, 2, 3, false},  // dilation
                       {{2, 3, 8, 9}, 2, 3, 3, 2, 1, 1, 2, 2, true}};  // dilation + ceil
  uint32_t seed = 190;
  for (const auto& p : ps) {
    SCOPED_TRACE(::testing::Message() << "input " << p.s[2] << "x" << p.s[3] << ", kernel " << p.kh << "x" << p.kw);
    auto out = [&](int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) {
      const int64_t span = in + 2 * pad - d * (k - 1) - 1;
      int64_t o = (p.ceil ? (span + s - 1) / s : span / s) + 1;
      if (p.ceil && (o - 1) * s >= in + pad) --o;
      return o;
    };
    const int64_t N = p.s[0], C = p.s[1], H = p.s[2], W = p.s[3];
    auto xv = rand_vec(numel_of(p.s), seed++);
    for (int pass = 0; pass < 2; ++pass) {  // max (with dilation), then avg (without) both divisors
      const bool is_max = pass == 0;
      const int64_t dh = is_max ? p.dh : 1, dw = is_max ? p.dw : 1;
      const int64_t OH = out(H, p.kh, p.sh, p.ph, dh), OW = out(W, p.kw, p.sw, p.pw, dw);
      for (bool inc : {true, false}) {
        if (is_max && !inc) continue;
        std::vector<double> want;
        for (int64_t q = 0; q < N * C; ++q)
          for (int64_t i = 0; i < OH; ++i)
            for (int64_t j = 0; j < OW; ++j) {
              double acc = is_max ? -INFINITY : 0.0;
              int64_t cnt = 0, padded = 0;
              for (int64_t a = 0; a < p.kh; ++a)
                for (int64_t b = 0; b < p.kw; ++b) {
                  const int64_t h = i * p.sh - p.ph + a * dh, w = j * p.sw - p.pw + b * dw;
                  padded += h < H + p.ph && w < W + p.pw;
                  if (h < 0 || h >= H || w < 0 || w >= W) continue;
                  const double v = xv[size_t((q * H + h) * W + w)];
                  acc = is_max ? std::max(acc, v) : acc + v;
                  ++cnt;
                }
              want.push_back(is_max ? acc : acc / double(inc ? padded : cnt));
            }
        Pool2dOptions o{.kernel = {p.kh, p.kw}, .stride = {p.sh, p.sw}, .padding = {p.ph, p.pw},
                        .dilation = {dh, dw}, .ceil_mode = p.ceil, .count_include_pad = inc};
        Tensor x = from_vector(xv, p.s);
        Tensor xcl = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
        std::vector<float> gv(size_t(N * C * H * 2 * W), NAN);  // x's values with NaN gaps between
        for (size_t i = 0; i < xv.size(); ++i) gv[2 * i] = xv[i];
        Tensor view = slice(from_vector(gv, {N, C, H, 2 * W}), 3, 0, 2 * W, 2);
        for (const Tensor& in : {x, xcl, view}) {
          Tensor y = is_max ? max_pool2d(in, o) : avg_pool2d(in, o);
          ASSERT_EQ(y.shape(), (Shape{N, C, OH, OW}));
          expect_close(y.to_vector<float>(), want, 1e-5, is_max ? "max_pool2d" : inc ? "avg_pool2d included" : "avg_pool2d excluded");
        }
      }
    }
  }
}

TEST(Pool, CeilModeAndDilationGradients) {
  auto spread = [](size_t n, uint32_t seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = 0.05f * float(i);
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return v;
  };
  check_grads([](const std::vector<Tensor>& t) {
    return max_pool2d(t[0], {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .ceil_mode = true});
  }, {{2, 2, 7, 8}}, 201, 0.01f, 2e-3, "max_pool2d dilation ceil", {spread(224, 5)});
  check_grads([](const std::vector<Tensor>& t) {  // channels-last: axle's own kernel for the overhang
    return max_pool2d(permute(t[0], {0, 3, 1, 2}), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true});
  }, {{2, 6, 6, 3}}, 202, 0.01f, 2e-3, "max_pool2d channels-last ceil", {spread(216, 6)});
  for (bool inc : {true, false})
    check_grads([inc](const std::vector<Tensor>& t) {
      return avg_pool2d(t[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = inc});
    }, {{2, 2, 6, 7}}, 203, 0.25f, 2e-3, "avg_pool2d ceil");
}

TEST(Pool, Errors) {
  EXPECT_THROW(max_pool2d(zeros({1, 1, 1, 1}), {.kernel = {2, 2}}), Error);
  EXPECT_THROW(max_pool2d(zeros({1, 1, 4, 4}), {.kernel = {2, 2}, .padding = {2, 2}}), Error);
  EXPECT_THROW(avg_pool2d(zeros({4, 4}), {}), Error);
  EXPECT_THROW(adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}), Error);
}

// ------------------------------------------------------------------ primitive cache
TEST(DnnlCache, SecondCallCreatesNoPrimitive) {
  Tensor x = rt({4, 3, 9, 9}, 111), w = rt({5, 3, 3, 3}, 112), b = rt({5}, 113);
  Tensor a = rt({17, 23}, 114), m = rt({23, 19}, 115);
  Conv2dFuncOptions o{.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
  auto run = [&] {
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
    Tensor y = max_pool2d(relu(conv2d(xr, wr, b, o)), {.kernel = {2, 2}});
    Tensor z = linear(y.flatten(1), rt({7, 80}, 116), rt({7}, 117));
    Tensor q = avg_pool2d(y, {.kernel = {2, 2}});
    (z.sum() + q.sum() + matmul(a, m).sum()).backward();
  };
  run();
  const int64_t before = dg::primitives_created();
  EXPECT_GT(before, 0);
  run();
  run();
  EXPECT_EQ(dg::primitives_created(), before) << "a repeated configuration created new primitives";
  // A new shape is a new entry: one no earlier run of this test (--gtest_repeat) has used.
  static int64_t calls = 0;
  const int64_t k = 997 + calls++;
  matmul(rt({17, k}, 118), rt({k, 19}, 119));
  EXPECT_EQ(dg::primitives_created(), before + 1);
}
