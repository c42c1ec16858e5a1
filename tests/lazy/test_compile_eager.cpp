// Seed Patterns 4 and 6: compile() and eager mode; the old API and its anti-patterns.
#include <gtest/gtest.h>

#include <cmath>

#include "axle/axle.h"
#include "axle/compile.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "lazy/ir.h"

using namespace axle;

namespace {
nn::ModulePtr small_mlp() {
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
}
struct Batch {
  Tensor x, y;
};
std::vector<Batch> batches(int n, int64_t bs = 5) {
  manual_seed(11);
  std::vector<Batch> b;
  for (int i = 0; i < n; ++i) b.push_back({randn({bs, 6}), cast(mul(rand({bs}), 2.999), kInt64)});
  return b;
}
// Counts start from zero and every graph from a cold in-memory cache, whatever ran before
// (--gtest_repeat, --gtest_shuffle).
void cold_start() {
  metrics::reset();
  lazy::clear_graph_cache();
}
std::vector<std::vector<float>> params_of(const nn::ModulePtr& m) {
  std::vector<std::vector<float>> r;
  for (const Tensor& p : m->parameters()) r.push_back(p.to_vector<float>());
  return r;
}
}  // namespace

TEST(Compile, CompiledStepEqualsLazySteps) {
  auto data = batches(4);
  manual_seed(0);
  auto m1 = small_mlp();
  m1->to(device());
  optim::SGD o1(m1->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (auto& b : data) {
    auto s = step();
    o1.zero_grad();
    cross_entropy((*m1)(b.x.to(device())), b.y.to(device())).backward();
    o1.step();
  }
  manual_seed(0);
  auto m2 = small_mlp();
  m2->to(device());
  optim::SGD o2(m2->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto compiled = compile(
      [&](const Tensor& x, const Tensor& y) {
        o2.zero_grad();
        Tensor loss = cross_entropy((*m2)(x), y);
        loss.backward();
        o2.step();
        return loss;
      },
      {.full_graph = true, .name = "train_step"});
  for (auto& b : data) {
    Tensor loss = compiled(b.x.to(device()), b.y.to(device()));
    EXPECT_GT(loss.item(), 0.0);  // read after the call: allowed
  }
  EXPECT_EQ(params_of(m1), params_of(m2));
}

TEST(Compile, FullGraphValueReadThrowsNamingReadAndFunction) {
  Tensor w = ones({3}).to(device());
  auto bad = compile([&](const Tensor& x) { return x * w * (x.sum().item() > 0 ? 1.0 : 2.0); },
                     {.full_graph = true, .name = "branchy"});
  try {
    bad(full({3}, 2.0).to(device()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[item]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'branchy'"), std::string::npos) << msg;
  }
  // The next call without the read works.
  auto good = compile([&](const Tensor& x) { return x * w; }, {.full_graph = true, .name = "good"});
  EXPECT_EQ(good(full({3}, 2.0).to(device())).to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TEST(Compile, NewShapeCompilesOnceMore) {
  auto f = compile([](const Tensor& x) { return relu(x * 3.0 + 1.0); }, {.name = "shapes"});
  cold_start();
  for (int64_t n : {4, 4, 4, 7, 7, 4})
    EXPECT_EQ(f(ones({n}).to(device())).to_vector<float>(), std::vector<float>(size_t(n), 4.0f));
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
  // The function's name appears in the metrics.
  EXPECT_EQ(metrics::counter_value("UncachedCompile::shapes"), 2);
  EXPECT_EQ(metrics::counter_value("CachedCompile::shapes"), 4);
}

TEST(Compile, MaxDifferentGraphsExplains) {
  auto f = compile([](const Tensor& x) { return exp(x); }, {.name = "limited", .max_different_graphs = 1});
  (void)f(ones({2}).to(device()));
  (void)f(ones({2}).to(device()));
  try {
    (void)f(ones({5}).to(device()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'limited'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32[2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32[5]"), std::string::npos) << msg;
  }
}

TEST(Eager, EachOpSignatureCompilesOnceAndMatchesLazy) {
  experimental::eager_mode(true);
  cold_start();
  Tensor x = full({4}, 0.5).to(device());
  for (int i = 0; i < 5; ++i) {
    Tensor y = exp(x) * 2.0;
    EXPECT_NEAR(y.to_vector<float>()[0], 2 * std::exp(0.5), 1e-5);  // readable at once
  }
  // exp and mul: two op signatures, each compiled once over five iterations.
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
  EXPECT_GT(metrics::timer_count("EagerOpExecuteTime"), 0);
  // A compiled region inside eager mode is one graph.
  cold_start();
  auto f = compile([](const Tensor& a) { return tanh(exp(a) * 2.0 + 1.0); }, {.name = "region"});
  Tensor r = f(x);
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  experimental::eager_mode(false);
  Tensor lazy_r = tanh(exp(x) * 2.0 + 1.0);
  EXPECT_EQ(r.to_vector<float>(), lazy_r.to_vector<float>());
}

TEST(OldApi, DeprecatedAliasesWork) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_EQ(xm::xla_device(), device());
  metrics::reset();
  xm::mark_step();
  EXPECT_EQ(metrics::counter_value("MarkStep"), 1);
#pragma GCC diagnostic pop
}

TEST(OldApi, MarkStepInsideStepScopeIsAnError) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  try {
    auto s = step();
    xm::mark_step();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[mark_step]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("axle::step()"), std::string::npos) << e.what();
  }
#pragma GCC diagnostic pop
}
