// Graph compiler passes on small programs: node counts before and after, and the verifier.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "backend/backend.h"
#include "backend/cpu/backend.h"
#include "backend/cpu/executable.h"
#include "compiler/program.h"
#include "lazy/graph.h"
#include "lazy/ir.h"
#include "ops/fused.h"
#include "ops/op.h"
#include "test_util.h"

using namespace axle;
using namespace axle::compiler;

namespace {
// Traces `roots` (xla tensors with pending IR) into a Program.
Program trace(const std::vector<Tensor>& roots) {
  std::vector<lazy::Value> vals;
  for (const Tensor& t : roots) vals.push_back(lazy::lazy_of(t)->ir);
  return lazy::to_program(lazy::build_graph(vals));
}
// The pipeline the lazy device runs: the generic passes, then the cpu backend's fusions.
PassPipeline cpu_pipeline() { return backend::backend_for(kCPU).pipeline(); }
int count_op(const Program& p, ops::OpKind k) {
  int c = 0;
  for (const PNode& n : p.nodes) c += !n.dead && n.kind == compiler::NodeKind::Op && n.op == k;
  return c;
}
}  // namespace

TEST(Passes, CseMergesRepeatedWork) {
  Tensor a = randn({4, 4}).to(device()), b = randn({4, 4}).to(device());
  Tensor y = add(mul(a, b), mul(a, b));
  Program p = trace({y});
  EXPECT_EQ(count_op(p, ops::OpKind::Mul), 2);
  PassPipeline pp;
  pp.add(make_cse_pass()).add(make_dce_pass());
  pp.run(p);
  EXPECT_EQ(count_op(p, ops::OpKind::Mul), 1);
  EXPECT_EQ(p.op_count(), 2);
  axle::sync();
}

TEST(Passes, AlgebraicSimplification) {
  Tensor x = randn({2, 3, 4}).to(device());
  Tensor y = permute(permute(x, {2, 0, 1}), {1, 2, 0});   // identity overall
  Tensor z = reshape(reshape(y, {6, 4}), {24});            // reshape chain
  Tensor w = add(mul(z, 1.0), 0.0);                         // x * 1 + 0
  Program p = trace({w});
  int before = p.op_count();
  EXPECT_EQ(before, 6);
  PassPipeline pp;
  pp.add(make_algebraic_simplification_pass()).add(make_dce_pass());
  pp.run(p);
  EXPECT_EQ(count_op(p, ops::OpKind::Permute), 0);
  EXPECT_EQ(count_op(p, ops::OpKind::Mul), 0);
  EXPECT_EQ(count_op(p, ops::OpKind::Add), 0);
  EXPECT_EQ(count_op(p, ops::OpKind::Reshape), 1);
  // The simplified program computes the same values.
  auto ex = cpu::lower(p, kCPU);
  Tensor xin = x.cpu();
  auto out = ex->run({xin});
  EXPECT_EQ(out[0].to_vector<float>(), xin.reshape({24}).to_vector<float>());
  axle::sync();
}

// The gradient of slicing one tensor into pieces that tile it (GPT's packed qkv split into q, k,
// v) is a sum of slice_backward values; algebraic simplification makes it one cat, with the
// same values. Pieces that leave a gap stay a sum.
TEST(Passes, TiledSliceGradientsBecomeOneCat) {
  manual_seed(5);
  for (bool tiled : {true, false}) {
    Tensor x = randn({2, 3, 9}).to(device()).set_requires_grad(true);
    Tensor a = randn({2, 3, 3}).to(device()), b = randn({2, 3, 3}).to(device()), c = randn({2, 3, 3}).to(device());
    // in another order than the ranges: the cat puts the pieces in range order
    Tensor loss = sum(mul(slice(x, 2, 6, 9), c));
    loss = add(loss, sum(mul(slice(x, 2, 0, 3), a)));
    if (tiled) loss = add(loss, sum(mul(slice(x, 2, 3, 6), b)));
    loss.backward();
    Tensor g = x.grad();
    Program p = trace({g});
    ASSERT_EQ(count_op(p, ops::OpKind::SliceBackward), tiled ? 3 : 2) << p.text();
    PassPipeline pp;
    pp.add(make_algebraic_simplification_pass()).add(make_dce_pass());
    pp.run(p);
    EXPECT_EQ(count_op(p, ops::OpKind::Cat), tiled ? 1 : 0) << p.text();
    EXPECT_EQ(count_op(p, ops::OpKind::SliceBackward), tiled ? 0 : 2) << p.text();
    EXPECT_EQ(count_op(p, ops::OpKind::Add), tiled ? 0 : 1) << p.text();
    // The values: against the gradient by hand (each piece's multiplier in its range, 0 in a gap).
    std::vector<float> want(2 * 3 * 9, 0.0f);
    const std::vector<float> av = a.cpu().to_vector<float>(), bv = b.cpu().to_vector<float>(),
                             cv = c.cpu().to_vector<float>();
    for (int r = 0; r < 6; ++r)
      for (int j = 0; j < 3; ++j) {
        want[size_t(r * 9 + j)] = av[size_t(r * 3 + j)];
        if (tiled) want[size_t(r * 9 + 3 + j)] = bv[size_t(r * 3 + j)];
        want[size_t(r * 9 + 6 + j)] = cv[size_t(r * 3 + j)];
      }
    EXPECT_EQ(g.cpu().to_vector<float>(), want);
    axle::sync();
  }
}

TEST(Passes, ConstantFoldingAndDce) {
  Program p;
  p.num_inputs = 1;
  PNode in;
  in.kind = compiler::NodeKind::Data;
  in.input = 0;
  in.outs = {{{3}, kFloat32}};
  PNode c1;
  c1.kind = compiler::NodeKind::Constant;
  c1.constant = scalar_tensor(1.0);
  c1.outs = {{{}, kFloat32}};
  PNode c2 = c1;
  c2.constant = scalar_tensor(-1.0);
  PNode sum_c;  // 1 + -1 folds to constant 0
  sum_c.op = ops::OpKind::Add;
  sum_c.operands = {{1, 0}, {2, 0}};
  sum_c.outs = {{{}, kFloat32}};
  PNode unused;  // dead
  unused.op = ops::OpKind::Exp;
  unused.operands = {{0, 0}};
  unused.outs = {{{3}, kFloat32}};
  PNode res;  // x + (1 + -1)
  res.op = ops::OpKind::Add;
  res.operands = {{0, 0}, {3, 0}};
  res.outs = {{{3}, kFloat32}};
  p.nodes = {in, c1, c2, sum_c, unused, res};
  p.outputs = {{5, 0}};
  p.verify();
  cpu_pipeline().run(p);
  // Folding makes the constant 0, simplification removes x + 0, DCE drops exp and the constants.
  EXPECT_EQ(p.op_count(), 0) << p.text();
  auto out = cpu::lower(p, kCPU)->run({from_vector(std::vector<float>{1, 2, 3}, {3})});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Passes, VerifierRejectsMalformed) {
  Program p;
  PNode a;
  a.op = ops::OpKind::Exp;
  a.operands = {{1, 0}};  // refers forward
  a.outs = {{{1}, kFloat32}};
  PNode b = a;
  b.operands = {};
  p.nodes = {a, b};
  p.outputs = {{0, 0}};
  EXPECT_THROW(p.verify(), Error);
}

namespace {
// Sets an environment variable for a scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A pass with a bug on purpose: it damages the first mul it finds, as a broken rewrite would.
class BreakingPass final : public Pass {
 public:
  enum How { kShape, kDtype, kDropOperand, kForwardRef };
  explicit BreakingPass(How how) : how_(how) {}
  const char* name() const override { return "breaking-pass"; }
  bool run(Program& p) override {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PNode& n = p.nodes[i];
      if (n.dead || n.kind != compiler::NodeKind::Op || n.op != ops::OpKind::Mul) continue;
      if (how_ == kShape) n.outs[0].shape.back() += 1;
      if (how_ == kDtype) n.outs[0].dtype = kInt64;
      if (how_ == kDropOperand) n.operands.pop_back();
      if (how_ == kForwardRef) n.operands[0] = {int(i) + 1, 0};
      return false;  // "unchanged": the pipeline does not compact, the verifier still looks
    }
    return false;
  }

 private:
  How how_;
};

// The error PassPipeline{cse, broken pass} raises on exp(a * 2) with a = float32[4].
std::string broken_pipeline_error(BreakingPass::How how) {
  ScopedEnv on("AXLE_VERIFY", "1");
  Tensor a = ones({4}).to(device());
  Program p = trace({exp(a * 2.0)});
  PassPipeline pp;
  pp.add(make_cse_pass()).add(std::make_unique<BreakingPass>(how));
  try {
    pp.run(p);
  } catch (const Error& e) {
    axle::sync();
    return e.what();
  }
  axle::sync();
  return "(no error)";
}
}  // namespace

TEST(Verifier, NamesThePassTheNodeAndExpectedVsFound) {
  // A pass that records a wrong output shape: shape inference, re-run on every node, catches it.
  std::string e = broken_pipeline_error(BreakingPass::kShape);
  EXPECT_NE(e.find("after pass 'breaking-pass'"), std::string::npos) << e;
  EXPECT_NE(e.find("node `%2 = mul(%0, %1) : float32[5]`"), std::string::npos) << e;
  EXPECT_NE(e.find("expected outputs float32[4] (shape inference), found float32[5]"), std::string::npos) << e;
  // A wrong recorded dtype.
  e = broken_pipeline_error(BreakingPass::kDtype);
  EXPECT_NE(e.find("after pass 'breaking-pass'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected outputs float32[4] (shape inference), found int64[4]"), std::string::npos) << e;
  // A dropped operand: arity.
  e = broken_pipeline_error(BreakingPass::kDropOperand);
  EXPECT_NE(e.find("after pass 'breaking-pass'"), std::string::npos) << e;
  EXPECT_NE(e.find("node `%2 = mul(%0) : float32[4]`: expected 2 operands, found 1"), std::string::npos) << e;
  // An operand that refers to a later node.
  e = broken_pipeline_error(BreakingPass::kForwardRef);
  EXPECT_NE(e.find("after pass 'breaking-pass'"), std::string::npos) << e;
  EXPECT_NE(e.find("operand 0 refers to %3, which does not come before it"), std::string::npos) << e;
}

TEST(Verifier, OnInTestsAndSwitchedByAxleVerify) {
  // tests/support/verify_on.cpp turns it on in every test program, whatever the build type.
  EXPECT_TRUE(verifying());
  ScopedEnv off("AXLE_VERIFY", "0");
  EXPECT_FALSE(verifying());
  Tensor a = ones({4}).to(device());
  Program p = trace({exp(a * 2.0)});
  PassPipeline pp;
  pp.add(std::make_unique<BreakingPass>(BreakingPass::kShape));
  EXPECT_NO_THROW(pp.run(p));  // off: nothing looks
  EXPECT_THROW(p.verify(), Error);
  axle::sync();
}

TEST(Verifier, ChecksLeavesAndOptionalOperands) {
  // Two nodes claiming input 0; a constant whose value does not match its recorded meta;
  // an absent operand where one is required; an absent optional one (linear's bias) is fine.
  auto input = [](int k, Shape s) {
    PNode n;
    n.kind = compiler::NodeKind::Data;
    n.input = k;
    n.outs = {{std::move(s), kFloat32}};
    return n;
  };
  Program p;
  p.num_inputs = 2;
  PNode lin;
  lin.op = ops::OpKind::Linear;
  lin.operands = {{0, 0}, {1, 0}, {}};
  lin.outs = {{{2, 3}, kFloat32}};
  p.nodes = {input(0, {2, 4}), input(1, {3, 4}), lin};
  p.outputs = {{2, 0}};
  EXPECT_NO_THROW(p.verify());
  auto error_of = [](const Program& q) {
    try {
      q.verify("in the test");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Program twice = p;
  twice.nodes[1].input = 0;
  EXPECT_NE(error_of(twice).find("node `%1 = input 0 : float32[3, 4]`: input position 0 is taken twice"),
            std::string::npos)
      << error_of(twice);
  Program absent = p;
  absent.nodes[2].operands[1] = {};
  EXPECT_NE(error_of(absent).find("operand 1 is absent, but only operands after the first 2 are optional"),
            std::string::npos)
      << error_of(absent);
  Program bad_const = p;
  bad_const.nodes[1].kind = compiler::NodeKind::Constant;
  bad_const.nodes[1].constant = zeros({4, 3});  // recorded: float32[3, 4]
  bad_const.num_inputs = 1;
  EXPECT_NE(error_of(bad_const).find("in the test: node `%1 = constant 0 : float32[3, 4]`: expected its value's "
                                     "float32[4, 3], found float32[3, 4]"),
            std::string::npos)
      << error_of(bad_const);
}

TEST(Passes, SaveGraphsWritesEachPassAndTheFinalProgram) {
  test::TempDir dir;
  ScopedEnv save("AXLE_SAVE_GRAPHS", dir.path.c_str());
  Tensor a = ones({4}).to(device()), b = ones({4}).to(device());
  Tensor y = exp(add(mul(a, b), mul(a, b)));
  Program p = trace({y});
  ASSERT_EQ(p.name.rfind("graph-", 0), 0u) << p.name;
  PassPipeline pp;
  pp.add(make_cse_pass()).add(make_dce_pass());
  pp.run(p);
  std::set<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir.path)) files.insert(f.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{p.name + ".00.input.txt", p.name + ".01.cse.txt", p.name + ".02.dce.txt",
                                          p.name + ".final.txt"}));
  EXPECT_EQ(test::slurp(dir / (p.name + ".final.txt")), p.text());
  // The two muls before cse, one after it (cse changed the program, so it was compacted).
  auto count = [](const std::string& text, const std::string& what) {
    size_t c = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++c;
    return c;
  };
  EXPECT_EQ(count(test::slurp(dir / (p.name + ".00.input.txt")), "= mul("), 2u);
  EXPECT_EQ(count(test::slurp(dir / (p.name + ".01.cse.txt")), "= mul("), 1u);
  axle::sync();

  // Through the lazy device: the graph's name and hash name its files, with the traced graph's dot.
  lazy::clear_graph_cache();
  std::filesystem::remove_all(dir.path);
  Tensor z = exp(ones({3}).to(device()) * 3.0);
  EXPECT_EQ(z.cpu().to_vector<float>(), exp(ones({3}) * 3.0).to_vector<float>());
  std::string stem;
  for (const auto& f : std::filesystem::directory_iterator(dir.path)) {
    const std::string n = f.path().filename().string();
    if (n.ends_with(".final.txt")) stem = n.substr(0, n.size() - std::string(".final.txt").size());
  }
  ASSERT_EQ(stem.rfind("step-", 0), 0u) << "no <graph>.final.txt for graph 'step'";
  EXPECT_TRUE(std::filesystem::exists(dir / (stem + ".00.input.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir / (stem + ".01.constant-folding.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir / (stem + ".dot")));
}

TEST(Passes, PassTimesGoToMetrics) {
  metrics::reset();
  Tensor a = ones({4}).to(device());
  Tensor y = exp(a * 2.0);
  Program p = trace({y});
  PassPipeline pp;
  pp.add(make_cse_pass()).add(make_dce_pass()).add(make_cse_pass());
  pp.run(p);
  EXPECT_EQ(metrics::timer_count("PassTime::cse"), 2);
  EXPECT_EQ(metrics::timer_count("PassTime::dce"), 1);
  EXPECT_EQ(metrics::timer_count("PassTime::elementwise-fusion"), 0);
  lazy::clear_graph_cache();
  axle::sync();  // a compile through the lazy device runs the standard pipeline
  EXPECT_GE(metrics::timer_count("PassTime::elementwise-fusion"), 1);
  EXPECT_NE(metrics::report().find("PassTime::cse"), std::string::npos) << metrics::report();
}

TEST(Passes, TextFormIsStable) {
  Tensor a = ones({2}).to(device());
  Tensor y = exp(a * 2.0);
  Program p = trace({y});
  EXPECT_EQ(p.text(), "%0 = input 0 : float32[2]\n%1 = input 1 : float32[]\n%2 = mul(%0, %1) : float32[2]\n"
                      "%3 = exp(%2) : float32[2]\nreturn %3\n");
  axle::sync();
}
