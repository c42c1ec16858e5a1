// axle-train: trains a model (mlp or cnn on Fashion-MNIST, gpt on text: docs/gpt.md) with one of the
// seed's training-loop patterns (docs: README.md, DESIGN.md "The CLI: axle-train").
//
// stdout: configuration, epoch summaries, the result. stderr: progress and errors.
// Exit status: 0 success, 2 bad flags / missing or corrupt data / unavailable option,
// 1 anything else (an internal error).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "axle/compile.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/serialize.h"
#include "axle/dist.h"
#include "axle/dtype.h"
#include "axle/fsdp.h"
#include "axle/xm.h"
#include "axle/xs.h"
#include "axle/data/text.h"
#include "axle/models/gpt.h"
#include "axle/nn/utils.h"
#include "axle/optim/lr_scheduler.h"
#include "models.h"
#include "progress.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace axle;

struct Config {
  std::string pattern = "single";
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
  int threads = 0;  // 0: OpenMP's default (all cores unless OMP_NUM_THREADS says otherwise)
  std::string data = data::kFashionMNISTRoot;
  std::string json;
  std::string save;      // checkpoint directory
  int64_t save_every = 0;  // steps between checkpoints (0: at the end of each epoch only)
  std::string resume;    // checkpoint directory to resume from
  std::string init;      // safetensors weights to start from (e.g. written by PyTorch)
  double timeout = 300;  // rendezvous and collective timeout of the multi-process patterns, seconds
  // --model gpt (docs/gpt.md); defaults that differ from mlp/cnn are applied in main().
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 128;
  double dropout = 0.1;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95;
  int64_t warmup_steps = 100;
  bool warmup_given = false;  // an explicit --warmup-steps must fit in the run; the default is capped
  double min_lr = 1e-4;
  int64_t lr_decay_steps = 0;  // 0: the run's steps (--max-steps, else the epochs')
  double grad_clip = 1.0;     // 0: no clipping (the norm is still measured)
  int64_t accum_steps = 1;
  int64_t eval_every = 0;     // 0: evaluate at the end only
  int64_t eval_iters = 20;
  int64_t sample = 0;
  std::string prompt;
  double temperature = 1.0;
  int64_t top_k = 0;
  bool epochs_given = false;
};

/// The flags only --model gpt reads (an error with mlp/cnn).
const std::vector<std::string>& gpt_only_flags() {
  static const std::vector<std::string> f{"--n-layer", "--n-head", "--n-embd", "--block-size", "--dropout",
                                          "--weight-decay", "--beta1", "--beta2", "--warmup-steps", "--min-lr", "--lr-decay-steps",
                                          "--grad-clip", "--accum-steps", "--eval-every", "--eval-iters",
                                          "--sample", "--prompt", "--temperature", "--top-k"};
  return f;
}

/// Checkpoint metadata: every step's loss up to the checkpoint (a JSON list).
constexpr const char* kLossesKey = "axle-train.losses";

std::string checkpoint_file(const std::string& dir) { return (fs::path(dir) / "checkpoint.safetensors").string(); }

/// Reported as "axle-train: error: ..." with exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int fail(const std::string& msg, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "axle-train: error: %s\n", one_line(msg).c_str());
  return status;
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

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  if (v.size() % 2) return v[m];
  const double hi = v[m];
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + m));
}

/// The patterns that run under axle::launch, one process per device.
bool multi_process(const Config& c) {
  return c.pattern == "multiprocess" || c.pattern == "ddp" || c.pattern == "loader" || c.pattern == "fsdp";
}

/// The patterns where one process drives every device (runtime::use_spmd()).
bool spmd_pattern(const Config& c) { return c.pattern == "spmd" || c.pattern == "fsdp-spmd"; }

/// The layers FSDP wraps in units of their own (v1 and v2): every layer with parameters in
/// axle-train's models.
fsdp::AutoWrapPolicy layer_wrap_policy() { return fsdp::transformer_auto_wrap_policy({"Linear", "Conv2d"}); }

/// --mesh for --pattern spmd: axes "data" and/or "model" with sizes multiplying to --devices.
struct MeshAxes {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int64_t size(const std::string& axis) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == axis) return sizes[i];
    return 0;
  }
};

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

/// Tensor parallelism on a mesh's "model" axis, Megatron style: the linear layers in pairs,
/// the first split by output features (weight rows and bias: column-parallel), the second by
/// input features (weight columns: row-parallel, its output a partial sum the compiler
/// all-reduces). The parameters keep these shardings across steps.
void shard_linear_layers(nn::Module& model, const xs::Mesh& mesh) {
  const auto params = model.named_parameters();
  auto bias_of = [&](const std::string& weight_name) -> Tensor {
    const std::string bias = weight_name.substr(0, weight_name.size() - 6) + "bias";
    for (const auto& [n, p] : params)
      if (n == bias) return p;
    return {};
  };
  int k = 0;
  for (const auto& [name, p] : params) {
    if (p.dim() != 2 || name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) continue;
    Tensor w = p, b = bias_of(name);
    if (k++ % 2 == 0) {
      xs::mark_sharding(w, mesh, {"model", xs::None});
      if (b.defined()) xs::mark_sharding(b, mesh, {"model"});
    } else {
      xs::mark_sharding(w, mesh, {xs::None, "model"});
    }
  }
}

/// The collective counters the SPMD runtime keeps (kind and bytes), by their JSON names.
const std::vector<std::pair<std::string, std::string>>& collective_counters() {
  static const std::vector<std::pair<std::string, std::string>> names{
      {"all_reduce", "SpmdAllReduce"},         {"all_gather", "SpmdAllGather"},
      {"reduce_scatter", "SpmdReduceScatter"}, {"all_to_all", "SpmdAllToAll"},
      {"collective_permute", "SpmdCollectivePermute"}, {"bytes", "SpmdCollectiveBytes"}};
  return names;
}

/// The devices one batch is split over under SPMD (the "data" or "fsdp" axis); 1 otherwise.
int64_t batch_split(const Config& c) {
  if (c.pattern == "fsdp-spmd") return c.devices;
  if (c.pattern == "spmd") return std::max<int64_t>(1, parse_mesh(c).size("data"));
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
  if (c.sample > 0 && c.pattern == "fsdp")
    throw UsageError("--sample is not available with --pattern fsdp (every rank holds only shards of the weights; "
                     "use --pattern fsdp-spmd, or train with ddp)");
  const int64_t split = batch_split(c);
  if (c.batch_size % split != 0)
    throw UsageError(fmt::format("--batch-size {} is not divisible by the {} devices that split each batch "
                                 "(--pattern {}{})", c.batch_size, split, c.pattern,
                                 c.accum_steps > 1 ? ", per micro-batch of --accum-steps" : ""));
}

void validate(const Config& c) {
  if (c.save_every > 0 && c.save.empty()) throw UsageError("--save-every needs --save DIR");
  if (c.device == "cpu" && c.pattern != "single")
    throw UsageError("--pattern " + c.pattern + " runs on the lazy device: use --device xla (the default)");
  if (!c.mesh.empty() && c.pattern != "spmd")
    throw UsageError("--mesh needs --pattern spmd" +
                     std::string(c.pattern == "fsdp-spmd" ? " (fsdp-spmd's mesh is always fsdp=--devices)" : ""));
  if (c.devices != 1 && !multi_process(c) && !spmd_pattern(c))
    throw UsageError(fmt::format("--devices {} needs --pattern multiprocess, ddp, loader, fsdp, spmd or fsdp-spmd",
                                 c.devices));
  if (c.pattern == "fsdp" && (!c.save.empty() || !c.resume.empty()))
    throw UsageError("--save and --resume are not available with --pattern fsdp (its checkpoints are per-rank "
                     "shard files: axle/fsdp_checkpoint.h, docs/fsdp.md)");
  if (c.pattern == "spmd") (void)parse_mesh(c);
  if (c.model == "gpt") validate_gpt(c);
  if (!c.json.empty()) {
    const fs::path parent = fs::absolute(fs::path(c.json)).parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec))
      throw UsageError("--json " + c.json + ": directory " + parent.string() + " does not exist");
  }
}

/// Test accuracy: eval mode, no gradients, batches of 1000, on the training device (under
/// SPMD with the images sharded as the training batches are).
double evaluate(nn::Module& model, const std::shared_ptr<data::Dataset>& test, Device dev,
                const xs::ShardingSpec* input_sharding = nullptr) {
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(test, {.batch_size = 1000});
  int64_t correct = 0, total = 0;
  for (const data::Example& b : loader) {
    const Tensor x = dev.is_cpu() ? b.data : xm::send_cpu_data_to_device({b.data}, dev, input_sharding)[0];
    const Tensor pred = argmax(model(x), 1);
    correct += static_cast<int64_t>(sum(eq(pred, b.target.to(dev))).item());
    total += b.target.size(0);
  }
  model.train();
  return total > 0 ? double(correct) / double(total) : 0.0;
}

/// What each device holds, for the JSON report: its peak bytes and the bytes of the
/// parameters, their gradients and the optimizer state on it (what FSDP divides by N).
struct DeviceMemory {
  std::vector<int64_t> peak, parameters, gradients, optimizer;
};

/// Each device's peak bytes so far: one entry per SPMD device, else this process's device.
std::vector<int64_t> peak_bytes(Device dev, int spmd_devices) {
  if (spmd_devices == 0) return {xm::get_memory_info(dev).peak_bytes_used};
  std::vector<int64_t> peaks;
  for (int k = 0; k < spmd_devices; ++k) peaks.push_back(xm::get_memory_info(Device(DeviceType::XLA, k)).peak_bytes_used);
  return peaks;
}

/// Adds the bytes each device holds of `t`: under SPMD each device's (padded) shard, the whole
/// tensor where it is replicated; else all of it, on this process's one device.
void add_bytes(const Tensor& t, std::vector<int64_t>& per_device, bool spmd) {
  if (!t.defined()) return;
  const auto bytes = [](const Tensor& x) { return x.numel() * static_cast<int64_t>(itemsize(x.dtype())); };
  if (!spmd) {
    per_device[0] += bytes(t);
    return;
  }
  const std::vector<xs::XLAShard> shards = xs::local_shards(t);
  for (size_t k = 0; k < shards.size() && k < per_device.size(); ++k) per_device[k] += bytes(shards[k].data);
}

/// The optimizer's parameters (FSDP v1: the shards), their gradients and its state tensors,
/// per device; `peaks` as peak_bytes gave them.
DeviceMemory device_memory(optim::Optimizer& opt, std::vector<int64_t> peaks, bool spmd) {
  DeviceMemory m;
  const size_t n = peaks.size();
  m.peak = std::move(peaks);
  m.parameters.assign(n, 0);
  m.gradients.assign(n, 0);
  m.optimizer.assign(n, 0);
  const std::vector<Tensor> params = opt.parameters();
  const optim::OptimizerState state = opt.state_dict();
  for (size_t i = 0; i < params.size(); ++i) {
    add_bytes(params[i], m.parameters, spmd);
    add_bytes(params[i].grad(), m.gradients, spmd);
    if (i < state.state.size())
      for (const auto& [key, t] : state.state[i].tensors) add_bytes(t, m.optimizer, spmd);
  }
  return m;
}

/// Multi-process: every rank's figures, in rank order (a rendezvous: every rank calls it).
DeviceMemory gather_ranks(const DeviceMemory& mine) {
  const std::string payload = fmt::format("{} {} {} {}", mine.peak.at(0), mine.parameters.at(0), mine.gradients.at(0),
                                          mine.optimizer.at(0));
  DeviceMemory all;
  for (const std::string& p : xm::rendezvous("axle-train.memory", payload)) {
    long long v[4] = {0, 0, 0, 0};
    AXLE_CHECK(std::sscanf(p.c_str(), "%lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3]) == 4,
               "[axle-train] bad memory figures from a rank: '", p, "'");
    all.peak.push_back(v[0]);
    all.parameters.push_back(v[1]);
    all.gradients.push_back(v[2]);
    all.optimizer.push_back(v[3]);
  }
  return all;
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    AXLE_CHECK(f.good(), "[axle-train] cannot write ", tmp);
    f << j.dump(2) << "\n";
    f.close();
    AXLE_CHECK(f.good(), "[axle-train] failed writing ", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  AXLE_CHECK(!ec, "[axle-train] cannot rename ", tmp, " to ", path, ": ", ec.message());
}

/// OpenMP's threads for this process: --threads, else the machine's cores shared among the
/// ranks (one process: OpenMP's default). Returns the count.
int set_threads(const Config& cfg, int world) {
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  else if (world > 1) omp_set_num_threads(std::max(1, omp_get_num_procs() / world));  // share the cores
  return omp_get_max_threads();
}

/// SPMD (seed Pattern 5 with input_sharding): this one process drives every device. The
/// mesh's "data" axis (fsdp-spmd: its one "fsdp" axis over every device) splits each batch's
/// dim 0; a "model" axis splits the layers. Empty for the other patterns.
struct SpmdLayout {
  MeshAxes axes;
  std::optional<xs::Mesh> mesh;
  std::optional<xs::ShardingSpec> input_sharding;  ///< of the batch's inputs ([B, ...], `input_dims` dims)
  const xs::ShardingSpec* input() const { return input_sharding ? &*input_sharding : nullptr; }
};

SpmdLayout spmd_layout(const Config& cfg, size_t input_dims) {
  SpmdLayout l;
  if (!spmd_pattern(cfg)) return l;
  runtime::use_spmd();  // before any tensor is on the device
  l.axes = cfg.pattern == "fsdp-spmd" ? MeshAxes{{"fsdp"}, {cfg.devices}} : parse_mesh(cfg);
  std::vector<int64_t> ids(static_cast<size_t>(cfg.devices));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  l.mesh.emplace(ids, l.axes.sizes, l.axes.names);
  const std::string batch_axis = l.axes.size("data") ? "data" : l.axes.size("fsdp") ? "fsdp" : "";
  if (!batch_axis.empty()) {
    xs::PartitionSpec spec(input_dims, xs::None);
    spec[0] = batch_axis;
    l.input_sharding.emplace(*l.mesh, spec);
  }
  return l;
}

/// "spmd: ..." for the run's header (nothing without a mesh).
void print_spmd(const Config& cfg, const SpmdLayout& l, size_t input_dims) {
  if (!l.mesh) return;
  std::string spec = "none (replicated)";
  if (l.input_sharding) {
    spec = "(" + l.input_sharding->partition_spec[0].items()[0];
    for (size_t i = 1; i < input_dims; ++i) spec += ", None";
    spec += ")";
  }
  std::printf("spmd: %d devices, mesh %s, input sharding %s\n", cfg.devices, mesh_text(l.axes).c_str(), spec.c_str());
}

/// What the steps call: the model itself, or its FSDP wrapper (built before the optimizer:
/// v1's optimizer holds the shards). v1: one process per device, shards over the "xla"
/// process group; v2 (fsdp-spmd): parameters sharded on "fsdp", each unit's output on dim 0.
struct Wrapped {
  nn::ModulePtr net;
  std::shared_ptr<fsdp::XlaFullyShardedDataParallel> fsdp_v1;
};

Wrapped wrap_fsdp(const Config& cfg, const nn::ModulePtr& model, const SpmdLayout& l, const fsdp::AutoWrapPolicy& policy) {
  Wrapped w{model, nullptr};
  if (cfg.pattern == "fsdp") {
    dist::init_process_group("xla", "xla://");
    fsdp::XlaFullyShardedDataParallelOptions o;
    o.auto_wrap_policy = policy;
    w.fsdp_v1 = std::make_shared<fsdp::XlaFullyShardedDataParallel>(model, o);
    w.net = w.fsdp_v1;
  }
  if (cfg.pattern == "fsdp-spmd") {
    fsdp::SpmdFullyShardedDataParallelOptions o;
    o.mesh = *l.mesh;
    o.auto_wrap_policy = policy;
    w.net = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(model, o);
  }
  return w;
}

/// Pattern 3: DDP over the "xla" process group (parameters broadcast from rank 0 here); null
/// for the other patterns.
std::shared_ptr<nn::parallel::DistributedDataParallel> wrap_ddp(const Config& cfg, const nn::ModulePtr& model) {
  if (cfg.pattern != "ddp") return nullptr;
  dist::init_process_group("xla", "xla://");
  return std::make_shared<nn::parallel::DistributedDataParallel>(
      model, nn::parallel::DistributedDataParallelOptions{.gradient_as_bucket_view = true});
}

/// Pattern 5 (and SPMD): batches arrive on the device, loaded and moved while the step runs,
/// split over the mesh as the layout says. Null for the other patterns.
std::unique_ptr<pl::MpDeviceLoader> device_loader(const Config& cfg, data::DataLoader& loader, Device dev,
                                                  const SpmdLayout& l) {
  if (cfg.pattern == "loader") return std::make_unique<pl::MpDeviceLoader>(loader, dev);
  if (!spmd_pattern(cfg)) return nullptr;
  pl::MpDeviceLoaderOptions o;
  if (l.input_sharding) o.input_sharding = *l.input_sharding;  // the targets stay replicated
  return std::make_unique<pl::MpDeviceLoader>(loader, dev, o);
}

/// The SPMD collectives counted over a run's training epochs (evaluation and checkpoints
/// excluded): begin() before an epoch, end() after it.
struct CollectiveCount {
  std::map<std::string, int64_t> total, before;
  void begin() {
    for (const auto& [key, counter] : collective_counters()) before[key] = metrics::counter_value(counter);
  }
  void end() {
    for (const auto& [key, counter] : collective_counters()) total[key] += metrics::counter_value(counter) - before[key];
  }
};

/// The JSON report's per-device part, common to every model: memory per device (rank order, or
/// SPMD device order), under SPMD the mesh and the collectives the partitioner inserted (per
/// training step, as they ran) and the parameters' shardings, then the torch_xla-named counters
/// and timers (name -> total ms; empty on the eager cpu path).
void add_device_report(nlohmann::ordered_json& j, const DeviceMemory& memory, const SpmdLayout& l,
                       const nn::Module& model, const CollectiveCount& collectives, int64_t trained) {
  j["devices"] = memory.peak.size();
  j["peak_bytes_per_device"] = memory.peak;
  j["parameter_bytes_per_device"] = memory.parameters;
  j["gradient_bytes_per_device"] = memory.gradients;
  j["optimizer_bytes_per_device"] = memory.optimizer;
  std::vector<int64_t> state_bytes(memory.peak.size());
  for (size_t k = 0; k < state_bytes.size(); ++k)
    state_bytes[k] = memory.parameters[k] + memory.gradients[k] + memory.optimizer[k];
  j["training_state_bytes_per_device"] = state_bytes;
  if (l.mesh) {
    j["mesh"] = nlohmann::ordered_json::object();
    for (size_t i = 0; i < l.axes.names.size(); ++i) j["mesh"][l.axes.names[i]] = l.axes.sizes[i];
    j["collectives"] = nlohmann::ordered_json::object();
    j["collectives"]["steps"] = trained;
    j["collectives"]["per_step"] = nlohmann::ordered_json::object();
    for (const auto& [key, counter] : collective_counters()) {
      const auto it = collectives.total.find(key);
      const int64_t n = it == collectives.total.end() ? 0 : it->second;
      j["collectives"]["per_step"][key] = trained > 0 ? double(n) / double(trained) : 0.0;
    }
    j["collectives"]["total"] = collectives.total;
    j["parameter_shardings"] = nlohmann::ordered_json::object();  // after training: kept across steps
    for (const auto& [name, p] : model.named_parameters()) j["parameter_shardings"][name] = xs::get_sharding_spec(p);
  }
  j["counters"] = nlohmann::ordered_json::object();
  for (const auto& [name, v] : metrics::counters()) j["counters"][name] = v;
  j["metrics"] = nlohmann::ordered_json::object();
  for (const auto& [name, ms] : metrics::timers_ms()) j["metrics"][name] = ms;
}

/// Each device's memory figures for the report (every rank takes part: a rendezvous).
DeviceMemory report_memory(optim::Optimizer& opt, std::vector<int64_t> peaks, Device dev, const SpmdLayout& l, int world) {
  if (peaks.empty()) peaks = peak_bytes(dev, l.mesh ? int(l.mesh->size()) : 0);
  DeviceMemory memory = device_memory(opt, std::move(peaks), l.mesh.has_value());
  return world > 1 ? gather_ranks(memory) : memory;
}

// One process's training run; under --pattern multiprocess, ddp and loader each launched rank
// runs it on its shard of the data (rank 0 prints and writes the results).
int run(const Config& cfg) {
  const int world = runtime::world_size(), rank = runtime::global_ordinal();
  const bool master = rank == 0;
  if (!master) std::freopen("/dev/null", "w", stdout);
  const int threads = set_threads(cfg, world);

  const auto t_load = Clock::now();
  // The test split decodes on another thread while this one inflates the training images.
  auto test_future = std::async(std::launch::async, [&] { return std::make_shared<data::FashionMNIST>(cfg.data, false); });
  std::shared_ptr<data::FashionMNIST> train_set;
  try {
    train_set = std::make_shared<data::FashionMNIST>(cfg.data, true);
  } catch (...) {
    try { test_future.get(); } catch (...) {}
    throw;
  }
  auto test_set = test_future.get();
  const double load_s = seconds_since(t_load);

  manual_seed(cfg.seed);
  nn::ModulePtr model = axle_train::make_model(cfg.model);
  const int64_t num_parameters = model->num_parameters();  // FSDP v1 moves them into its shards
  model->train();
  if (!cfg.init.empty()) model->load_state_dict(axle::load(cfg.init).tensors);  // weights by name
  const Device dev = Device::parse(cfg.device);
  const SpmdLayout spmd = spmd_layout(cfg, 4);  // images [B, 1, 28, 28]
  model->to(dev);  // before the optimizer, as with torch_xla
  if (spmd.mesh && spmd.axes.size("model")) shard_linear_layers(*model, *spmd.mesh);
  if (cfg.pattern == "eager") experimental::eager_mode(true);
  // `net` is what the steps and the evaluation call; the plain model everywhere else.
  const nn::ModulePtr net = wrap_fsdp(cfg, model, spmd, layer_wrap_policy()).net;
  std::unique_ptr<optim::Optimizer> opt;
  std::string opt_desc;
  if (cfg.optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum});
    opt_desc = fmt::format("sgd (lr {}, momentum {})", cfg.lr, cfg.momentum);
  } else {
    opt = std::make_unique<optim::AdamW>(net->parameters(), optim::AdamWOptions{.lr = cfg.lr});
    opt_desc = fmt::format("adamw (lr {})", cfg.lr);
  }
  // Each rank reads its own shard, reshuffled every epoch (DistributedSampler); one process reads all.
  std::shared_ptr<data::Sampler> shard;
  if (world > 1) shard = std::make_shared<data::DistributedSampler>(train_set->size(), world, rank, true, cfg.seed);
  data::DataLoader loader(train_set, {.batch_size = cfg.batch_size, .shuffle = world == 1, .seed = cfg.seed}, shard);
  const auto ddp_model = wrap_ddp(cfg, model);
  const std::unique_ptr<pl::MpDeviceLoader> mp_loader = device_loader(cfg, loader, dev, spmd);

  // The training step of each pattern. On xla the loss is read after the step
  // boundary, so reading it never splits the step's graph.
  auto step_fn = [&](const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    const Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    opt->step();
    return loss;
  };
  auto compiled_step = axle::compile(step_fn, {.full_graph = true, .name = "train_step"});
  auto train_step = [&](const data::Example& batch) -> Tensor {
    if (dev.is_cpu()) return step_fn(batch.data, batch.target);
    if (cfg.pattern == "compiled") return compiled_step(batch.data.to(dev), batch.target.to(dev));
    if (cfg.pattern == "multiprocess" || cfg.pattern == "loader" || cfg.pattern == "spmd") {  // seed Patterns 2, 5
      auto step = axle::step();
      // The loader patterns' batches are on the device already (to() is then a no-op). Under
      // SPMD there is one process: optimizer_step is opt.step(); the compiler inserted the
      // gradients' all-reduces.
      Tensor x = batch.data.to(dev), y = batch.target.to(dev);
      opt->zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      xm::optimizer_step(*opt);  // all-reduce the gradients, then step
      return loss;
    }
    if (cfg.pattern == "ddp") {  // seed Pattern 3
      auto step = axle::step();
      Tensor x = batch.data.to(dev), y = batch.target.to(dev);
      opt->zero_grad();
      Tensor loss = cross_entropy((*ddp_model)(x), y);
      loss.backward();  // DDP averages the gradients as backward() finishes
      opt->step();
      return loss;
    }
    if (cfg.pattern == "fsdp" || cfg.pattern == "fsdp-spmd") {
      // v1: backward reduce-scatters each unit's gradients into its shards, so the optimizer's
      // own step() updates them (xm::optimizer_step would all-reduce them again: an error).
      // v2: one process; the partitioner inserted the all-gathers and reduce-scatters.
      auto step = axle::step();
      Tensor x = batch.data.to(dev), y = batch.target.to(dev);
      opt->zero_grad();
      Tensor loss = cross_entropy((*net)(x), y);
      loss.backward();
      opt->step();
      return loss;
    }
    auto step = axle::step();  // seed Pattern 1 (and 6: in eager mode each op has already run)
    return step_fn(batch.data.to(dev), batch.target.to(dev));
  };

  std::printf("axle-train: pattern %s, device %s, model %s (%lld parameters), %s, batch %lld, %lld epoch%s%s, "
              "%d thread%s\n",
              cfg.pattern.c_str(), cfg.device.c_str(), cfg.model.c_str(),
              static_cast<long long>(num_parameters), opt_desc.c_str(),
              static_cast<long long>(cfg.batch_size), static_cast<long long>(cfg.epochs), cfg.epochs == 1 ? "" : "s",
              cfg.max_steps > 0 ? fmt::format(" (at most {} steps)", cfg.max_steps).c_str() : "", threads,
              threads == 1 ? "" : "s");
  print_spmd(cfg, spmd, 4);
  std::printf("data: %lld train / %lld test images from %s in %.2f s\n", static_cast<long long>(train_set->size()),
              static_cast<long long>(test_set->size()), cfg.data.c_str(), load_s);
  std::fflush(stdout);

  std::vector<double> losses, step_ms;  // this process's steps
  std::vector<double> restored;         // the steps before the checkpoint this run resumed from
  std::vector<double> epoch_seconds;
  double train_seconds = 0, test_accuracy = 0;
  int64_t steps = 0, samples = 0;
  const int64_t per_epoch = loader.size();
  CollectiveCount collectives;
  // Each device's peak bytes at the end of the first epoch's training (evaluation excluded).
  std::vector<int64_t> peaks;

  // Checkpoints: model, optimizer, RNG state and the loader position, written atomically,
  // so a run killed at any moment resumes to the same parameters as an uninterrupted one.
  int64_t start_epoch = 0, skip = 0;
  if (!cfg.resume.empty()) {
    Checkpoint ck = load_checkpoint(checkpoint_file(cfg.resume),
                                    {.model = model.get(), .optimizer = opt.get(), .generator = &default_generator()});
    start_epoch = ck.epoch;
    skip = ck.batch;
    steps = ck.step;
    if (auto it = ck.metadata.find(kLossesKey); it != ck.metadata.end()) {
      const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
      AXLE_CHECK(j.is_array(), "[axle-train] ", checkpoint_file(cfg.resume), ": metadata ", kLossesKey,
                 " is not a list of losses");
      restored = j.get<std::vector<double>>();
    }
    std::printf("resumed from %s at epoch %lld, batch %lld, step %lld\n", checkpoint_file(cfg.resume).c_str(),
                static_cast<long long>(start_epoch + 1), static_cast<long long>(skip), static_cast<long long>(steps));
  }
  // Every step's loss so far (what the checkpoint restored, then this process's).
  auto all_losses = [&] {
    std::vector<double> all = restored;
    all.insert(all.end(), losses.begin(), losses.end());
    return all;
  };
  auto save = [&](int64_t epoch, int64_t batch) {
    if (cfg.save.empty()) return;
    if (master) fs::create_directories(cfg.save);  // every rank holds the same parameters: rank 0 writes
    // ... but every rank calls save_checkpoint: xm::save is a collective (a rendezvous), as in torch_xla.
    if (batch == per_epoch) ++epoch, batch = 0;
    save_checkpoint(checkpoint_file(cfg.save), {.model = model.get(), .optimizer = opt.get(),
                                                .generator = &default_generator(), .epoch = epoch, .batch = batch,
                                                .step = steps,
                                                .metadata = {{kLossesKey, nlohmann::json(all_losses()).dump()}}});
  };

  for (int64_t epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    if (cfg.max_steps > 0 && steps >= cfg.max_steps) break;
    const int64_t first_batch = epoch == start_epoch ? skip : 0;
    const int64_t planned =
        cfg.max_steps > 0 ? std::min(per_epoch - first_batch, cfg.max_steps - steps) : per_epoch - first_batch;
    axle_train::Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg.epochs), planned, master);
    loader.set_epoch(epoch);
    const auto t_epoch = Clock::now();
    const size_t first = losses.size();
    int64_t done = 0;
    auto run_epoch = [&](auto& source) {
      auto it = source.begin();
      for (int64_t b = 0; b < first_batch && it != source.end(); ++b) ++it;  // resume inside the epoch
      if (done >= planned) return;
      for (; it != source.end(); ++it) {
        const data::Example& batch = *it;
        const auto t0 = Clock::now();
        const Tensor loss = train_step(batch);
        step_ms.push_back(1e3 * seconds_since(t0));
        const double l = loss.item();
        losses.push_back(l);
        samples += batch.target.size(0);
        ++steps;
        progress.update(++done, l);
        if (cfg.save_every > 0 && steps % cfg.save_every == 0) save(epoch, first_batch + done);
        if (done == planned) break;  // not ++it: that would fetch (and the loader pattern sync) one batch more
      }
    };
    collectives.begin();
    if (mp_loader) run_epoch(*mp_loader);
    else run_epoch(loader);
    collectives.end();
    progress.finish();
    save(epoch, first_batch + done);
    const double es = seconds_since(t_epoch);
    epoch_seconds.push_back(es);
    train_seconds += es;
    if (peaks.empty()) peaks = peak_bytes(dev, spmd.mesh ? cfg.devices : 0);  // before evaluation's batches of 1000
    test_accuracy = evaluate(*net, test_set, dev, spmd.input());
    const double mean_loss =
        std::accumulate(losses.begin() + first, losses.end(), 0.0) / double(std::max<size_t>(1, losses.size() - first));
    std::printf("epoch %lld/%lld: %lld steps, mean loss %.4f, test accuracy %.4f, %.2f s (%.2f ms/step median)\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(cfg.epochs), static_cast<long long>(done),
                mean_loss, test_accuracy, es,
                median(std::vector<double>(step_ms.begin() + first, step_ms.end())));
    std::fflush(stdout);
  }

  if (!cfg.resume.empty() && losses.empty()) {
    // The checkpoint's run had finished: report its figures, the accuracy from the restored model.
    test_accuracy = evaluate(*net, test_set, dev, spmd.input());
    std::printf("nothing left to train: the run in %s had already finished (step %lld); its figures follow "
                "(losses from the checkpoint, test accuracy of the restored model)\n",
                cfg.resume.c_str(), static_cast<long long>(steps));
  }
  const double med = median(step_ms);
  // Samples per second of the whole job (every rank trains on its own shard).
  const double sps = train_seconds > 0 ? double(samples) * world / train_seconds : 0;
  const std::vector<double> every_loss = all_losses();
  const double final_loss = every_loss.empty() ? 0 : every_loss.back();
  std::printf("result: %lld steps, final loss %.4f, test accuracy %.4f, train %.2f s, median step %.2f ms, "
              "%.0f samples/s\n",
              static_cast<long long>(steps), final_loss, test_accuracy, train_seconds, med, sps);
  std::fflush(stdout);

  DeviceMemory memory;
  if (!cfg.json.empty()) memory = report_memory(*opt, peaks, dev, spmd, world);
  if (!cfg.json.empty() && master) {
    nlohmann::ordered_json j;
    j["pattern"] = cfg.pattern;
    j["device"] = cfg.device;
    j["model"] = cfg.model;
    j["parameters"] = num_parameters;
    j["world_size"] = world;
    j["epochs"] = cfg.epochs;
    j["steps"] = steps;
    j["batch_size"] = cfg.batch_size;
    j["optimizer"] = cfg.optimizer;
    j["lr"] = cfg.lr;
    j["momentum"] = cfg.momentum;
    j["seed"] = cfg.seed;
    j["threads"] = threads;
    j["final_loss"] = final_loss;
    j["losses"] = every_loss;
    j["restored_losses"] = restored.size();  // how many of them a resumed run read from its checkpoint
    j["test_accuracy"] = test_accuracy;
    j["train_seconds"] = train_seconds;
    j["epoch_seconds"] = epoch_seconds;
    j["data_load_seconds"] = load_s;
    j["median_step_ms"] = med;
    j["step_ms"] = step_ms;
    j["samples_per_second"] = sps;
    add_device_report(j, memory, spmd, *model, collectives, static_cast<int64_t>(losses.size()));
    write_json(cfg.json, j);
  }
  return 0;
}


// ---------------------------------------------------------------------------------------
// --model gpt (docs/gpt.md): a character-level GPT on a text corpus. An epoch is as many
// tokens as the training split: floor(train tokens / (block_size * batch_size * ranks))
// micro-batches per rank (rounded down to a multiple of --accum-steps, at least one step),
// each a batch of windows drawn at random (RandomWindowSampler: a pure function of the seed,
// the rank, the epoch and the position, so a resumed run sees the same batches).

/// Checkpoint metadata of gpt runs: the per-step learning rates and gradient norms and the
/// validation history (a JSON object), next to kLossesKey.
constexpr const char* kGptHistoryKey = "axle-train.gpt";

struct GptStepOut {
  Tensor loss, grad_norm;
};

int run_gpt(Config cfg) {  // by value: --max-steps alone sets the epochs below
  const int world = runtime::world_size(), rank = runtime::global_ordinal();
  const bool master = rank == 0;
  if (!master) std::freopen("/dev/null", "w", stdout);
  const int threads = set_threads(cfg, world);

  const auto t_load = Clock::now();
  const std::shared_ptr<data::TextCorpus> corpus = data::TextCorpus::from_path(cfg.data);
  auto train_set = std::make_shared<data::TextWindows>(corpus, data::Split::Train, cfg.block_size);
  auto val_set = std::make_shared<data::TextWindows>(corpus, data::Split::Val, cfg.block_size);
  const double load_s = seconds_since(t_load);
  std::vector<int64_t> prompt_ids;
  if (!cfg.prompt.empty()) {
    try {
      prompt_ids = corpus->encode(cfg.prompt);
    } catch (const axle::Error& e) {
      throw UsageError("--prompt: " + std::string(e.what()));
    }
  }
  if (cfg.top_k > corpus->vocab_size())
    throw UsageError(fmt::format("--top-k {} is more than the corpus's {} characters", cfg.top_k, corpus->vocab_size()));

  // Steps: micro-batches per epoch per rank, optimizer steps per epoch, the run's total.
  const int64_t train_tokens = static_cast<int64_t>(corpus->tokens(data::Split::Train).size());
  const int64_t micro_per_epoch =
      std::max(cfg.accum_steps, train_tokens / (cfg.block_size * cfg.batch_size * world) / cfg.accum_steps * cfg.accum_steps);
  const int64_t per_epoch = micro_per_epoch / cfg.accum_steps;
  // --max-steps without --epochs: as many epochs as those steps need (not one epoch's worth).
  if (cfg.max_steps > 0 && !cfg.epochs_given) cfg.epochs = (cfg.max_steps + per_epoch - 1) / per_epoch;
  const int64_t total_steps = cfg.max_steps > 0 ? std::min(cfg.max_steps, per_epoch * cfg.epochs) : per_epoch * cfg.epochs;
  const int64_t horizon = cfg.lr_decay_steps > 0 ? cfg.lr_decay_steps : total_steps;
  if (cfg.warmup_given && cfg.warmup_steps > horizon)
    throw UsageError(fmt::format("--warmup-steps {} is more than the schedule's {} steps", cfg.warmup_steps, horizon));
  const int64_t warmup = std::min(cfg.warmup_steps, horizon);

  manual_seed(cfg.seed);
  models::GPTConfig gc{.vocab_size = corpus->vocab_size(), .block_size = cfg.block_size, .n_layer = cfg.n_layer,
                       .n_head = cfg.n_head, .n_embd = cfg.n_embd, .dropout = cfg.dropout};
  auto gpt = std::make_shared<models::GPT>(gc);
  nn::ModulePtr model = gpt;
  const int64_t num_parameters = model->num_parameters();
  model->train();
  if (!cfg.init.empty()) model->load_state_dict(axle::load(cfg.init).tensors);
  const Device dev = Device::parse(cfg.device);

  const SpmdLayout spmd = spmd_layout(cfg, 2);  // x and y: [B, T], split on B
  model->to(dev);
  if (spmd.mesh && spmd.axes.size("model")) {
    if (cfg.n_head % spmd.axes.size("model") != 0)
      throw UsageError(fmt::format("--mesh {}: --n-head {} is not divisible by the model axis ({}): tensor "
                                   "parallelism splits the heads", mesh_text(spmd.axes), cfg.n_head,
                                   spmd.axes.size("model")));
    gpt->shard_tensor_parallel(*spmd.mesh, "model");
  }
  if (cfg.pattern == "eager") experimental::eager_mode(true);
  // FSDP: one unit per GPTBlock; the root holds tok (tied head), pos and ln.
  const Wrapped wrapped = wrap_fsdp(cfg, model, spmd, fsdp::transformer_auto_wrap_policy({"GPTBlock"}));
  nn::ModulePtr net = wrapped.net;
  const std::shared_ptr<fsdp::XlaFullyShardedDataParallel>& fsdp_model = wrapped.fsdp_v1;

  // AdamW with GPT's groups: decay on the matrices only. FSDP v1's optimizer holds the
  // shards: a shard decays when every parameter it holds is a matrix.
  std::vector<optim::ParamGroup> groups;
  if (fsdp_model) {
    std::map<std::string, bool> matrix_shard;
    for (const auto& unit : fsdp_model->get_shard_metadata().params) {
      bool all = true;
      for (const Shape& s : unit.shapes) all = all && s.size() >= 2;
      matrix_shard[unit.shard_name] = all;
    }
    std::vector<Tensor> decay, no_decay;
    for (const auto& [name, p] : net->named_parameters()) (matrix_shard[name] ? decay : no_decay).push_back(p);
    groups = {optim::ParamGroup(decay, -1, {{"weight_decay", cfg.weight_decay}}),
              optim::ParamGroup(no_decay, -1, {{"weight_decay", 0.0}})};
  } else {
    groups = gpt->param_groups(cfg.weight_decay);
  }
  std::unique_ptr<optim::Optimizer> opt;
  std::string opt_desc;
  if (cfg.optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum});
    opt_desc = fmt::format("sgd (lr {}, momentum {})", cfg.lr, cfg.momentum);
  } else {
    opt = std::make_unique<optim::AdamW>(
        groups, optim::AdamWOptions{.lr = cfg.lr, .beta1 = cfg.beta1, .beta2 = cfg.beta2, .weight_decay = cfg.weight_decay});
    opt_desc = fmt::format("adamw (lr {}, betas {}/{}, weight decay {} on matrices)", cfg.lr, cfg.beta1, cfg.beta2,
                           cfg.weight_decay);
  }
  optim::LambdaLR sched(*opt, optim::warmup_cosine(cfg.lr, warmup, horizon, cfg.min_lr));

  auto sampler = std::make_shared<data::RandomWindowSampler>(train_set->size(), micro_per_epoch * cfg.batch_size,
                                                             cfg.seed, world, rank);
  data::DataLoader loader(train_set, {.batch_size = cfg.batch_size}, sampler);
  const auto ddp_model = wrap_ddp(cfg, model);
  if (ddp_model) net = ddp_model;
  const std::unique_ptr<pl::MpDeviceLoader> mp_loader = device_loader(cfg, loader, dev, spmd);

  // One optimizer step over accum_steps micro-batches: each micro-batch's loss / N is
  // backpropagated (the gradients add up to the mean's), then the gradients are reduced
  // (multiprocess), clipped in the graph and the optimizer steps. Returns the mean loss and
  // the global gradient norm before clipping, both still on the device.
  const int64_t V = corpus->vocab_size();
  const double clip = cfg.grad_clip > 0 ? cfg.grad_clip : std::numeric_limits<double>::infinity();
  auto micro_loss = [&](const Tensor& x, const Tensor& y) {
    return cross_entropy(reshape((*net)(x), {-1, V}), reshape(y, {-1}));
  };
  auto step_fn = [&](const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) -> GptStepOut {
    const size_t n = xs.size();
    opt->zero_grad();
    Tensor total;
    for (size_t k = 0; k < n; ++k) {
      auto fwd_bwd = [&] {
        Tensor l = micro_loss(xs[k], ys[k]);
        (n > 1 ? div(l, double(n)) : l).backward();
        Tensor d = l.detach();
        total = total.defined() ? add(total, d) : d;
      };
      if (k + 1 < n && ddp_model) {
        auto guard = ddp_model->no_sync();
        fwd_bwd();
      } else if (k + 1 < n && fsdp_model) {
        auto guard = fsdp_model->no_sync();
        fwd_bwd();
      } else {
        fwd_bwd();
      }
    }
    const Tensor loss = n > 1 ? div(total, double(n)) : total;
    // xm::optimizer_step's reduction, done apart so that the clipping sees the mean gradients.
    if (cfg.pattern == "multiprocess" || cfg.pattern == "loader") xm::reduce_gradients(*opt);
    Tensor norm = fsdp_model ? fsdp_model->clip_grad_norm_(clip) : nn::utils::clip_grad_norm_(opt->parameters(), clip);
    opt->step();
    return {loss, norm};
  };
  auto compiled_step = axle::compile(step_fn, {.full_graph = true, .name = "train_step"});
  auto train_step = [&](const std::vector<data::Example>& micro) -> GptStepOut {
    std::vector<Tensor> xs, ys;
    for (const data::Example& b : micro) {
      xs.push_back(dev.is_cpu() ? b.data : b.data.to(dev));
      ys.push_back(dev.is_cpu() ? b.target : b.target.to(dev));
    }
    if (dev.is_cpu()) return step_fn(xs, ys);
    if (cfg.pattern == "compiled") return compiled_step(xs, ys);
    auto step = axle::step();
    return step_fn(xs, ys);
  };

  // Validation loss: the same eval_iters batches every time (the validation sampler's epoch 0),
  // eval mode, no gradients; every rank computes it (FSDP's forwards are collectives).
  auto val_sampler = std::make_shared<data::RandomWindowSampler>(val_set->size(), cfg.eval_iters * cfg.batch_size,
                                                                 cfg.seed + 1);
  data::DataLoader val_loader(val_set, {.batch_size = cfg.batch_size}, val_sampler);
  auto evaluate_val = [&]() -> double {
    net->eval();
    NoGradGuard no_grad;
    val_loader.set_epoch(0);
    Tensor total;
    int64_t n = 0;
    for (const data::Example& b : val_loader) {
      std::vector<Tensor> xy{b.data, b.target};
      if (!dev.is_cpu()) xy = xm::send_cpu_data_to_device(xy, dev, spmd.input());
      const Tensor l = micro_loss(xy[0], xy[1]);
      total = total.defined() ? add(total, l) : l;
      ++n;
    }
    if (!dev.is_cpu()) axle::sync();
    net->train();
    return n > 0 ? total.item() / double(n) : 0.0;
  };

  std::printf("axle-train: pattern %s, device %s, model gpt (%lld parameters: %lld layers, %lld heads, %lld wide, "
              "context %lld, dropout %g), %s, batch %lld%s, %lld epoch%s of %lld steps%s, %d thread%s\n",
              cfg.pattern.c_str(), cfg.device.c_str(), static_cast<long long>(num_parameters),
              static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_head), static_cast<long long>(cfg.n_embd),
              static_cast<long long>(cfg.block_size), cfg.dropout, opt_desc.c_str(),
              static_cast<long long>(cfg.batch_size),
              cfg.accum_steps > 1 ? fmt::format(" x {} accumulated", cfg.accum_steps).c_str() : "",
              static_cast<long long>(cfg.epochs), cfg.epochs == 1 ? "" : "s", static_cast<long long>(per_epoch),
              cfg.max_steps > 0 ? fmt::format(" (at most {} steps)", cfg.max_steps).c_str() : "", threads,
              threads == 1 ? "" : "s");
  std::printf("schedule: warmup %lld steps, cosine to lr %g at step %lld; grad clip %s\n",
              static_cast<long long>(warmup), cfg.min_lr, static_cast<long long>(horizon),
              cfg.grad_clip > 0 ? fmt::format("{}", cfg.grad_clip).c_str() : "off");
  print_spmd(cfg, spmd, 2);
  std::printf("data: %s, %lld characters (%lld train / %lld validation), vocabulary %lld, in %.2f s\n",
              cfg.data.c_str(), static_cast<long long>(train_tokens + corpus->tokens(data::Split::Val).size()),
              static_cast<long long>(train_tokens), static_cast<long long>(corpus->tokens(data::Split::Val).size()),
              static_cast<long long>(V), load_s);
  std::fflush(stdout);

  // History: per step (loss, lr, grad norm) and the validation points; a resumed run starts
  // from the checkpoint's.
  std::vector<double> losses, lrs, grad_norms, step_ms;
  std::vector<int64_t> val_steps;
  std::vector<double> val_losses;
  size_t restored = 0;
  std::vector<double> epoch_seconds;
  double train_seconds = 0;
  int64_t steps = 0, tokens = 0;
  CollectiveCount collectives;
  std::vector<int64_t> peaks;
  int64_t start_epoch = 0, skip = 0;
  if (!cfg.resume.empty()) {
    Checkpoint ck = load_checkpoint(checkpoint_file(cfg.resume), {.model = model.get(), .optimizer = opt.get(),
                                                                  .scheduler = &sched,
                                                                  .generator = &default_generator()});
    start_epoch = ck.epoch;
    skip = ck.batch;
    steps = ck.step;
    auto it = ck.metadata.find(kGptHistoryKey);
    AXLE_CHECK(it != ck.metadata.end(), "[axle-train] ", checkpoint_file(cfg.resume), ": no ", kGptHistoryKey,
               " metadata: not a --model gpt checkpoint");
    const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    AXLE_CHECK(j.is_object(), "[axle-train] ", checkpoint_file(cfg.resume), ": metadata ", kGptHistoryKey,
               " is not a JSON object");
    losses = j.value("losses", std::vector<double>{});
    lrs = j.value("lrs", std::vector<double>{});
    grad_norms = j.value("grad_norms", std::vector<double>{});
    val_steps = j.value("val_steps", std::vector<int64_t>{});
    val_losses = j.value("val_losses", std::vector<double>{});
    restored = losses.size();
    std::printf("resumed from %s at epoch %lld, step %lld of the epoch, step %lld\n",
                checkpoint_file(cfg.resume).c_str(), static_cast<long long>(start_epoch + 1),
                static_cast<long long>(skip), static_cast<long long>(steps));
  }
  auto save = [&](int64_t epoch, int64_t batch) {
    if (cfg.save.empty()) return;
    if (master) fs::create_directories(cfg.save);
    if (batch == per_epoch) ++epoch, batch = 0;
    nlohmann::json h;
    h["losses"] = losses;
    h["lrs"] = lrs;
    h["grad_norms"] = grad_norms;
    h["val_steps"] = val_steps;
    h["val_losses"] = val_losses;
    save_checkpoint(checkpoint_file(cfg.save),
                    {.model = model.get(), .optimizer = opt.get(), .scheduler = &sched,
                     .generator = &default_generator(), .epoch = epoch, .batch = batch, .step = steps,
                     .metadata = {{kLossesKey, nlohmann::json(losses).dump()}, {kGptHistoryKey, h.dump()}}});
  };
  auto validate_now = [&] {
    const double v = evaluate_val();
    val_steps.push_back(steps);
    val_losses.push_back(v);
    std::printf("step %lld: val loss %.4f\n", static_cast<long long>(steps), v);
    std::fflush(stdout);
  };

  for (int64_t epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    if (steps >= total_steps) break;
    const int64_t first_step = epoch == start_epoch ? skip : 0;
    const int64_t planned = std::min(per_epoch - first_step, total_steps - steps);
    axle_train::Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg.epochs), planned, master);
    progress.set_units(double(cfg.batch_size * cfg.accum_steps * cfg.block_size * world), "tok/s");
    loader.set_epoch(epoch);
    const auto t_epoch = Clock::now();
    const size_t first = losses.size();
    int64_t done = 0;
    double eval_s = 0;  // validation inside the epoch, not counted as training time
    auto run_epoch = [&](auto& source) {
      auto it = source.begin();
      for (int64_t b = 0; b < first_step * cfg.accum_steps && it != source.end(); ++b) ++it;  // resume
      std::vector<data::Example> micro;
      while (done < planned && it != source.end()) {
        micro.push_back(*it);
        if (static_cast<int64_t>(micro.size()) < cfg.accum_steps) {
          ++it;
          continue;
        }
        const double lr = sched.get_last_lr();
        const auto t0 = Clock::now();
        const GptStepOut out = train_step(micro);
        micro.clear();
        const double l = out.loss.item(), g = out.grad_norm.item();
        step_ms.push_back(1e3 * seconds_since(t0));
        sched.step();
        losses.push_back(l);
        lrs.push_back(lr);
        grad_norms.push_back(g);
        tokens += cfg.batch_size * cfg.accum_steps * cfg.block_size;
        ++steps;
        progress.update(++done, l);
        if (cfg.eval_every > 0 && steps % cfg.eval_every == 0 && steps < total_steps) {
          const auto te = Clock::now();
          validate_now();
          eval_s += seconds_since(te);
        }
        if (cfg.save_every > 0 && steps % cfg.save_every == 0) save(epoch, first_step + done);
        if (done == planned) break;  // not ++it: no batch fetched beyond the last step's
        ++it;
      }
    };
    collectives.begin();
    if (mp_loader) run_epoch(*mp_loader);
    else run_epoch(loader);
    collectives.end();
    progress.finish();
    save(epoch, first_step + done);
    const double es = seconds_since(t_epoch) - eval_s;
    epoch_seconds.push_back(es);
    train_seconds += es;
    if (peaks.empty()) peaks = peak_bytes(dev, spmd.mesh ? cfg.devices : 0);
    const double mean_loss = std::accumulate(losses.begin() + static_cast<std::ptrdiff_t>(first), losses.end(), 0.0) /
                             double(std::max<size_t>(1, losses.size() - first));
    std::printf("epoch %lld/%lld: %lld steps, mean loss %.4f, %.2f s (%.2f ms/step median)\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(cfg.epochs), static_cast<long long>(done),
                mean_loss, es, median(std::vector<double>(step_ms.begin() + static_cast<std::ptrdiff_t>(first - restored), step_ms.end())));
    std::fflush(stdout);
  }
  // The final validation loss (what test_accuracy is to mlp/cnn).
  if (val_steps.empty() || val_steps.back() != steps) validate_now();
  const double val_loss = val_losses.back();

  // Sampling: on a cpu copy of the trained weights (eagerly, one token at a time), from a
  // generator seeded with --seed: the same seed and weights give the same text.
  std::string sample_text;
  if (cfg.sample > 0) {
    std::string text;
    models::GPT sampler_model(gc);
    nn::StateDict sd;
    for (const auto& [name, t] : model->state_dict()) sd.emplace_back(name, t.to(Device(kCPU)));
    sampler_model.load_state_dict(sd);
    Generator gen(cfg.seed);
    const std::vector<int64_t> ids = sampler_model.generate(prompt_ids, cfg.sample, cfg.temperature, cfg.top_k, gen);
    sample_text = corpus->decode(ids);
    std::printf("sample (%lld characters after the prompt, temperature %g, top-k %lld):\n%s\n",
                static_cast<long long>(cfg.sample), cfg.temperature, static_cast<long long>(cfg.top_k),
                sample_text.c_str());
  }

  const double med = median(step_ms);
  const double tps = train_seconds > 0 ? double(tokens) * world / train_seconds : 0;
  const double final_loss = losses.empty() ? 0 : losses.back();
  std::printf("result: %lld steps, final loss %.4f, val loss %.4f, train %.2f s, median step %.2f ms, %.0f tokens/s\n",
              static_cast<long long>(steps), final_loss, val_loss, train_seconds, med, tps);
  std::fflush(stdout);

  DeviceMemory memory;
  if (!cfg.json.empty()) memory = report_memory(*opt, peaks, dev, spmd, world);
  if (!cfg.json.empty() && master) {
    nlohmann::ordered_json j;
    j["pattern"] = cfg.pattern;
    j["device"] = cfg.device;
    j["model"] = cfg.model;
    j["parameters"] = num_parameters;
    j["gpt"] = {{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head}, {"n_embd", cfg.n_embd},
                {"block_size", cfg.block_size}, {"dropout", cfg.dropout}, {"vocab_size", V}};
    j["data"] = cfg.data;
    j["train_tokens"] = train_tokens;
    j["world_size"] = world;
    j["epochs"] = cfg.epochs;
    j["steps_per_epoch"] = per_epoch;
    j["steps"] = steps;
    j["batch_size"] = cfg.batch_size;
    j["accum_steps"] = cfg.accum_steps;
    j["optimizer"] = cfg.optimizer;
    j["lr"] = cfg.lr;
    j["min_lr"] = cfg.min_lr;
    j["warmup_steps"] = warmup;
    j["weight_decay"] = cfg.weight_decay;
    j["betas"] = {cfg.beta1, cfg.beta2};
    j["grad_clip"] = cfg.grad_clip;
    j["momentum"] = cfg.momentum;
    j["seed"] = cfg.seed;
    j["threads"] = threads;
    j["final_loss"] = final_loss;
    j["losses"] = losses;
    j["restored_losses"] = restored;
    j["learning_rates"] = lrs;
    j["grad_norms"] = grad_norms;
    j["val_steps"] = val_steps;
    j["val_losses"] = val_losses;
    j["val_loss"] = val_loss;        // gpt's final figure, in place of test_accuracy
    j["test_accuracy"] = nullptr;    // does not apply to a language model
    j["sample"] = sample_text;
    j["prompt"] = cfg.prompt;
    j["train_seconds"] = train_seconds;
    j["epoch_seconds"] = epoch_seconds;
    j["data_load_seconds"] = load_s;
    j["median_step_ms"] = med;
    j["step_ms"] = step_ms;
    j["tokens_per_second"] = tps;
    j["samples_per_second"] = train_seconds > 0 ? tps / double(cfg.block_size) : 0.0;  // windows per second
    add_device_report(j, memory, spmd, *model, collectives, static_cast<int64_t>(losses.size() - restored));
    write_json(cfg.json, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"axle-train: train a model (mlp or cnn on Fashion-MNIST, gpt on text) with one of the PyTorch/XLA training-loop patterns",
               "axle-train"};
  app.add_option("--pattern", cfg.pattern, "training-loop pattern")
      ->check(CLI::IsMember({"single", "multiprocess", "ddp", "compiled", "loader", "eager", "spmd", "fsdp", "fsdp-spmd"}))
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    return fail(e.what(), 2);
  }
  try {
    if (cfg.model == "gpt") {
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
    if (spmd_pattern(cfg)) {
      // The virtual devices of this process (read by the runtime at its first use).
      const std::string n = std::to_string(cfg.devices);
      const char* set = std::getenv("AXLE_CPU_DEVICES");
      if (set && n != set)
        throw UsageError(fmt::format("--devices {} disagrees with AXLE_CPU_DEVICES={}", cfg.devices, set));
      ::setenv("AXLE_CPU_DEVICES", n.c_str(), 1);
    }
    auto run_model = [](const Config& c) { return c.model == "gpt" ? run_gpt(c) : run(c); };
    if (!multi_process(cfg)) return run_model(cfg);
    int status = 0;
    axle::launch([&](int) { status = run_model(cfg); }, {.nprocs = cfg.devices, .timeout_s = cfg.timeout});
    return status;
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what(), 1);
  }
}
