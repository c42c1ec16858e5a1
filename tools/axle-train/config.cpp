// axle-train's flags and their checks (config.h).
#include "config.h"

#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "checkpoints.h"
#include "models.h"

namespace axle_train {

namespace fs = std::filesystem;

namespace {

struct PatternName {
  Pattern pattern;
  std::string name;
};

const std::vector<PatternName>& patterns() {
  static const std::vector<PatternName> p{
      {Pattern::Single, "single"}, {Pattern::Multiprocess, "multiprocess"}, {Pattern::Ddp, "ddp"},
      {Pattern::Compiled, "compiled"}, {Pattern::Loader, "loader"}, {Pattern::Eager, "eager"},
      {Pattern::Spmd, "spmd"}, {Pattern::Fsdp, "fsdp"}, {Pattern::FsdpSpmd, "fsdp-spmd"}};
  return p;
}

/// The flags only --model gpt reads (an error with mlp/cnn).
const std::vector<std::string>& gpt_only_flags() {
  static const std::vector<std::string> f{"--n-layer", "--n-head", "--n-embd", "--block-size", "--dropout",
                                          "--weight-decay", "--beta1", "--beta2", "--warmup-steps", "--min-lr", "--lr-decay-steps",
                                          "--grad-clip", "--accum-steps", "--eval-every", "--eval-iters",
                                          "--sample", "--prompt", "--temperature", "--top-k"};
  return f;
}

/// A CLI11 check: parses as T and is > 0 ("--epochs: expected a number > 0, got abc").
template <class T>
CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        T v{};
        if (!CLI::detail::lexical_cast(s, v) || !(v > 0)) return "expected a number > 0, got '" + s + "'";
        return "";
      },
      "> 0");
}

/// The devices one batch is split over under SPMD (the "data" or "fsdp" axis); 1 otherwise.
int64_t batch_split(const Config& c) {
  if (c.pattern == Pattern::FsdpSpmd) return c.devices;
  if (c.pattern == Pattern::Spmd) return std::max<int64_t>(1, parse_mesh(c).size("data"));
  return 1;
}

void validate_gpt(const Config& c) {
  if (c.n_embd % c.n_head != 0)
    throw UsageError(fmt::format("--n-embd {} is not a multiple of --n-head {} (each head gets n_embd / n_head "
                                 "features)", c.n_embd, c.n_head));
  if (!(c.dropout >= 0 && c.dropout < 1)) throw UsageError(fmt::format("--dropout: expected 0 <= p < 1, got {}", c.dropout));
  if (c.max_steps == 0 && !c.epochs_given)
    throw UsageError("--model gpt needs --max-steps N or --epochs N (one epoch: as many tokens as the training split, "
                     "docs/gpt.md)");
  if (c.min_lr > c.lr) throw UsageError(fmt::format("--min-lr {} is above --lr {}: the cosine decays from --lr down to "
                                                    "--min-lr", c.min_lr, c.lr));
  if (c.warmup_given && c.lr_decay_steps == 0 && c.max_steps > 0 && c.warmup_steps > c.max_steps)
    throw UsageError(fmt::format("--warmup-steps {} is more than --max-steps {}", c.warmup_steps, c.max_steps));
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    throw UsageError(fmt::format("--beta1 and --beta2: expected 0 <= beta < 1, got {} and {}", c.beta1, c.beta2));
  if (!c.prompt.empty() && c.sample == 0) throw UsageError("--prompt needs --sample N (the characters to generate)");
  if (c.sample > 0 && c.pattern == Pattern::Fsdp)
    throw UsageError("--sample is not available with --pattern fsdp (every rank holds only shards of the weights; "
                     "use --pattern fsdp-spmd, or train with ddp)");
  const int64_t split = batch_split(c);
  if (c.batch_size % split != 0)
    throw UsageError(fmt::format("--batch-size {} is not divisible by the {} devices that split each batch "
                                 "(--pattern {}{})", c.batch_size, split, pattern_name(c.pattern),
                                 c.accum_steps > 1 ? ", per micro-batch of --accum-steps" : ""));
}

void validate(const Config& c) {
  if (c.save_every > 0 && c.save.empty()) throw UsageError("--save-every needs --save DIR");
  if (c.device == "cpu" && c.pattern != Pattern::Single)
    throw UsageError("--pattern " + pattern_name(c.pattern) + " runs on the lazy device: use --device xla (the default)");
  if (!c.mesh.empty() && c.pattern != Pattern::Spmd)
    throw UsageError("--mesh needs --pattern spmd" +
                     std::string(c.pattern == Pattern::FsdpSpmd ? " (fsdp-spmd's mesh is always fsdp=--devices)" : ""));
  if (c.devices != 1 && !multi_process(c.pattern) && !spmd_pattern(c.pattern))
    throw UsageError(fmt::format("--devices {} needs --pattern multiprocess, ddp, loader, fsdp, spmd or fsdp-spmd",
                                 c.devices));
  if (!c.resume.empty() && multi_process(c.pattern)) {
    // Said once, before the ranks start (each would fail with it).
    const std::string file = c.pattern == Pattern::Fsdp ? fsdp_checkpoint_file(c.resume) : plain_checkpoint_file(c.resume);
    std::error_code ec;
    if (!fs::exists(file, ec)) throw UsageError("--resume " + c.resume + ": no checkpoint there (no " + file + ")");
  }
  if (c.pattern == Pattern::Spmd) (void)parse_mesh(c);
  if (c.is_gpt()) validate_gpt(c);
  if (!c.json.empty()) {
    const fs::path parent = fs::absolute(fs::path(c.json)).parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec))
      throw UsageError("--json " + c.json + ": directory " + parent.string() + " does not exist");
  }
}

}  // namespace

const std::vector<std::string>& pattern_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const PatternName& p : patterns()) n.push_back(p.name);
    return n;
  }();
  return names;
}

const std::string& pattern_name(Pattern p) {
  for (const PatternName& n : patterns())
    if (n.pattern == p) return n.name;
  throw std::logic_error("pattern_name: a Pattern without a name");
}

Pattern parse_pattern(const std::string& name) {
  for (const PatternName& n : patterns())
    if (n.name == name) return n.pattern;
  throw UsageError("--pattern: unknown pattern '" + name + "'");
}

bool multi_process(Pattern p) {
  return p == Pattern::Multiprocess || p == Pattern::Ddp || p == Pattern::Loader || p == Pattern::Fsdp;
}

bool spmd_pattern(Pattern p) { return p == Pattern::Spmd || p == Pattern::FsdpSpmd; }

int64_t MeshAxes::size(const std::string& axis) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == axis) return sizes[i];
  return 0;
}

MeshAxes parse_mesh(const Config& c) {
  MeshAxes m;
  const std::string text = c.mesh.empty() ? fmt::format("data={}", c.devices) : c.mesh;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw UsageError("--mesh " + text + ": expected AXIS=SIZE items separated by commas (data=2,model=2), got '" +
                       item + "'");
    const std::string axis = item.substr(0, eq), size = item.substr(eq + 1);
    if (axis != "data" && axis != "model")
      throw UsageError("--mesh " + text + ": unknown axis '" + axis + "' (expected data and/or model)");
    if (m.size(axis)) throw UsageError("--mesh " + text + ": axis '" + axis + "' appears twice");
    int64_t n = 0;
    if (!CLI::detail::lexical_cast(size, n) || n < 1)
      throw UsageError("--mesh " + text + ": axis '" + axis + "' needs a size >= 1, got '" + size + "'");
    m.names.push_back(axis);
    m.sizes.push_back(n);
    pos = comma + 1;
  }
  const int64_t total = std::accumulate(m.sizes.begin(), m.sizes.end(), int64_t{1}, std::multiplies<>());
  if (total != c.devices)
    throw UsageError(fmt::format("--mesh {}: the axis sizes multiply to {}, but --devices is {}", text, total,
                                 c.devices));
  return m;
}

std::string mesh_text(const MeshAxes& m) {
  std::string r;
  for (size_t i = 0; i < m.names.size(); ++i) r += fmt::format("{}{}={}", i ? "," : "", m.names[i], m.sizes[i]);
  return r;
}

void add_flags(CLI::App& app, Config& cfg, std::string& pattern_text) {
  pattern_text = pattern_name(cfg.pattern);
  app.add_option("--pattern", pattern_text, "training-loop pattern")
      ->check(CLI::IsMember(pattern_names()))
      ->capture_default_str();
  app.add_option("--device", cfg.device, "device: cpu trains eagerly; xla is the lazy device")
      ->check(CLI::IsMember({"xla", "cpu"}))
      ->capture_default_str();
  app.add_option("--model", cfg.model, "model")->check(CLI::IsMember(axle_train::model_names()))->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "epochs")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--max-steps", cfg.max_steps, "stop after this many steps in total")->check(positive<int64_t>());
  app.add_option("--batch-size", cfg.batch_size, "batch size")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--optimizer", cfg.optimizer, "optimizer")->check(CLI::IsMember({"sgd", "adamw"}))->capture_default_str();
  app.add_option("--lr", cfg.lr, "learning rate")->check(positive<double>())->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--seed", cfg.seed, "random seed (model initialisation, shuffling)")->capture_default_str();
  app.add_option("--devices", cfg.devices, "devices (processes, or SPMD devices for spmd and fsdp-spmd)")->check(positive<int>())->capture_default_str();
  app.add_option("--mesh", cfg.mesh,
                 "--pattern spmd: mesh axes and sizes, data=N (default: data=--devices) or data=2,model=2 "
                 "(model: tensor-parallel linear layers)");
  app.add_option("--precision", cfg.precision,
                 "bf16: forward and loss under autocast (matrix products, convolutions and attention in bfloat16; "
                 "parameters, gradients and optimizer state stay float32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--threads", cfg.threads, "CPU threads (default: all cores)")->check(positive<int>());
  app.add_option("--data", cfg.data, "mlp/cnn: directory of the Fashion-MNIST IDX files; gpt: a UTF-8 text file or a directory of them (default /usr/share/games/fortunes)")->capture_default_str();
  app.add_option("--json", cfg.json, "write the result as one JSON object to this file");
  app.add_option("--save", cfg.save, "write checkpoints (DIR/checkpoint.safetensors) at each epoch end");
  app.add_option("--save-every", cfg.save_every, "also checkpoint every N steps")->check(positive<int64_t>());
  app.add_option("--resume", cfg.resume, "resume from the checkpoint in this directory");
  app.add_option("--timeout", cfg.timeout, "rendezvous and collective timeout of the multi-process patterns, seconds")
      ->check(positive<double>())
      ->capture_default_str();
  app.add_option("--init", cfg.init, "start from these weights (safetensors, by parameter name; e.g. from PyTorch)");
  // --model gpt (docs/gpt.md)
  app.add_option("--n-layer", cfg.n_layer, "gpt: transformer blocks")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--n-head", cfg.n_head, "gpt: attention heads")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--n-embd", cfg.n_embd, "gpt: embedding width (a multiple of --n-head)")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--block-size", cfg.block_size, "gpt: context length in characters")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--dropout", cfg.dropout, "gpt: dropout probability")->capture_default_str();
  app.add_option("--weight-decay", cfg.weight_decay, "gpt: AdamW weight decay of the matrices (vectors: none)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--beta1", cfg.beta1, "gpt: AdamW beta1")->capture_default_str();
  app.add_option("--beta2", cfg.beta2, "gpt: AdamW beta2")->capture_default_str();
  app.add_option("--warmup-steps", cfg.warmup_steps, "gpt: linear warmup steps (default capped at the run's steps)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))->capture_default_str();
  app.add_option("--min-lr", cfg.min_lr, "gpt: learning rate at the end of the cosine decay")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--lr-decay-steps", cfg.lr_decay_steps,
                 "gpt: the step the cosine reaches --min-lr (default: the run's steps; set it to stop and resume "
                 "a run on the same schedule)")
      ->check(positive<int64_t>());
  app.add_option("--grad-clip", cfg.grad_clip, "gpt: clip the gradients' global norm to this (0: no clipping)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--accum-steps", cfg.accum_steps, "gpt: micro-batches of --batch-size per optimizer step")
      ->check(positive<int64_t>())->capture_default_str();
  app.add_option("--eval-every", cfg.eval_every, "gpt: validation loss every N steps (and at the end)")->check(positive<int64_t>());
  app.add_option("--eval-iters", cfg.eval_iters, "gpt: validation batches per evaluation")->check(positive<int64_t>())->capture_default_str();
  app.add_option("--sample", cfg.sample, "gpt: generate N characters after training")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  app.add_option("--prompt", cfg.prompt, "gpt: text the sample continues (characters of the corpus)");
  app.add_option("--temperature", cfg.temperature, "gpt: sampling temperature")->check(positive<double>())->capture_default_str();
  app.add_option("--top-k", cfg.top_k, "gpt: sample from the k most likely characters (0: all)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))->capture_default_str();

}

void finish_config(const CLI::App& app, Config& cfg, const std::string& pattern_text) {
  cfg.pattern = parse_pattern(pattern_text);
if (cfg.is_gpt()) {
    // gpt's own defaults where the flag was not given.
    if (!app.count("--data")) cfg.data = "/usr/share/games/fortunes";
    if (!app.count("--batch-size")) cfg.batch_size = 32;
    if (!app.count("--optimizer")) cfg.optimizer = "adamw";
    if (!app.count("--lr")) cfg.lr = 1e-3;
    cfg.warmup_given = app.count("--warmup-steps") > 0;
    cfg.epochs_given = app.count("--epochs") > 0;
    if (app.count("--momentum") && cfg.optimizer != "sgd") throw UsageError("--momentum needs --optimizer sgd");
    if ((app.count("--beta1") || app.count("--beta2")) && cfg.optimizer != "adamw")
      throw UsageError("--beta1 and --beta2 need --optimizer adamw");
    if (app.count("--weight-decay") && cfg.optimizer != "adamw")
      throw UsageError("--weight-decay needs --optimizer adamw (the gpt default)");
  } else {
    for (const std::string& f : gpt_only_flags())
      if (app.count(f)) throw UsageError(f + " applies to --model gpt only (got --model " + cfg.model + ")");
  }
  validate(cfg);
}

}  // namespace axle_train
