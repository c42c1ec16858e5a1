// The GPT training step timed as PyTorch's peer times it (shared/reference/peers/gpt_pt2.py):
// axle::models::GPT (vocab 96, block 128, 4 layers, 4 heads, 128 embd, no dropout), batch 32
// of random tokens, AdamW (weight decay 0.1 on the >= 2-D parameters, betas 0.9/0.95, lr 1e-3)
// and clip_grad_norm_(1.0). Each step ends with the loss read on the host (the step is done
// when its value is known). One JSON line on stdout: median/p10/p90 step ms after the warm-up
// steps, the first step's seconds (tracing + compiling on xla), tokens/s.
//
//   build/bin/axle-gpt-step --device xla|cpu [--threads N] [--steps 40] [--warm 5] [--batch 32]
//                           [--block 128] [--n-layer 4] [--n-head 4] [--n-embd 128] [--vocab 96]
//                           [--metrics]   (axle's metrics report on stderr after the run)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/models/gpt.h"
#include "axle/nn/utils.h"

using namespace axle;

namespace {

struct Args {
  std::string device = "xla";
  std::string precision = "fp32";  // bf16: forward and loss under axle::autocast
  int threads = 1, steps = 40, warm = 5;
  int64_t batch = 32, block = 128, n_layer = 4, n_head = 4, n_embd = 128, vocab = 96;
  bool metrics = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "axle-gpt-step: %s\nusage: axle-gpt-step --device xla|cpu [--threads N] [--steps N] [--warm N] "
               "[--batch N] [--block N] [--n-layer N] [--n-head N] [--n-embd N] [--vocab N] [--precision fp32|bf16] "
               "[--metrics]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--metrics") { a.metrics = true; continue; }
    if (k == "-h" || k == "--help") usage("the GPT training step of gpt_pt2.py, timed");
    if (i + 1 >= argc) usage(("missing a value after " + k).c_str());
    const std::string v = argv[++i];
    auto num = [&]() {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 0) usage(("expected a non-negative integer after " + k).c_str());
      return n;
    };
    if (k == "--device") a.device = v;
    else if (k == "--precision") a.precision = v;
    else if (k == "--threads") a.threads = int(num());
    else if (k == "--steps") a.steps = int(num());
    else if (k == "--warm") a.warm = int(num());
    else if (k == "--batch") a.batch = num();
    else if (k == "--block") a.block = num();
    else if (k == "--n-layer") a.n_layer = num();
    else if (k == "--n-head") a.n_head = num();
    else if (k == "--n-embd") a.n_embd = num();
    else if (k == "--vocab") a.vocab = num();
    else usage(("unknown argument " + k).c_str());
  }
  if (a.device != "xla" && a.device != "cpu") usage("expected --device xla or cpu");
  if (a.precision != "fp32" && a.precision != "bf16") usage("expected --precision fp32 or bf16");
  if (a.steps < 1 || a.threads < 1) usage("expected --steps >= 1 and --threads >= 1");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  omp_set_num_threads(a.threads);
  try {
    const Device dev(a.device);
    manual_seed(0);
    auto model = std::make_shared<models::GPT>(models::GPTConfig{.vocab_size = a.vocab,
                                                                 .block_size = a.block,
                                                                 .n_layer = a.n_layer,
                                                                 .n_head = a.n_head,
                                                                 .n_embd = a.n_embd,
                                                                 .dropout = 0.0});
    model->to(dev);
    int64_t params = 0;
    for (const Tensor& p : model->parameters()) params += p.numel();
    optim::AdamW opt(model->param_groups(0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});

    // The batches up front (host memory, as the peer's list of tensors), moved per step.
    std::mt19937_64 rng(0);
    std::uniform_int_distribution<int64_t> tok(0, a.vocab - 1);
    const size_t n = size_t(a.batch * a.block);
    std::vector<std::pair<Tensor, Tensor>> data;
    for (int i = 0; i < a.warm + a.steps; ++i) {
      std::vector<int64_t> x(n), y(n);
      for (auto& v : x) v = tok(rng);
      for (auto& v : y) v = tok(rng);
      data.emplace_back(from_vector(x, {a.batch, a.block}), from_vector(y, {a.batch, a.block}));
    }

    std::vector<double> ts;
    double first = 0, last_loss = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor x = data[i].first.to(dev), y = data[i].second.to(dev);
      opt.zero_grad();
      Tensor loss;
      {
        autocast region(dev, DType::BFloat16, a.precision == "bf16");
        loss = model->loss(x, y);
      }
      loss.backward();
      nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      opt.step();
      if (dev.is_xla()) axle::sync();
      last_loss = loss.item<float>();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i == 0) first = dt;
      ts.push_back(dt);
    }
    std::vector<double> timed(ts.begin() + a.warm, ts.end());
    std::sort(timed.begin(), timed.end());
    const size_t m = timed.size();
    const double med = m % 2 ? timed[m / 2] : 0.5 * (timed[m / 2 - 1] + timed[m / 2]);
    std::printf(
        "{\"system\": \"axle\", \"device\": \"%s\", \"precision\": \"%s\", \"model\": \"gpt\", \"threads\": %d, "
        "\"params\": %lld, "
        "\"batch\": %lld, \"block\": %lld, \"median_step_ms\": %.3f, \"p10_step_ms\": %.3f, \"p90_step_ms\": %.3f, "
        "\"tokens_per_s\": %.0f, \"first_step_s\": %.2f, \"last_loss\": %.6f}\n",
        a.device.c_str(), a.precision.c_str(), a.threads, (long long)params, (long long)a.batch, (long long)a.block, med * 1e3,
        timed[m / 10] * 1e3, timed[9 * m / 10] * 1e3, double(a.batch * a.block) / med, first, last_loss);
    if (a.metrics) std::cerr << metrics::report();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "axle-gpt-step: %s\n", e.what());
    return 1;
  }
  return 0;
}
