// bfloat16 against float32 on this processor, one thread by default: the 2048x768x768 GEMM
// (GPT's MLP/attention projection size) through linear, the elementwise GELU (tanh) and
// LayerNorm over a [2048, 768] activation, the gpt's causal attention (forward and backward),
// and the cnn's 2x2 max pooling (channels-last). Each bf16 row runs under both compute paths
// (native: oneDNN bf16 primitives, float32 accumulation; fp32: operands widened, float32
// primitive, result rounded). The variants run in alternation, ROUNDS rounds of REPS calls;
// per variant the median and range of the per-call time, and each one's ratio to float32.
// The processor and its AMX / AVX512_BF16 features are printed first.
//
//   OMP_NUM_THREADS=1 build/bin/axle-bench-bf16 [ROUNDS=7] [REPS=10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <omp.h>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "backend/cpu/bf16.h"

using namespace axle;
namespace {

struct Variant {
  std::string name;
  std::function<void()> run;
  std::function<void()> setup;  // before each round (the compute path)
  std::vector<double> ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const char* title, double flop, std::vector<Variant> vs, int rounds, int reps) {
  for (auto& v : vs) {  // warm-up: primitives built, caches filled
    v.setup();
    v.run();
  }
  for (int r = 0; r < rounds; ++r)
    for (auto& v : vs) {
      v.setup();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) v.run();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
      v.ms.push_back(ms);
    }
  std::printf("\n%s\n", title);
  const double base = median(vs[0].ms);
  for (const auto& v : vs) {
    const double m = median(v.ms);
    const auto [lo, hi] = std::minmax_element(v.ms.begin(), v.ms.end());
    std::printf("  %-22s %9.3f ms  [%8.3f, %8.3f]  ratio to float32 %5.2fx", v.name.c_str(), m, *lo, *hi, m / base);
    if (flop > 0) std::printf("  %7.1f GFLOP/s", flop / m * 1e-6);
    std::printf("\n");
  }
}

/// f's forward from a fresh leaf copy of t and its backward with the output gradient g (the
/// main loop runs without grad).
void grad_step(const Tensor& t, const Tensor& g, const std::function<Tensor(const Tensor&)>& f) {
  Tensor x = t.detach();
  x.set_requires_grad(true);
  const bool was = grad_enabled();
  set_grad_enabled(true);
  sum(mul(f(x), g)).backward();
  set_grad_enabled(was);
  if (!x.grad().defined()) std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7, reps = argc > 2 ? std::atoi(argv[2]) : 10;
  std::printf("processor: %s\n", cpu::bf16_cpu_summary().c_str());
  std::printf("process bf16 path: %s; OMP threads %d; %d rounds of %d calls, alternating\n",
              cpu::bf16_compute_name(cpu::bf16_compute()), omp_get_max_threads(), rounds, reps);
  NoGradGuard ng;
  const int64_t M = 2048, K = 768, N = 768;
  Tensor x = randn({M, K}), w = randn({N, K}), bias = randn({N});
  Tensor xb = x.to(kBFloat16), wb = w.to(kBFloat16), bb = bias.to(kBFloat16);
  Tensor g = randn({K}), be = randn({K});
  Tensor gb = g.to(kBFloat16), beb = be.to(kBFloat16);
  auto path = [](cpu::Bf16Compute c) { return [c] { cpu::set_bf16_compute(c); }; };
  auto none = [] {};
  auto keep = [](const Tensor& t) { if (t.numel() == 0) std::abort(); };
  bench("linear 2048x768x768 (+bias)", 2.0 * double(M) * double(K) * double(N),
        {{"float32", [&] { keep(linear(x, w, bias)); }, none, {}},
         {"bf16 native (oneDNN)", [&] { keep(linear(xb, wb, bb)); }, path(cpu::Bf16Compute::Native), {}},
         {"bf16 fp32 path", [&] { keep(linear(xb, wb, bb)); }, path(cpu::Bf16Compute::F32), {}}},
        rounds, reps);
  bench("gelu tanh [2048, 768]", 0,
        {{"float32", [&] { keep(gelu(x, "tanh")); }, none, {}},
         {"bf16", [&] { keep(gelu(xb, "tanh")); }, none, {}}},
        rounds, reps);
  bench("layer_norm [2048, 768]", 0,
        {{"float32", [&] { keep(layer_norm(x, {K}, g, be)); }, none, {}},
         {"bf16", [&] { keep(layer_norm(xb, {K}, gb, beb)); }, none, {}}},
        rounds, reps);
  // The cnn's pooling: 2x2 max over a channels-last activation (NCHW shape, NHWC strides, as
  // a channels-last conv writes it), forward and backward.
  Tensor a = permute(randn({128, 28, 28, 32}), {0, 3, 1, 2}), ab = a.to(kBFloat16);
  Tensor ga = randn({128, 32, 14, 14}), gab = ga.to(kBFloat16);
  auto pool_step = [](const Tensor& t, const Tensor& g) {
    grad_step(t, g, [](const Tensor& x) { return max_pool2d(x, {.kernel = {2, 2}}); });
  };
  // The gpt's attention (bench/gpt_step.cpp's shape): q, k, v views of one packed [B, T, 3, H,
  // E] projection, causal, forward and backward.
  Tensor qkv = randn({32, 128, 3, 4, 32}), qkvb = qkv.to(kBFloat16);
  Tensor go = randn({32, 4, 128, 32}), gob = go.to(kBFloat16);
  auto attention_step = [](const Tensor& t, const Tensor& g) {
    grad_step(t, g, [](const Tensor& x) {
      auto part = [&](int64_t i) { return transpose(squeeze(slice(x, 2, i, i + 1), 2), 1, 2); };
      return scaled_dot_product_attention(part(0), part(1), part(2), {.is_causal = true});
    });
  };
  bench("attention, causal, q k v of [32, 128, 3, 4, 32], forward + backward", 0,
        {{"float32", [&] { attention_step(qkv, go); }, none, {}},
         {"bf16 native (oneDNN)", [&] { attention_step(qkvb, gob); }, path(cpu::Bf16Compute::Native), {}},
         {"bf16 fp32 path", [&] { attention_step(qkvb, gob); }, path(cpu::Bf16Compute::F32), {}}},
        rounds, reps);
  bench("max_pool2d 2x2 channels-last [128, 32, 28, 28], forward + backward", 0,
        {{"float32", [&] { pool_step(a, ga); }, none, {}},
         {"bf16", [&] { pool_step(ab, gab); }, none, {}}},
        rounds, reps);
  return 0;
}
