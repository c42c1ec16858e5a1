// Graph compiler passes on small programs: node counts before and after, and the verifier.
#include <gtest/gtest.h>

#include "axle/axle.h"
#include "axle/runtime.h"
#include "compiler/executable.h"
#include "compiler/program.h"
#include "lazy/graph.h"

using namespace axle;
using namespace axle::compiler;

namespace {
// Traces `roots` (xla tensors with pending IR) into a Program.
Program trace(const std::vector<Tensor>& roots) {
  std::vector<lazy::Value> vals;
  for (const Tensor& t : roots) vals.push_back(t.impl()->lazy->ir);
  return Program::from_graph(lazy::build_graph(vals));
}
int count_op(const Program& p, ops::OpKind k) {
  int c = 0;
  for (const PNode& n : p.nodes) c += !n.dead && n.kind == lazy::NodeKind::Op && n.op == k;
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
  auto ex = lower(p);
  Tensor xin = x.cpu();
  auto out = ex->run({xin});
  EXPECT_EQ(out[0].to_vector<float>(), xin.reshape({24}).to_vector<float>());
  axle::sync();
}

TEST(Passes, ConstantFoldingAndDce) {
  Program p;
  p.num_inputs = 1;
  PNode in;
  in.kind = lazy::NodeKind::Data;
  in.input = 0;
  in.outs = {{{3}, kFloat32}};
  PNode c1;
  c1.kind = lazy::NodeKind::Constant;
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
  PassPipeline::standard().run(p);
  // Folding makes the constant 0, simplification removes x + 0, DCE drops exp and the constants.
  EXPECT_EQ(p.op_count(), 0) << p.text();
  auto out = lower(p)->run({from_vector(std::vector<float>{1, 2, 3}, {3})});
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

TEST(Passes, TextFormIsStable) {
  Tensor a = ones({2}).to(device());
  Tensor y = exp(a * 2.0);
  Program p = trace({y});
  EXPECT_EQ(p.text(), "%0 = input 0 : float32[2]\n%1 = input 1 : float32[]\n%2 = mul(%0, %1) : float32[2]\n"
                      "%3 = exp(%2) : float32[2]\nreturn %3\n");
  axle::sync();
}

TEST(Passes, ElementwiseFusionMakesOnePassAndKeepsValues) {
  manual_seed(5);
  Tensor p0 = randn({300, 70}), g0 = randn({300, 70}), b0 = randn({300, 70});
  Tensor p = p0.to(device()), g = g0.to(device()), buf = b0.to(device());
  // An SGD-momentum update plus a relu-backward style mask: mixed dtypes, scalars, two outputs.
  Tensor nb = add(mul(buf, 0.9), g);
  Tensor np = sub(p, mul(nb, 0.01));
  Tensor masked = mul(np, gt(np, 0.0));
  Program prog = trace({nb, masked});
  PassPipeline::standard().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedElementwise), 1) << prog.text();
  EXPECT_EQ(prog.op_count(), 1) << prog.text();
  // Same values as eager cpu.
  Tensor enb = add(mul(b0, 0.9), g0);
  Tensor enp = sub(p0, mul(enb, 0.01));
  Tensor emasked = mul(enp, gt(enp, 0.0));
  EXPECT_EQ(nb.cpu().to_vector<float>(), enb.to_vector<float>());
  EXPECT_EQ(masked.cpu().to_vector<float>(), emasked.to_vector<float>());
}

TEST(Passes, FusionRespectsBroadcastAndOrder) {
  // A bias-shaped operand is not fused (it broadcasts), and a value that leaves the group
  // through a matmul and comes back does not create a cycle.
  Tensor x = randn({8, 8}).to(device()), bias = randn({8}).to(device());
  Tensor a = exp(x);
  Tensor b = matmul(a, x);
  Tensor c = add(mul(a, 2.0), b);
  Tensor d = add(c, bias);
  Program prog = trace({d});
  PassPipeline::standard().run(prog);
  prog.verify();
  Tensor xe = x.cpu(), be = bias.cpu();
  Tensor ae = exp(xe);
  Tensor de = add(add(mul(ae, 2.0), matmul(ae, xe)), be);
  auto got = d.cpu().to_vector<float>(), want = de.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])));
}

TEST(Passes, ConvReluEpilogueIsFused) {
  manual_seed(2);
  Tensor x = randn({2, 3, 8, 8}).to(device()), w = randn({4, 3, 3, 3}).to(device()), b = randn({4}).to(device());
  Tensor y = relu(conv2d(x, w, b, {.padding = {1, 1}}));
  Program prog = trace({y});
  PassPipeline::standard().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::Relu), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::Conv2d), 1) << prog.text();
  Tensor want = relu(conv2d(x.cpu(), w.cpu(), b.cpu(), {.padding = {1, 1}}));
  EXPECT_EQ(y.cpu().to_vector<float>(), want.to_vector<float>());
}
