// The backward engine (src/autograd/engine.cpp): hooks on accumulated gradients, callbacks
// queued for the end of backward, and clear errors from them.
#include <gtest/gtest.h>

#include <algorithm>

#include "axle/axle.h"

using namespace axle;

TEST(Autograd, PostAccumulateGradHookAndQueuedCallback) {
  Tensor w = full({3}, 2.0, {.requires_grad = true});
  Tensor v = full({3}, 1.0, {.requires_grad = true});
  std::vector<std::string> events;
  bool queued = false;
  auto hook = [&](const std::string& name) {
    return [&, name](const Tensor& p) {
      ASSERT_TRUE(p.grad().defined());  // the gradient is already accumulated
      events.push_back("hook " + name + " " + std::to_string(p.grad().to_vector<float>()[0]));
      if (queued) return;
      queued = true;
      autograd::queue_callback([&] {
        // Runs once the whole pass is done: after both hooks, whichever ran first.
        events.push_back("callback " + std::to_string(w.grad().defined() && v.grad().defined()));
        autograd::queue_callback([&] { events.push_back("nested"); });
      });
    };
  };
  const int64_t id = autograd::register_post_accumulate_grad_hook(w, hook("w"));
  autograd::register_post_accumulate_grad_hook(v, hook("v"));
  (w * v * 3.0).sum().backward();
  ASSERT_EQ(events.size(), 4u);
  std::vector<std::string> hooks(events.begin(), events.begin() + 2);
  std::sort(hooks.begin(), hooks.end());
  EXPECT_EQ(hooks, (std::vector<std::string>{"hook v 6.000000", "hook w 3.000000"}));
  EXPECT_EQ(events[2], "callback 1");
  EXPECT_EQ(events[3], "nested");
  events.clear();
  queued = false;
  (w * 2.0).sum().backward();  // accumulates: w's hook sees 3 + 2; v gets nothing
  EXPECT_EQ(events, (std::vector<std::string>{"hook w 5.000000", "callback 1", "nested"}));
  autograd::remove_hook(w, id);
  events.clear();
  queued = false;
  (w * 2.0).sum().backward();
  EXPECT_TRUE(events.empty());
}

TEST(Autograd, HookErrorsAreClear) {
  Tensor a = full({2}, 1.0);
  EXPECT_THROW(
      {
        try {
          autograd::register_post_accumulate_grad_hook(a, [](const Tensor&) {});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("expected a leaf tensor that requires grad"), std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_THROW(autograd::queue_callback([] {}), Error);  // no backward running
  // A throwing hook ends backward() with its error; the next backward starts clean.
  Tensor w = full({2}, 1.0, {.requires_grad = true});
  const int64_t id = autograd::register_post_accumulate_grad_hook(w, [](const Tensor&) {
    autograd::queue_callback([] { AXLE_FAIL("[test] callback failed"); });
  });
  EXPECT_THROW((w * 2.0).sum().backward(), Error);
  autograd::remove_hook(w, id);
  EXPECT_NO_THROW((w * 2.0).sum().backward());
  EXPECT_THROW(autograd::queue_callback([] {}), Error);
}
