// The cpu backend's fusion passes (src/backend/cpu/fusion.cpp) and the fused kernels they
// lower to: which groups fuse, which must not, and that fused programs compute what eager
// cpu does (thread count and memory layout included).
#include <gtest/gtest.h>
#include <omp.h>

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

TEST(Passes, ElementwiseFusionMakesOnePassAndKeepsValues) {
  manual_seed(5);
  Tensor p0 = randn({300, 70}), g0 = randn({300, 70}), b0 = randn({300, 70});
  Tensor p = p0.to(device()), g = g0.to(device()), buf = b0.to(device());
  // An SGD-momentum update plus a relu-backward style mask: mixed dtypes, scalars, two outputs.
  Tensor nb = add(mul(buf, 0.9), g);
  Tensor np = sub(p, mul(nb, 0.01));
  Tensor masked = mul(np, gt(np, 0.0));
  Program prog = trace({nb, masked});
  cpu_pipeline().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedElementwise), 1) << prog.text();
  EXPECT_EQ(prog.op_count(), 1) << prog.text();
  // Same values as eager cpu.
  Tensor enb = add(mul(b0, 0.9), g0);
  Tensor enp = sub(p0, mul(enb, 0.01));
  Tensor emasked = mul(enp, gt(enp, 0.0));
  EXPECT_EQ(nb.cpu().to_vector<float>(), enb.to_vector<float>());
  EXPECT_EQ(masked.cpu().to_vector<float>(), emasked.to_vector<float>());
}

void expect_close(const Tensor& got, const Tensor& want, double rtol = 1e-5) {
  ASSERT_EQ(got.shape(), want.shape());
  auto g = got.cpu().to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], rtol * (1 + std::abs(w[i]))) << "element " << i;
}

TEST(Passes, SumFusesIntoTheChainThatFeedsIt) {
  manual_seed(6);
  Tensor a0 = randn({300, 70}), b0 = randn({300, 70});
  Tensor a = a0.to(device()), b = b0.to(device());
  // A squared-error loss: the difference is read again (as by its backward), the square only by the sum.
  Tensor d = sub(a, b);
  Tensor loss = mean(mul(d, d));
  Tensor keep = mul(d, 2.0);
  Program prog = trace({loss, keep});
  cpu_pipeline().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedSum), 1) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::Sum), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedElementwise), 0) << prog.text();
  const Tensor de = sub(a0, b0);
  expect_close(loss, mean(mul(de, de)));
  EXPECT_EQ(keep.cpu().to_vector<float>(), mul(de, 2.0).to_vector<float>());
}

TEST(Passes, FusedSumOverEveryDimSetMatchesEager) {
  manual_seed(7);
  // Large enough to run on several threads where the machine has them, with a ragged last tile.
  Tensor x0 = randn({6, 37, 29}), y0 = randn({6, 37, 29});
  const std::vector<Shape> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}, {-1}};
  for (const Shape& dims : dim_sets)
    for (bool keepdim : {false, true}) {
      Tensor x = x0.to(device()), y = y0.to(device());
      Tensor s = dims.empty() ? sum(mul(exp(x), y)) : sum(mul(exp(x), y), dims, keepdim);
      Program prog = trace({s});
      cpu_pipeline().run(prog);
      EXPECT_EQ(count_op(prog, ops::OpKind::FusedSum), 1) << prog.text();
      Tensor want = dims.empty() ? sum(mul(exp(x0), y0)) : sum(mul(exp(x0), y0), dims, keepdim);
      SCOPED_TRACE(shape_str(dims) + (keepdim ? " keepdim" : ""));
      expect_close(s, want);
    }
}

// A FusedSum adds into float64 partials, one per fixed group of tiles (never one per thread),
// so its bits do not depend on the thread count. The data make the order visible even in
// float64: +-1e17 at the two ends, whose ulp (16) swallows part of every addition in between.
TEST(Passes, FusedSumDoesNotDependOnTheThreadCount) {
  const int saved = omp_get_max_threads();
  manual_seed(9);
  const int64_t n = 1 << 18;  // 256 tiles
  std::vector<float> v = randn({n}).to_vector<float>(), w = randn({n}).to_vector<float>();
  v.front() = 1e17f;
  v.back() = -1e17f;
  w.front() = w.back() = 1.0f;  // the two cancel: the sum is that of the values in between
  const Tensor x0 = from_vector(v, {n}), y0 = from_vector(w, {n});
  std::vector<float> got;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor s = sum(mul(x0.to(device()), y0.to(device())));
    Program prog = trace({s});
    cpu_pipeline().run(prog);
    EXPECT_EQ(count_op(prog, ops::OpKind::FusedSum), 1) << prog.text();
    got.push_back(s.cpu().item<float>());
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(got[1], got[0]) << "2 threads vs 1";
  EXPECT_EQ(got[2], got[0]) << "3 threads vs 1";
}

TEST(Passes, FusedSumWalksChannelsLastActivations) {
  manual_seed(8);
  // A convolution's output is channels-last on cpu: the sum follows that memory order.
  Tensor x0 = randn({3, 4, 9, 9}), w0 = randn({8, 4, 3, 3});
  Tensor y = conv2d(x0.to(device()), w0.to(device()), {}, {.padding = {1, 1}});
  Tensor act = relu(y);  // read again below: stays a full output
  Tensor per_channel = sum(mul(act, act), {0, 2, 3});
  Tensor per_pixel = sum(mul(y, 3.0), {1}, true);
  Program prog = trace({per_channel, per_pixel, act});
  cpu_pipeline().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::Sum), 0) << prog.text();
  Tensor ye = conv2d(x0, w0, {}, {.padding = {1, 1}});
  Tensor ae = relu(ye);
  expect_close(per_channel, sum(mul(ae, ae), {0, 2, 3}));
  expect_close(per_pixel, sum(mul(ye, 3.0), {1}, true));
  expect_close(act, ae);
}

TEST(Passes, SumsThatSaveNoWriteAreNotFused) {
  manual_seed(9);
  Tensor x0 = randn({256, 300});
  Tensor x = x0.to(device());
  Tensor n = sum(gt(x, 0.0));  // bool -> int64: stays a plain sum
  // A bias gradient: the masked value is also read by a matmul, so it is written anyway and
  // the plain sum keeps eager's summation order (bit-identical to the cpu path).
  Tensor masked = mul(x, gt(x, 0.0));
  Tensor bias_grad = sum(masked, {0});
  Tensor weight_grad = matmul(transpose(masked, 0, 1), x);
  Program prog = trace({n, bias_grad, weight_grad});
  cpu_pipeline().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedSum), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::Sum), 2) << prog.text();
  axle::sync();  // one graph for all three, as in a training step (a value read would run only its own)
  EXPECT_EQ(n.item(), double(sum(gt(x0, 0.0)).item()));
  EXPECT_EQ(bias_grad.cpu().to_vector<float>(), sum(mul(x0, gt(x0, 0.0)), {0}).to_vector<float>());
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
  cpu_pipeline().run(prog);
  prog.verify();
  Tensor xe = x.cpu(), be = bias.cpu();
  Tensor ae = exp(xe);
  Tensor de = add(add(mul(ae, 2.0), matmul(ae, xe)), be);
  auto got = d.cpu().to_vector<float>(), want = de.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i])));
}

TEST(Passes, OpsOfInputsOnlyJoinTheGroupThatReadsThem) {
  // AdamW's update of one parameter: the state's ops read only graph inputs (m * beta1,
  // p * (1 - lr * wd)) and would each start a group of their own (here before the gradient's
  // matmul: moved later); they move into the group of the clipped gradient that reads them,
  // so the whole update is one pass: p, m and v written together, the same values as eager.
  manual_seed(12);
  Tensor pe = randn({64, 32}), me = randn({64, 32}), ve = abs(randn({64, 32})), ae = randn({64, 16}),
         be = randn({16, 32});
  auto update = [](const Tensor& p, const Tensor& m, const Tensor& v, const Tensor& a, const Tensor& b) {
    Tensor g = mul(matmul(a, b), 0.5);  // a computed gradient, clipped
    Tensor m2 = add(mul(m, 0.9), mul(g, 0.1));
    Tensor v2 = add(mul(v, 0.95), mul(mul(g, g), 0.05));
    Tensor p2 = sub(mul(p, 0.999), div(mul(m2, 0.01), add(sqrt(v2), 1e-8)));
    return std::vector<Tensor>{p2, m2, v2};
  };
  const std::vector<Tensor> got = update(pe.to(device()), me.to(device()), ve.to(device()), ae.to(device()), be.to(device()));
  Program prog = trace(got);
  cpu_pipeline().run(prog);
  prog.verify();
  EXPECT_EQ(count_op(prog, ops::OpKind::FusedElementwise), 1) << prog.text();
  for (ops::OpKind k : {ops::OpKind::Mul, ops::OpKind::Add, ops::OpKind::Sub, ops::OpKind::Div, ops::OpKind::Sqrt})
    EXPECT_EQ(count_op(prog, k), 0) << ops::op_name(k) << "\n" << prog.text();
  const std::vector<Tensor> want = update(pe, me, ve, ae, be);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(got[k].cpu().to_vector<float>(), want[k].to_vector<float>()) << "value " << k;
}

TEST(Passes, ConvReluEpilogueIsFused) {
  manual_seed(2);
  Tensor x = randn({2, 3, 8, 8}).to(device()), w = randn({4, 3, 3, 3}).to(device()), b = randn({4}).to(device());
  Tensor y = relu(conv2d(x, w, b, {.padding = {1, 1}}));
  Program prog = trace({y});
  cpu_pipeline().run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::Relu), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::Conv2d), 1) << prog.text();
  Tensor want = relu(conv2d(x.cpu(), w.cpu(), b.cpu(), {.padding = {1, 1}}));
  EXPECT_EQ(y.cpu().to_vector<float>(), want.to_vector<float>());
}

TEST(Passes, LinearReluEpilogueIsFused) {
  manual_seed(3);
  Tensor x = randn({5, 7}).to(device()), w = randn({6, 7}).to(device()), b = randn({6}).to(device());
  Tensor h = linear(x, w, b);
  Tensor y = relu(h);
  Tensor z = relu(linear(y, w.t(), {}));  // without a bias too
  Program prog = trace({y, z});
  const int before = prog.op_count();
  PassPipeline pp;
  pp.add(cpu::make_epilogue_fusion_pass());
  pp.run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::Relu), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::Linear), 2) << prog.text();
  EXPECT_EQ(prog.op_count(), before - 2);
  Tensor ye = relu(linear(x.cpu(), w.cpu(), b.cpu()));
  Tensor ze = relu(linear(ye, w.cpu().t(), {}));
  EXPECT_EQ(y.cpu().to_vector<float>(), ye.to_vector<float>());
  EXPECT_EQ(z.cpu().to_vector<float>(), ze.to_vector<float>());
}

TEST(Passes, LinearReluNotFusedWhenPreActivationIsUsed) {
  manual_seed(4);
  Tensor x = randn({3, 4}).to(device()), w = randn({2, 4}).to(device());
  Tensor h = linear(x, w, {});
  Tensor y = add(relu(h), h);  // h is needed as it is
  Program prog = trace({y});
  PassPipeline pp;
  pp.add(cpu::make_epilogue_fusion_pass());
  pp.run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::Relu), 1) << prog.text();
  Tensor he = linear(x.cpu(), w.cpu(), {});
  EXPECT_EQ(y.cpu().to_vector<float>(), add(relu(he), he).to_vector<float>());
}

namespace {
// relu -> max_pool2d, backward: the pooling gradient's relu backward is fused into
// max_pool2d_backward. `conv`: the relu input comes from a (channels-last) convolution.
struct PoolReluCase {
  bool conv;
  Pool2dOptions pool;
};
Tensor pool_relu_grad(const Tensor& x, const Tensor& w, const Tensor& gout, const PoolReluCase& c) {
  Tensor h = c.conv ? conv2d(x, w, {}, {.padding = {1, 1}}) : mul(x, 1.5);
  Tensor p = max_pool2d(relu(h), c.pool);
  sum(mul(p, gout)).backward();
  return c.conv ? w.grad() : x.grad();
}
void check_pool_relu_fusion(const PoolReluCase& c) {
  manual_seed(5);
  Tensor xe = randn({2, 4, 8, 8}), we = randn({4, 4, 3, 3});
  const Shape ps = max_pool2d(xe, c.pool).shape();
  Tensor ge = randn(ps);
  Tensor x = xe.to(device()), w = we.to(device()), g = ge.to(device());
  (c.conv ? w : x).set_requires_grad(true);
  (c.conv ? we : xe).set_requires_grad(true);
  Tensor got = pool_relu_grad(x, w, g, c);
  Program prog = trace({got});
  EXPECT_EQ(count_op(prog, ops::OpKind::ReluBackward), 1) << prog.text();
  cpu_pipeline().run(prog);
  prog.verify();
  EXPECT_EQ(count_op(prog, ops::OpKind::ReluBackward), 0) << prog.text();
  EXPECT_EQ(count_op(prog, ops::OpKind::MaxPool2dBackward), 1) << prog.text();
  Tensor want = pool_relu_grad(xe, we, ge, c);
  EXPECT_EQ(got.cpu().to_vector<float>(), want.to_vector<float>());  // the same values exactly
}
}  // namespace

TEST(Passes, PoolReluBackwardIsFused2x2Nchw) { check_pool_relu_fusion({false, {}}); }
TEST(Passes, PoolReluBackwardIsFused2x2ChannelsLast) { check_pool_relu_fusion({true, {}}); }
TEST(Passes, PoolReluBackwardIsFusedOverlappingNchw) {
  check_pool_relu_fusion({false, {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}});
}
TEST(Passes, PoolReluBackwardIsFusedOneDnnChannelsLast) {
  check_pool_relu_fusion({true, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}});
}
// ceil_mode and dilation: axle's own kernel (an overhanging or dilated window), NCHW and channels-last.
TEST(Passes, PoolReluBackwardIsFusedCeilModeDilation) {
  check_pool_relu_fusion({false, {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 1}, .ceil_mode = true}});
  check_pool_relu_fusion({true, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}});
  check_pool_relu_fusion({true, {.kernel = {3, 3}, .ceil_mode = true}});
}

TEST(Passes, PoolReluBackwardNotFusedWhenGradientIsUsedElsewhere) {
  // The pooling gradient itself is a graph output: it must stay unmasked.
  manual_seed(6);
  Tensor x = randn({2, 3, 6, 6}).to(device());
  Tensor h = relu(x);
  ops::Tensors pr = ops::call(ops::OpKind::MaxPool2d, {h}, {.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0}, .floats = {}});
  Tensor g = randn(pr[0].shape()).to(device());
  Tensor gp = ops::call1(ops::OpKind::MaxPool2dBackward, {g, h, pr[1]}, {.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0}, .floats = {}});
  Tensor gr = ops::call1(ops::OpKind::ReluBackward, {gp, h});
  Program prog = trace({gp, gr});
  PassPipeline pp;
  pp.add(cpu::make_epilogue_fusion_pass());
  pp.run(prog);
  EXPECT_EQ(count_op(prog, ops::OpKind::ReluBackward), 1) << prog.text();
  // Without the extra use it fuses, and keeps the node count down by one.
  Program prog2 = trace({gr});
  const int before = prog2.op_count();
  pp.run(prog2);
  EXPECT_EQ(count_op(prog2, ops::OpKind::ReluBackward), 0) << prog2.text();
  EXPECT_EQ(prog2.op_count(), before - 1);
  Tensor want = ops::call1(ops::OpKind::ReluBackward, {gp.cpu(), h.cpu()});
  EXPECT_EQ(gr.cpu().to_vector<float>(), want.to_vector<float>());
  axle::sync();
}

namespace {
// A residual stream through three layer norms (two pre-LN blocks and a final norm), forward
// and backward; returns (y, x.grad, M.grad, w2.grad, b2.grad).
// bf16_branch: each block's product in bf16 (as autocast runs it), added to the float32 stream.
std::vector<Tensor> residual_stream(const Tensor& x, const Tensor& m, const std::vector<Tensor>& w,
                                    const std::vector<Tensor>& b, const Tensor& r, bool bf16_branch = false) {
  Tensor s = x;
  for (int k = 0; k < 2; ++k) {
    const Tensor h = layer_norm(s, {40}, w[size_t(k)], b[size_t(k)]);
    s = add(s, bf16_branch ? matmul(cast(h, kBFloat16), cast(m, kBFloat16)) : matmul(h, m));
  }
  Tensor y = layer_norm(s, {40}, w[2], b[2]);
  sum(mul(y, r)).backward();
  return {y, x.grad(), m.grad(), w[1].grad(), b[1].grad()};
}
}  // namespace

class ResidualStream : public ::testing::TestWithParam<bool> {};
TEST_P(ResidualStream, AddsFuseIntoLayerNormForwardAndBackward) {
  // Each residual add that feeds a norm becomes the norm's 4th input (s = x + r its 4th
  // output), and each add of a norm's input gradient to the stream's gradient becomes the
  // backward's 6th input: no add of the stream's shape is left, and every value equals the
  // eager (unfused) one exactly. With a bf16 branch (autocast's products) the norm takes the
  // bf16 r and widens it, as the add did.
  const bool bf16 = GetParam();
  manual_seed(11);
  Tensor xe = randn({4, 6, 40}), me = mul(randn({40, 40}), 0.2), re = randn({4, 6, 40});
  std::vector<Tensor> we, be, wx, bx;
  for (int k = 0; k < 3; ++k) {
    we.push_back(add(mul(randn({40}), 0.1), 1.0));
    be.push_back(mul(randn({40}), 0.1));
  }
  Tensor x = xe.to(device()), m = me.to(device()), r = re.to(device());
  for (int k = 0; k < 3; ++k) {
    wx.push_back(we[size_t(k)].to(device()));
    bx.push_back(be[size_t(k)].to(device()));
  }
  for (Tensor* t : {&xe, &me, &x, &m, &we[1], &be[1], &wx[1], &bx[1]}) t->set_requires_grad(true);
  const std::vector<Tensor> got = residual_stream(x, m, wx, bx, r, bf16);
  Program prog = trace(got);
  cpu_pipeline().run(prog);
  prog.verify();
  int fwd = 0, bwd = 0, stream_adds = 0, bf16_y = 0, widening_casts = 0;
  for (const PNode& n : prog.nodes) {
    if (n.dead || n.kind != compiler::NodeKind::Op) continue;
    if (n.op == ops::OpKind::LayerNorm) fwd += ops::attr::LayerNorm::of(n.attrs).residual;
    if (n.op == ops::OpKind::LayerNorm) bf16_y += ops::attr::LayerNorm::of(n.attrs).bf16_y;
    if (n.op == ops::OpKind::LayerNormBackward) bwd += ops::attr::LayerNormBackward::of(n.attrs).residual;
    if (n.op == ops::OpKind::Add && n.outs[0].shape == Shape{4, 6, 40}) ++stream_adds;
    if (n.op == ops::OpKind::Cast && n.outs[0].dtype == kFloat32 && n.outs[0].shape == Shape{4, 6, 40}) ++widening_casts;
  }
  EXPECT_EQ(fwd, 2) << prog.text();
  EXPECT_EQ(bwd, 2) << prog.text();
  EXPECT_EQ(stream_adds, 0) << prog.text();
  // bf16: the two block norms write y in bf16 for their products, and their backwards read the
  // bf16 gradients (the casts around them folded in)
  EXPECT_EQ(bf16_y, bf16 ? 2 : 0) << prog.text();
  EXPECT_EQ(widening_casts, 0) << prog.text();
  const std::vector<Tensor> want = residual_stream(xe, me, we, be, re, bf16);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(got[k].cpu().to_vector<float>(), want[k].to_vector<float>()) << "value " << k;
}
INSTANTIATE_TEST_SUITE_P(Passes, ResidualStream, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Bf16Branch" : "Float32"; });

TEST(Passes, CnnStepFusesEveryPoolingReluBackward) {
  // conv -> relu -> pool -> conv -> relu -> pool -> flatten -> linear -> relu -> linear, forward
  // and backward: both pooling gradients take their relu backward, the linear its relu, and
  // every result equals the eager one exactly.
  manual_seed(7);
  Tensor xe = randn({2, 3, 8, 8}), w1e = randn({4, 3, 3, 3}), w2e = randn({6, 4, 3, 3}), fce = randn({5, 24}),
         fc2e = randn({3, 5});
  auto run = [](const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& fc, const Tensor& fc2) {
    Tensor h = max_pool2d(relu(conv2d(x, w1, {}, {.padding = {1, 1}})));
    h = max_pool2d(relu(conv2d(h, w2, {}, {.padding = {1, 1}})));
    Tensor out = linear(relu(linear(reshape(h, {2, 24}), fc)), fc2);
    sum(mul(out, out)).backward();
    return std::vector<Tensor>{out, w1.grad(), w2.grad(), fc.grad(), fc2.grad()};
  };
  for (Tensor* t : {&w1e, &w2e, &fce, &fc2e}) t->set_requires_grad(true);
  Tensor x = xe.to(device()), w1 = w1e.detach().to(device()), w2 = w2e.detach().to(device()),
         fc = fce.detach().to(device()), fc2 = fc2e.detach().to(device());
  for (Tensor* t : {&w1, &w2, &fc, &fc2}) t->set_requires_grad(true);
  std::vector<Tensor> got = run(x, w1, w2, fc, fc2);
  Program prog = trace(got);
  EXPECT_EQ(count_op(prog, ops::OpKind::ReluBackward), 3) << prog.text();
  cpu_pipeline().run(prog);
  prog.verify();
  EXPECT_EQ(count_op(prog, ops::OpKind::ReluBackward), 1) << prog.text();  // the linear's stays
  EXPECT_EQ(count_op(prog, ops::OpKind::Relu), 0) << prog.text();
  std::vector<Tensor> want = run(xe, w1e, w2e, fce, fc2e);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(got[k].cpu().to_vector<float>(), want[k].to_vector<float>()) << "result " << k;
}

TEST(Ops, MaxPoolBackwardReadsNchwGradAndOutput) {
  // The 2x2 backward on a channels-last input, plain and with the fused relu backward: an NCHW
  // grad (a flatten's gradient) or y gives the same values as channels-last ones.
  manual_seed(8);
  Tensor x = permute(randn({3, 5, 6, 4}), {0, 3, 1, 2});  // [3, 4, 5, 6], channels-last memory
  const ops::Attrs a6{.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0}, .floats = {}}, a7{.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0, 1}, .floats = {}};
  ops::Tensors fwd = ops::call(ops::OpKind::MaxPool2d, {x}, a6);
  Tensor y_nchw = fwd[0].contiguous();
  Tensor g = randn(fwd[0].shape());  // NCHW
  Tensor g_cl = permute(permute(g, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
  Tensor plain = ops::call1(ops::OpKind::MaxPool2dBackward, {g_cl, x, fwd[1]}, a6);
  EXPECT_EQ(ops::call1(ops::OpKind::MaxPool2dBackward, {g, x, fwd[1]}, a6).to_vector<float>(),
            plain.to_vector<float>());
  Tensor want = ops::call1(ops::OpKind::ReluBackward, {plain, x});
  for (const Tensor& gy : {g, g_cl})
    for (const Tensor& y : {fwd[0], y_nchw})
      EXPECT_EQ(ops::call1(ops::OpKind::MaxPool2dBackward, {gy, x, fwd[1], y}, a7).to_vector<float>(),
                want.to_vector<float>());
}


// Every UNARY and BINARY op of the op table, chained in one graph, fuses into one
// fused_elementwise node and computes what eager cpu computes, gradients included. Drawn
// from the table (operands in each op's declared domain, attributes at their declared
// defaults, unbounded ones at -/+0.8), so a new elementwise op is checked here unedited.
TEST(Fusion, EveryElementwiseOpOfTheTableFusesAndMatchesEager) {
  std::vector<ops::OpKind> kinds = ops::ops_with(ops::kUnary);
  for (ops::OpKind k : ops::ops_with(ops::kBinary)) kinds.push_back(k);
  auto domain = [](ops::OpKind k, const Tensor& v) {
    const ops::OpInfo& info = ops::op_info(k);
    if (info.has(ops::kPositive)) return abs(v) + 0.5;
    if (info.has(ops::kNonzero)) return where(ge(v, 0.0), v + 0.5, v - 0.5);
    return v;
  };
  // Every value derives from v (an operand made only from inputs would start a group of its own).
  auto chain = [&](const Tensor& x, const Tensor& w) {
    Tensor v = x + w;
    for (ops::OpKind k : kinds) {
      const ops::OpInfo& info = ops::op_info(k);
      ops::Attrs a;
      int unbounded = 0;
      for (size_t f = 0; f < info.num_attrs; ++f) {
        const double d = info.attrs[f].default_value;
        if (info.attrs[f].type != ops::AttrType::Float) {  // gelu's tanh (a bool): its default
          a.ints.push_back(int64_t(d));
          continue;
        }
        a.floats.push_back(std::isfinite(d) ? d : (unbounded++ == 0 ? -0.8 : 0.8));
      }
      std::vector<Tensor> in = {domain(k, v)};
      if (info.has(ops::kBinary)) in.push_back(domain(k, v * -0.75 + 0.25));
      Tensor y = ops::call1(k, in, a);
      v = tanh(y.dtype() == kFloat32 ? y : cast(y, kFloat32)) + v * 0.25;  // bounded, and never constant
    }
    return v;
  };
  manual_seed(11);
  const Tensor x0 = randn({3, 37}) * 1.5, w0 = randn({3, 37});
  auto run = [&](Device dev, std::vector<float>* gx) {
    Tensor x = x0.to(dev), w = w0.to(dev);
    x.set_requires_grad(true);
    Tensor y = chain(x, w);
    if (!dev.is_cpu()) {  // the graph the xla device compiles: one fused node holding every op
      Program p = lazy::to_program(lazy::build_graph({lazy::lazy_of(y)->ir}));
      backend::backend_for(kCPU).pipeline().run(p);  // the cpu backend's fusion
      int fused = 0, other = 0;
      std::set<ops::OpKind> in_program;
      for (const PNode& n : p.nodes) {
        if (n.dead || n.kind != compiler::NodeKind::Op) continue;
        if (n.op != ops::OpKind::FusedElementwise) {
          ++other;
          continue;
        }
        ++fused;
        for (const ops::FOp& op : ops::parse(n.attrs).ops) in_program.insert(op.kind);
      }
      EXPECT_EQ(fused, 1);
      EXPECT_EQ(other, 0);
      for (ops::OpKind k : kinds) EXPECT_TRUE(in_program.count(k)) << ops::op_name(k) << " is not in the fused program";
    }
    sum(y * y).backward();
    *gx = x.grad().cpu().to_vector<float>();
    return y.cpu().to_vector<float>();
  };
  std::vector<float> gcpu, gxla;
  const std::vector<float> ycpu = run(kCPU, &gcpu), yxla = run(axle::device(), &gxla);
  ASSERT_EQ(ycpu.size(), yxla.size());
  for (size_t i = 0; i < ycpu.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ycpu[i])) << i;
    EXPECT_NEAR(yxla[i], ycpu[i], 1e-5 * (1 + std::abs(ycpu[i]))) << i;
    EXPECT_NEAR(gxla[i], gcpu[i], 1e-4 * (1 + std::abs(gcpu[i]))) << i;
  }
}
