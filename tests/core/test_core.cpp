#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "axle/axle.h"

using namespace axle;

TEST(Core, FactoriesAndItem) {
  Tensor t = full({2, 3}, 1.5);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_DOUBLE_EQ(sum(t).item(), 9.0);
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Core, BroadcastAddAndBackward) {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, {.requires_grad = true});
  Tensor b = from_vector(std::vector<float>{10, 20, 30}, {3}, {.requires_grad = true});
  Tensor c = a * b + a;
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 42, 93, 44, 105, 186}));
  c.sum().backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{11, 21, 31, 11, 21, 31}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{5, 7, 9}));
}

// from_blob converts to the requested dtype itself (core is below the ops), element by
// element as a cast does: truncation toward zero, nonzero -> true.
TEST(Core, FromBlobConvertsDtypeAsCastDoes) {
  const float v[] = {1.75f, -2.25f, 3.0f, 0.0f, -0.5f, 255.0f};
  Tensor i = from_blob(v, {2, 3}, kFloat32, {.dtype = kInt64});
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.shape(), (Shape{2, 3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3, 0, 0, 255}));
  EXPECT_EQ(i.to_vector<int64_t>(), from_blob(v, {2, 3}, kFloat32).to(kInt64).to_vector<int64_t>());
  Tensor b = from_blob(v, {6}, kFloat32, {.dtype = kBool});
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(b.to_vector<int64_t>(), from_blob(v, {6}, kFloat32).to(kBool).to_vector<int64_t>());
  const int32_t w[] = {7, -8};
  EXPECT_EQ(from_blob(w, {2}, kInt32).to_vector<float>(), (std::vector<float>{7.0f, -8.0f}));
  EXPECT_EQ(from_blob(w, {2}, kInt32, {.dtype = kFloat32}).to_vector<float>(), (std::vector<float>{7.0f, -8.0f}));
}

TEST(Core, ViewsShareStorage) {
  Tensor a = arange(0, 12, 1, {.dtype = kFloat32}).reshape({3, 4});
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(t.contiguous().to_vector<float>()[1], 4.0f);
  Tensor s = slice(a, 1, 1, 4, 2);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
}

TEST(Core, ErrorsAreClear) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  try {
    add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[add] expected shapes that broadcast"), std::string::npos) << e.what();
  }
}

TEST(Core, CheckNumericsNamesTheOp) {
  // Run in a child process: the flag is read once per process.
  if (!std::getenv("AXLE_CHECK_NUMERICS")) {
    std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
    std::string cmd = "AXLE_CHECK_NUMERICS=1 " + self + " --gtest_filter=Core.CheckNumericsNamesTheOp > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    return;
  }
  Tensor x = from_vector(std::vector<float>{1, 0, 2}, {3});
  (void)exp(x);  // finite: fine
  try {
    (void)log(x);  // log(0) = -inf
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[numerics] op 'log' output 0 produced Inf at element 1"), std::string::npos)
        << e.what();
  }
  Tensor y = x.to(axle::device());
  Tensor z = div(y, y);  // 0/0 = NaN, found when the graph runs
  try {
    axle::sync();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(op 'div') produced NaN"), std::string::npos) << e.what();
  }
}
