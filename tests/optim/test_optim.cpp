// Optimizers and LR schedulers against golden values from PyTorch 1.13
// (tests/golden/gen_nn_optim.py), plus state_dict, param groups and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "golden_nn_optim.h"
#include "axle/runtime.h"

using namespace axle;
using json = nlohmann::json;

using pytorch_golden::expect_close;
using pytorch_golden::from_json;
using pytorch_golden::seq;

namespace {

const json& golden() { return pytorch_golden::data(); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Linear(4, 5), Tanh, Linear(5, 3) with the golden initial weights.
std::shared_ptr<nn::Sequential> golden_model() {
  auto m = seq({
      std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(5, 3)});
  nn::StateDict sd;
  for (const auto& e : golden().at("optim").at("init_state"))
    sd.emplace_back(e.at("name").get<std::string>(), from_json(e));
  m->load_state_dict(sd);
  return m;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const json& c, std::vector<Tensor> params) {
  std::string kind = c.at("kind");
  if (kind == "sgd")
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = c.at("lr"), .momentum = c.at("momentum"), .dampening = c.at("dampening"),
                                  .weight_decay = c.at("weight_decay"), .nesterov = c.at("nesterov")});
  if (kind == "adam")
    return std::make_unique<optim::Adam>(
        params, optim::AdamOptions{.lr = c.at("lr"), .beta1 = c.at("beta1"), .beta2 = c.at("beta2"),
                                   .eps = c.at("eps"), .weight_decay = c.at("weight_decay")});
  if (kind == "adamw")
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions{.lr = c.at("lr"), .beta1 = c.at("beta1"), .beta2 = c.at("beta2"),
                                    .eps = c.at("eps"), .weight_decay = c.at("weight_decay")});
  throw std::runtime_error("unknown optimizer " + kind);
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const json& c, optim::Optimizer& opt) {
  if (!c.contains("scheduler")) return nullptr;
  if (c.at("scheduler") == "step")
    return std::make_unique<optim::StepLR>(opt, c.at("step_size").get<int64_t>(), c.at("gamma").get<double>());
  return std::make_unique<optim::CosineAnnealingLR>(opt, c.at("T_max").get<int64_t>(), c.at("eta_min").get<double>());
}

Tensor train_loss(nn::Module& m) {
  const json& o = golden().at("optim");
  static Tensor x = from_json(o.at("x")), t = from_json(o.at("target"));
  Tensor d = sub(m(x), t);
  return mean(mul(d, d));
}

// One training step as the golden script: zero_grad, loss, backward, step.
double train_step(nn::Module& m, optim::Optimizer& opt) {
  opt.zero_grad();
  Tensor loss = train_loss(m);
  loss.backward();
  opt.step();
  return loss.item();
}

const json& find_case(const std::string& name) {
  for (const auto& c : golden().at("optim").at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("no golden optimizer case " + name);
}

void run_golden(const std::string& name) {
  const json& c = find_case(name);
  auto model = golden_model();
  auto opt = make_optimizer(c, model->parameters());
  auto sched = make_scheduler(c, *opt);
  int steps = golden().at("optim").at("steps");
  for (int s = 0; s < steps; ++s) {
    double loss = train_step(*model, *opt);
    double want = c.at("losses")[s];
    EXPECT_NEAR(loss, want, 1e-5 * (1 + std::abs(want))) << name << " loss at step " << s;
    if (sched) sched->step();
    EXPECT_NEAR(opt->lr(), c.at("lrs")[s].get<double>(), 1e-12) << name << " lr after step " << s;
    auto params = model->parameters();
    const json& ref = c.at("params_per_step")[s];
    ASSERT_EQ(params.size(), ref.size());
    for (size_t i = 0; i < params.size(); ++i)
      expect_close(params[i], ref[i], name + " param " + std::to_string(i) + " after step " + std::to_string(s));
  }
}

}  // namespace

// ---------------------------------------------------------------- golden trajectories
TEST(OptimGolden, SGDPlain) { run_golden("sgd_plain"); }
TEST(OptimGolden, SGDMomentum) { run_golden("sgd_momentum"); }
TEST(OptimGolden, SGDNesterov) { run_golden("sgd_nesterov"); }
TEST(OptimGolden, SGDWeightDecay) { run_golden("sgd_weight_decay"); }
TEST(OptimGolden, SGDDampening) { run_golden("sgd_dampening"); }
TEST(OptimGolden, SGDPlainWeightDecay) { run_golden("sgd_plain_wd"); }
TEST(OptimGolden, Adam) { run_golden("adam"); }
TEST(OptimGolden, AdamWeightDecay) { run_golden("adam_wd"); }
TEST(OptimGolden, AdamW) { run_golden("adamw"); }
TEST(OptimGolden, AdamWWeightDecay) { run_golden("adamw_wd"); }
TEST(OptimGolden, SGDMomentumWithStepLR) { run_golden("sgd_momentum_steplr"); }
TEST(OptimGolden, AdamWithCosineAnnealing) { run_golden("adam_cosine"); }

TEST(SchedulerGolden, LrSequences) {
  for (const auto& c : golden().at("schedulers")) {
    std::string name = c.at("name");
    Tensor p = zeros({1}, {.requires_grad = true});
    optim::SGD opt({p}, {.lr = c.at("lr")});
    std::unique_ptr<optim::LRScheduler> s;
    if (c.at("kind") == "step")
      s = std::make_unique<optim::StepLR>(opt, c.at("step_size").get<int64_t>(), c.at("gamma").get<double>());
    else
      s = std::make_unique<optim::CosineAnnealingLR>(opt, c.at("T_max").get<int64_t>(),
                                                      c.at("eta_min").get<double>());
    const json& lrs = c.at("lrs");
    EXPECT_EQ(s->last_epoch(), 0) << name;
    for (size_t e = 0; e < lrs.size(); ++e) {
      if (e > 0) {
        opt.step();
        s->step();
      }
      double want = lrs[e];
      EXPECT_NEAR(s->get_last_lr(), want, 1e-12 + 1e-12 * std::abs(want)) << name << " epoch " << e;
      EXPECT_DOUBLE_EQ(opt.lr(), s->get_last_lr()) << name;
      EXPECT_EQ(s->last_epoch(), int64_t(e)) << name;
    }
  }
}

// ---------------------------------------------------------------- behaviour
TEST(Optim, SkipsParametersWithoutGradient) {
  auto model = golden_model();
  Tensor unused = ones({3}, {.requires_grad = true});
  auto params = model->parameters();
  params.push_back(unused);
  for (int kind = 0; kind < 3; ++kind) {
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9,
                                                                               .weight_decay = 0.1});
    if (kind == 1) opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.weight_decay = 0.1});
    if (kind == 2) opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.weight_decay = 0.5});
    auto w0 = params[0].to_vector<float>();
    train_step(*model, *opt);
    EXPECT_NE(params[0].to_vector<float>(), w0) << kind;
    EXPECT_EQ(unused.to_vector<float>(), std::vector<float>(3, 1.0f)) << kind;  // no grad: no weight decay either
    auto sd = opt->state_dict();
    ASSERT_EQ(sd.state.size(), params.size());
    EXPECT_TRUE(sd.state.back().empty()) << kind;
    EXPECT_FALSE(sd.state.front().empty()) << kind;
  }
}

TEST(Optim, StepUpdatesInPlaceAndZeroGradClears) {
  auto model = golden_model();
  auto params = model->parameters();
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  train_step(*model, opt);
  auto now = model->parameters();
  for (size_t i = 0; i < now.size(); ++i) {
    EXPECT_TRUE(now[i].is_same(params[i]));
    EXPECT_TRUE(now[i].grad().defined());
    EXPECT_TRUE(now[i].requires_grad());
    EXPECT_TRUE(now[i].is_leaf());
  }
  opt.zero_grad();
  for (const auto& p : now) EXPECT_FALSE(p.grad().defined());
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  opt.set_lr(0.05);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, 0.05);
  // step() records no autograd graph
  train_step(*model, opt);
  EXPECT_TRUE(params[0].is_leaf());
}

TEST(Optim, ParamGroupsUseTheirOwnOptions) {
  auto model = golden_model();
  auto ps = model->parameters();
  auto frozen = ps[2].to_vector<float>();
  auto w0 = ps[0].to_vector<float>();
  // group 0: default lr 0.1; group 1 (second Linear): lr 0 -> unchanged
  optim::SGD opt({optim::ParamGroup{{ps[0], ps[1]}}, optim::ParamGroup{{ps[2], ps[3]}, 0.0, {{"momentum", 0.5}}}},
                 {.lr = 0.1});
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].options.at("momentum"), 0.5);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].options.at("momentum"), 0.0);
  train_step(*model, opt);
  EXPECT_EQ(ps[2].to_vector<float>(), frozen);
  EXPECT_NE(ps[0].to_vector<float>(), w0);
  // plain SGD keeps no momentum buffer; the lr-0 group with momentum does
  auto sd = opt.state_dict();
  EXPECT_TRUE(sd.state[0].empty());
  EXPECT_EQ(sd.state[2].tensors.count("momentum_buffer"), 1u);
  EXPECT_EQ(sd.param_groups[1].params, (std::vector<int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(sd.param_groups[1].options.at("lr"), 0.0);
  EXPECT_NE(error_of([&] {
              optim::SGD bad({optim::ParamGroup{{ps[0]}, -1, {{"betas", 1}}}}, {});
            }).find("unknown option \"betas\""),
            std::string::npos);
}

namespace {
// Runs `first` steps, checkpoints model + optimizer, restores both into fresh copies and
// finishes the golden run: the result must equal the uninterrupted golden trajectory.
void resume_matches_golden(const std::string& name, int first) {
  const json& c = find_case(name);
  int steps = golden().at("optim").at("steps");
  auto a = golden_model();
  auto opt_a = make_optimizer(c, a->parameters());
  for (int s = 0; s < first; ++s) train_step(*a, *opt_a);
  nn::StateDict model_sd = a->state_dict();
  optim::OptimizerState opt_sd = opt_a->state_dict();

  auto b = golden_model();
  auto opt_b = make_optimizer(c, b->parameters());
  b->load_state_dict(model_sd);
  opt_b->load_state_dict(opt_sd);
  // keep running a too: the restored copy must not share state tensors with it
  for (int s = first; s < steps; ++s) {
    train_step(*a, *opt_a);
    train_step(*b, *opt_b);
  }
  const json& ref = c.at("params_per_step")[steps - 1];
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pb.size(); ++i) {
    expect_close(pb[i], ref[i], name + " resumed param " + std::to_string(i));
    expect_close(pa[i], ref[i], name + " original param " + std::to_string(i));
  }
}
}  // namespace

TEST(OptimStateDict, ResumeSGDMomentum) { resume_matches_golden("sgd_momentum", 2); }
TEST(OptimStateDict, ResumeAdam) { resume_matches_golden("adam_wd", 3); }
TEST(OptimStateDict, ResumeAdamW) { resume_matches_golden("adamw_wd", 1); }

TEST(OptimStateDict, ContentsAndErrors) {
  auto model = golden_model();
  optim::Adam opt(model->parameters(), {.lr = 0.02, .weight_decay = 0.1});
  train_step(*model, opt);
  train_step(*model, opt);
  optim::OptimizerState s = opt.state_dict();
  ASSERT_EQ(s.state.size(), 4u);
  EXPECT_DOUBLE_EQ(s.state[0].scalars.at("step"), 2);
  EXPECT_EQ(s.state[0].tensors.at("exp_avg").shape(), (Shape{5, 4}));
  EXPECT_EQ(s.state[3].tensors.at("exp_avg_sq").shape(), (Shape{3}));
  ASSERT_EQ(s.param_groups.size(), 1u);
  EXPECT_DOUBLE_EQ(s.param_groups[0].options.at("lr"), 0.02);
  EXPECT_DOUBLE_EQ(s.param_groups[0].options.at("weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(s.param_groups[0].options.at("beta2"), 0.999);

  // hyperparameters come back with the state
  optim::Adam other(model->parameters(), {.lr = 0.5});
  other.load_state_dict(s);
  EXPECT_DOUBLE_EQ(other.lr(), 0.02);
  EXPECT_DOUBLE_EQ(other.param_groups()[0].options.at("weight_decay"), 0.1);

  auto fewer = s;
  fewer.param_groups[0].params.pop_back();
  std::string e = error_of([&] { other.load_state_dict(fewer); });
  EXPECT_NE(e.find("has 4 parameter(s), the saved group has 3"), std::string::npos) << e;
  auto groups = s;
  groups.param_groups.push_back(groups.param_groups[0]);
  e = error_of([&] { other.load_state_dict(groups); });
  EXPECT_NE(e.find("expected 1 param group(s), got 2"), std::string::npos) << e;
  auto shape = s;
  shape.state[1].tensors["exp_avg"] = zeros({7});
  e = error_of([&] { other.load_state_dict(shape); });
  EXPECT_NE(e.find("\"exp_avg\" of parameter 1 has shape [7]"), std::string::npos) << e;
  EXPECT_DOUBLE_EQ(other.lr(), 0.02);  // failed loads change nothing
}

TEST(Optim, ConstructorErrors) {
  Tensor p = zeros({2}, {.requires_grad = true});
  EXPECT_NE(error_of([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }).find("Nesterov"), std::string::npos);
  EXPECT_NE(error_of([&] { optim::SGD(std::vector<Tensor>{}, {}); }).find("empty parameter list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { optim::SGD({p}, {.lr = -1.0}); }).find("lr >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { optim::Adam({p}, {.beta1 = 1.0}); }).find("beta1"), std::string::npos);
  EXPECT_NE(error_of([&] { optim::AdamW({p, p}); }).find("more than once"), std::string::npos);
  Tensor nonleaf = mul(p, 2.0);
  EXPECT_NE(error_of([&] { optim::SGD({nonleaf}); }).find("non-leaf"), std::string::npos);
  EXPECT_NE(error_of([&] { optim::SGD({zeros({2}, {.dtype = kInt64})}); }).find("floating-point"),
            std::string::npos);
  optim::SGD opt({p});
  EXPECT_NE(error_of([&] { optim::StepLR(opt, 0); }).find("step_size"), std::string::npos);
  EXPECT_NE(error_of([&] { optim::CosineAnnealingLR(opt, 0); }).find("T_max"), std::string::npos);
  EXPECT_DOUBLE_EQ(optim::AdamW({p}).param_groups()[0].options.at("weight_decay"), 1e-2);
}

// The same optimizer code traced on the lazy device gives the cpu trajectory.
TEST(Optim, LazyDeviceMatchesGolden) {
  for (const char* name : {"sgd_nesterov", "adamw_wd", "sgd_momentum_steplr"}) {
    const json& c = find_case(name);
    auto model = golden_model();
    Device xla = Device::parse("xla:0");
    // The lazy device is part of axle: an error moving to it fails the test, never skips it.
    ASSERT_NO_THROW(model->to(xla)) << name;
    auto opt = make_optimizer(c, model->parameters());
    auto sched = make_scheduler(c, *opt);
    const json& o = golden().at("optim");
    Tensor x = from_json(o.at("x")).to(xla), t = from_json(o.at("target")).to(xla);
    int steps = o.at("steps");
    for (int s = 0; s < steps; ++s) {
      auto guard = axle::step();
      opt->zero_grad();
      Tensor d = sub((*model)(x), t);
      mean(mul(d, d)).backward();
      opt->step();
      if (sched) sched->step();
    }
    auto params = model->parameters();
    const json& ref = c.at("params_per_step")[steps - 1];
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].device(), xla);
      expect_close(params[i].cpu(), ref[i], std::string(name) + " lazy param " + std::to_string(i));
    }
  }
}
