// PyTorch compatibility of modules and state dicts: state dicts written by PyTorch 2.x
// (tests/golden/gen_torch_compat.py) load strictly into the same axle modules, with the
// same keys, order, shapes and dtypes, the same str() (repr), and the same forward in eval
// and train mode (within 1e-5), on cpu and xla; a ResNet-style model with BatchNorm; a
// U-Net-style model trained from PyTorch's weights and batches with PyTorch's losses.
// Also BatchNorm's buffers (num_batches_tracked, momentum=None, track_running_stats=false),
// load_state_dict's errors, ModuleList / ModuleDict, and checkpoints with int64 buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "axle/axle.h"
#include "axle/distributed_checkpoint.h"
#include "axle/fsdp.h"
#include "axle/runtime.h"
#include "axle/xs.h"
#include "dist/dist_internal.h"
#include "spmd/device_count.h"
#include "test_util.h"

using namespace axle;
using json = nlohmann::json;
using nn::ModulePtr;
using axle::test::error_of;

namespace {

const std::string kData = AXLE_TEST_DATA;

const SafeTensors& modules_file() {
  static const SafeTensors f = load(kData + "/torch_compat_modules.safetensors");
  return f;
}

/// The entries under `prefix` ("case/sd/"), prefix stripped, in the order of `keys`.
nn::StateDict entries(const SafeTensors& f, const std::string& prefix, const std::vector<std::string>& keys) {
  nn::StateDict out;
  for (const auto& k : keys) out.emplace_back(k, f.at(prefix + k));
  return out;
}

/// |got - want| <= tol * (1 + |want|) elementwise (NaN fails), same shape.
void expect_close(const Tensor& got_t, const Tensor& want_t, const std::string& what, double tol = 1e-5) {
  ASSERT_TRUE(got_t.defined()) << what;
  ASSERT_EQ(got_t.shape(), want_t.shape()) << what;
  std::vector<double> got = got_t.cpu().to_vector<double>(), want = want_t.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(got[i] - want[i]) / (1 + std::abs(want[i]));
    if (!(err <= worst)) worst = err, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << (got.empty() ? 0 : got[at]) << ", PyTorch has "
                        << (want.empty() ? 0 : want[at]);
}

template <class M, class... A>
std::shared_ptr<M> mk(A&&... a) {
  return std::make_shared<M>(std::forward<A>(a)...);
}

// The Containers and Stack modules of the generator.
struct Containers : nn::Module {
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::ModuleDict> heads;
  Containers() {
    layers = register_module("layers", mk<nn::ModuleList>(std::vector<ModulePtr>{
                                           mk<nn::Linear>(4, 5), mk<nn::ReLU>(), mk<nn::Linear>(5, 3)}));
    heads = register_module("heads", mk<nn::ModuleDict>(std::vector<std::pair<std::string, ModulePtr>>{
                                         {"mean", mk<nn::Linear>(3, 2)}, {"scale", mk<nn::Linear>(3, 2, false)}}));
  }
  std::string name() const override { return "Containers"; }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& m : *layers) y = (*m)(y);
    return mul((*(*heads)["mean"])(y), sigmoid((*(*heads)["scale"])(y)));
  }
};

struct Stack : nn::Module {
  std::shared_ptr<nn::ModuleList> blocks;
  explicit Stack(std::vector<ModulePtr> mods) { blocks = register_module("blocks", mk<nn::ModuleList>(mods)); }
  std::string name() const override { return "Stack"; }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& m : *blocks) y = (*m)(y);
    return y;
  }
};

/// The axle module of each case of gen_torch_compat.py's module_cases().
ModulePtr build_case(const std::string& name) {
  using namespace nn;
  using O = InterpolateOptions;
  static const std::map<std::string, std::function<ModulePtr()>> cases = {
      {"linear", [] { return mk<Linear>(5, 3); }},
      {"linear_nobias", [] { return mk<Linear>(5, 3, false); }},
      {"conv2d", [] { return mk<Conv2d>(3, 4, 3, Conv2dOptions{.stride = 2, .padding = 1}); }},
      {"conv2d_groups",
       [] {
         return mk<Conv2d>(4, 6, Int2{3, 2},
                           Conv2dOptions{.padding = {1, 0}, .dilation = {1, 2}, .groups = 2, .bias = false});
       }},
      {"conv_transpose2d",
       [] { return mk<ConvTranspose2d>(4, 3, 3, ConvTranspose2dOptions{.stride = 2, .padding = 1, .output_padding = 1}); }},
      {"conv_transpose2d_groups",
       [] {
         return mk<ConvTranspose2d>(4, 6, Int2{2, 3},
                                    ConvTranspose2dOptions{.stride = {2, 1}, .groups = 2, .bias = false});
       }},
      {"batchnorm1d", [] { return mk<BatchNorm1d>(4); }},
      {"batchnorm1d_3d", [] { return mk<BatchNorm1d>(3, 1e-5, 0.3); }},
      {"batchnorm1d_cma", [] { return mk<BatchNorm1d>(4, 1e-5, std::nullopt); }},
      {"batchnorm2d", [] { return mk<BatchNorm2d>(3); }},
      {"batchnorm2d_cma", [] { return mk<BatchNorm2d>(3, 1e-3, std::nullopt); }},
      {"batchnorm2d_noaffine", [] { return mk<BatchNorm2d>(3, 1e-5, 0.1, false); }},
      {"batchnorm2d_nobias", [] { return mk<BatchNorm2d>(2, 1e-5, 0.1, true, true, false); }},
      {"batchnorm2d_notrack", [] { return mk<BatchNorm2d>(3, 1e-5, 0.1, true, false); }},
      {"groupnorm", [] { return mk<GroupNorm>(2, 6); }},
      {"groupnorm_noaffine", [] { return mk<GroupNorm>(3, 3, 1e-3, false); }},
      {"groupnorm_nobias", [] { return mk<GroupNorm>(1, 4, 1e-5, true, false); }},
      {"layernorm", [] { return mk<LayerNorm>(Shape{4, 5}); }},
      {"layernorm_nobias", [] { return mk<LayerNorm>(6, 1e-6, true, false); }},
      {"embedding", [] { return mk<Embedding>(10, 4); }},
      {"upsample_nearest", [] { return mk<Upsample>(O{.scale_factor = {2}}); }},
      {"upsample_bilinear", [] { return mk<Upsample>(O{.size = {7, 9}, .mode = "bilinear"}); }},
      {"upsample_bilinear_ac",
       [] { return mk<Upsample>(O{.scale_factor = {2.0, 1.5}, .mode = "bilinear", .align_corners = true}); }},
      {"relu", [] { return mk<ReLU>(); }},
      {"gelu", [] { return mk<GELU>(); }},
      {"silu", [] { return mk<SiLU>(); }},
      {"tanh", [] { return mk<Tanh>(); }},
      {"sigmoid", [] { return mk<Sigmoid>(); }},
      {"leaky_relu", [] { return mk<LeakyReLU>(0.2); }},
      {"hardtanh", [] { return mk<Hardtanh>(-0.5, 2.0); }},
      {"softplus", [] { return mk<Softplus>(2.0, 5.0); }},
      {"identity", [] { return mk<Identity>(); }},
      {"flatten", [] { return mk<Flatten>(); }},
      {"dropout", [] { return mk<Dropout>(0.3); }},
      {"maxpool2d", [] { return mk<MaxPool2d>(3, 2, 1); }},
      {"maxpool2d_ceil", [] { return mk<MaxPool2d>(2, std::nullopt, 0, 1, true); }},
      {"avgpool2d", [] { return mk<AvgPool2d>(3, 2, 1, false, false); }},
      {"adaptive_avgpool2d", [] { return mk<AdaptiveAvgPool2d>(Int2{2, 3}); }},
      {"sequential",
       [] {
         return mk<Sequential>(std::vector<ModulePtr>{mk<Conv2d>(2, 3, 3, Conv2dOptions{.padding = 1}),
                                                      mk<BatchNorm2d>(3), mk<ReLU>(), mk<Flatten>(),
                                                      mk<Linear>(3 * 4 * 4, 2)});
       }},
      {"containers", [] { return mk<Containers>(); }},
      {"modulelist_repeat",
       [] {
         return mk<Stack>(std::vector<ModulePtr>{mk<Linear>(3, 3), mk<Linear>(3, 3), mk<ReLU>(), mk<Linear>(3, 3),
                                                 mk<Tanh>()});
       }},
  };
  auto it = cases.find(name);
  if (it == cases.end()) throw std::runtime_error("no axle module for the PyTorch case \"" + name + "\"");
  return it->second();
}

const json& module_cases() {
  static const json j = json::parse(modules_file().metadata.at("cases"));
  return j;
}

std::string torch_dtype_name(DType t) { return t == kInt64 ? "int64" : t == kFloat32 ? "float32" : "other"; }

/// One case: build, compare the state dict's layout and str(), load strictly (on `device`),
/// forward in eval (and train) mode against PyTorch's outputs and state after.
void run_module_case(const json& c, const std::string& device) {
  const std::string name = c.at("name");
  SCOPED_TRACE(name + " on " + device);
  const SafeTensors& f = modules_file();
  ModulePtr m = build_case(name);
  const auto keys = c.at("keys").get<std::vector<std::string>>();
  const auto dtypes = c.at("dtypes").get<std::vector<std::string>>();

  // Keys, order, shapes, dtypes: PyTorch's.
  nn::StateDict own = m->state_dict();
  std::vector<std::string> own_keys;
  for (const auto& [k, t] : own) own_keys.push_back(k);
  ASSERT_EQ(own_keys, keys);
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_EQ(own[i].second.shape(), f.at(name + "/sd/" + keys[i]).shape()) << keys[i];
    EXPECT_EQ(torch_dtype_name(own[i].second.dtype()), dtypes[i]) << keys[i];
  }
  EXPECT_EQ(m->str(), c.at("repr").get<std::string>());

  m->to(Device::parse(device));
  m->load_state_dict(entries(f, name + "/sd/", keys), /*strict=*/true);
  const Tensor x = f.at(name + "/in").to(Device::parse(device));

  m->eval();
  {
    NoGradGuard ng;
    expect_close((*m)(x), f.at(name + "/out_eval"), "eval output");
  }
  if (c.at("train").get<bool>()) {
    m->train();
    expect_close((*m)(x), f.at(name + "/out_train"), "train output");
    for (const auto& [k, t] : m->state_dict()) expect_close(t, f.at(name + "/after/" + k), "after a training forward: " + k);
  }
}

}  // namespace

// ---------------------------------------------------------------- every module type
TEST(TorchCompat, EveryModuleCaseLoadsStrictlyAndMatchesOnCpu) {
  ASSERT_GE(module_cases().size(), 40u);
  for (const auto& c : module_cases()) run_module_case(c, "cpu");
}

TEST(TorchCompat, EveryModuleCaseLoadsStrictlyAndMatchesOnXla) {
  for (const auto& c : module_cases()) run_module_case(c, "xla:0");
}

// ---------------------------------------------------------------- BatchNorm's buffers
TEST(TorchCompatBatchNorm, BuffersAreNamedShapedAndTypedAsPyTorch) {
  nn::BatchNorm2d bn(3);
  auto bufs = bn.named_buffers();
  ASSERT_EQ(bufs.size(), 3u);
  EXPECT_EQ(bufs[2].first, "num_batches_tracked");
  EXPECT_EQ(bufs[2].second.dtype(), kInt64);
  EXPECT_EQ(bufs[2].second.dim(), 0);
  EXPECT_EQ(bufs[2].second.item(), 0);
  EXPECT_FALSE(bufs[2].second.requires_grad());
  nn::BatchNorm1d untracked(3, 1e-5, 0.1, true, /*track_running_stats=*/false);
  EXPECT_TRUE(untracked.named_buffers().empty());
  EXPECT_FALSE(untracked.running_mean.defined());
  nn::BatchNorm2d noaffine(3, 1e-5, 0.1, false);
  EXPECT_TRUE(noaffine.named_parameters().empty());
  EXPECT_EQ(noaffine.state_dict().size(), 3u);
}

TEST(TorchCompatBatchNorm, NumBatchesTrackedCountsTrainingForwardsOnly) {
  for (const char* dev : {"cpu", "xla:0"}) {
    SCOPED_TRACE(dev);
    auto bn = nn::to(mk<nn::BatchNorm1d>(2), Device::parse(dev));
    Tensor x = randn({4, 2}).to(Device::parse(dev));
    (*bn)(x);
    (*bn)(x);
    EXPECT_EQ(bn->num_batches_tracked.cpu().item(), 2);
    bn->eval();
    (*bn)(x);
    EXPECT_EQ(bn->num_batches_tracked.cpu().item(), 2);
    EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);
    EXPECT_EQ(bn->num_batches_tracked.device(), Device::parse(dev));
  }
}

TEST(TorchCompatBatchNorm, MomentumNoneIsTheCumulativeAverageOfTheBatchStatistics) {
  for (const char* dev : {"cpu", "xla:0"}) {
    SCOPED_TRACE(dev);
    const Device d = Device::parse(dev);
    auto bn = nn::to(mk<nn::BatchNorm1d>(2, 1e-5, std::nullopt), d);
    std::vector<double> mean_sum(2, 0), var_sum(2, 0);
    manual_seed(5);
    for (int step = 0; step < 3; ++step) {
      Tensor x = add(mul(randn({5, 2}), 2.0 + step), double(step));
      Tensor bm = mean(x, {0}), bv = var(x, {0}, 1);
      for (int c = 0; c < 2; ++c) {
        mean_sum[size_t(c)] += bm.to_vector<double>()[size_t(c)];
        var_sum[size_t(c)] += bv.to_vector<double>()[size_t(c)];
      }
      (*bn)(x.to(d));
    }
    // The running statistics start at (0, 1) and count as the first "batch" (PyTorch's rule).
    std::vector<double> rm = bn->running_mean.cpu().to_vector<double>(), rv = bn->running_var.cpu().to_vector<double>();
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(rm[size_t(c)], mean_sum[size_t(c)] / 3, 1e-5);
      EXPECT_NEAR(rv[size_t(c)], var_sum[size_t(c)] / 3, 1e-4);
    }
    EXPECT_EQ(bn->num_batches_tracked.cpu().item(), 3);
  }
}

TEST(TorchCompatBatchNorm, UntrackedUsesBatchStatisticsInEval) {
  nn::BatchNorm2d bn(2, 1e-5, 0.1, false, false);
  Tensor x = randn({3, 2, 2, 2});
  bn.train();
  auto train_y = bn(x).to_vector<float>();
  bn.eval();
  auto eval_y = bn(x).to_vector<float>();
  ASSERT_EQ(train_y.size(), eval_y.size());
  for (size_t i = 0; i < eval_y.size(); ++i) EXPECT_FLOAT_EQ(train_y[i], eval_y[i]);
  Tensor m = mean(bn(x), {0, 2, 3});
  for (float v : m.to_vector<float>()) EXPECT_NEAR(v, 0, 1e-5);
}

TEST(TorchCompatBatchNorm, AStateDictWithoutNumBatchesTrackedLoadsStrictly) {
  // PyTorch's rule for state dicts older than the buffer (and axle's own before it):
  // num_batches_tracked may be left out and keeps its value; everything else is required.
  auto m = mk<nn::Sequential>(std::vector<ModulePtr>{mk<nn::Linear>(2, 3), mk<nn::BatchNorm1d>(3)});
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm1d>((*m)[1]);
  bn->num_batches_tracked.set_data(full({}, 7, {.dtype = kInt64}));
  nn::StateDict sd;
  for (auto& [k, t] : m->state_dict())
    if (k != "1.num_batches_tracked") sd.emplace_back(k, full(t.shape(), 0.5, {.dtype = t.dtype()}));
  ASSERT_NO_THROW(m->load_state_dict(sd, true));
  EXPECT_EQ(bn->num_batches_tracked.item(), 7);
  EXPECT_EQ(bn->running_mean.to_vector<float>(), std::vector<float>(3, 0.5f));
  EXPECT_EQ(m->optional_state_keys(), (std::vector<std::string>{"1.num_batches_tracked"}));
  sd.erase(sd.begin() + 3);  // "1.bias" is required
  EXPECT_NE(error_of([&] { m->load_state_dict(sd); }).find("missing key(s): \"1.bias\""), std::string::npos);
}

// ---------------------------------------------------------------- load_state_dict's errors
TEST(TorchCompatStateDict, StrictLoadReportsMissingUnexpectedAndShapesTogether) {
  auto m = mk<nn::Sequential>(std::vector<ModulePtr>{mk<nn::Linear>(2, 3), mk<nn::BatchNorm1d>(3)});
  nn::StateDict sd = m->state_dict();
  const auto before = m->state_dict()[0].second.to_vector<float>();
  nn::StateDict bad;
  for (auto& [k, t] : sd) {
    if (k == "0.bias" || k == "1.running_var") continue;                   // missing
    if (k == "1.weight") bad.emplace_back(k, zeros({4}));                  // wrong shape
    else bad.emplace_back(k, zeros(t.shape(), {.dtype = t.dtype()}));
  }
  bad.emplace_back("1.running_std", zeros({3}));  // unexpected
  bad.emplace_back("2.weight", zeros({1}));
  const std::string e = error_of([&] { m->load_state_dict(bad); });
  const size_t miss = e.find("missing key(s): \"0.bias\", \"1.running_var\"");
  const size_t unexp = e.find("unexpected key(s): \"1.running_std\", \"2.weight\"");
  const size_t shape = e.find("size mismatch for \"1.weight\": copying a tensor of shape [4] from the state dict, "
                              "the shape in the current model is [3]");
  EXPECT_NE(miss, std::string::npos) << e;
  EXPECT_NE(unexp, std::string::npos) << e;
  EXPECT_NE(shape, std::string::npos) << e;
  EXPECT_TRUE(miss < unexp && unexp < shape) << "PyTorch's order: missing, unexpected, size mismatch\n" << e;
  EXPECT_NE(e.find("for Sequential"), std::string::npos) << e;
  EXPECT_EQ(m->state_dict()[0].second.to_vector<float>(), before) << "nothing is loaded from a failing state dict";
  // Not strict: missing and unexpected keys pass, a shape mismatch is still an error.
  const std::string loose = error_of([&] { m->load_state_dict(bad, false); });
  EXPECT_EQ(loose.find("missing"), std::string::npos) << loose;
  EXPECT_NE(loose.find("size mismatch for \"1.weight\""), std::string::npos) << loose;
}

TEST(TorchCompatStateDict, ValuesAreCastToTheModulesDtypes) {
  nn::BatchNorm2d bn(2);
  nn::StateDict sd = bn.state_dict();
  sd[4].second = full({}, 12.0);  // a float num_batches_tracked: cast to int64 as PyTorch's copy_
  bn.load_state_dict(sd);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.num_batches_tracked.item(), 12);
}

// ---------------------------------------------------------------- containers
TEST(TorchCompatContainers, ModuleListAndModuleDict) {
  nn::ModuleList list{mk<nn::Linear>(2, 2), mk<nn::ReLU>()};
  list.push_back(mk<nn::Linear>(2, 1));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list[2]->name(), "Linear");
  EXPECT_NE(error_of([&] { (void)list[3]; }).find("index 3 is out of range for 3 module(s)"), std::string::npos);
  EXPECT_NE(error_of([&] { list(zeros({1, 2})); }).find("forward() is not implemented"), std::string::npos);
  std::vector<std::string> names;
  for (auto& [n, p] : list.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_NE(error_of([&] { list.push_back(nullptr); }).find("expected a module, got null at index 3"), std::string::npos);

  nn::ModuleDict dict({{"b", mk<nn::Linear>(2, 2)}, {"a", mk<nn::Linear>(2, 3, false)}});
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"b", "a"}));  // insertion order, not sorted
  EXPECT_TRUE(dict.contains("a"));
  EXPECT_FALSE(dict.contains("c"));
  dict.insert("b", mk<nn::Linear>(2, 5));  // replaced in its place
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(std::dynamic_pointer_cast<nn::Linear>(dict["b"])->out_features, 5);
  EXPECT_EQ(dict.named_children()[0].second.get(), dict["b"].get());
  EXPECT_EQ(dict.state_dict()[0].second.shape(), (Shape{5, 2}));
  const std::string e = error_of([&] { (void)dict["c"]; });
  EXPECT_NE(e.find("no module under key \"c\" (keys: \"b\", \"a\")"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { dict.insert("x.y", mk<nn::ReLU>()); }).find("must not contain '.'"), std::string::npos);
  EXPECT_EQ(nn::ModuleList().str(), "ModuleList()");
  EXPECT_EQ(nn::ModuleDict().str(), "ModuleDict()");
}

// ---------------------------------------------------------------- ResNet-style model
namespace {

// gen_torch_compat.py's BasicBlock and ResNet, module for module (the same attribute names,
// so the same state dict keys).
struct BasicBlock : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;
  BasicBlock(int64_t cin, int64_t cout, int64_t stride) {
    conv1 = register_module("conv1", mk<nn::Conv2d>(cin, cout, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
    bn1 = register_module("bn1", mk<nn::BatchNorm2d>(cout));
    conv2 = register_module("conv2", mk<nn::Conv2d>(cout, cout, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
    bn2 = register_module("bn2", mk<nn::BatchNorm2d>(cout));
    if (stride != 1 || cin != cout)
      downsample = register_module(
          "downsample", mk<nn::Sequential>(std::vector<ModulePtr>{
                            mk<nn::Conv2d>(cin, cout, 1, nn::Conv2dOptions{.stride = stride, .bias = false}),
                            mk<nn::BatchNorm2d>(cout)}));
  }
  std::string name() const override { return "BasicBlock"; }
  Tensor forward(const Tensor& x) override {
    Tensor out = relu((*bn1)((*conv1)(x)));
    out = (*bn2)((*conv2)(out));
    return relu(add(out, downsample ? (*downsample)(x) : x));
  }
};

struct ResNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
  ResNet() {
    conv1 = register_module("conv1", mk<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
    bn1 = register_module("bn1", mk<nn::BatchNorm2d>(8));
    auto blocks = [](std::vector<ModulePtr> b) { return mk<nn::Sequential>(std::move(b)); };
    layer1 = register_module("layer1", blocks({mk<BasicBlock>(8, 8, 1), mk<BasicBlock>(8, 8, 1)}));
    layer2 = register_module("layer2", blocks({mk<BasicBlock>(8, 16, 2), mk<BasicBlock>(16, 16, 1)}));
    layer3 = register_module("layer3", blocks({mk<BasicBlock>(16, 32, 2)}));
    avgpool = register_module("avgpool", mk<nn::AdaptiveAvgPool2d>(nn::Int2{1, 1}));
    fc = register_module("fc", mk<nn::Linear>(32, 10));
  }
  std::string name() const override { return "ResNet"; }
  Tensor forward(const Tensor& x) override {
    Tensor y = relu((*bn1)((*conv1)(x)));
    y = (*layer3)((*layer2)((*layer1)(y)));
    return (*fc)(flatten((*avgpool)(y), 1));
  }
};

}  // namespace

TEST(TorchCompatModels, ResNetWithBatchNormLoadsStrictlyAndMatchesPyTorch) {
  const SafeTensors f = load(kData + "/torch_compat_resnet.safetensors");
  const auto keys = json::parse(f.metadata.at("keys")).get<std::vector<std::string>>();
  for (const char* dev : {"cpu", "xla:0"}) {
    SCOPED_TRACE(dev);
    const Device d = Device::parse(dev);
    auto m = nn::to(mk<ResNet>(), d);
    std::vector<std::string> own;
    for (const auto& [k, t] : m->state_dict()) own.push_back(k);
    ASSERT_EQ(own, keys);  // PyTorch's keys in PyTorch's order (num_batches_tracked included)
    m->load_state_dict(entries(f, "sd/", keys), /*strict=*/true);
    const Tensor x = f.at("in").to(d);
    m->eval();
    {
      NoGradGuard ng;
      expect_close((*m)(x), f.at("out_eval"), "eval output");
    }
    m->train();
    Tensor y = (*m)(x);
    expect_close(y, f.at("out_train"), "train output");
    for (const auto& [k, t] : m->state_dict()) expect_close(t, f.at("after/" + k), "after the training forward: " + k);
    EXPECT_EQ(m->bn1->num_batches_tracked.cpu().item(), 101);
  }
}

// ---------------------------------------------------------------- the int64 buffer elsewhere
namespace {

std::shared_ptr<nn::Sequential> bn_net() {
  manual_seed(3);
  return mk<nn::Sequential>(std::vector<ModulePtr>{mk<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}),
                                                   mk<nn::BatchNorm2d>(4), mk<nn::ReLU>(), mk<nn::Flatten>(),
                                                   mk<nn::Linear>(4 * 6 * 6, 3)});
}

struct BnRun {
  std::vector<double> losses;
  std::vector<float> running_mean;
  int64_t num_batches_tracked = -1;
  DType nbt_dtype = kFloat32;
};

/// Two SGD steps of `m` (the module to call; `net` the wrapped one) on fixed batches.
BnRun train_bn(const ModulePtr& m, const std::shared_ptr<nn::Sequential>& net, Device d) {
  manual_seed(11);
  std::vector<Tensor> xs{randn({4, 1, 6, 6}), randn({4, 1, 6, 6})};
  std::vector<Tensor> ys{from_vector(std::vector<int64_t>{0, 2, 1, 0}, {4}), from_vector(std::vector<int64_t>{1, 1, 2, 0}, {4})};
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  BnRun r;
  for (size_t s = 0; s < xs.size(); ++s) {
    auto st = axle::step();
    opt.zero_grad();
    Tensor loss = cross_entropy((*m)(xs[s].to(d)), ys[s].to(d));
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item());
  }
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>((*net)[1]);
  r.running_mean = bn->running_mean.cpu().to_vector<float>();
  r.num_batches_tracked = int64_t(bn->num_batches_tracked.cpu().item());
  r.nbt_dtype = bn->num_batches_tracked.dtype();
  return r;
}

void expect_same_run(const BnRun& got, const BnRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << what << " step " << i;
  ASSERT_EQ(got.running_mean.size(), want.running_mean.size()) << what;
  for (size_t i = 0; i < want.running_mean.size(); ++i)
    EXPECT_NEAR(got.running_mean[i], want.running_mean[i], 1e-5) << what << " running_mean " << i;
  EXPECT_EQ(got.num_batches_tracked, 2) << what;
  EXPECT_EQ(got.nbt_dtype, kInt64) << what;
}

}  // namespace

TEST(TorchCompatBuffers, BatchNormTrainsUnderFsdpV1AndV2WithItsInt64Buffer) {
  auto ref_net = bn_net();
  const BnRun ref = train_bn(ref_net, ref_net, kCPU);
  EXPECT_EQ(ref.num_batches_tracked, 2);
  {  // FSDP v1 over a world of one process, on the cpu
    auto net = bn_net();
    auto f = std::make_shared<fsdp::FSDP>(net);
    expect_same_run(train_bn(f, net, kCPU), ref, "FSDP v1");
    bool listed = false;
    for (const auto& [k, t] : f->state_dict()) listed |= k.find("num_batches_tracked") != std::string::npos;
    EXPECT_TRUE(listed) << "the FSDP model's state dict holds the buffer";
  }
  {  // FSDP v2 (SPMD) over two virtual devices: the buffer stays replicated
    setenv("AXLE_CPU_DEVICES", "2", 1);
    spmd::reset_device_count();
    runtime::use_spmd();
    xs::Mesh mesh({0, 1}, {2}, {"fsdp"});
    auto net = bn_net();
    auto f = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(net, fsdp::SpmdFullyShardedDataParallelOptions{.mesh = mesh});
    const BnRun got = train_bn(f, net, device());
    xs::set_global_mesh(std::nullopt);
    dist::detail::set_spmd_mode(false);
    unsetenv("AXLE_CPU_DEVICES");
    spmd::reset_device_count();
    expect_same_run(got, ref, "FSDP v2 on 2 devices");
  }
}

TEST(TorchCompatBuffers, CheckpointsKeepNumBatchesTrackedAndOldOnesStillLoad) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("axle_torch_compat_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto net = bn_net();
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  (*net)(randn({2, 1, 6, 6}));
  (*net)(randn({2, 1, 6, 6}));
  save_checkpoint(dir + "/ckpt.safetensors", {.model = net.get(), .optimizer = &opt, .step = 2});
  const SafeTensors raw = load(dir + "/ckpt.safetensors");
  EXPECT_EQ(raw.at("model.1.num_batches_tracked").dtype(), kInt64);
  EXPECT_EQ(raw.at("model.1.num_batches_tracked").dim(), 0);

  auto back = bn_net();
  optim::SGD opt2(back->parameters(), {.lr = 0.1});
  load_checkpoint(dir + "/ckpt.safetensors", {.model = back.get(), .optimizer = &opt2});
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>((*back)[1]);
  EXPECT_EQ(bn->num_batches_tracked.item(), 2);
  EXPECT_EQ(bn->running_mean.to_vector<float>(),
            std::dynamic_pointer_cast<nn::BatchNorm2d>((*net)[1])->running_mean.to_vector<float>());

  // A checkpoint written before BatchNorm had the buffer (the same file without it) loads too.
  nn::StateDict old;
  for (const auto& [k, t] : raw.tensors)
    if (k != "model.1.num_batches_tracked") old.emplace_back(k, t);
  save(old, dir + "/old.safetensors", raw.metadata);
  auto older = bn_net();
  optim::SGD opt3(older->parameters(), {.lr = 0.1});
  EXPECT_NO_THROW(load_checkpoint(dir + "/old.safetensors", {.model = older.get(), .optimizer = &opt3}));
  EXPECT_EQ(std::dynamic_pointer_cast<nn::BatchNorm2d>((*older)[1])->num_batches_tracked.item(), 0);
  // ... but not one missing anything else.
  nn::StateDict broken;
  for (const auto& [k, t] : old)
    if (k != "model.1.running_var") broken.emplace_back(k, t);
  save(broken, dir + "/broken.safetensors", raw.metadata);
  const std::string e = error_of([&] { load_checkpoint(dir + "/broken.safetensors", {.model = older.get(), .optimizer = &opt3}); });
  EXPECT_NE(e.find("missing key \"1.running_var\""), std::string::npos) << e;

  // Distributed checkpoints (xla tensors) keep the 0-d int64 buffer too.
  namespace dc = axle::experimental::distributed_checkpoint;
  auto on_xla = nn::to(bn_net(), Device::parse("xla:0"));
  (*on_xla)(randn({2, 1, 6, 6}).to(Device::parse("xla:0")));
  axle::sync();
  dc::save(on_xla->state_dict(), dir + "/dc");
  auto into = nn::to(bn_net(), Device::parse("xla:0"));
  dc::load(into->state_dict(), dir + "/dc");
  auto nbt = std::dynamic_pointer_cast<nn::BatchNorm2d>((*into)[1])->num_batches_tracked;
  EXPECT_EQ(nbt.dtype(), kInt64);
  EXPECT_EQ(nbt.cpu().item(), 1);
  fs::remove_all(dir);
}

// axle-train --init with a PyTorch-written BatchNorm model: the state dict (num_batches_tracked
// included) loads strictly, and the first two losses (training mode: batch statistics) are
// PyTorch's from the same weights on tests/data/tiny_fmnist as one batch of 64.
TEST(TorchCompatBuffers, AxleTrainInitLoadsAPyTorchBatchNormModelStrictly) {
  axle::test::TempDir d;
  const auto golden = json::parse(axle::test::slurp(kData + "/cli_init_bn_golden.json"));
  const auto expected = golden.at("losses").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), 2u);
  const auto r = axle::test::run_train("--model cnn-bn --data '" + kData + "/tiny_fmnist' --batch-size 64 --epochs 2 "
                                       "--threads 1 --init '" + kData + "/torch_cnn_bn.safetensors' --save '" +
                                       (d / "ck") + "' --json '" + (d / "r.json") + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto losses = json::parse(axle::test::slurp(d / "r.json")).at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_NEAR(losses[0], expected[0], 1e-5) << "first-step loss";
  EXPECT_NEAR(losses[1], expected[1], 1e-5) << "loss after one SGD step";
  // The loaded count went on: 5 from PyTorch, one per training step.
  const SafeTensors ck = load(d / "ck/checkpoint.safetensors");
  EXPECT_EQ(ck.at("model.1.num_batches_tracked").item(), golden.at("num_batches_tracked_after").get<double>());
  EXPECT_EQ(ck.at("model.1.num_batches_tracked").dtype(), kInt64);
  // A file with a key the model lacks is still refused (strict), naming it.
  nn::StateDict sd = load(kData + "/torch_cnn_bn.safetensors").tensors;
  sd.emplace_back("1.running_std", zeros({32}));
  save(sd, d / "extra.safetensors");
  const auto bad = axle::test::run_train("--model cnn-bn --data '" + kData + "/tiny_fmnist' --batch-size 64 "
                                         "--max-steps 1 --threads 1 --init '" + (d / "extra.safetensors") + "'");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE((bad.err + bad.out).find("unexpected key(s): \"1.running_std\""), std::string::npos) << bad.err;
}

// ---------------------------------------------------------------- U-Net-style model
namespace {

// gen_torch_compat.py's UNet, attribute for attribute.
ModulePtr conv_block(int64_t cin, int64_t cout, bool group_norm) {
  auto norm = [&]() -> ModulePtr {
    if (group_norm) return mk<nn::GroupNorm>(2, cout);
    return mk<nn::BatchNorm2d>(cout);
  };
  return mk<nn::Sequential>(std::vector<ModulePtr>{
      mk<nn::Conv2d>(cin, cout, 3, nn::Conv2dOptions{.padding = 1}), norm(), mk<nn::ReLU>(),
      mk<nn::Conv2d>(cout, cout, 3, nn::Conv2dOptions{.padding = 1}), norm(), mk<nn::ReLU>()});
}

struct UNet : nn::Module {
  ModulePtr enc1, enc2, bottom, dec2, dec1;
  std::shared_ptr<nn::ConvTranspose2d> up2;
  std::shared_ptr<nn::Conv2d> head;
  UNet() {
    enc1 = register_module("enc1", conv_block(2, 4, true));
    enc2 = register_module("enc2", conv_block(4, 8, false));
    bottom = register_module("bottom", conv_block(8, 8, true));
    up2 = register_module("up2", mk<nn::ConvTranspose2d>(8, 8, 2, nn::ConvTranspose2dOptions{.stride = 2}));
    dec2 = register_module("dec2", conv_block(16, 8, false));
    dec1 = register_module("dec1", conv_block(8 + 4, 4, true));
    head = register_module("head", mk<nn::Conv2d>(4, 1, 1));
  }
  std::string name() const override { return "UNet"; }
  /// x padded (zeros, split as evenly as PyTorch's U-Net does) to ref's spatial size.
  static Tensor pad_to(const Tensor& x, const Tensor& ref) {
    const int64_t dh = ref.size(2) - x.size(2), dw = ref.size(3) - x.size(3);
    return pad(x, {dw / 2, dw - dw / 2, dh / 2, dh - dh / 2});
  }
  Tensor forward(const Tensor& x) override {
    Pool2dOptions p2;  // kernel 2, stride 2
    Tensor e1 = (*enc1)(x);
    Tensor e2 = (*enc2)(max_pool2d(e1, p2));
    Tensor b = (*bottom)(max_pool2d(e2, p2));
    Tensor u2 = pad_to((*up2)(b), e2);
    Tensor d2 = (*dec2)(cat({u2, e2}, 1));
    Tensor u1 = pad_to(interpolate(d2, {.scale_factor = {2}, .mode = "bilinear"}), e1);
    Tensor d1 = (*dec1)(cat({u1, e1}, 1));
    return (*head)(d1);
  }
};

}  // namespace

// PyTorch's initial weights and batches, 4 steps of SGD (momentum) and of Adam in training
// mode (BatchNorm on batch statistics): the losses are PyTorch's within 1e-4 relative.
TEST(TorchCompatModels, UNetTrainsAsPyTorchOnCpuAndXla) {
  const SafeTensors f = load(kData + "/torch_compat_unet.safetensors");
  const auto keys = json::parse(f.metadata.at("keys")).get<std::vector<std::string>>();
  const json losses = json::parse(f.metadata.at("losses"));
  for (const char* dev : {"cpu", "xla:0"}) {
    for (const char* opt_name : {"sgd", "adam"}) {
      SCOPED_TRACE(std::string(dev) + " " + opt_name);
      const Device d = Device::parse(dev);
      auto m = nn::to(mk<UNet>(), d);
      std::vector<std::string> own;
      for (const auto& [k, t] : m->state_dict()) own.push_back(k);
      ASSERT_EQ(own, keys);
      m->load_state_dict(entries(f, "sd/", keys), /*strict=*/true);
      m->train();
      std::unique_ptr<optim::Optimizer> opt;
      if (std::string(opt_name) == "sgd") opt = std::make_unique<optim::SGD>(m->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      else opt = std::make_unique<optim::Adam>(m->parameters(), optim::AdamOptions{.lr = 0.01});
      const auto want = losses.at(opt_name).get<std::vector<double>>();
      for (size_t s = 0; s < want.size(); ++s) {
        auto st = axle::step();
        opt->zero_grad();
        Tensor loss = mse_loss((*m)(f.at("x/" + std::to_string(s)).to(d)), f.at("y/" + std::to_string(s)).to(d));
        loss.backward();
        opt->step();
        EXPECT_NEAR(loss.item(), want[s], 1e-4 * std::abs(want[s])) << "step " << s;
      }
    }
  }
}

// PyTorch's initialisation of ConvTranspose2d: its weight is [in, out/groups, kh, kw] and the
// fan-in PyTorch computes from it is dim 1 times the kernel (out/groups*kh*kw), not in/groups.
TEST(TorchCompatInit, ConvTranspose2dUsesPyTorchsFanIn) {
  manual_seed(0);
  nn::ConvTranspose2d ct(16, 64, 3, {.groups = 4});
  EXPECT_EQ(ct.weight.shape(), (Shape{16, 16, 3, 3}));
  EXPECT_EQ(ct.bias.shape(), (Shape{64}));
  const double bound = 1 / std::sqrt(16.0 * 9);  // out/groups = 16
  for (const Tensor& t : {ct.weight, ct.bias}) {
    double lo = 0, hi = 0;
    for (float v : t.to_vector<float>()) lo = std::min(lo, double(v)), hi = std::max(hi, double(v));
    EXPECT_LE(hi, bound);
    EXPECT_GE(lo, -bound);
  }
  double hi = 0;
  for (float v : ct.weight.to_vector<float>()) hi = std::max(hi, std::abs(double(v)));
  EXPECT_GT(hi, 0.95 * bound) << "2304 uniform draws reach the bound";
  EXPECT_NE(error_of([] { nn::ConvTranspose2d(4, 4, 3, {.stride = 2, .output_padding = 2}); })
                .find("output_padding smaller than stride or dilation"),
            std::string::npos);
  EXPECT_EQ(ct.str(), "ConvTranspose2d(16, 64, kernel_size=(3, 3), stride=(1, 1), groups=4)");
}
