// nn modules against golden values from PyTorch (tests/golden/gen_nn_optim.py),
// plus state_dict, train/eval, initialisation and error behaviour.
#include <gtest/gtest.h>

#include <type_traits>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "golden_nn_optim.h"

using namespace axle;
using json = nlohmann::json;

using pytorch_golden::expect_close;
using pytorch_golden::from_json;
using pytorch_golden::seq;

namespace {

const json& golden() { return pytorch_golden::data(); }

nn::StateDict state_from_json(const json& entries) {
  nn::StateDict sd;
  for (const auto& e : entries) sd.emplace_back(e.at("name").get<std::string>(), from_json(e));
  return sd;
}

template <class M, class... A>
nn::ModulePtr mk(A&&... a) { return std::make_shared<M>(std::forward<A>(a)...); }

// The same architectures as tests/golden/gen_nn_optim.py.
std::shared_ptr<nn::Sequential> build(const std::string& name) {
  using namespace nn;
  if (name == "mlp_sum" || name == "mlp_ce")
    return seq({mk<Flatten>(), mk<Linear>(12, 6), mk<ReLU>(), mk<Linear>(6, 3)});
  if (name == "cnn")
    return seq({
        mk<Conv2d>(2, 4, 3, nn::Conv2dOptions{.padding = 1}), mk<ReLU>(), mk<MaxPool2d>(2),
        mk<Conv2d>(4, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .groups = 2}), mk<GELU>(),
        mk<AvgPool2d>(2, 1), mk<AdaptiveAvgPool2d>(nn::Int2{1, 1}), mk<Flatten>(), mk<Linear>(4, 3)});
  if (name == "conv_nobias")
    return seq({
        mk<Conv2d>(1, 3, Int2{3, 2},
                   nn::Conv2dOptions{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .bias = false}),
        mk<Tanh>(), mk<Flatten>(), mk<Linear>(3 * 4 * 3, 2, false)});
  if (name == "batchnorm")
    return seq({mk<Conv2d>(2, 3, 3, nn::Conv2dOptions{.padding = 1}),
                                                   mk<BatchNorm2d>(3, 1e-5, 0.2), mk<ReLU>(), mk<Flatten>(),
                                                   mk<Linear>(3 * 4 * 4, 2)});
  if (name == "layernorm")
    return seq(
        {mk<Linear>(6, 8), mk<LayerNorm>(8), mk<Tanh>(), mk<Linear>(8, 2)});
  if (name == "embedding") return seq({mk<Embedding>(10, 4), mk<Linear>(4, 2)});
  throw std::runtime_error("unknown golden case " + name);
}

Tensor loss_of(const std::string& kind, const Tensor& y, const Tensor& aux) {
  if (kind == "sum_coef") return sum(mul(y, aux));
  if (kind == "mse_mean") {
    Tensor d = sub(y, aux);
    return mean(mul(d, d));
  }
  if (kind == "cross_entropy") return cross_entropy(y, aux);
  throw std::runtime_error("unknown loss " + kind);
}

const json& find_case(const std::string& name) {
  for (const auto& c : golden().at("nn"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("no golden case " + name);
}

void run_golden(const std::string& name) {
  const json& c = find_case(name);
  auto model = build(name);
  model->load_state_dict(state_from_json(c.at("state")));
  model->train(c.at("train").get<bool>());
  bool int_input = name == "embedding";
  Tensor x = from_json(c.at("input"), int_input ? kInt64 : kFloat32);
  std::string kind = c.at("loss_kind");
  Tensor aux = from_json(c.at("aux"), kind == "cross_entropy" ? kInt64 : kFloat32);

  Tensor y = (*model)(x);
  expect_close(y, c.at("output"), name + " output");
  Tensor loss = loss_of(kind, y, aux);
  EXPECT_NEAR(loss.item(), c.at("loss").get<double>(), 1e-5 * (1 + std::abs(c.at("loss").get<double>())))
      << name << " loss";
  loss.backward();

  auto named = model->named_parameters();
  const json& grads = c.at("grads");
  ASSERT_EQ(named.size(), grads.size()) << name << ": parameter count differs from PyTorch";
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, grads[i].at("name").get<std::string>()) << name << ": parameter order/name";
    expect_close(named[i].second.grad(), grads[i], name + " grad of " + named[i].first);
  }
  auto bufs = model->named_buffers();
  const json& bref = c.at("buffers_after");
  ASSERT_EQ(bufs.size(), bref.size()) << name;
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(bufs[i].first, bref[i].at("name").get<std::string>());
    expect_close(bufs[i].second, bref[i], name + " buffer " + bufs[i].first);
  }
  if (c.contains("eval_output")) {
    model->eval();
    NoGradGuard ng;
    expect_close((*model)(x), c.at("eval_output"), name + " eval output");
  }
}

std::shared_ptr<nn::Sequential> reference_mlp() {
  using namespace nn;
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(),
      std::make_shared<Linear>(256, 10)});
}

std::shared_ptr<nn::Sequential> reference_cnn() {
  using namespace nn;
  return seq({
      mk<Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}), mk<ReLU>(), mk<MaxPool2d>(2),
      mk<Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}), mk<ReLU>(), mk<MaxPool2d>(2), mk<Flatten>(),
      mk<Linear>(3136, 128), mk<ReLU>(), mk<Linear>(128, 10)});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

// ---------------------------------------------------------------- golden values
TEST(NNGolden, MlpSum) { run_golden("mlp_sum"); }
TEST(NNGolden, MlpCrossEntropy) { run_golden("mlp_ce"); }
TEST(NNGolden, CnnConvPoolGeluGroups) { run_golden("cnn"); }
TEST(NNGolden, ConvNoBiasStrideDilation) { run_golden("conv_nobias"); }
TEST(NNGolden, BatchNormTrainThenEval) { run_golden("batchnorm"); }
TEST(NNGolden, LayerNorm) { run_golden("layernorm"); }
TEST(NNGolden, Embedding) { run_golden("embedding"); }

// ---------------------------------------------------------------- structure
TEST(NNModule, ReferenceModelParameterCounts) {
  const json& pc = golden().at("param_counts");
  auto mlp = reference_mlp();
  auto cnn = reference_cnn();
  EXPECT_EQ(mlp->num_parameters(), pc.at("mlp").at("total").get<int64_t>());
  EXPECT_EQ(mlp->num_parameters(), 784 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(cnn->num_parameters(), pc.at("cnn").at("total").get<int64_t>());
  std::vector<std::string> names;
  for (auto& [n, p] : cnn->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, pc.at("cnn").at("names").get<std::vector<std::string>>());
  names.clear();
  for (auto& [n, p] : mlp->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, pc.at("mlp").at("names").get<std::vector<std::string>>());
  EXPECT_EQ(mlp->parameters().size(), 4u);
  for (const auto& p : mlp->parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(NNModule, ReferenceCnnForwardShape) {
  auto cnn = reference_cnn();
  Tensor y = (*cnn)(randn({2, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm2d> bn;
  Tensor scale;
  Block() {
    scale = register_parameter("scale", ones({1}));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 4));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(2));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 2, false));
    register_buffer("step", zeros({}, {.dtype = kInt64}));
  }
  std::string name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return mul((*fc2)(relu((*fc1)(x))), scale); }
};

TEST(NNModule, NamesAndOrderFollowPyTorch) {
  auto outer = std::make_shared<nn::Sequential>();
  outer->push_back(std::make_shared<Block>());
  outer->push_back(std::make_shared<nn::ReLU>());
  std::vector<std::string> names;
  for (auto& [n, p] : outer->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.scale", "0.fc1.weight", "0.fc1.bias", "0.bn.weight", "0.bn.bias",
                                             "0.fc2.weight"}));
  names.clear();
  for (auto& [n, p] : outer->named_buffers()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.step", "0.bn.running_mean", "0.bn.running_var",
                                             "0.bn.num_batches_tracked"}));
  // state_dict: a module's own params, own buffers, then children (PyTorch's order)
  names.clear();
  for (auto& [n, p] : outer->state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.scale", "0.step", "0.fc1.weight", "0.fc1.bias", "0.bn.weight",
                                             "0.bn.bias", "0.bn.running_mean", "0.bn.running_var",
                                             "0.bn.num_batches_tracked", "0.fc2.weight"}));
  EXPECT_EQ(outer->named_children().size(), 2u);
  EXPECT_EQ(outer->named_children()[1].first, "1");
  auto block = std::dynamic_pointer_cast<Block>((*outer)[0]);
  ASSERT_TRUE(block);
  EXPECT_EQ(block->parameters(false).size(), 1u);
  EXPECT_TRUE(block->parameters()[1].is_same(block->fc1->weight));
  EXPECT_EQ((*outer)(ones({5, 3})).shape(), (Shape{5, 2}));
}

TEST(NNModule, StrLooksLikePyTorch) {
  auto m = reference_mlp();
  EXPECT_EQ(m->str(),
            "Sequential(\n"
            "  (0): Flatten(start_dim=1, end_dim=-1)\n"
            "  (1): Linear(in_features=784, out_features=256, bias=True)\n"
            "  (2): ReLU()\n"
            "  (3): Linear(in_features=256, out_features=10, bias=True)\n"
            ")");
}

TEST(NNModule, RegistrationErrors) {
  struct Bad : nn::Module {
    void twice() {
      register_parameter("w", zeros({2}));
      register_parameter("w", zeros({2}));
    }
    void dotted() { register_buffer("a.b", zeros({2})); }
  };
  Bad b;
  EXPECT_NE(error_of([&] { b.twice(); }).find("\"w\" is already registered"), std::string::npos);
  EXPECT_NE(error_of([&] { b.dotted(); }).find("must not contain '.'"), std::string::npos);
  nn::Module plain;
  EXPECT_NE(error_of([&] { plain.forward(zeros({1})); }).find("forward() is not implemented"), std::string::npos);
  nn::Linear lin(3, 2);
  std::string e = error_of([&] { lin(zeros({4, 5})); });
  EXPECT_NE(e.find("[Linear]"), std::string::npos) << e;
  EXPECT_NE(e.find("[4, 5]"), std::string::npos) << e;
  EXPECT_NE(error_of([] { nn::Dropout(1.5); }).find("[Dropout]"), std::string::npos);
  EXPECT_NE(error_of([] { nn::Conv2d(3, 4, 3, {.groups = 2}); }).find("[Conv2d]"), std::string::npos);
  nn::BatchNorm2d bn(3);
  EXPECT_NE(error_of([&] { bn(zeros({2, 3})); }).find("[BatchNorm2d] expected 4-D"), std::string::npos);
  EXPECT_NE(error_of([] { nn::Sequential{}.push_back(nullptr); }).find("[Sequential]"), std::string::npos);
}

// ---------------------------------------------------------------- state_dict
TEST(NNStateDict, RoundTripKeepsIdentityAndCopies) {
  manual_seed(1);
  auto a = reference_cnn();
  manual_seed(2);
  auto b = reference_cnn();
  auto before = b->parameters();
  ASSERT_NE(a->parameters()[0].to_vector<float>(), before[0].to_vector<float>());
  b->load_state_dict(a->state_dict());
  auto sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>()) << sa[i].first;
  }
  auto after = b->parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].is_same(before[i]));  // same tensors: optimizers stay valid
    EXPECT_TRUE(after[i].requires_grad());
  }
  // b holds its own copy: changing a afterwards does not change b
  {
    NoGradGuard ng;
    a->parameters()[0].set_data(zeros(a->parameters()[0].shape()));
  }
  EXPECT_NE(b->parameters()[0].to_vector<float>(), a->parameters()[0].to_vector<float>());
  Tensor x = randn({1, 1, 28, 28});
  auto c = reference_cnn();
  c->load_state_dict(b->state_dict());
  EXPECT_EQ((*b)(x).to_vector<float>(), (*c)(x).to_vector<float>());
}

TEST(NNStateDict, ClearErrors) {
  auto m = reference_mlp();
  auto keep = m->parameters()[0].to_vector<float>();
  auto sd = m->state_dict();

  auto missing = sd;
  missing.erase(missing.begin() + 1);  // "1.bias"
  std::string e = error_of([&] { m->load_state_dict(missing); });
  EXPECT_NE(e.find("missing key(s): \"1.bias\""), std::string::npos) << e;
  EXPECT_NO_THROW(m->load_state_dict(missing, /*strict=*/false));

  auto extra = sd;
  extra.emplace_back("5.weight", zeros({2}));
  e = error_of([&] { m->load_state_dict(extra); });
  EXPECT_NE(e.find("unexpected key(s): \"5.weight\""), std::string::npos) << e;
  EXPECT_NO_THROW(m->load_state_dict(extra, false));

  auto wrong = sd;
  wrong[2].second = zeros({10, 255});  // "3.weight" is [10, 256]
  std::vector<float> untouched = m->parameters()[0].to_vector<float>();
  wrong[0].second = zeros({256, 784});  // a valid entry that must NOT be applied on error
  e = error_of([&] { m->load_state_dict(wrong); });
  EXPECT_NE(e.find("size mismatch for \"3.weight\""), std::string::npos) << e;
  EXPECT_NE(e.find("[10, 255]"), std::string::npos) << e;
  EXPECT_NE(e.find("[10, 256]"), std::string::npos) << e;
  EXPECT_THROW(m->load_state_dict(wrong, false), Error);  // shape mismatch is an error even when not strict
  EXPECT_EQ(m->parameters()[0].to_vector<float>(), untouched);
  EXPECT_EQ(untouched, keep);
}

// ---------------------------------------------------------------- train / eval
TEST(NNMode, TrainEvalIsRecursive) {
  auto m = seq({mk<nn::Linear>(4, 4), seq({mk<nn::Dropout>(0.5)})});
  EXPECT_TRUE(m->is_training());
  m->eval();
  EXPECT_FALSE(m->is_training());
  auto inner = std::dynamic_pointer_cast<nn::Sequential>((*m)[1]);
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE((*inner)[0]->is_training());
  m->train();
  EXPECT_TRUE((*inner)[0]->is_training());
}

TEST(NNMode, DropoutTrainAndEval) {
  manual_seed(7);
  nn::Dropout d(0.3);
  Tensor x = full({200, 100}, 2.0);
  std::vector<float> y = d(x).to_vector<float>();
  int64_t zeros_n = 0;
  for (float v : y) {
    if (v == 0) ++zeros_n;
    else EXPECT_NEAR(v, 2.0 / 0.7, 1e-5);
  }
  double frac = double(zeros_n) / double(y.size());
  EXPECT_NEAR(frac, 0.3, 0.02);  // 20000 samples: std ~0.003
  d.eval();
  EXPECT_EQ(d(x).to_vector<float>(), x.to_vector<float>());
}

TEST(NNMode, BatchNormRunningStats) {
  nn::BatchNorm2d bn(2, 1e-5, 0.1);
  EXPECT_EQ(bn.running_mean.to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_EQ(bn.running_var.to_vector<float>(), (std::vector<float>{1, 1}));
  // channel 0: values 1..8, channel 1: all 5
  std::vector<float> v;
  for (int n = 0; n < 2; ++n) {
    for (int i = 0; i < 4; ++i) v.push_back(float(n * 4 + i + 1));
    for (int i = 0; i < 4; ++i) v.push_back(5.0f);
  }
  Tensor x = from_vector(v, {2, 2, 2, 2});
  Tensor y = bn(x);
  // batch statistics: channel 0 mean 4.5, biased var 5.25, unbiased 6
  auto rm = bn.running_mean.to_vector<float>(), rv = bn.running_var.to_vector<float>();
  EXPECT_NEAR(rm[0], 0.45, 1e-6);
  EXPECT_NEAR(rm[1], 0.5, 1e-6);
  EXPECT_NEAR(rv[0], 0.9 + 0.1 * 6.0, 1e-5);
  EXPECT_NEAR(rv[1], 0.9, 1e-6);
  EXPECT_NEAR(y.to_vector<float>()[0], (1 - 4.5) / std::sqrt(5.25 + 1e-5), 1e-5);
  bn.eval();
  Tensor ye = bn(x);
  EXPECT_EQ(bn.running_mean.to_vector<float>(), rm);  // eval does not update
  EXPECT_NEAR(ye.to_vector<float>()[0], (1 - 0.45) / std::sqrt(rv[0] + 1e-5), 1e-5);
}

// ---------------------------------------------------------------- initialisation
namespace {
void expect_uniform(const Tensor& t, double bound, const std::string& what) {
  std::vector<double> v = t.to_vector<double>();
  double mn = 1e9, mx = -1e9, s = 0, s2 = 0;
  for (double x : v) mn = std::min(mn, x), mx = std::max(mx, x), s += x, s2 += x * x;
  double n = double(v.size()), mean = s / n, var = s2 / n - mean * mean;
  EXPECT_GE(mn, -bound) << what;
  EXPECT_LT(mx, bound) << what;
  EXPECT_LT(mn, -0.9 * bound) << what;  // spans the interval
  EXPECT_GT(mx, 0.9 * bound) << what;
  EXPECT_NEAR(mean, 0, 4 * bound / std::sqrt(3 * n)) << what;
  EXPECT_NEAR(var, bound * bound / 3, 0.1 * bound * bound / 3) << what;
}
}  // namespace

TEST(NNInit, LinearAndConvKaimingUniformBounds) {
  manual_seed(0);
  nn::Linear lin(400, 300);
  expect_uniform(lin.weight, 1 / std::sqrt(400.0), "Linear.weight");
  expect_uniform(lin.bias, 1 / std::sqrt(400.0), "Linear.bias");
  nn::Conv2d conv(16, 64, 3);
  expect_uniform(conv.weight, 1 / std::sqrt(16.0 * 9), "Conv2d.weight");
  EXPECT_EQ(conv.weight.shape(), (Shape{64, 16, 3, 3}));
  nn::Conv2d grouped(16, 32, nn::Int2{5, 3}, {.groups = 4});
  EXPECT_EQ(grouped.weight.shape(), (Shape{32, 4, 5, 3}));
  expect_uniform(grouped.weight, 1 / std::sqrt(4.0 * 15), "grouped Conv2d.weight");
  for (float b : conv.bias.to_vector<float>()) EXPECT_LE(std::abs(b), 1 / std::sqrt(144.0));
}

TEST(NNInit, NormAndEmbedding) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(bn.weight.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.bias.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  nn::LayerNorm ln(Shape{2, 3});
  EXPECT_EQ(ln.weight.shape(), (Shape{2, 3}));
  EXPECT_EQ(ln.weight.to_vector<float>(), std::vector<float>(6, 1));
  EXPECT_EQ(ln.bias.to_vector<float>(), std::vector<float>(6, 0));
  manual_seed(3);
  nn::Embedding emb(500, 40);
  std::vector<double> v = emb.weight.to_vector<double>();
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x;
  double n = double(v.size()), mean = s / n;
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(std::sqrt(s2 / n - mean * mean), 1, 0.02);
}

TEST(NNInit, SeedReproducible) {
  manual_seed(42);
  auto a = reference_mlp();
  manual_seed(42);
  auto b = reference_mlp();
  manual_seed(43);
  auto c = reference_mlp();
  EXPECT_EQ(a->parameters()[0].to_vector<float>(), b->parameters()[0].to_vector<float>());
  EXPECT_NE(a->parameters()[0].to_vector<float>(), c->parameters()[0].to_vector<float>());
}

// ---------------------------------------------------------------- grads, to()
TEST(NNModule, ZeroGradClearsGradients) {
  auto m = reference_mlp();
  sum((*m)(randn({2, 784}))).backward();
  for (const auto& p : m->parameters()) EXPECT_TRUE(p.grad().defined());
  m->zero_grad();
  for (const auto& p : m->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(NNModule, ToKeepsIdentity) {
  auto m = reference_mlp();
  auto before = m->parameters();
  auto vals = before[0].to_vector<float>();
  m->to(kCPU);
  m->to(kFloat32);
  auto after = m->parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i].is_same(before[i]));
  EXPECT_EQ(after[0].to_vector<float>(), vals);
  EXPECT_THROW(m->to(kInt64), Error);
}

TEST(NNModule, ToLazyDeviceKeepsIdentity) {
  auto m = seq({mk<nn::Linear>(3, 2), mk<nn::BatchNorm2d>(2)});
  auto lin = std::dynamic_pointer_cast<nn::Linear>((*m)[0]);
  auto vals = lin->weight.to_vector<float>();
  Tensor w = lin->weight;
  Device xla = Device::parse("xla:0");
  // The lazy device is part of axle: an error moving to it fails the test, never skips it.
  ASSERT_NO_THROW(m->to(xla));
  EXPECT_TRUE(w.is_same(lin->weight));
  EXPECT_EQ(lin->weight.device(), xla);
  EXPECT_EQ(m->state_dict()[2].second.device(), xla);  // buffers move too
  EXPECT_TRUE(lin->weight.requires_grad());
  EXPECT_EQ(lin->weight.cpu().to_vector<float>(), vals);
  m->to(kCPU);
  EXPECT_EQ(lin->weight.device(), kCPU);
  EXPECT_EQ(lin->weight.to_vector<float>(), vals);
}

// The activation modules of the new elementwise ops apply their function with their arguments.
TEST(Activations, ModulesApplyTheirFunctions) {
  manual_seed(2);
  const Tensor x = randn({4, 5}) * 3.0;
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); };
  EXPECT_TRUE(same(nn::SiLU()(x), silu(x)));
  EXPECT_TRUE(same(nn::Softplus(2.0, 3.0)(x), softplus(x, 2.0, 3.0)));
  EXPECT_FALSE(same(nn::Softplus(2.0, 3.0)(x), softplus(x)));
  EXPECT_TRUE(same(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)));
  EXPECT_FALSE(same(nn::LeakyReLU(0.2)(x), leaky_relu(x)));
  EXPECT_TRUE(same(nn::Hardtanh(-0.5, 2.0)(x), hardtanh(x, -0.5, 2.0)));
  EXPECT_FALSE(same(nn::Hardtanh(-0.5, 2.0)(x), hardtanh(x)));
  EXPECT_EQ(nn::LeakyReLU().name(), "LeakyReLU");
}

// The functional and module options are two spellings (axle::Conv2dFuncOptions and
// axle::nn::Conv2dOptions, as LibTorch's): with both namespaces open each name is one type.
// Reintroducing an axle::Conv2dOptions makes this file fail to compile (ambiguous name).
namespace both_namespaces_open {
using namespace axle;
using namespace axle::nn;
static_assert(!std::is_same_v<Conv2dOptions, Conv2dFuncOptions>);
TEST(Nn, FunctionalAndModuleConvOptionsDoNotClash) {
  const Conv2dOptions module_options{.padding = 1};
  const Conv2dFuncOptions functional{.padding = {1, 1}};
  EXPECT_EQ(module_options.padding.h, functional.padding[0]);
}
}  // namespace both_namespaces_open

// MaxPool2d's indices feed MaxUnpool2d (torch.nn.MaxUnpool2d): each maximum goes back to where
// it was read, every other element is zero; the gradient reaches the maxima only.
TEST(Modules, MaxUnpool2dUndoesMaxPool2dWithIndices) {
  nn::MaxPool2d pool(2);
  nn::MaxUnpool2d unpool(2);
  Tensor x = from_vector(std::vector<float>{1, 5, 2, 0, 3, 4, 8, 7, -1, -2, 6, 9, -3, -4, 1, 2}, {1, 1, 4, 4});
  x.set_requires_grad(true);
  auto [y, idx] = pool.forward_with_indices(x);
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 6, 8, 11}));
  Tensor u = unpool.forward(y, idx);
  EXPECT_EQ(u.to_vector<float>(), (std::vector<float>{0, 5, 0, 0, 0, 0, 8, 0, -1, 0, 0, 9, 0, 0, 0, 0}));
  sum(u).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(unpool.str(), "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  EXPECT_THROW(unpool.forward(y), Error);  // needs the indices
}
