// Training checkpoints: model, optimizer, scheduler, generator and data position in
// one safetensors file. Tensors are stored bit for bit; the rest is JSON in the
// "axle.checkpoint" metadata string (doubles round-trip exactly through nlohmann's dump).
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "axle/generator.h"
#include "axle/optim/lr_scheduler.h"
#include "axle/optim/optimizer.h"
#include "axle/runtime.h"
#include "axle/serialize.h"
#include "core/tensor_impl.h"
#include "serialize/checkpoint.h"
#include "serialize/safetensors.h"

namespace axle {

namespace {

using json = nlohmann::json;
constexpr const char* kMetaKey = "axle.checkpoint";
constexpr int kVersion = 1;

// JSON has no NaN/Inf: those become strings.
json enc(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}
double dec(const json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  AXLE_FAIL("expected a number, got \"", s, "\"");
}
json enc_map(const std::map<std::string, double>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = enc(v);
  return j;
}
std::map<std::string, double> dec_map(const json& j) {
  std::map<std::string, double> m;
  for (auto it = j.begin(); it != j.end(); ++it) m[it.key()] = dec(it.value());
  return m;
}
json enc_vec(const std::vector<double>& v) {
  json j = json::array();
  for (double x : v) j.push_back(enc(x));
  return j;
}
std::vector<double> dec_vec(const json& j) {
  std::vector<double> v;
  for (const json& x : j) v.push_back(dec(x));
  return v;
}

std::string opt_key(size_t i, const std::string& k) { return "optimizer." + std::to_string(i) + "." + k; }

}  // namespace

namespace st {

void checkpoint_contents(const Checkpoint& c, nn::StateDict& tensors, Metadata& meta) {
  AXLE_CHECK(!c.metadata.count(kMetaKey), "[save_checkpoint] the metadata key \"", kMetaKey, "\" is reserved");
  json j;
  j["version"] = kVersion;
  j["epoch"] = c.epoch;
  j["batch"] = c.batch;
  j["step"] = c.step;
  if (c.model) {
    for (auto& [name, t] : c.model->state_dict()) tensors.emplace_back("model." + name, t);
    j["model"] = true;
  }
  if (c.optimizer) {
    optim::OptimizerState s = c.optimizer->state_dict();
    json groups = json::array(), states = json::array();
    for (const auto& g : s.param_groups) groups.push_back({{"options", enc_map(g.options)}, {"params", g.params}});
    for (size_t i = 0; i < s.state.size(); ++i) {
      json names = json::array();
      for (const auto& [k, t] : s.state[i].tensors) {
        names.push_back(k);
        tensors.emplace_back(opt_key(i, k), t);
      }
      states.push_back({{"scalars", enc_map(s.state[i].scalars)}, {"tensors", names}});
    }
    j["optimizer"] = {{"param_groups", groups}, {"state", states}};
  }
  if (c.scheduler) {
    auto s = c.scheduler->state_dict();
    j["scheduler"] = {{"last_epoch", s.last_epoch},
                      {"step_count", s.step_count},
                      {"base_lrs", enc_vec(s.base_lrs)},
                      {"last_lrs", enc_vec(s.last_lrs)}};
  }
  if (c.generator) j["generator"] = {{"seed", c.generator->seed()}, {"offset", c.generator->offset()}};
  meta = c.metadata;
  meta[kMetaKey] = j.dump();
}

}  // namespace st

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  nn::StateDict tensors;
  Metadata meta;
  st::checkpoint_contents(c, tensors, meta);
  // Optimizer and model tensors may live on the lazy device: xm::save syncs, copies to
  // the cpu and writes on the master ordinal only.
  xm::save(tensors, path, meta);
}

Checkpoint load_checkpoint(const std::string& path, Checkpoint into) { return st::load_checkpoint(load(path), into); }

Checkpoint st::load_checkpoint(const SafeTensors& file, Checkpoint into) {
  const std::string what = "[load_checkpoint] '" + file.path + "'";
  auto mit = file.metadata.find(kMetaKey);
  AXLE_CHECK(mit != file.metadata.end(), what, ": not an axle checkpoint (no \"", kMetaKey,
             "\" metadata); load plain weights with axle::load");

  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : file.tensors) by_name.emplace(n, &t);

  nn::StateDict model_sd;
  optim::OptimizerState opt_state;
  optim::LRScheduler::State sched_state;
  uint64_t gen_seed = 0, gen_offset = 0;
  try {
    json j = json::parse(mit->second);
    AXLE_CHECK(j.is_object(), "expected a JSON object");
    int version = j.at("version").get<int>();
    AXLE_CHECK(version == kVersion, "checkpoint format version ", version, " (this axle reads ", kVersion, ")");
    into.epoch = j.at("epoch").get<int64_t>();
    into.batch = j.at("batch").get<int64_t>();
    into.step = j.at("step").get<int64_t>();
    if (into.model) {
      AXLE_CHECK(j.value("model", false), "it holds no model state, but a model was given");
      for (const auto& [n, t] : file.tensors)
        if (n.rfind("model.", 0) == 0) model_sd.emplace_back(n.substr(6), t);
    }
    if (into.optimizer) {
      AXLE_CHECK(j.contains("optimizer"), "it holds no optimizer state, but an optimizer was given");
      const json& o = j.at("optimizer");
      for (const json& g : o.at("param_groups")) {
        optim::OptimizerState::Group sg;
        sg.options = dec_map(g.at("options"));
        sg.params = g.at("params").get<std::vector<int64_t>>();
        opt_state.param_groups.push_back(std::move(sg));
      }
      const json& states = o.at("state");
      for (size_t i = 0; i < states.size(); ++i) {
        optim::ParamState ps;
        ps.scalars = dec_map(states[i].at("scalars"));
        for (const json& k : states[i].at("tensors")) {
          const std::string key = k.get<std::string>();
          auto it = by_name.find(opt_key(i, key));
          AXLE_CHECK(it != by_name.end(), "optimizer state tensor \"", opt_key(i, key), "\" is missing");
          ps.tensors[key] = *it->second;
        }
        opt_state.state.push_back(std::move(ps));
      }
    }
    if (into.scheduler) {
      AXLE_CHECK(j.contains("scheduler"), "it holds no scheduler state, but a scheduler was given");
      const json& s = j.at("scheduler");
      sched_state.last_epoch = s.at("last_epoch").get<int64_t>();
      sched_state.step_count = s.at("step_count").get<int64_t>();
      sched_state.base_lrs = dec_vec(s.at("base_lrs"));
      sched_state.last_lrs = dec_vec(s.at("last_lrs"));
    }
    if (into.generator) {
      AXLE_CHECK(j.contains("generator"), "it holds no generator state, but a generator was given");
      gen_seed = j.at("generator").at("seed").get<uint64_t>();
      gen_offset = j.at("generator").at("offset").get<uint64_t>();
    }
  } catch (const json::exception& e) {
    AXLE_FAIL(what, ": corrupt checkpoint metadata: ", e.what());
  } catch (const Error& e) {
    AXLE_FAIL(what, ": ", e.what());
  }

  // Validate everything before changing anything: model keys and shapes, optimizer layout.
  if (into.model) {
    std::unordered_map<std::string, const Tensor*> given;
    for (const auto& [n, t] : model_sd) given.emplace(n, &t);
    std::string err;
    std::unordered_set<std::string> own;
    // Keys a state dict may leave out (BatchNorm's num_batches_tracked, absent from the
    // checkpoints written before axle had it): load_state_dict keeps their values.
    const std::vector<std::string> opt = into.model->optional_state_keys();
    const std::unordered_set<std::string> optional(opt.begin(), opt.end());
    for (const auto& [n, t] : into.model->state_dict()) {
      own.insert(n);
      auto it = given.find(n);
      if (it == given.end()) {
        if (!optional.count(n)) err += "\n  missing key \"" + n + "\"";
      } else if (it->second->shape() != t.shape())
        err += "\n  \"" + n + "\": the checkpoint has shape " + shape_str(it->second->shape()) +
               ", the model has " + shape_str(t.shape());
    }
    for (const auto& [n, t] : model_sd)
      if (!own.count(n)) err += "\n  unexpected key \"" + n + "\"";
    AXLE_CHECK(err.empty(), what, ": the model does not match the checkpoint:", err);
  }
  if (into.optimizer) {
    const auto& groups = into.optimizer->param_groups();
    AXLE_CHECK(opt_state.param_groups.size() == groups.size(), what, ": the optimizer has ", groups.size(),
               " param group(s), the checkpoint has ", opt_state.param_groups.size());
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& sg = opt_state.param_groups[gi];
      AXLE_CHECK(sg.params.size() == groups[gi].params.size(), what, ": param group ", gi, " has ",
                 groups[gi].params.size(), " parameter(s), the checkpoint has ", sg.params.size());
      for (size_t i = 0; i < sg.params.size(); ++i) {
        int64_t idx = sg.params[i];
        AXLE_CHECK(idx >= 0 && size_t(idx) < opt_state.state.size(), what, ": optimizer parameter index ", idx,
                   " out of range");
        for (const auto& [k, t] : opt_state.state[size_t(idx)].tensors)
          AXLE_CHECK(t.shape() == groups[gi].params[i].shape(), what, ": optimizer state \"", k,
                     "\" of parameter ", idx, " has shape ", shape_str(t.shape()), ", the parameter has ",
                     shape_str(groups[gi].params[i].shape()));
      }
    }
  }
  if (into.scheduler) {
    size_t n = into.scheduler->base_lrs().size();
    AXLE_CHECK(sched_state.base_lrs.size() == n && sched_state.last_lrs.size() == n, what, ": the scheduler has ",
               n, " learning rate(s), the checkpoint has ", sched_state.base_lrs.size());
  }

  if (into.model) into.model->load_state_dict(model_sd, /*strict=*/true);
  if (into.optimizer) into.optimizer->load_state_dict(opt_state);
  if (into.scheduler) into.scheduler->load_state_dict(sched_state);
  if (into.generator) into.generator->set_state(gen_seed, gen_offset);
  into.metadata = file.metadata;
  into.metadata.erase(kMetaKey);
  return into;
}

}  // namespace axle
