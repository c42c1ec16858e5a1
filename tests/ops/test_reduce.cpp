// Sanity tests for reduce.cpp, index.cpp and nn_functional.cpp: values against double
// references or PyTorch 1.13 golden values (tests/ comments give the torch call), gradients
// against finite differences, non-contiguous inputs, and errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "axle/autograd.h"
#include "axle/generator.h"
#include "axle/ops.h"

using namespace axle;

namespace {

// Deterministic input: sin(a * i + b) * s, computed in double and rounded to float (as the goldens).
Tensor seq(const Shape& shape, double a = 0.7, double b = 0.3, double s = 2.0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(std::sin(a * double(i) + b) * s);
  return from_vector(v, shape);
}

void expect_near(const Tensor& t, const std::vector<float>& want, double tol = 1e-5) {
  auto got = t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "at " << i;
}

// Double-precision reference reduction of a row-major tensor over `dims` (keepdim layout).
std::vector<double> ref_sum(const Tensor& x, const std::vector<bool>& red) {
  auto v = x.to_vector<float>();
  const Shape& s = x.shape();
  Shape os = s;
  for (size_t i = 0; i < s.size(); ++i)
    if (red[i]) os[i] = 1;
  int64_t on = 1;
  for (int64_t d : os) on *= d;
  std::vector<double> out(size_t(on), 0.0);
  std::vector<int64_t> idx(s.size(), 0);
  for (size_t lin = 0; lin < v.size(); ++lin) {
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d) o = o * os[d] + (red[d] ? 0 : idx[d]);
    out[size_t(o)] += v[lin];
    for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

// Central finite differences of scalar f at x, compared with autograd.
void check_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0, double tol = 2e-2) {
  Tensor x = x0.clone().detach().set_requires_grad(true);
  Tensor y = f(x);
  y.backward();
  auto g = x.grad().to_vector<float>();
  auto xv = x0.to_vector<float>();
  const float h = 1e-2f;
  for (size_t i = 0; i < xv.size(); ++i) {
    auto xp = xv, xm = xv;
    xp[i] += h;
    xm[i] -= h;
    NoGradGuard ng;
    double fp = f(from_vector(xp, x0.shape())).item(), fm = f(from_vector(xm, x0.shape())).item();
    double num = (fp - fm) / (2.0 * h);
    EXPECT_NEAR(g[i], num, tol * (1.0 + std::fabs(num))) << "gradient element " << i;
  }
}

}  // namespace

TEST(Reduce, SumAllPathsMatchDoubleReference) {
  Tensor x = seq({3, 4, 5, 6});
  // rows, leading dims, middle, non-adjacent (general path), all
  std::vector<Shape> cases = {{3}, {0}, {0, 1}, {1, 2}, {2}, {0, 2}, {1, 3}, {}, {-1, 0}};
  for (const Shape& dims : cases) {
    std::vector<bool> red(4, dims.empty());
    for (int64_t d : dims) red[size_t(d < 0 ? d + 4 : d)] = true;
    auto want = ref_sum(x, red);
    Tensor s = sum(x, dims, true);
    auto got = s.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
    Tensor s2 = sum(x, dims, false);
    EXPECT_EQ(s2.numel(), s.numel());
  }
  EXPECT_EQ(sum(x, {1, 2}).shape(), (Shape{3, 6}));
  EXPECT_EQ(sum(x, {1, 2}, true).shape(), (Shape{3, 1, 1, 6}));
  EXPECT_EQ(sum(x).dim(), 0);
}

TEST(Reduce, SumNonContiguousAndBias) {
  Tensor x = seq({128, 256});
  Tensor b = sum(x, {0});  // bias-gradient shape
  auto want = ref_sum(x, {true, false});
  expect_near(b, std::vector<float>(want.begin(), want.end()), 1e-5);
  Tensor xt = transpose(seq({256, 128}), 0, 1);  // [128, 256], non-contiguous
  ASSERT_FALSE(xt.is_contiguous());
  auto w1 = ref_sum(xt.contiguous(), {false, true});
  expect_near(sum(xt, {1}), std::vector<float>(w1.begin(), w1.end()), 1e-5);
  auto w0 = ref_sum(xt.contiguous(), {true, false});
  expect_near(sum(xt, {0}), std::vector<float>(w0.begin(), w0.end()), 1e-5);
}

TEST(Reduce, LargeSumAccuracy) {
  const int64_t n = 3'000'001;
  std::vector<float> v(static_cast<size_t>(n));
  double want = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[size_t(i)] = 0.1f + float(i % 97) * 1e-3f;
    want += v[size_t(i)];
  }
  Tensor x = from_vector(v, {n});
  EXPECT_NEAR(sum(x).item(), want, 1e-5 * want);
  // Same data as [n/7.., 7] reduced over the leading dim and as rows.
  Tensor x2 = from_vector(std::vector<float>(v.begin(), v.begin() + 3'000'000), {200'000, 15});
  auto w0 = ref_sum(x2, {true, false});
  expect_near(sum(x2, {0}), std::vector<float>(w0.begin(), w0.end()), 1e-5);
  std::vector<float> mx(15, -1e30f);
  for (int64_t i = 0; i < 3'000'000; ++i) mx[size_t(i % 15)] = std::max(mx[size_t(i % 15)], v[size_t(i)]);
  expect_near(amax(x2, {0}), mx, 0);
  Tensor x3 = reshape(x2, {15, 200'000});
  auto w1 = ref_sum(x3, {false, true});
  expect_near(sum(x3, {1}), std::vector<float>(w1.begin(), w1.end()), 1e-5);
}

// The bits of a sum do not depend on the OpenMP thread count (axle-train's --threads): every
// parallel path splits its work into chunks fixed by the shape. Shapes that take each path:
// rows, column tiles, row chunks of few column tiles (a bias gradient of a large batch), one long row.
TEST(Reduce, SumDoesNotDependOnTheThreadCount) {
  const int saved = omp_get_max_threads();
  manual_seed(3);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{300, 1000}, {1}}, {{64, 300, 256}, {1}}, {{4096, 256}, {0}}, {{3, 2048, 300}, {1}}, {{1 << 18}, {}}};
  for (const auto& [shape, dims] : cases) {
    SCOPED_TRACE(::testing::PrintToString(shape) + " summed over " + ::testing::PrintToString(dims));
    const Tensor x = randn(shape);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      got.push_back(sum(x, dims).to_vector<float>());
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(got[1], got[0]) << "2 threads vs 1";
    EXPECT_EQ(got[2], got[0]) << "3 threads vs 1";
  }
}

TEST(Reduce, IntegerSumAndMean) {
  Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(x, {1});
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{6, 15}));
  Tensor b = from_vector(std::vector<int32_t>{1, 0, 1, 1}, {4});
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  expect_near(mean(seq({2, 3}), {0}), {float(std::sin(0.3) + std::sin(2.4)), float(std::sin(1.0) + std::sin(3.1)),
                                       float(std::sin(1.7) + std::sin(3.8))});
  EXPECT_NEAR(mean(x).item(), 3.5, 1e-6);
}

TEST(Reduce, VarAndLogsumexp) {
  Tensor x = seq({3, 4});
  auto v = x.to_vector<float>();
  for (int64_t c : {0, 1}) {
    Tensor r = var(x, {1}, c);
    for (int i = 0; i < 3; ++i) {
      double m = 0, ss = 0;
      for (int j = 0; j < 4; ++j) m += v[size_t(i * 4 + j)];
      m /= 4;
      for (int j = 0; j < 4; ++j) ss += (v[size_t(i * 4 + j)] - m) * (v[size_t(i * 4 + j)] - m);
      EXPECT_NEAR(r.to_vector<float>()[size_t(i)], ss / double(4 - c), 1e-5);
    }
  }
  // torch.logsumexp(seq([3,4]), 1)
  expect_near(logsumexp(x, {1}), {2.90772748f, 0.526660681f, 2.71139646f});
  EXPECT_EQ(logsumexp(x, {1}, true).shape(), (Shape{3, 1}));
  Tensor big = from_vector(std::vector<float>{1000.f, 1000.f, -INFINITY}, {3});
  EXPECT_NEAR(logsumexp(big, {0}).item(), 1000.0 + std::log(2.0), 1e-3);
  check_grad([](const Tensor& t) { return sum(mul(logsumexp(t, {0}), seq({4}, 0.3))); }, x);
  check_grad([](const Tensor& t) { return sum(mul(var(t, {1}), seq({3}, 0.5))); }, x);
}

TEST(Reduce, AmaxAminArgmax) {
  Tensor x = from_vector(std::vector<float>{1, 5, 5, 2, 7, 0, 7, 3, -1, 4, 2, 4}, {3, 4});
  expect_near(amax(x, {1}), {5, 7, 4});
  expect_near(amin(x, {0}), {-1, 0, 2, 2});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));  // first of ties
  EXPECT_EQ(argmin(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 2, 0}));
  EXPECT_EQ(argmax(x, 0, true).shape(), (Shape{1, 4}));
  Tensor xt = transpose(x, 0, 1);  // [4, 3] non-contiguous
  EXPECT_EQ(argmax(xt, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(argmax(xt, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 2}));
  EXPECT_FLOAT_EQ(max(x).item<float>(), 7.f);
  EXPECT_FLOAT_EQ(min(x).item<float>(), -1.f);
  Tensor n = from_vector(std::vector<float>{1, NAN, 3}, {3});
  EXPECT_TRUE(std::isnan(amax(n).item()));
  EXPECT_EQ(argmax(n, 0).item<int64_t>(), 1);
  Tensor xi = from_vector(std::vector<int64_t>{3, -2, 9}, {3});
  EXPECT_EQ(amax(xi).item<int64_t>(), 9);
  EXPECT_THROW(amax(zeros({0, 3}), {0}), Error);
  // amax splits the gradient between ties (as torch.amax)
  Tensor xg = x.clone().detach().set_requires_grad(true);
  sum(amax(xg, {1})).backward();
  expect_near(xg.grad(), {0, .5f, .5f, 0, .5f, 0, .5f, 0, 0, .5f, 0, .5f});
}

TEST(Reduce, MaxWithDimGradientGoesToSelectedIndex) {
  Tensor x = from_vector(std::vector<float>{1, 5, 5, 2, 7, 0}, {2, 3}).set_requires_grad(true);
  auto [vals, idx] = max(x, 1);
  expect_near(vals, {5, 7});
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  sum(mul(vals, from_vector(std::vector<float>{2, 3}, {2}))).backward();
  expect_near(x.grad(), {0, 2, 0, 0, 3, 0});
  auto [mv, mi] = min(x.detach(), 0, true);
  EXPECT_EQ(mv.shape(), (Shape{1, 3}));
  expect_near(mv, {1, 5, 0});
  EXPECT_EQ(mi.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1}));
}

TEST(Softmax, MatchesTorch) {
  Tensor x = seq({4, 5});
  // torch.softmax(x, 1)
  expect_near(softmax(x, 1), {0.0930770338f, 0.277363479f, 0.374546736f, 0.199001685f, 0.05601101f, 0.0998880863f,
                              0.0480722897f, 0.0580240041f, 0.160776109f, 0.633239567f, 0.307531804f, 0.406027853f,
                              0.211377099f, 0.0589834079f, 0.0160798021f, 0.0169332102f, 0.0209103674f,
                              0.0588322915f, 0.231851742f, 0.671472371f});
  // torch.log_softmax(x, 0): the strided (column) path
  std::vector<float> ls0 = {-1.45268655f, -0.876607537f, -0.475571424f, -0.638354242f, -2.09306908f,
                            -3.26744294f, -4.51460981f,  -4.22581053f,  -2.73703408f,  -1.55314779f,
                            -0.342853785f, -0.580832958f, -1.13296258f, -1.93972969f,  -3.42637181f,
                            -4.0055995f,  -4.31045389f,  -3.17535949f,  -1.33433175f,  -0.457906961f};
  expect_near(log_softmax(x, 0), ls0);
  // same through a transposed (non-contiguous) input on its last dim
  expect_near(transpose(log_softmax(transpose(x, 0, 1), -1), 0, 1).contiguous(), ls0);
  // softmax columns sum to one, stable for large values
  Tensor big = from_vector(std::vector<float>{1000, 1001, 1002, -INFINITY}, {4});
  auto sb = softmax(big, 0).to_vector<float>();
  EXPECT_NEAR(sb[0] + sb[1] + sb[2], 1.0, 1e-6);
  EXPECT_EQ(sb[3], 0.f);
  EXPECT_NEAR(log_softmax(big, 0).to_vector<float>()[2], -std::log1p(std::exp(-1.0) + std::exp(-2.0)), 1e-4);  // float ulp at 1000 is 6e-5
  expect_near(sum(softmax(seq({3, 7, 5}), 1), {1}), std::vector<float>(15, 1.f), 1e-6);
}

TEST(Softmax, Gradients) {
  Tensor x = seq({3, 4});
  Tensor w = seq({3, 4}, 1.3, 0.2, 1.0);
  check_grad([&](const Tensor& t) { return sum(mul(softmax(t, 1), w)); }, x);
  check_grad([&](const Tensor& t) { return sum(mul(softmax(t, 0), w)); }, x);
  check_grad([&](const Tensor& t) { return sum(mul(log_softmax(t, 0), w)); }, x);
  check_grad([&](const Tensor& t) { return sum(mul(log_softmax(t, 1), w)); }, x);
}

TEST(Loss, CrossEntropyMatchesTorch) {
  Tensor x = seq({4, 5});
  Tensor t = from_vector(std::vector<int64_t>{1, 0, 4, -100}, {4});
  // F.cross_entropy(x, t, label_smoothing=0.1) and its gradient
  Tensor xr = x.clone().detach().set_requires_grad(true);
  Tensor l = cross_entropy(xr, t, {.label_smoothing = 0.1});
  EXPECT_NEAR(l.item(), 2.51623726, 1e-5);
  l.backward();
  expect_near(xr.grad(), {0.0243590046f, -0.214212149f, 0.118182227f, 0.0596672222f, 0.0120036686f, -0.273370624f,
                          0.00935742632f, 0.0126746641f, 0.0469253659f, 0.204413161f, 0.0958439261f, 0.128675938f,
                          0.0637923703f, 0.0129944673f, -0.301306695f, 0, 0, 0, 0, 0});
  // reduction='sum'
  Tensor xs = x.clone().detach().set_requires_grad(true);
  Tensor ls = cross_entropy(xs, t, {.reduction = Reduction::Sum});
  EXPECT_NEAR(ls.item(), 7.71632242, 1e-5);
  ls.backward();
  expect_near(xs.grad(), {0.0930770263f, -0.722636461f, 0.374546736f, 0.1990017f, 0.0560110137f, -0.900111914f,
                          0.048072286f, 0.0580240004f, 0.160776123f, 0.633239567f, 0.307531804f, 0.406027853f,
                          0.211377114f, 0.0589834042f, -0.983920217f, 0, 0, 0, 0, 0});
  // reduction='none', label_smoothing=0.2
  expect_near(cross_entropy(x, t, {.reduction = Reduction::None, .label_smoothing = 0.2}),
              {1.39135873f, 2.26177621f, 3.72796559f, 0.f});
  // [N, C, d] logits
  Tensor t3 = from_vector(std::vector<int64_t>{0, 2, 1, 1, 2, -100, 0, 1}, {2, 4});
  EXPECT_NEAR(cross_entropy(seq({2, 3, 4}, 0.31, 0.1, 3.0), t3).item(), 2.12827921, 1e-5);
  check_grad([&](const Tensor& z) { return cross_entropy(z, t3, {.label_smoothing = 0.05}); },
             seq({2, 3, 4}, 0.31, 0.1, 3.0));
}

TEST(Loss, NllLossAndErrors) {
  Tensor lp = log_softmax(seq({4, 5}), 1);
  Tensor t = from_vector(std::vector<int64_t>{1, 0, 4, 2}, {4});
  auto lv = lp.to_vector<float>();
  Tensor none = nll_loss(lp, t, Reduction::None, 2);
  expect_near(none, {-lv[1], -lv[5], -lv[14], 0.f});
  EXPECT_NEAR(nll_loss(lp, t, Reduction::Mean, 2).item(), -(lv[1] + lv[5] + lv[14]) / 3.0, 1e-5);
  EXPECT_NEAR(nll_loss(lp, t, Reduction::Sum).item(), -(lv[1] + lv[5] + lv[14] + lv[17]), 1e-5);
  Tensor bad = from_vector(std::vector<int64_t>{1, 0, 5, 2}, {4});
  try {
    nll_loss(lp, bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nll_loss"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nll_loss(lp, from_vector(std::vector<int64_t>{1, 0}, {2})), Error);
  EXPECT_THROW(nll_loss(lp, cast(t, kFloat32)), Error);
  check_grad([&](const Tensor& z) { return nll_loss(log_softmax(z, 1), t, Reduction::Mean, 2); }, seq({4, 5}));
  EXPECT_NEAR(mse_loss(seq({3}), zeros({3})).item(),
              (std::pow(std::sin(0.3) * 2, 2) + std::pow(std::sin(1.0) * 2, 2) + std::pow(std::sin(1.7) * 2, 2)) / 3,
              1e-5);
}

TEST(Index, CatIndexSelectGather) {
  Tensor a = seq({2, 3}), b = seq({2, 2}, 0.2);
  Tensor c = cat({a, b}, -1);
  EXPECT_EQ(c.shape(), (Shape{2, 5}));
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  expect_near(c, {av[0], av[1], av[2], bv[0], bv[1], av[3], av[4], av[5], bv[2], bv[3]});
  Tensor c0 = cat({a, transpose(seq({3, 2}, 0.9), 0, 1)}, 0);
  EXPECT_EQ(c0.shape(), (Shape{4, 3}));
  EXPECT_THROW(cat({a, cast(a, kInt64)}, 0), Error);
  EXPECT_THROW(cat({a, b}, 0), Error);
  // cat gradient: slices back to each input
  Tensor ag = a.clone().detach().set_requires_grad(true), bg = b.clone().detach().set_requires_grad(true);
  sum(mul(cat({ag, bg}, 1), seq({2, 5}, 0.4))).backward();
  auto w = seq({2, 5}, 0.4).to_vector<float>();
  expect_near(ag.grad(), {w[0], w[1], w[2], w[5], w[6], w[7]});
  expect_near(bg.grad(), {w[3], w[4], w[8], w[9]});

  Tensor x = seq({3, 4});
  auto xv = x.to_vector<float>();
  Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  expect_near(index_select(x, 1, idx), {xv[2], xv[0], xv[2], xv[6], xv[4], xv[6], xv[10], xv[8], xv[10]});
  expect_near(index_select(transpose(x, 0, 1), 1, idx), {xv[8], xv[0], xv[8], xv[9], xv[1], xv[9], xv[10], xv[2],
                                                         xv[10], xv[11], xv[3], xv[11]});
  try {
    index_select(x, 0, from_vector(std::vector<int64_t>{0, 3}, {2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index_select"), std::string::npos) << e.what();
  }
  Tensor gi = from_vector(std::vector<int64_t>{3, 0, 1, 1, 2, 2}, {3, 2});
  expect_near(gather(x, 1, gi), {xv[3], xv[0], xv[5], xv[5], xv[10], xv[10]});
  Tensor gi0 = from_vector(std::vector<int64_t>{2, 0, 1, 1}, {1, 4});
  expect_near(gather(x, 0, gi0), {xv[8], xv[1], xv[6], xv[7]});
  EXPECT_THROW(gather(x, 1, from_vector(std::vector<int64_t>{4}, {1, 1})), Error);
  check_grad([&](const Tensor& z) { return sum(mul(gather(z, 1, gi), seq({3, 2}, 0.8))); }, x);
  check_grad([&](const Tensor& z) { return sum(mul(index_select(z, 0, idx), seq({3, 4}, 0.6))); }, x);
}

TEST(NN, EmbeddingAccumulatesRepeatedRows) {
  Tensor w = seq({5, 3}).set_requires_grad(true);
  Tensor ids = from_vector(std::vector<int64_t>{1, 4, 1, 0}, {2, 2});
  Tensor e = embedding(w, ids);
  EXPECT_EQ(e.shape(), (Shape{2, 2, 3}));
  auto wv = w.to_vector<float>();
  EXPECT_FLOAT_EQ(e.to_vector<float>()[3], wv[12]);
  sum(e).backward();
  expect_near(w.grad(), {1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1});
}

TEST(NN, BatchNormMatchesTorch) {
  Tensor x = seq({3, 2, 2, 2}, 0.45, 0.2, 1.5);
  Tensor rm = from_vector(std::vector<float>{0.1f, -0.2f}, {2});
  Tensor rv = from_vector(std::vector<float>{1.0f, 2.0f}, {2});
  Tensor w = from_vector(std::vector<float>{1.5f, 0.5f}, {2});
  Tensor b = from_vector(std::vector<float>{0.1f, -0.3f}, {2});
  // F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
  Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  expect_near(y, {0.0491157547f, 0.815537214f, 1.35478294f, 1.55948591f, 0.53783375f, 0.287117362f, -0.0808468089f,
                  -0.49279502f, -1.47900069f, -2.01279879f, -2.21063447f, -2.03311753f, -0.884626806f, -0.515117466f,
                  -0.103126325f, 0.269316733f, 1.36892426f, 1.55987859f, 1.37545466f, 0.852371991f, -0.0959520638f,
                  -0.507956982f, -0.878905833f, -1.13494051f},
              2e-5);
  expect_near(rm, {0.123848818f, -0.179714933f});
  expect_near(rv, {1.055372f, 1.8719753f});
  Tensor ye = batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5);
  expect_near(ye, {0.354286224f, 1.24462748f, 1.87106168f, 2.1088624f, 0.264119029f, 0.115274698f, -0.103176847f,
                   -0.34774065f, -1.42090559f, -2.04101133f, -2.27083421f, -2.06461549f, -0.580361843f, -0.360992968f,
                   -0.116403662f, 0.104706891f, 1.88748956f, 2.10931849f, 1.8950758f, 1.28741789f, -0.112144478f,
                   -0.356741965f, -0.576965451f, -0.72896713f},
              2e-5);
  EXPECT_FALSE(rm.requires_grad());
  check_grad([&](const Tensor& z) { return sum(mul(batch_norm(z, w, b, {}, {}, true), seq({3, 2, 2, 2}, 0.8))); },
             x);
  // F.layer_norm(x, [2, 2], w, b)
  expect_near(layer_norm(x, {2, 2}, seq({2, 2}, 1.1, 0.5, 1.0), seq({2, 2}, 0.9, 0.1, 0.5)),
              {-0.685129106f, 0.199667245f, 0.773153067f, -0.476415753f, 0.635328412f, 0.997057915f, 0.315304101f,
               1.04141283f, 0.846716762f, 0.1325472f, 0.0410135947f, 0.38932243f, -0.58779788f, -0.0562653877f,
               0.675650477f, -0.648449004f, 0.194992557f, 1.44730425f, 0.613064349f, 1.18133438f, 0.732964694f,
               0.794257104f, 0.228422031f, 0.917496443f},
              2e-5);
}

// The fused layer_norm op (float32 with weight and bias): its backward sums the weight and bias
// gradients per fixed block of rows, so 1 and 2 OpenMP threads give the same bits; and it
// agrees with the composite of public ops (the no-affine path, scaled and shifted by hand)
// on 300 rows of 257 (several blocks, the threaded paths), forward and backward.
TEST(NN, LayerNormFusedSameBitsForEveryThreadCountAndEqualsTheComposite) {
  const Tensor x0 = seq({3, 100, 257}, 0.37, 0.1, 3.0), w0 = seq({257}, 1.3, 0.2, 1.0), b0 = seq({257}, 0.9, 0.4, 0.5);
  const Tensor r = seq({3, 100, 257}, 0.53, 0.7, 1.0);
  struct Run {
    std::vector<float> y, dx, dw, db;
  };
  auto run = [&](int threads, bool composite) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = composite ? add(mul(layer_norm(x, {257}), w), b) : layer_norm(x, {257}, w, b);
    sum(mul(y, r)).backward();
    omp_set_num_threads(saved);
    return Run{y.to_vector<float>(), x.grad().to_vector<float>(), w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  const Run one = run(1, false), two = run(2, false), ref = run(1, true);
  EXPECT_EQ(one.y, two.y);
  EXPECT_EQ(one.dx, two.dx);
  EXPECT_EQ(one.dw, two.dw);
  EXPECT_EQ(one.db, two.db);
  auto near = [](const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  };
  near(one.y, ref.y, 1e-5, "y");
  near(one.dx, ref.dx, 1e-4, "dx");
  near(one.dw, ref.dw, 1e-4, "dweight");
  near(one.db, ref.db, 1e-4, "dbias");
}

TEST(NN, Dropout) {
  Tensor x = ones({100000});
  EXPECT_TRUE(dropout(x, 0.3, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_EQ(sum(dropout(x, 1.0, true)).item(), 0.0);
  Generator g1(7), g2(7);
  Tensor d1 = dropout(x, 0.25, true, &g1), d2 = dropout(x, 0.25, true, &g2);
  EXPECT_EQ(d1.to_vector<float>(), d2.to_vector<float>());
  auto v = d1.to_vector<float>();
  int64_t kept = 0;
  for (float f : v) {
    ASSERT_TRUE(f == 0.f || std::fabs(f - 1.f / 0.75f) < 1e-6);
    kept += f != 0.f;
  }
  EXPECT_NEAR(double(kept) / 100000.0, 0.75, 0.01);
  EXPECT_THROW(dropout(x, 1.5, true), Error);
}

TEST(Softmax, RowPathsMatchDoubleReference) {
  // Short-row block path (R < 256), long rows, and R == 1; values spread over [-30, 30].
  for (int64_t R : {1, 7, 10, 255, 300}) {
    const int64_t O = 70;
    Tensor x = seq({O, R}, 0.37, 0.1, 30.0);
    auto xv = x.to_vector<float>();
    auto ls = log_softmax(x, 1).to_vector<float>();
    auto sm = softmax(x, -1).to_vector<float>();
    for (int64_t o = 0; o < O; ++o) {
      double m = -1e30, s = 0;
      for (int64_t i = 0; i < R; ++i) m = std::max(m, double(xv[size_t(o * R + i)]));
      for (int64_t i = 0; i < R; ++i) s += std::exp(double(xv[size_t(o * R + i)]) - m);
      for (int64_t i = 0; i < R; ++i) {
        const double want = double(xv[size_t(o * R + i)]) - m - std::log(s);
        ASSERT_NEAR(ls[size_t(o * R + i)], want, 2e-6 * (1 + std::fabs(want))) << "R " << R << " row " << o;
        ASSERT_NEAR(sm[size_t(o * R + i)], std::exp(want), 1e-6) << "R " << R << " row " << o;
      }
    }
  }
}
