// The lazy xla device: tracing, sync/step boundaries, the compilation cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"

using namespace axle;

namespace {
void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}
}  // namespace

TEST(Lazy, OpsAreTracedNotRun) {
  metrics::reset();
  Tensor a = randn({4, 5}).to(device());
  Tensor b = relu(a * 2.5 + 1.0);
  EXPECT_EQ(b.device(), device());
  EXPECT_EQ(b.shape(), (Shape{4, 5}));
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 0);
  Tensor c = b.cpu();  // a value read executes what b needs
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  expect_close(c, relu(a.cpu() * 2.5 + 1.0));
}

TEST(Lazy, SameGraphNewDataHitsCache) {
  metrics::reset();
  Tensor w = randn({8, 3}).to(device());
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({2, 8}).to(device());
    Tensor y = matmul(x, w).cpu();
    (void)y;
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 3);
}

TEST(Lazy, ChangingScalarDoesNotRecompile) {
  metrics::reset();
  Tensor p = randn({16}).to(device());
  for (double lr : {0.1, 0.05, 0.025}) {
    p.set_data(p - lr * p);  // a learning-rate style update
    axle::sync();
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 2);
}

TEST(Lazy, NewShapeCompilesOnce) {
  metrics::reset();
  for (int64_t n : {3, 5, 3, 5, 5}) {
    Tensor x = ones({n, 4}).to(device());
    (void)sum(exp(x)).item();
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
}

TEST(Lazy, StepAddsTwoMarkStepsAlsoOnThrow) {
  metrics::reset();
  { auto s = step(); }
  EXPECT_EQ(metrics::counter_value("MarkStep"), 2);
  Tensor kept;
  try {
    auto s = step();
    kept = ones({3}).to(device()) * 3.0;
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(metrics::counter_value("MarkStep"), 4);
  // The exit sync ran: the pending value was materialised without another compile.
  int64_t compiles = metrics::counter_value("UncachedCompile");
  EXPECT_EQ(kept.to_vector<float>(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), compiles);
}

TEST(Lazy, AutogradTracesAndMatchesEager) {
  manual_seed(3);
  Tensor w0 = randn({5, 4}), x0 = randn({6, 4});
  Tensor w = w0.clone();
  w.set_requires_grad(true);
  (relu(matmul(x0, w.t())) * 0.5).sum().backward();
  Tensor wx = w0.to(device());
  wx.set_requires_grad(true);
  Tensor xx = x0.to(device());
  (relu(matmul(xx, wx.t())) * 0.5).sum().backward();
  axle::sync();
  ASSERT_TRUE(wx.grad().defined());
  EXPECT_EQ(wx.grad().device(), device());
  expect_close(wx.grad().cpu(), w.grad());
}

// ---- persistent cache: a second process with the same AXLE_CACHE_DIR compiles nothing
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/disk_cache.h"

namespace {
void child_graph() {
  Tensor w = ones({8, 4}).to(device());
  Tensor x = full({3, 8}, 0.5).to(device());
  (void)sum(relu(matmul(x, w)) * 3.0).item();
}
}  // namespace

// Run only as a child process by the tests below (hence DISABLED_).
TEST(CacheChild, DISABLED_Lru) {
  metrics::reset();
  for (int64_t n : {2, 3, 2, 2}) (void)sum(exp(ones({n}).to(device()))).item();
  std::ofstream(std::getenv("AXLE_CHILD_OUT")) << metrics::counter_value("UncachedCompile");
}

TEST(Cache, LeastRecentlyUsedGraphIsEvicted) {
  namespace fs = std::filesystem;
  fs::path out = fs::temp_directory_path() / ("axle-lru-test-" + std::to_string(::getpid()));
  std::string cmd = "AXLE_CACHE_SIZE=1 AXLE_CHILD_OUT=" + out.string() + " /proc/" + std::to_string(::getpid()) +
                    "/exe --gtest_also_run_disabled_tests --gtest_filter=CacheChild.DISABLED_Lru > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  int64_t uncached = -1;
  std::ifstream(out) >> uncached;
  // Shapes 2, 3, 2, 2 with room for one graph: 2 compiles, 3 evicts it, 2 compiles again, then hits.
  EXPECT_EQ(uncached, 3);
  fs::remove(out);
}

TEST(DiskCacheChild, DISABLED_Run) {
  metrics::reset();
  child_graph();
  std::ofstream(std::getenv("AXLE_CHILD_OUT")) << metrics::counter_value("UncachedCompile") << " "
                                               << metrics::counter_value("PersistentCacheHit") << " "
                                               << metrics::counter_value("PersistentCacheMiss");
}

TEST(DiskCache, SecondProcessCompilesNothing) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("axle-cache-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path out = dir.string() + ".out";
  std::string cmd = "AXLE_CACHE_DIR=" + dir.string() + " AXLE_CHILD_OUT=" + out.string() +
                    " /proc/" + std::to_string(::getpid()) + "/exe --gtest_also_run_disabled_tests"
                    " --gtest_filter=DiskCacheChild.DISABLED_Run > /dev/null 2>&1";
  auto run = [&] {
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    int64_t uncached = -1, hit = -1, miss = -1;
    std::ifstream(out) >> uncached >> hit >> miss;
    return std::array<int64_t, 3>{uncached, hit, miss};
  };
  auto first = run();
  EXPECT_EQ(first[0], 1);  // compiled
  EXPECT_EQ(first[2], 1);  // and missed the disk
  auto second = run();
  EXPECT_EQ(second[0], 0);  // compiled nothing
  EXPECT_EQ(second[1], 1);  // found it on disk
  // A corrupt file is discarded with a warning, and the graph compiles again.
  for (auto& e : fs::directory_iterator(dir)) std::ofstream(e.path(), std::ios::trunc) << "garbage";
  auto third = run();
  EXPECT_EQ(third[0], 1);
  EXPECT_EQ(third[1], 0);
  fs::remove_all(dir);
  fs::remove(out);
}

#include "lazy/ir.h"

TEST(Lazy, UpdatedParameterKeepsItsBuffer) {
  Tensor p = randn({64, 32}).to(device()), buf = zeros({64, 32}).to(device());
  Tensor g = randn({64, 32}).to(device());
  axle::sync();
  const void* p_mem = p.impl()->lazy->buffer.data_ptr();
  const void* b_mem = buf.impl()->lazy->buffer.data_ptr();
  std::vector<float> expect = p.to_vector<float>();
  std::vector<float> gv = g.to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    buf.set_data(buf * 0.9 + g);      // momentum buffer
    p.set_data(p - buf * 0.01);       // parameter
    axle::sync();
    // Donation: the updates were written over the old buffers, not into new memory.
    EXPECT_EQ(p.impl()->lazy->buffer.data_ptr(), p_mem) << "step " << i;
    EXPECT_EQ(buf.impl()->lazy->buffer.data_ptr(), b_mem) << "step " << i;
  }
  // ... and the values are right: b1 = g, b2 = 1.9 g, b3 = 2.71 g; p -= 0.01 * (b1 + b2 + b3).
  auto got = p.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expect[i] - 0.01f * 5.61f * gv[i], 1e-5);
  // A tensor someone still holds is never overwritten.
  Tensor keep = p;
  std::vector<float> before = keep.to_vector<float>();
  Tensor q = p;  // same LazyTensor as keep
  p.set_data(p * 2.0);
  axle::sync();
  (void)q;
  EXPECT_EQ(keep.to_vector<float>(), p.to_vector<float>());  // set_data moved both handles' shared impl
  EXPECT_NE(before, p.to_vector<float>());
}

TEST(Lazy, LiveTensorIsNotDonated) {
  Tensor a = full({1000}, 1.0).to(device());
  axle::sync();
  Tensor old = a.detach();  // a second handle to the old value
  a.set_data(a + 1.0);
  axle::sync();
  EXPECT_EQ(old.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(a.to_vector<float>()[0], 2.0f);
}

TEST(Lazy, EagerModeWithoutSyncDoesNotAccumulate) {
  // Eager mode materialises every op; nothing is left for a sync, and nothing piles up.
  experimental::eager_mode(true);
  metrics::reset();
  Tensor x = ones({8}).to(device());
  for (int i = 0; i < 20000; ++i) x = x * 1.0001;
  experimental::eager_mode(false);
  EXPECT_NEAR(x.to_vector<float>()[0], ::pow(1.0001, 20000), 1e-2);
  const int64_t live = metrics::counter_value("CreateXlaTensor") - metrics::counter_value("DestroyXlaTensor");
  EXPECT_LT(live, 10);
  EXPECT_LT(lazy::pending_count(), size_t(10000));  // 20000 ops, the registry pruned
}
