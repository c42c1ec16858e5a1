// axle-train's configuration: the flags, their defaults and their validation. The pattern is
// parsed once into a Pattern; nothing else compares pattern names.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/data/fashion_mnist.h"

namespace CLI {
class App;
}

namespace axle_train {

/// The training-loop patterns (README.md, DESIGN.md "The CLI: axle-train").
enum class Pattern { Single, Multiprocess, Ddp, Compiled, Loader, Eager, Spmd, Fsdp, FsdpSpmd };

/// The flag's spelling of every pattern, in the help's order.
const std::vector<std::string>& pattern_names();
/// "single", "fsdp-spmd", ...
const std::string& pattern_name(Pattern p);
/// The pattern a --pattern value names; throws UsageError for another.
Pattern parse_pattern(const std::string& name);
/// The patterns that run under axle::launch, one process per device.
bool multi_process(Pattern p);
/// The patterns where one process drives every device (runtime::use_spmd()).
bool spmd_pattern(Pattern p);

struct Config {
  Pattern pattern = Pattern::Single;
  std::string device = "xla";
  std::string model = "mlp";
  int64_t epochs = 1;
  int64_t max_steps = 0;  // 0: no cap
  int64_t batch_size = 128;
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.9;
  uint64_t seed = 0;
  int devices = 1;
  std::string mesh;  // --pattern spmd: "data=N" (default) or "data=2,model=2"; fsdp-spmd: always fsdp=N
  int threads = 0;   // 0: OpenMP's default (all cores unless OMP_NUM_THREADS says otherwise)
  std::string data = axle::data::kFashionMNISTRoot;
  std::string json;
  std::string save;        // checkpoint directory
  int64_t save_every = 0;  // steps between checkpoints (0: at the end of each epoch only)
  std::string resume;      // checkpoint directory to resume from
  std::string init;        // safetensors weights to start from (e.g. written by PyTorch)
  double timeout = 300;    // rendezvous and collective timeout of the multi-process patterns, seconds
  // --model gpt (docs/gpt.md); defaults that differ from mlp/cnn are applied by finish_config.
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 128;
  double dropout = 0.1;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95;
  int64_t warmup_steps = 100;
  bool warmup_given = false;  // an explicit --warmup-steps must fit in the run; the default is capped
  double min_lr = 1e-4;
  int64_t lr_decay_steps = 0;  // 0: the run's steps (--max-steps, else the epochs')
  double grad_clip = 1.0;      // 0: no clipping (the norm is still measured)
  int64_t accum_steps = 1;
  int64_t eval_every = 0;  // 0: evaluate at the end only
  int64_t eval_iters = 20;
  int64_t sample = 0;
  std::string prompt;
  double temperature = 1.0;
  int64_t top_k = 0;
  bool epochs_given = false;
  std::string precision = "fp32";  // bf16: forward and loss under axle::autocast (docs/precision.md)
  /// --precision bf16: the forward and the loss run in an autocast region (bf16 matrix products,
  /// fp32 parameters, optimizer state and gradients).
  bool autocast() const { return precision == "bf16"; }
  bool is_gpt() const { return model == "gpt"; }
};

/// Reported as "axle-train: error: ..." with exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The command line: every flag bound to `cfg`; --pattern to `pattern_text`.
void add_flags(CLI::App& app, Config& cfg, std::string& pattern_text);
/// After parsing: the pattern, gpt's own defaults where a flag was not given, the checks
/// that span flags (throws UsageError).
void finish_config(const CLI::App& app, Config& cfg, const std::string& pattern_text);

/// --mesh for --pattern spmd: axes "data" and/or "model" with sizes multiplying to --devices.
struct MeshAxes {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int64_t size(const std::string& axis) const;
};
/// The spmd mesh --mesh (default data=--devices) describes; throws UsageError.
MeshAxes parse_mesh(const Config& c);
/// "data=2,model=2".
std::string mesh_text(const MeshAxes& m);

}  // namespace axle_train
