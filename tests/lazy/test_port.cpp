// The seed (training-loop-patterns.md) ported line by line: string devices, module
// chaining, torch.nn loss modules (against PyTorch golden values), and the AXLE_DEBUG
// explanation of a recompile.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "test_util.h"
#include "lazy/ir.h"

using namespace axle;
using json = nlohmann::json;

namespace {

// The seed's `MyModel`.
struct MyModel : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  MyModel() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 4));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(flatten(x, 1)))); }
  std::string name() const override { return "MyModel"; }
};

// Four separable classes of 1x4x4 "images": class k lights up quadrant k.
std::shared_ptr<data::TensorDataset> toy_dataset(int64_t n) {
  Generator gen(7);
  Tensor x = mul(randn({n, 1, 4, 4}, {}, &gen), 0.3);
  std::vector<float> xs = x.to_vector<float>();
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % 4;
    ys[size_t(i)] = k;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 2; ++c) xs[size_t(i * 16 + ((k / 2) * 2 + r) * 4 + (k % 2) * 2 + c)] += 1.0f;
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, 1, 4, 4}), from_vector(ys, {n}));
}

std::vector<double> values(const std::vector<Tensor>& losses) {
  std::vector<double> v;
  for (const Tensor& l : losses) v.push_back(l.item());
  return v;
}

// The mean of the last three losses is well below the mean of the first three.
void expect_falls(const std::vector<double>& l, const std::string& what) {
  ASSERT_GE(l.size(), 6u) << what;
  const double first = (l[0] + l[1] + l[2]) / 3, last = (l[l.size() - 1] + l[l.size() - 2] + l[l.size() - 3]) / 3;
  EXPECT_LT(last, 0.7 * first) << what << ": loss went from " << first << " to " << last;
}

using axle::test::error_of;

}  // namespace

// ---------------------------------------------------------------- string devices
TEST(PortDevices, StringsNameDevices) {
  EXPECT_EQ(Device("xla:0"), device());
  EXPECT_EQ(Device("xla"), device());
  EXPECT_EQ(Device("xla:3").index, 3);
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device(std::string("xla:1")).str(), "xla:1");
  Device d = "xla";  // implicit, as in PyTorch's t.to('xla')
  EXPECT_TRUE(d.is_xla());
  TensorOptions o{.device = "xla"};
  EXPECT_TRUE(zeros({2}, o).device().is_xla());

  Tensor t = from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor x = t.to("xla");
  EXPECT_EQ(x.device(), device());
  Tensor back = (x * 2.0).to("cpu");
  EXPECT_EQ(back.device(), kCPU);
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(t.to(kInt64).dtype(), kInt64);  // the dtype overload is still chosen for dtypes
}

TEST(PortDevices, BadStringsSayWhatWasExpected) {
  for (const char* bad : {"tpu", "xla:x", "xla:", "XLA", "cuda:0", "xla:-1", ""}) {
    std::string msg = error_of([&] { Device d(bad); (void)d; });
    EXPECT_NE(msg.find("expected 'cpu', 'xla' or 'xla:N'"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find(std::string("got '") + bad + "'"), std::string::npos) << bad << ": " << msg;
  }
  Tensor t = ones({2});
  EXPECT_NE(error_of([&] { (void)t.to("tpu"); }).find("got 'tpu'"), std::string::npos);
  auto m = std::make_shared<nn::Linear>(2, 2);
  EXPECT_NE(error_of([&] { m->to("xla:x"); }).find("got 'xla:x'"), std::string::npos);
  EXPECT_EQ(m->weight.device(), kCPU);  // nothing moved
}

// ---------------------------------------------------------------- Module::to chaining
TEST(PortChaining, ToReturnsTheModule) {
  auto m = std::make_shared<MyModel>();
  std::shared_ptr<nn::Module> same = m->to("xla");
  EXPECT_EQ(same.get(), m.get());
  EXPECT_TRUE(m->fc1->weight.device().is_xla());
  EXPECT_EQ(m->to(kFloat32).get(), m.get());
  // nn::to keeps the derived type.
  auto typed = nn::to(std::make_shared<MyModel>(), "xla");
  static_assert(std::is_same_v<decltype(typed), std::shared_ptr<MyModel>>);
  EXPECT_TRUE(typed->fc2->bias.device().is_xla());
  // A module not held by a shared_ptr still moves; there is no pointer to return.
  nn::Linear on_stack(2, 2);
  EXPECT_EQ(on_stack.to("xla"), nullptr);
  EXPECT_TRUE(on_stack.weight.device().is_xla());
}

// ---------------------------------------------------------------- Pattern 1, literally
TEST(PortPatterns, SingleDeviceWithStringsAndLossModule) {
  manual_seed(0);
  data::DataLoader train_loader(toy_dataset(256), {.batch_size = 16, .shuffle = true});
  auto model = std::make_shared<MyModel>();
  auto loss_fn = nn::CrossEntropyLoss();

  model->to("xla");                                             // model.to('xla')
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Tensor> losses;
  for (const data::Example& batch : train_loader) {
    auto step = axle::step();                                   // with torch_xla.step():
    Tensor inputs = batch.data.to("xla"), labels = batch.target.to("xla");
    optimizer.zero_grad();
    Tensor outputs = (*model)(inputs);
    Tensor loss = loss_fn(outputs, labels);
    loss.backward();
    optimizer.step();
    losses.push_back(loss);
  }
  axle::sync();
  EXPECT_TRUE(losses.back().device().is_xla());
  expect_falls(values(losses), "Pattern 1");
}

// ---------------------------------------------------------------- Pattern 4, literally
TEST(PortPatterns, CompiledStepWithChainedModel) {
  manual_seed(0);
  data::DataLoader loader(toy_dataset(256), {.batch_size = 16, .shuffle = true});

  auto device = axle::device();
  auto model = std::make_shared<MyModel>()->to(device);
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto loss_fn = nn::CrossEntropyLoss();

  auto step_fn = [&](const Tensor& data, const Tensor& target) {
    optimizer.zero_grad();
    Tensor output = (*model)(data);
    Tensor loss = loss_fn(output, target);
    loss.backward();
    optimizer.step();
    return loss;
  };
  auto compiled_step = axle::compile(step_fn, {.full_graph = true, .name = "port_train_step"});

  std::vector<double> losses;
  for (const auto& [data, target] : loader) {
    Tensor loss = compiled_step(data.to(device), target.to(device));
    losses.push_back(loss.item());
  }
  expect_falls(losses, "Pattern 4");
}

// NLLLoss on log_softmax and MSELoss (regression) also train on xla.
TEST(PortPatterns, NllAndMseModulesTrain) {
  manual_seed(1);
  data::DataLoader loader(toy_dataset(128), {.batch_size = 16, .shuffle = true});
  auto model = nn::to(std::make_shared<MyModel>(), "xla");
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::NLLLoss nll({.reduction = "mean"});
  std::vector<Tensor> losses;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& [data, target] : loader) {
      auto step = axle::step();
      optimizer.zero_grad();
      Tensor loss = nll(log_softmax((*model)(data.to("xla")), 1), target.to("xla"));
      loss.backward();
      optimizer.step();
      losses.push_back(loss);
    }
  expect_falls(values(losses), "NLLLoss");

  manual_seed(2);
  auto reg = std::make_shared<nn::Linear>(3, 1)->to("xla");
  optim::SGD opt2(reg->parameters(), {.lr = 0.1});
  auto loss_fn = nn::MSELoss();
  Tensor x = randn({32, 3});
  Tensor y = add(matmul(x, from_vector(std::vector<float>{1.5f, -2.0f, 0.5f}, {3, 1})), 0.25);
  std::vector<Tensor> mse;
  for (int i = 0; i < 20; ++i) {
    auto step = axle::step();
    opt2.zero_grad();
    Tensor loss = loss_fn((*reg)(x.to("xla")), y.to("xla"));
    loss.backward();
    opt2.step();
    mse.push_back(loss);
  }
  expect_falls(values(mse), "MSELoss");
}

// ---------------------------------------------------------------- loss modules vs PyTorch
namespace {

const json& golden() {
  static const json j = [] {
    std::ifstream f(std::string(AXLE_TEST_DATA) + "/golden_losses.json");
    if (!f) throw std::runtime_error("cannot open golden_losses.json under " + AXLE_TEST_DATA);
    return json::parse(f);
  }();
  return j;
}

Tensor tensor_of(const json& j) {
  Shape shape = j.at("shape").get<Shape>();
  const json& v = j.at("values");
  if (!v.empty() && v[0].is_number_integer()) return from_vector(v.get<std::vector<int64_t>>(), shape);
  return from_vector(v.get<std::vector<double>>(), shape);  // float32
}

bool is_int(const json& j) { return !j.at("values").empty() && j.at("values")[0].is_number_integer(); }

// |got - want| / (1 + |want|) <= 1e-6 for every element.
void expect_close(const Tensor& got, const json& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  ASSERT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  std::vector<double> g = got.cpu().to_vector<double>(), w = want.at("values").get<std::vector<double>>();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_LE(std::abs(g[i] - w[i]) / (1 + std::abs(w[i])), 1e-6)
        << what << " element " << i << ": axle " << g[i] << ", PyTorch " << w[i];
}

// Builds the case's module (on `dev`) and returns (loss, grad input, grad target).
struct LossRun {
  Tensor out, grad_input, grad_target;
};
LossRun run_case(const json& c, Device dev) {
  const std::string kind = c.at("loss");
  const json& o = c.at("options");
  Tensor weight = o.contains("weight") ? tensor_of(o.at("weight")) : Tensor();
  std::string reduction = o.value("reduction", "mean");
  int64_t ignore = o.value("ignore_index", int64_t(-100));
  std::shared_ptr<nn::Module> module;
  std::function<Tensor(const Tensor&, const Tensor&)> call;
  if (kind == "CrossEntropyLoss") {
    auto m = std::make_shared<nn::CrossEntropyLoss>(nn::CrossEntropyLossOptions{
        .weight = weight, .ignore_index = ignore, .reduction = reduction,
        .label_smoothing = o.value("label_smoothing", 0.0)});
    module = m;
    call = [m](const Tensor& a, const Tensor& b) { return (*m)(a, b); };
  } else if (kind == "NLLLoss") {
    auto m = std::make_shared<nn::NLLLoss>(nn::NLLLossOptions{.weight = weight, .ignore_index = ignore,
                                                              .reduction = reduction});
    module = m;
    call = [m](const Tensor& a, const Tensor& b) { return (*m)(a, b); };
  } else {
    auto m = std::make_shared<nn::MSELoss>(nn::MSELossOptions{.reduction = reduction});
    module = m;
    call = [m](const Tensor& a, const Tensor& b) { return (*m)(a, b); };
  }
  module->to(dev);
  Tensor x = tensor_of(c.at("input")).to(dev);
  x.set_requires_grad(true);
  Tensor t = tensor_of(c.at("target")).to(dev);
  const bool grad_target = c.contains("grad_target");
  if (grad_target) t.set_requires_grad(true);
  Tensor out = call(x, t);
  if (c.contains("grad_output")) out.backward(tensor_of(c.at("grad_output")).to(dev));
  else out.backward();
  return {out, x.grad(), grad_target ? t.grad() : Tensor()};
}

}  // namespace

TEST(PortLosses, MatchPyTorchForwardAndGradient) {
  const json& cases = golden().at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (Device dev : {Device("cpu"), Device("xla")}) {
    for (const json& c : cases) {
      const std::string what = c.at("name").get<std::string>() + " on " + dev.str();
      SCOPED_TRACE(what);
      LossRun r;
      ASSERT_NO_THROW(r = run_case(c, dev)) << error_of([&] { run_case(c, dev); });
      EXPECT_EQ(r.out.device(), dev);
      expect_close(r.out, c.at("output"), what + " loss");
      expect_close(r.grad_input, c.at("grad_input"), what + " grad input");
      if (c.contains("grad_target")) expect_close(r.grad_target, c.at("grad_target"), what + " grad target");
      if (is_int(c.at("target"))) {
        EXPECT_FALSE(r.grad_target.defined());
      }
    }
  }
}

TEST(PortLosses, OptionsAreCheckedAndShown) {
  EXPECT_NE(error_of([] { nn::CrossEntropyLoss l({.reduction = "avg"}); }).find("got 'avg'"), std::string::npos);
  EXPECT_NE(error_of([] { nn::CrossEntropyLoss l({.label_smoothing = 1.5}); }).find("label_smoothing"),
            std::string::npos);
  EXPECT_NE(error_of([] { nn::NLLLoss l({.weight = ones({2, 2})}); }).find("1-D weight"), std::string::npos);
  nn::CrossEntropyLoss l({.weight = ones({3}), .ignore_index = 1, .reduction = "sum", .label_smoothing = 0.1});
  EXPECT_EQ(l.str(), "CrossEntropyLoss(reduction=sum, ignore_index=1, label_smoothing=0.1, weight=[3])");
  EXPECT_EQ(l.state_dict().size(), 1u);  // the weight is a buffer
  // A weight of the wrong size, or on another device than the input, is an error, not a crash.
  EXPECT_NE(error_of([&] { (void)l(zeros({2, 4}), zeros({2}, {.dtype = kInt64})); }).find("weight of 4 values"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)l(zeros({2, 3}).to("xla"), zeros({2}, {.dtype = kInt64}).to("xla")); })
                .find("->to(device)"),
            std::string::npos);
  EXPECT_EQ(nn::MSELoss({.reduction = Reduction::None}).str(), "MSELoss(reduction=none)");
}

// ---------------------------------------------------------------- AXLE_DEBUG explanations
TEST(PortExplain, BatchSizeChangeNamesEveryChangedInput) {
  lazy::clear_graph_cache();  // explanations come only from compiles: start cold
  manual_seed(0);
  data::DataLoader train_loader(toy_dataset(10), {.batch_size = 4});  // batches of 4, 4, 2
  auto model = std::make_shared<MyModel>()->to("xla");
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto loss_fn = nn::CrossEntropyLoss();
  setenv("AXLE_DEBUG", "1", 1);
  testing::internal::CaptureStderr();
  for (const data::Example& batch : train_loader) {
    auto step = axle::step();
    Tensor inputs = batch.data.to("xla"), labels = batch.target.to("xla");
    optimizer.zero_grad();
    Tensor loss = loss_fn((*model)(inputs), labels);
    loss.backward();
    optimizer.step();
  }
  std::string err = testing::internal::GetCapturedStderr();
  unsetenv("AXLE_DEBUG");
  const std::string why = lazy::last_explanation();
  std::printf("the explanation: %s\n", why.c_str());
  EXPECT_NE(why.find("2 inputs changed:"), std::string::npos) << why;
  EXPECT_NE(why.find("(copied from cpu with .to()) changed from float32[4, 1, 4, 4] to float32[2, 1, 4, 4]"),
            std::string::npos) << why;
  EXPECT_NE(why.find("(copied from cpu with .to()) changed from int64[4] to int64[2]"), std::string::npos) << why;
  EXPECT_EQ(why.find("parameter"), std::string::npos) << why;  // the parameters did not change
  // AXLE_DEBUG prints the same explanation on stderr.
  EXPECT_NE(err.find(why), std::string::npos) << err;
}

TEST(PortExplain, CompiledArgumentsAndParametersAreNamed) {
  lazy::clear_graph_cache();  // explanations come only from compiles: start cold
  auto f = compile([](const Tensor& data, const Tensor& target) { return add(sum(data), sum(target)); },
                   {.name = "port_explain_args"});
  (void)f(ones({4, 3}).to("xla"), ones({4}).to("xla"));
  (void)f(ones({2, 3}).to("xla"), ones({2}).to("xla"));
  std::string why = lazy::last_explanation();
  EXPECT_NE(why.find("(tensor argument 0 of compiled function 'port_explain_args') changed from float32[4, 3] to "
                     "float32[2, 3]"),
            std::string::npos) << why;
  EXPECT_NE(why.find("(tensor argument 1 of compiled function 'port_explain_args') changed from float32[4] to "
                     "float32[2]"),
            std::string::npos) << why;

  // Parameters are named from their module, and keep their names through optimizer updates.
  auto run = compile([](nn::Module& m, const Tensor& x) { return sum(m(x)); }, {.name = "port_explain_params"});
  auto a = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(3, 2)});
  auto b = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(3, 5)});
  a->to("xla");
  b->to("xla");
  optim::SGD opt(a->parameters(), {.lr = 0.1});
  Tensor loss = run(*a, ones({1, 3}).to("xla"));
  loss.backward();
  opt.step();
  axle::sync();
  EXPECT_EQ(lazy::label_of(a->parameters()[0]), "parameter 0.weight");
  (void)run(*a, ones({1, 3}).to("xla"));
  (void)run(*b, ones({1, 3}).to("xla"));
  why = lazy::last_explanation();
  EXPECT_NE(why.find("(parameter 0.weight) changed from float32[2, 3] to float32[5, 3]"), std::string::npos) << why;
  EXPECT_NE(why.find("(parameter 0.bias) changed from float32[2] to float32[5]"), std::string::npos) << why;
}

TEST(PortExplain, LongListsAreCapped) {
  lazy::clear_graph_cache();  // explanations come only from compiles: start cold
  auto f = compile(
      [](const std::vector<Tensor>& xs) {
        Tensor s = sum(xs[0]);
        for (size_t i = 1; i < xs.size(); ++i) s = add(s, sum(xs[i]));
        return s;
      },
      {.name = "port_explain_cap"});
  for (int64_t n : {2, 3}) {
    std::vector<Tensor> xs;
    for (int i = 0; i < 11; ++i) xs.push_back(ones({n}).to("xla"));
    (void)f(xs);
  }
  std::string why = lazy::last_explanation();
  EXPECT_EQ(why.rfind("11 inputs changed:", 0), 0u) << why;
  EXPECT_NE(why.find("input 7 "), std::string::npos) << why;
  EXPECT_EQ(why.find("input 8 "), std::string::npos) << why;
  EXPECT_NE(why.find("... and 3 more"), std::string::npos) << why;
}

TEST(PortExplain, ScalarInputsAreNamed) {
  lazy::clear_graph_cache();  // explanations come only from compiles: start cold
  // x * 3 takes the scalar in x's dtype: a graph input that changes with x's dtype.
  auto f = compile([](const Tensor& x) { return mul(x, 3.0); }, {.name = "port_explain_scalar"});
  (void)f(ones({2}, {.dtype = kInt64}).to("xla"));
  (void)f(ones({2}).to("xla"));
  std::string why = lazy::last_explanation();
  EXPECT_NE(why.find("(tensor argument 0 of compiled function 'port_explain_scalar') changed from int64[2] to "
                     "float32[2]"),
            std::string::npos) << why;
  EXPECT_NE(why.find("(a cpu scalar made a graph input, e.g. a learning rate) changed from int64[] to float32[]"),
            std::string::npos) << why;
}
