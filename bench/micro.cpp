// Micro-benchmarks of axle's cpu kernels (oneDNN matmul/conv/pooling, elementwise loops).
// Each reports a rate against this machine's peaks (DESIGN.md: fp32 FMA ~150-170 GFLOP/s
// per core, triad ~12-15 GB/s per thread).
//
//   OMP_NUM_THREADS=1 build/bin/axle-micro --benchmark_min_time=0.2
//   build/bin/axle-micro --benchmark_filter=Cnn     # conv layouts end to end
//
// Conv benchmarks take the layout as an argument: 0 = NCHW, 1 = channels-last (NHWC), 2 = blocked.
#include <benchmark/benchmark.h>

#include "axle/axle.h"
#include "backend/cpu/dnnl.h"
#include "ops/op.h"

using namespace axle;
namespace dg = axle::cpu::dnnl_glue;

namespace {

void set_rate(benchmark::State& st, const char* name, double per_iter) {
  st.counters[name] = benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate,
                                         benchmark::Counter::kIs1000);
}
constexpr double kG = 1e-9;

const char* mode_name(int64_t m) { return m == 0 ? "nchw" : m == 1 ? "nhwc" : "blocked"; }

// A tensor in the layout the given conv mode produces (what the next op really receives).
Tensor in_mode_layout(const Tensor& t, dg::ConvMode m) {
  if (m != dg::ConvMode::ChannelsLast || t.shape()[1] == 1) return t;
  return permute(permute(t, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
}

// ---- matmul: the mlp's 128x784x256 layer and its two backward products
void BM_LinearForward(benchmark::State& st) {
  NoGradGuard ng;
  Tensor x = randn({128, 784}), w = randn({256, 784}), b = randn({256});
  for (auto _ : st) benchmark::DoNotOptimize(linear(x, w, b));
  set_rate(st, "GFLOP/s", 2.0 * 128 * 784 * 256 * kG);
}
BENCHMARK(BM_LinearForward)->Name("matmul_fwd/128x784x256")->Unit(benchmark::kMicrosecond);

void BM_LinearGradInput(benchmark::State& st) {  // g [128,256] @ w [256,784]: w used in place
  NoGradGuard ng;
  Tensor g = randn({128, 256}), w = randn({256, 784});
  for (auto _ : st) benchmark::DoNotOptimize(linear(g, w.t()));
  set_rate(st, "GFLOP/s", 2.0 * 128 * 256 * 784 * kG);
}
BENCHMARK(BM_LinearGradInput)->Name("matmul_bwd_input/128x256x784")->Unit(benchmark::kMicrosecond);

void BM_LinearGradWeight(benchmark::State& st) {  // g^T [256,128] @ x [128,784]: a transposed view
  NoGradGuard ng;
  Tensor g = randn({128, 256}), x = randn({128, 784});
  for (auto _ : st) benchmark::DoNotOptimize(matmul(g.t(), x));
  set_rate(st, "GFLOP/s", 2.0 * 256 * 128 * 784 * kG);
}
BENCHMARK(BM_LinearGradWeight)->Name("matmul_bwd_weight/256x128x784")->Unit(benchmark::kMicrosecond);

void BM_MatmulBig(benchmark::State& st) {
  NoGradGuard ng;
  const int64_t n = st.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : st) benchmark::DoNotOptimize(matmul(a, b));
  set_rate(st, "GFLOP/s", 2.0 * double(n) * double(n) * double(n) * kG);
}
BENCHMARK(BM_MatmulBig)->Name("matmul_square")->Arg(1024)->Unit(benchmark::kMillisecond);

// ---- conv: the cnn's two layers (N=128): 1->32 at 28x28 and 32->64 at 14x14, 3x3 pad 1
struct ConvLayer {
  int64_t C, O, H;
};
constexpr ConvLayer kLayers[] = {{1, 32, 28}, {32, 64, 14}};
double conv_flops(const ConvLayer& l) { return 2.0 * 128 * l.O * l.H * l.H * l.C * 9; }
const ops::Attrs kConvAttrs{.ints = {1, 1, 1, 1, 1, 1, 1}, .floats = {}};

class ModeScope {
 public:
  explicit ModeScope(int64_t m) : prev_(dg::conv_mode()) { dg::set_conv_mode(dg::ConvMode(m)); }
  ~ModeScope() { dg::set_conv_mode(prev_); }

 private:
  dg::ConvMode prev_;
};

void BM_ConvForward(benchmark::State& st) {
  NoGradGuard ng;
  const ConvLayer& l = kLayers[st.range(0)];
  ModeScope ms(st.range(1));
  Tensor x = in_mode_layout(randn({128, l.C, l.H, l.H}), dg::conv_mode());
  Tensor w = randn({l.O, l.C, 3, 3}), b = randn({l.O});
  for (auto _ : st) benchmark::DoNotOptimize(conv2d(x, w, b, {.padding = {1, 1}}));
  set_rate(st, "GFLOP/s", conv_flops(l) * kG);
  st.SetLabel(mode_name(st.range(1)));
}
void BM_ConvBackwardInput(benchmark::State& st) {
  NoGradGuard ng;
  const ConvLayer& l = kLayers[st.range(0)];
  ModeScope ms(st.range(1));
  Tensor g = in_mode_layout(randn({128, l.O, l.H, l.H}), dg::conv_mode());
  Tensor w = randn({l.O, l.C, 3, 3});
  ops::Attrs a = kConvAttrs;
  a.ints.insert(a.ints.end(), {128, l.C, l.H, l.H});
  for (auto _ : st) benchmark::DoNotOptimize(ops::call1(ops::OpKind::Conv2dBackwardInput, {g, w}, a));
  set_rate(st, "GFLOP/s", conv_flops(l) * kG);
  st.SetLabel(mode_name(st.range(1)));
}
void BM_ConvBackwardWeight(benchmark::State& st) {
  NoGradGuard ng;
  const ConvLayer& l = kLayers[st.range(0)];
  ModeScope ms(st.range(1));
  Tensor g = in_mode_layout(randn({128, l.O, l.H, l.H}), dg::conv_mode());
  Tensor x = in_mode_layout(randn({128, l.C, l.H, l.H}), dg::conv_mode());
  ops::Attrs a = kConvAttrs;
  a.ints.insert(a.ints.end(), {l.O, l.C, 3, 3, 1});
  for (auto _ : st) benchmark::DoNotOptimize(ops::call(ops::OpKind::Conv2dBackwardWeight, {g, x}, a));
  set_rate(st, "GFLOP/s", conv_flops(l) * kG);
  st.SetLabel(mode_name(st.range(1)));
}
void conv_args(benchmark::internal::Benchmark* b) {
  for (int64_t layer : {0, 1})
    for (int64_t mode : {0, 1, 2}) b->Args({layer, mode});
  b->ArgNames({"layer", "layout"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ConvForward)->Name("conv_fwd")->Apply(conv_args);
BENCHMARK(BM_ConvBackwardInput)->Name("conv_bwd_input")->Apply(conv_args);
BENCHMARK(BM_ConvBackwardWeight)->Name("conv_bwd_weight")->Apply(conv_args);

// The cnn's conv/pool trunk end to end, forward and backward, with autograd and the real
// elementwise ops in between: conv1-relu-pool-conv2-relu-pool. This decides the layout.
void BM_CnnTrunkStep(benchmark::State& st) {
  ModeScope ms(st.range(0));
  Tensor x = randn({128, 1, 28, 28});
  Tensor w1 = (randn({32, 1, 3, 3}) * 0.3).set_requires_grad(true), b1 = zeros({32}).set_requires_grad(true);
  Tensor w2 = (randn({64, 32, 3, 3}) * 0.06).set_requires_grad(true), b2 = zeros({64}).set_requires_grad(true);
  Tensor r = randn({128, 64, 7, 7});
  for (auto _ : st) {
    Tensor h = max_pool2d(relu(conv2d(x, w1, b1, {.padding = {1, 1}})), {.kernel = {2, 2}});
    Tensor y = max_pool2d(relu(conv2d(h, w2, b2, {.padding = {1, 1}})), {.kernel = {2, 2}});
    (y.flatten(1) * r.flatten(1)).sum().backward();
    benchmark::DoNotOptimize(w2.grad());
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
  }
  st.SetLabel(mode_name(st.range(0)));
}
BENCHMARK(BM_CnnTrunkStep)->Name("cnn_trunk_step")->ArgName("layout")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// ---- max pooling at the cnn's two pool shapes (2x2, stride 2), forward and backward
void BM_MaxPool(benchmark::State& st) {
  NoGradGuard ng;
  const int64_t C = st.range(0) == 0 ? 32 : 64, H = st.range(0) == 0 ? 28 : 14;
  Tensor x = randn({128, C, H, H});
  if (st.range(1)) x = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
  for (auto _ : st) benchmark::DoNotOptimize(max_pool2d(x, {.kernel = {2, 2}}));
  // reads x, writes y and a one-byte workspace per output
  set_rate(st, "GB/s", double(x.numel()) * 4 * kG + double(x.numel() / 4) * 5 * kG);
  st.SetLabel(st.range(1) ? "nhwc" : "nchw");
}
BENCHMARK(BM_MaxPool)->Name("max_pool2d_fwd")->ArgNames({"layer", "nhwc"})->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_MaxPoolBackward(benchmark::State& st) {
  NoGradGuard ng;
  const int64_t C = st.range(0) == 0 ? 32 : 64, H = st.range(0) == 0 ? 28 : 14;
  Tensor x = randn({128, C, H, H});
  if (st.range(1)) x = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
  ops::Attrs a{.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0}, .floats = {}};
  ops::Tensors yw = ops::call(ops::OpKind::MaxPool2d, {x}, a);
  Tensor g = yw[0] * 1.0;  // same layout as y where the elementwise op keeps it
  for (auto _ : st) benchmark::DoNotOptimize(ops::call1(ops::OpKind::MaxPool2dBackward, {g, x, yw[1]}, a));
  set_rate(st, "GB/s", double(x.numel()) * 4 * kG + double(x.numel() / 4) * 5 * kG);
  st.SetLabel(st.range(1) ? "nhwc" : "nchw");
}
BENCHMARK(BM_MaxPoolBackward)->Name("max_pool2d_bwd")->ArgNames({"layer", "nhwc"})->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// ---- the cnn's first layer backward behind its pooling (1->32 at 28x28, channels-last, 2x2 pool):
// 0 = max_pool2d_backward, relu_backward, conv2d_backward_weight (eager); 1 = max_pool2d_backward
// with the relu backward fused by the compiler (the relu flag after the 9 window ints), then conv2d_backward_weight.
void BM_Layer1WeightGrad(benchmark::State& st) {
  NoGradGuard ng;
  Tensor x = randn({128, 1, 28, 28});
  Tensor c = relu(permute(randn({128, 28, 28, 32}), {0, 3, 1, 2}));  // the relu'd conv output, channels-last
  const ops::Attrs a6{.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0}, .floats = {}}, a7{.ints = {2, 2, 2, 2, 0, 0, 1, 1, 0, 1}, .floats = {}};
  const ops::Attrs cw{.ints = {1, 1, 1, 1, 1, 1, 1, 32, 1, 3, 3, 1}, .floats = {}};
  ops::Tensors yw = ops::call(ops::OpKind::MaxPool2d, {c}, a6);
  Tensor g = yw[0] * 1.0;
  for (auto _ : st) {
    if (st.range(0) == 0) {
      Tensor pooled = ops::call1(ops::OpKind::MaxPool2dBackward, {g, c, yw[1]}, a6);
      Tensor gx = ops::call1(ops::OpKind::ReluBackward, {pooled, c});
      benchmark::DoNotOptimize(ops::call(ops::OpKind::Conv2dBackwardWeight, {gx, x}, cw));
    } else {
      Tensor gx = ops::call1(ops::OpKind::MaxPool2dBackward, {g, c, yw[1], yw[0]}, a7);
      benchmark::DoNotOptimize(ops::call(ops::OpKind::Conv2dBackwardWeight, {gx, x}, cw));
    }
  }
  st.SetLabel(st.range(0) == 0 ? "unfused" : "relu mask in pooling");
}
BENCHMARK(BM_Layer1WeightGrad)->Name("cnn_layer1_weight_grad")->ArgName("fusion")->DenseRange(0, 1)
    ->Unit(benchmark::kMillisecond);

// ---- elementwise: relu(a * b + c) on 1M floats (three ops today; one loop once fused)
void BM_ElementwiseChain(benchmark::State& st) {
  NoGradGuard ng;
  const int64_t n = 1 << 20;
  Tensor a = randn({n}), b = randn({n}), c = randn({n});
  for (auto _ : st) benchmark::DoNotOptimize(relu(a * b + c));
  set_rate(st, "GB/s", double(n) * 4 * 4 * kG);  // logical traffic: 3 reads + 1 write
}
BENCHMARK(BM_ElementwiseChain)->Name("relu(a*b+c)/1M")->Unit(benchmark::kMicrosecond);

void BM_Triad(benchmark::State& st) {  // a + b * 2 : memory-bound reference
  NoGradGuard ng;
  const int64_t n = 1 << 22;
  Tensor a = randn({n}), b = randn({n});
  for (auto _ : st) benchmark::DoNotOptimize(a + b * 2.0);
  set_rate(st, "GB/s", double(n) * 4 * 3 * kG);
}
BENCHMARK(BM_Triad)->Name("add_mul/4M")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
