// axle-train's checkpoint layouts (checkpoints.h).
#include "checkpoints.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "axle/dist.h"
#include "axle/distributed_checkpoint.h"
#include "axle/fsdp_checkpoint.h"
#include "axle/optim/optimizer.h"
#include "axle/runtime.h"
#include "axle/xm.h"

namespace axle_train {

namespace fs = std::filesystem;
namespace dc = axle::experimental::distributed_checkpoint;
using namespace axle;

namespace {

/// fsdp's pointer: the prefix of the complete set of rank files.
constexpr const char* kPrefixKey = "prefix";
/// distributed: the state directory (under DIR) and the optimizer's groups and scalars.
constexpr const char* kStateKey = "axle-train.state";
constexpr const char* kOptimizerKey = "axle-train.optimizer";

/// Writes `text` to `path` atomically (a temporary file renamed).
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.close();
    AXLE_CHECK(f.good(), "[axle-train] failed writing ", tmp.string());
  }
  fs::rename(tmp, path);
}

/// Removes the entries of `dir` whose names start with `stem` (older checkpoints, and what a
/// killed run left half-written), but not `keep` nor, with `keep_prefixed`, what starts with it.
void remove_others(const fs::path& dir, const std::string& stem, const std::string& keep, bool keep_prefixed) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool kept = name == keep || (keep_prefixed && name.rfind(keep, 0) == 0);
    if (name.rfind(stem, 0) == 0 && !kept) fs::remove_all(e.path());
  }
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream f(path);
  AXLE_CHECK(f.good(), "[axle-train] can't open '", path.string(), "': no checkpoint there");
  const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(j.is_object() && j.contains(kPrefixKey) && j[kPrefixKey].is_string(), "[axle-train] '", path.string(),
             "': expected a JSON object with a string \"", kPrefixKey, "\"");
  return j;
}

/// The optimizer's state without its tensors: groups (options, parameter indices) and, per
/// parameter, its scalars and the names of its tensors.
std::string optimizer_layout(const optim::OptimizerState& s) {
  nlohmann::json groups = nlohmann::json::array(), states = nlohmann::json::array();
  for (const auto& g : s.param_groups) groups.push_back({{"options", g.options}, {"params", g.params}});
  for (const auto& ps : s.state) {
    std::vector<std::string> names;
    for (const auto& [k, t] : ps.tensors) names.push_back(k);
    states.push_back({{"scalars", ps.scalars}, {"tensors", names}});
  }
  return nlohmann::json{{"param_groups", groups}, {"state", states}}.dump();
}

std::string tensor_key(size_t i, const std::string& k) { return fmt::format("optimizer.{}.{}", i, k); }

/// The model's and the optimizer's tensors under the names the state directory holds.
nn::StateDict distributed_tensors(const Checkpoint& c, const optim::OptimizerState& s) {
  nn::StateDict sd;
  for (const auto& [name, t] : c.model->state_dict()) sd.emplace_back("model." + name, t);
  for (size_t i = 0; i < s.state.size(); ++i)
    for (const auto& [k, t] : s.state[i].tensors) sd.emplace_back(tensor_key(i, k), t);
  return sd;
}

/// Reads the optimizer's state back: its layout from `text`, its tensors from `dir` (into
/// host tensors shaped as the parameters; load_state_dict moves them to the device).
optim::OptimizerState load_optimizer(optim::Optimizer& opt, const std::string& text, const fs::path& dir,
                                     const std::string& file) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(j.is_object() && j.contains("param_groups") && j.contains("state"), "[axle-train] ", file, ": metadata ",
             kOptimizerKey, " is not an optimizer layout");
  const std::vector<Tensor> params = opt.parameters();
  optim::OptimizerState s;
  for (const auto& g : j["param_groups"])
    s.param_groups.push_back({g.at("options").get<std::map<std::string, double>>(), g.at("params").get<std::vector<int64_t>>()});
  nn::StateDict targets;
  for (size_t i = 0; i < j["state"].size(); ++i) {
    const auto& st = j["state"][i];
    optim::ParamState ps;
    ps.scalars = st.at("scalars").get<std::map<std::string, double>>();
    for (const std::string& k : st.at("tensors").get<std::vector<std::string>>()) {
      AXLE_CHECK(i < params.size(), "[axle-train] ", file, ": optimizer state for parameter ", i, " of ", params.size());
      ps.tensors[k] = zeros(params[i].shape(), {.dtype = params[i].dtype()});
      targets.emplace_back(tensor_key(i, k), ps.tensors[k]);
    }
    s.state.push_back(std::move(ps));
  }
  if (!targets.empty()) dc::load(targets, dir);
  return s;
}

}  // namespace

std::string plain_checkpoint_file(const std::string& dir) { return (fs::path(dir) / "checkpoint.safetensors").string(); }

std::string fsdp_checkpoint_file(const std::string& dir) { return (fs::path(dir) / "checkpoint.json").string(); }

void save_plain(const std::string& dir, const Checkpoint& c) {
  if (runtime::global_ordinal() == 0) fs::create_directories(dir);  // every rank holds the same parameters: rank 0 writes
  // ... but every rank calls save_checkpoint: xm::save is a collective (a rendezvous), as in torch_xla.
  save_checkpoint(plain_checkpoint_file(dir), c);
}

Checkpoint load_plain(const std::string& dir, Checkpoint into) { return load_checkpoint(plain_checkpoint_file(dir), into); }

void save_fsdp(const std::string& dir, const fsdp::XlaFullyShardedDataParallel& model, const Checkpoint& c) {
  fs::create_directories(dir);
  const std::string stem = fmt::format("step-{}_", c.step);
  // Every rank writes its file; the call returns when every rank's is there.
  fsdp::save_sharded_checkpoint((fs::path(dir) / stem).string(), model, c);
  if (runtime::global_ordinal() != 0) return;
  write_atomically(fsdp_checkpoint_file(dir), nlohmann::json{{kPrefixKey, stem}}.dump() + "\n");
  remove_others(dir, "step-", stem, /*keep_prefixed=*/true);  // the rank files of `stem`
}

Checkpoint load_fsdp(const std::string& dir, fsdp::XlaFullyShardedDataParallel& model, Checkpoint into) {
  const auto j = read_json(fsdp_checkpoint_file(dir));
  return fsdp::load_sharded_checkpoint((fs::path(dir) / j[kPrefixKey].get<std::string>()).string(), model, into);
}

void save_distributed(const std::string& dir, const Checkpoint& c) {
  fs::create_directories(dir);
  const std::string state = fmt::format("state-{}", c.step);
  const optim::OptimizerState s = c.optimizer->state_dict();
  dc::save(distributed_tensors(c, s), fs::path(dir) / state);
  Checkpoint rest = c;  // the tensors are in the state directory
  rest.model = nullptr;
  rest.optimizer = nullptr;
  rest.metadata[kStateKey] = state;
  rest.metadata[kOptimizerKey] = optimizer_layout(s);
  save_checkpoint(plain_checkpoint_file(dir), rest);
  remove_others(dir, "state-", state, /*keep_prefixed=*/false);
}

Checkpoint load_distributed(const std::string& dir, Checkpoint into) {
  nn::Module* model = into.model;
  optim::Optimizer* opt = into.optimizer;
  into.model = nullptr;
  into.optimizer = nullptr;
  const std::string file = plain_checkpoint_file(dir);
  Checkpoint out = load_checkpoint(file, into);
  const auto state = out.metadata.find(kStateKey), layout = out.metadata.find(kOptimizerKey);
  AXLE_CHECK(state != out.metadata.end() && layout != out.metadata.end(), "[axle-train] ", file,
             ": not a checkpoint of --pattern spmd or fsdp-spmd (no ", kStateKey, " metadata)");
  const fs::path state_dir = fs::path(dir) / state->second;
  // Every check (shapes, names) runs before a tensor changes: the optimizer's host copies
  // first, then the model in place, in its shardings.
  const optim::OptimizerState s = load_optimizer(*opt, layout->second, state_dir, file);
  nn::StateDict sd;
  for (const auto& [name, t] : model->state_dict()) sd.emplace_back("model." + name, t);
  dc::load(sd, state_dir);
  opt->load_state_dict(s);
  out.metadata.erase(kStateKey);
  out.metadata.erase(kOptimizerKey);
  out.model = model;
  out.optimizer = opt;
  return out;
}

}  // namespace axle_train
