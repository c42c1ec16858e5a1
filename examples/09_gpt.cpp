// A character-level GPT trained on text: the transformer workload of axle-train --model gpt
// (docs/gpt.md), as a plain training loop to copy: AdamW with weight decay on the matrices
// only, warmup + cosine learning rate, gradient clipping in the step graph, a validation loss
// and a sample at the end.
//
//   build/bin/example_09_gpt [steps] [text file or directory]     (default: 200 steps on
//   /usr/share/games/fortunes, Debian's fortunes package)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "axle/axle.h"
#include "axle/data/text.h"
#include "axle/models/gpt.h"
#include "axle/nn/utils.h"
#include "axle/optim/lr_scheduler.h"

using namespace axle;

int main(int argc, char** argv) {
  const int64_t max_steps = argc > 1 ? std::atoll(argv[1]) : 200;
  const std::string path = argc > 2 ? argv[2] : "/usr/share/games/fortunes";
  if (!std::filesystem::exists(path)) {
    std::printf("SKIP: %s not found (apt-get install fortunes, or pass a text file)\n", path.c_str());
    return 77;
  }
  const int64_t block_size = 64, batch_size = 16;
  auto corpus = data::TextCorpus::from_path(path);  // characters -> ids; 90% train, 10% validation
  auto train = std::make_shared<data::TextWindows>(corpus, data::Split::Train, block_size);
  auto val = std::make_shared<data::TextWindows>(corpus, data::Split::Val, block_size);
  // Random windows (x: tokens [i, i+64), y: the next token of each), max_steps batches.
  auto sampler = std::make_shared<data::RandomWindowSampler>(train->size(), max_steps * batch_size, /*seed=*/0);
  data::DataLoader loader(train, {.batch_size = batch_size}, sampler);

  manual_seed(0);
  Device device = axle::device();
  models::GPT model({.vocab_size = corpus->vocab_size(), .block_size = block_size, .n_layer = 2, .n_head = 4,
                     .n_embd = 64, .dropout = 0.0});
  model.to(device);
  optim::AdamW optimizer(model.param_groups(/*weight_decay=*/0.1), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95});
  optim::LambdaLR schedule(optimizer, optim::warmup_cosine(1e-3, max_steps / 10, max_steps, 1e-4));

  int64_t steps = 0;
  double first = 0, last = 0;
  for (const data::Example& batch : loader) {
    Tensor loss, norm;
    {
      auto step = axle::step();  // one graph per step: forward, backward, clipping, AdamW
      optimizer.zero_grad();
      loss = model.loss(batch.data.to(device), batch.target.to(device));
      loss.backward();
      norm = nn::utils::clip_grad_norm_(model.parameters(), 1.0);
      optimizer.step();
    }
    schedule.step();  // the next step's learning rate (host side: no graph change)
    last = loss.item();
    if (steps == 0) first = last;
    if (++steps % 50 == 0) std::printf("step %lld: loss %.4f, grad norm %.3f\n", static_cast<long long>(steps), last,
                                       norm.item());
  }

  // Validation loss on a few batches: eval mode, no gradients.
  model.eval();
  double val_loss = 0;
  {
    NoGradGuard no_grad;
    auto val_sampler = std::make_shared<data::RandomWindowSampler>(val->size(), 4 * batch_size, /*seed=*/1);
    int64_t n = 0;
    for (const data::Example& b : data::DataLoader(val, {.batch_size = batch_size}, val_sampler)) {
      val_loss += model.loss(b.data.to(device), b.target.to(device)).item();
      ++n;
    }
    val_loss /= double(n);
  }
  Generator gen(0);
  const std::string text = corpus->decode(model.generate(corpus->encode("The "), 80, 0.8, 10, gen));
  std::printf("steps %lld, first loss %.4f, last loss %.4f, val loss %.4f\nsample: %s\n",
              static_cast<long long>(steps), first, last, val_loss, text.c_str());

  // The examples run as tests: the loss starts near ln(vocabulary) and goes down.
  const bool ok = steps == max_steps && std::abs(first - std::log(double(corpus->vocab_size()))) < 0.5 &&
                  last < first && std::isfinite(val_loss);
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
