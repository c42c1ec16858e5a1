// The JSON report's common figures (report.h).
#include "report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>

#include "axle/metrics.h"
#include "axle/xm.h"

namespace axle_train {

namespace fs = std::filesystem;
using namespace axle;

namespace {

/// The collective counters the SPMD runtime keeps (kind and bytes), by their JSON names.
const std::vector<std::pair<std::string, std::string>>& collective_counters() {
  static const std::vector<std::pair<std::string, std::string>> names{
      {"all_reduce", "SpmdAllReduce"},         {"all_gather", "SpmdAllGather"},
      {"reduce_scatter", "SpmdReduceScatter"}, {"all_to_all", "SpmdAllToAll"},
      {"collective_permute", "SpmdCollectivePermute"}, {"bytes", "SpmdCollectiveBytes"}};
  return names;
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

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  if (v.size() % 2) return v[m];
  const double hi = v[m];
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + m));
}

std::vector<int64_t> peak_bytes(Device dev, int spmd_devices) {
  if (spmd_devices == 0) return {xm::get_memory_info(dev).peak_bytes_used};
  std::vector<int64_t> peaks;
  for (int k = 0; k < spmd_devices; ++k) peaks.push_back(xm::get_memory_info(Device(DeviceType::XLA, k)).peak_bytes_used);
  return peaks;
}

DeviceMemory report_memory(optim::Optimizer& opt, std::vector<int64_t> peaks, Device dev, const SpmdLayout& l, int world) {
  if (peaks.empty()) peaks = peak_bytes(dev, l.mesh ? int(l.mesh->size()) : 0);
  DeviceMemory memory = device_memory(opt, std::move(peaks), l.mesh.has_value());
  return world > 1 ? gather_ranks(memory) : memory;
}

void CollectiveCount::begin() {
  for (const auto& [key, counter] : collective_counters()) before[key] = metrics::counter_value(counter);
}

void CollectiveCount::end() {
  for (const auto& [key, counter] : collective_counters()) total[key] += metrics::counter_value(counter) - before[key];
}

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

}  // namespace axle_train
