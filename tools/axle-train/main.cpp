// axle-train: trains a model on Fashion-MNIST with one of the seed's training-loop
// patterns (docs: README.md, DESIGN.md "The CLI: axle-train").
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
};

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

// One process's training run; under --pattern multiprocess, ddp and loader each launched rank
// runs it on its shard of the data (rank 0 prints and writes the results).
int run(const Config& cfg) {
  const int world = runtime::world_size(), rank = runtime::global_ordinal();
  const bool master = rank == 0;
  if (!master) std::freopen("/dev/null", "w", stdout);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  else if (world > 1) omp_set_num_threads(std::max(1, omp_get_num_procs() / world));  // share the cores
  const int threads = omp_get_max_threads();

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
  // SPMD (seed Pattern 5 with input_sharding): this one process drives every device. The
  // mesh's "data" axis splits each batch; a "model" axis splits the linear layers.
  std::optional<xs::Mesh> mesh;
  std::optional<xs::ShardingSpec> input_sharding;
  MeshAxes mesh_axes;
  if (spmd_pattern(cfg)) {
    runtime::use_spmd();  // before any tensor is on the device
    // fsdp-spmd: one mesh axis "fsdp" over every device, which splits the batches too.
    if (cfg.pattern == "fsdp-spmd") mesh_axes = MeshAxes{{"fsdp"}, {cfg.devices}};
    else mesh_axes = parse_mesh(cfg);
    std::vector<int64_t> ids(static_cast<size_t>(cfg.devices));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    mesh.emplace(ids, mesh_axes.sizes, mesh_axes.names);
    const std::string batch_axis = mesh_axes.size("data") ? "data" : mesh_axes.size("fsdp") ? "fsdp" : "";
    if (!batch_axis.empty())
      input_sharding.emplace(*mesh, xs::PartitionSpec{batch_axis, xs::None, xs::None, xs::None});
  }
  model->to(dev);  // before the optimizer, as with torch_xla
  if (mesh && mesh_axes.size("model")) shard_linear_layers(*model, *mesh);
  if (cfg.pattern == "eager") experimental::eager_mode(true);
  // FSDP: the model wrapped before the optimizer is built (v1's optimizer holds the shards).
  // `net` is what the steps and the evaluation call; the plain model everywhere else.
  nn::ModulePtr net = model;
  std::shared_ptr<fsdp::XlaFullyShardedDataParallel> fsdp_model;
  if (cfg.pattern == "fsdp") {  // v1: one process per device, shards over the "xla" process group
    dist::init_process_group("xla", "xla://");
    fsdp::XlaFullyShardedDataParallelOptions o;
    o.auto_wrap_policy = layer_wrap_policy();
    fsdp_model = std::make_shared<fsdp::XlaFullyShardedDataParallel>(model, o);
    net = fsdp_model;
  }
  if (cfg.pattern == "fsdp-spmd") {  // v2: parameters sharded on "fsdp", each layer's output on dim 0
    fsdp::SpmdFullyShardedDataParallelOptions o;
    o.mesh = *mesh;
    o.auto_wrap_policy = layer_wrap_policy();
    net = std::make_shared<fsdp::SpmdFullyShardedDataParallel>(model, o);
  }
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
  // Pattern 3: DDP over the "xla" process group (parameters broadcast from rank 0 here).
  std::shared_ptr<nn::parallel::DistributedDataParallel> ddp_model;
  if (cfg.pattern == "ddp") {
    dist::init_process_group("xla", "xla://");
    ddp_model = std::make_shared<nn::parallel::DistributedDataParallel>(
        model, nn::parallel::DistributedDataParallelOptions{.gradient_as_bucket_view = true});
  }
  // Pattern 5: batches arrive on the device, loaded and moved while the step runs.
  std::unique_ptr<pl::MpDeviceLoader> mp_loader;
  if (cfg.pattern == "loader") mp_loader = std::make_unique<pl::MpDeviceLoader>(loader, dev);
  if (spmd_pattern(cfg)) {
    pl::MpDeviceLoaderOptions o;
    if (input_sharding) o.input_sharding = *input_sharding;  // images [B, 1, 28, 28]; labels stay replicated
    mp_loader = std::make_unique<pl::MpDeviceLoader>(loader, dev, o);
  }

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
  if (mesh) {
    std::printf("spmd: %d devices, mesh %s, input sharding %s\n", cfg.devices, mesh_text(mesh_axes).c_str(),
                input_sharding ? fmt::format("({}, None, None, None)", input_sharding->partition_spec[0].items()[0]).c_str()
                               : "none (replicated)");
  }
  std::printf("data: %lld train / %lld test images from %s in %.2f s\n", static_cast<long long>(train_set->size()),
              static_cast<long long>(test_set->size()), cfg.data.c_str(), load_s);
  std::fflush(stdout);

  std::vector<double> losses, step_ms;  // this process's steps
  std::vector<double> restored;         // the steps before the checkpoint this run resumed from
  std::vector<double> epoch_seconds;
  double train_seconds = 0, test_accuracy = 0;
  int64_t steps = 0, samples = 0;
  const int64_t per_epoch = loader.size();
  // Collectives of the training steps only (evaluation and checkpoints excluded).
  std::map<std::string, int64_t> collectives;
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
    std::map<std::string, int64_t> before;
    for (const auto& [key, counter] : collective_counters()) before[key] = metrics::counter_value(counter);
    if (mp_loader) run_epoch(*mp_loader);
    else run_epoch(loader);
    for (const auto& [key, counter] : collective_counters()) collectives[key] += metrics::counter_value(counter) - before[key];
    progress.finish();
    save(epoch, first_batch + done);
    const double es = seconds_since(t_epoch);
    epoch_seconds.push_back(es);
    train_seconds += es;
    if (peaks.empty()) peaks = peak_bytes(dev, mesh ? cfg.devices : 0);  // before evaluation's batches of 1000
    test_accuracy = evaluate(*net, test_set, dev, input_sharding ? &*input_sharding : nullptr);
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
    test_accuracy = evaluate(*net, test_set, dev, input_sharding ? &*input_sharding : nullptr);
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

  // Memory per device (a rendezvous over the ranks: every rank takes part).
  DeviceMemory memory;
  if (!cfg.json.empty()) {
    if (peaks.empty()) peaks = peak_bytes(dev, mesh ? cfg.devices : 0);
    memory = device_memory(*opt, peaks, mesh.has_value());
    if (world > 1) memory = gather_ranks(memory);
  }
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
    // Memory, one entry per device (rank order, or SPMD device order).
    j["devices"] = memory.peak.size();
    j["peak_bytes_per_device"] = memory.peak;
    j["parameter_bytes_per_device"] = memory.parameters;
    j["gradient_bytes_per_device"] = memory.gradients;
    j["optimizer_bytes_per_device"] = memory.optimizer;
    std::vector<int64_t> state_bytes(memory.peak.size());
    for (size_t k = 0; k < state_bytes.size(); ++k)
      state_bytes[k] = memory.parameters[k] + memory.gradients[k] + memory.optimizer[k];
    j["training_state_bytes_per_device"] = state_bytes;
    if (mesh) {
      // SPMD: the mesh and the collectives the partitioner inserted (per training step,
      // counted as they ran).
      j["mesh"] = nlohmann::ordered_json::object();
      for (size_t i = 0; i < mesh_axes.names.size(); ++i) j["mesh"][mesh_axes.names[i]] = mesh_axes.sizes[i];
      const int64_t trained = static_cast<int64_t>(losses.size());
      j["collectives"] = nlohmann::ordered_json::object();
      j["collectives"]["steps"] = trained;
      j["collectives"]["per_step"] = nlohmann::ordered_json::object();
      for (const auto& [key, counter] : collective_counters())
        j["collectives"]["per_step"][key] = trained > 0 ? double(collectives[key]) / double(trained) : 0.0;
      j["collectives"]["total"] = collectives;
      j["parameter_shardings"] = nlohmann::ordered_json::object();  // after training: kept across steps
      for (const auto& [name, p] : model->named_parameters()) j["parameter_shardings"][name] = xs::get_sharding_spec(p);
    }
    // torch_xla-named counters and timers (name -> total ms); empty on the eager cpu path.
    j["counters"] = nlohmann::ordered_json::object();
    for (const auto& [name, v] : metrics::counters()) j["counters"][name] = v;
    j["metrics"] = nlohmann::ordered_json::object();
    for (const auto& [name, ms] : metrics::timers_ms()) j["metrics"][name] = ms;
    write_json(cfg.json, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"axle-train: train a model on Fashion-MNIST with one of the PyTorch/XLA training-loop patterns",
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
  app.add_option("--data", cfg.data, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--json", cfg.json, "write the result as one JSON object to this file");
  app.add_option("--save", cfg.save, "write checkpoints (DIR/checkpoint.safetensors) at each epoch end");
  app.add_option("--save-every", cfg.save_every, "also checkpoint every N steps")->check(positive<int64_t>());
  app.add_option("--resume", cfg.resume, "resume from the checkpoint in this directory");
  app.add_option("--timeout", cfg.timeout, "rendezvous and collective timeout of the multi-process patterns, seconds")
      ->check(positive<double>())
      ->capture_default_str();
  app.add_option("--init", cfg.init, "start from these weights (safetensors, by parameter name; e.g. from PyTorch)");

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
    validate(cfg);
    if (spmd_pattern(cfg)) {
      // The virtual devices of this process (read by the runtime at its first use).
      const std::string n = std::to_string(cfg.devices);
      const char* set = std::getenv("AXLE_CPU_DEVICES");
      if (set && n != set)
        throw UsageError(fmt::format("--devices {} disagrees with AXLE_CPU_DEVICES={}", cfg.devices, set));
      ::setenv("AXLE_CPU_DEVICES", n.c_str(), 1);
    }
    if (!multi_process(cfg)) return run(cfg);
    int status = 0;
    axle::launch([&](int) { status = run(cfg); }, {.nprocs = cfg.devices, .timeout_s = cfg.timeout});
    return status;
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what(), 1);
  }
}
