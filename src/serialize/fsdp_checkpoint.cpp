// FSDP v1 checkpoints (axle/fsdp_checkpoint.h): one axle checkpoint per rank, and the
// consolidation that stitches the ranks' shards back into the unwrapped model's state.
//
// A rank file is what save_checkpoint writes for the FSDP model (its state_dict: the shards
// and the buffers under the wrapped tree's keys, "model.<key>"), plus two metadata strings:
//   "shard_metadata"  the rank's ShardMetadata as JSON (how shards map to full parameters);
//   "shard_layout"    {"order": [unwrapped state_dict keys, in the unwrapped model's order],
//                      "buffer_keys": [the FSDP state_dict key of each buffer_names entry]}
// so consolidation needs no model: it reads "order" for the output order and finds each
// buffer in rank 0's file under its buffer_keys entry.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "axle/fsdp_checkpoint.h"
#include "axle/ops.h"
#include "axle/dist.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "core/tensor_impl.h"
#include "serialize/checkpoint.h"

namespace axle::fsdp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
constexpr const char* kShardKey = "shard_metadata";
constexpr const char* kLayoutKey = "shard_layout";

struct Layout {
  std::vector<std::string> order;        // unwrapped state_dict keys
  std::vector<std::string> buffer_keys;  // aligned with ShardMetadata::buffer_names
};

std::string layout_json(const Layout& l) { return json{{"order", l.order}, {"buffer_keys", l.buffer_keys}}.dump(); }

Layout parse_layout(const std::string& text, const std::string& what) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  Layout l;
  auto strings = [&](const char* key, std::vector<std::string>& out) {
    AXLE_CHECK(j.is_object() && j.contains(key) && j[key].is_array(), what, ": expected \"", kLayoutKey,
               "\" to be a JSON object with an array \"", key, "\"");
    for (const json& s : j[key]) {
      AXLE_CHECK(s.is_string(), what, ": expected \"", kLayoutKey, "\".", key, " to hold strings, got ", s.type_name());
      out.push_back(s.get<std::string>());
    }
  };
  strings("order", l.order);
  strings("buffer_keys", l.buffer_keys);
  return l;
}

// The unwrapped model's state_dict order and each buffer's key in the FSDP model, from a walk
// of the FSDP tree that skips the FSDP nodes: a wrapped module keeps its place (its path
// without the FSDP node's child name) and its buffers; its parameters, removed from it by
// wrapping, are the metadata names directly under its path, in metadata order.
Layout layout_of(const XlaFullyShardedDataParallel& model, const ShardMetadata& m, const std::string& what) {
  std::map<std::string, std::vector<std::string>> params_at;  // module path -> its parameter names
  for (const auto& p : m.params)
    for (const auto& n : p.names) {
      const size_t dot = n.rfind('.');
      params_at[dot == std::string::npos ? "" : n.substr(0, dot + 1)].push_back(n);
    }
  std::unordered_map<std::string, std::string> buffer_key;  // unwrapped -> fsdp key
  Layout l;
  std::function<void(const nn::Module&, const std::string&, const std::string&)> walk =
      [&](const nn::Module& mod, const std::string& key, const std::string& path) {
        const auto* f = dynamic_cast<const XlaFullyShardedDataParallel*>(&mod);
        if (f) {
          // The shards are FSDP parameters; the wrapped module takes the FSDP node's place.
          for (const auto& [n, b] : mod.named_buffers(false)) {
            l.order.push_back(path + n);
            buffer_key[path + n] = key + n;
          }
          std::string child_key;
          for (const auto& [n, c] : mod.named_children())
            if (c == f->module()) child_key = key + n + ".";
          AXLE_CHECK(!child_key.empty() || f->module()->named_buffers().empty(), what,
                     ": the wrapped module's buffers are not in the FSDP model's state_dict");
          walk(*f->module(), child_key, path);
          for (const auto& [n, c] : mod.named_children())
            if (c != f->module()) walk(*c, key + n + ".", path + n + ".");
          return;
        }
        if (auto it = params_at.find(path); it != params_at.end()) {
          l.order.insert(l.order.end(), it->second.begin(), it->second.end());
          params_at.erase(it);
        }
        for (const auto& [n, b] : mod.named_buffers(false)) {
          l.order.push_back(path + n);
          buffer_key[path + n] = key + n;
        }
        for (const auto& [n, c] : mod.named_children()) walk(*c, key + n + ".", path + n + ".");
      };
  walk(model, "", "");
  AXLE_CHECK(params_at.empty(), what, ": the shard metadata names parameter \"", params_at.begin()->second.front(),
             "\", which no module of the model holds");
  for (const auto& n : m.buffer_names) {
    auto it = buffer_key.find(n);
    AXLE_CHECK(it != buffer_key.end(), what, ": the shard metadata names buffer \"", n,
               "\", which no module of the model holds");
    l.buffer_keys.push_back(it->second);
  }
  AXLE_CHECK(buffer_key.size() == m.buffer_names.size(), what, ": the model holds ", buffer_key.size(),
             " buffers, the shard metadata names ", m.buffer_names.size());
  return l;
}

std::string names_str(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}
std::string shapes_str(const std::vector<Shape>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + shape_str(v[i]);
  return s + "]";
}

// Empty when `a` (described as `a_what`) and `b` describe the same sharding, else the first difference.
std::string difference(const ShardMetadata& a, const ShardMetadata& b, const std::string& a_what,
                       const std::string& b_what) {
  auto both = [&](const std::string& field, const auto& x, const auto& y) {
    return field + ": " + a_what + " has " + x + ", " + b_what + " has " + y;
  };
  if (a.params.size() != b.params.size())
    return both("the number of shards", std::to_string(a.params.size()), std::to_string(b.params.size()));
  for (size_t i = 0; i < a.params.size(); ++i) {
    const auto& p = a.params[i];
    const auto& q = b.params[i];
    const std::string at = "shard " + std::to_string(i) + " (\"" + q.shard_name + "\")";
    if (p.shard_name != q.shard_name) return both("shard " + std::to_string(i) + "'s name", "\"" + p.shard_name + "\"", "\"" + q.shard_name + "\"");
    if (p.names != q.names) return both(at + "'s parameters", names_str(p.names), names_str(q.names));
    if (p.shapes != q.shapes) return both(at + "'s shapes", shapes_str(p.shapes), shapes_str(q.shapes));
    if (p.dim0 != q.dim0)
      return both(at + "'s layout", p.dim0 ? "dim-0 shards" : "flattened shards", q.dim0 ? "dim-0 shards" : "flattened shards");
    if (p.padded_numel != q.padded_numel)
      return both(at + "'s padded size", std::to_string(p.padded_numel), std::to_string(q.padded_numel));
  }
  if (a.buffer_names != b.buffer_names) return both("the buffers", names_str(a.buffer_names), names_str(b.buffer_names));
  return "";
}

// prefix = "dir/base": the directory to list and the file-name prefix.
std::pair<fs::path, std::string> split_prefix(const std::string& prefix) {
  if (prefix.empty() || prefix.back() == '/') return {prefix.empty() ? fs::path(".") : fs::path(prefix), ""};
  fs::path p(prefix);
  return {p.has_parent_path() ? p.parent_path() : fs::path("."), p.filename().string()};
}

// "<rank>-of-<world>" with plain decimal numbers; false for anything else.
bool parse_rank_world(const std::string& s, int& rank, int& world) {
  const size_t of = s.find("-of-");
  if (of == std::string::npos) return false;
  auto num = [](const std::string& t, int& out) {
    if (t.empty() || t.size() > 9 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    out = std::stoi(t);
    return true;
  };
  return num(s.substr(0, of), rank) && num(s.substr(of + 4), world);
}

struct RankFile {
  std::string path;
  int rank = 0, world = 0;
};

// Every file named base + "rank-<r>-of-<w>" + suffix in dir.
std::vector<RankFile> find_rank_files(const std::string& prefix, const std::string& suffix) {
  auto [dir, base] = split_prefix(prefix);
  std::error_code ec;
  AXLE_CHECK(fs::is_directory(dir, ec), "[consolidate_sharded_model_checkpoints] no directory '", dir.string(),
             "' (from the prefix '", prefix, "')");
  const std::string head = base + "rank-";
  std::vector<RankFile> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < head.size() + suffix.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    RankFile f;
    if (!parse_rank_world(name.substr(head.size(), name.size() - head.size() - suffix.size()), f.rank, f.world))
      continue;
    f.path = (dir / name).string();
    out.push_back(std::move(f));
  }
  AXLE_CHECK(!ec, "[consolidate_sharded_model_checkpoints] can't list '", dir.string(), "': ", ec.message());
  std::sort(out.begin(), out.end(), [](const RankFile& a, const RankFile& b) {
    return std::tie(a.world, a.rank) < std::tie(b.world, b.rank);
  });
  return out;
}

ShardMetadata metadata_of(const SafeTensors& f, const std::string& what) {
  auto it = f.metadata.find(kShardKey);
  AXLE_CHECK(it != f.metadata.end(), what, ": '", f.path, "' is not an FSDP rank file (no \"", kShardKey,
             "\" metadata)");
  try {
    return ShardMetadata::from_json(it->second);
  } catch (const Error& e) {
    AXLE_FAIL(what, ": '", f.path, "': ", e.what());
  }
}

const Tensor& model_tensor(const SafeTensors& f, const std::string& key, const std::string& what) {
  for (const auto& [n, t] : f.tensors)
    if (n == "model." + key) return t;
  AXLE_FAIL(what, ": '", f.path, "' has no tensor \"model.", key, "\"");
}

}  // namespace

std::string shard_file(const std::string& prefix, int rank, int world, const std::string& suffix) {
  AXLE_CHECK(world >= 1 && rank >= 0 && rank < world, "[fsdp::shard_file] expected 0 <= rank < world, got rank ",
             rank, " and world ", world);
  return prefix + "rank-" + std::to_string(rank) + "-of-" + std::to_string(world) + suffix;
}

void save_sharded_checkpoint(const std::string& prefix, const XlaFullyShardedDataParallel& model, const Checkpoint& c,
                             const std::string& suffix) {
  const std::string what = "[save_sharded_checkpoint]";
  AXLE_CHECK(!c.metadata.count(kShardKey) && !c.metadata.count(kLayoutKey), what, ": the metadata keys \"",
             kShardKey, "\" and \"", kLayoutKey, "\" are reserved");
  const ShardMetadata m = model.get_shard_metadata();
  Checkpoint cc = c;
  cc.model = const_cast<XlaFullyShardedDataParallel*>(&model);  // only read (its state_dict)
  cc.metadata[kShardKey] = m.to_json();
  cc.metadata[kLayoutKey] = layout_json(layout_of(model, m, what));
  nn::StateDict tensors;
  Metadata meta;
  st::checkpoint_contents(cc, tensors, meta);
  bool any_xla = false;
  for (const auto& [n, t] : tensors) any_xla = any_xla || t.device().is_xla();
  if (any_xla) {
    axle::sync();
    for (auto& [n, t] : tensors) t = t.detach().cpu();
  }
  // Every rank writes its own file (save_checkpoint writes on the master only).
  save(tensors, shard_file(prefix, m.rank, m.world_size, suffix), meta);
  // No rank goes on (and perhaps consolidates) before every file is there.
  if (runtime::world_size() > 1) (void)xm::rendezvous("axle::fsdp::save_sharded_checkpoint");
}

Checkpoint load_sharded_checkpoint(const std::string& prefix, XlaFullyShardedDataParallel& model, Checkpoint into,
                                   const std::string& suffix) {
  const std::string what = "[load_sharded_checkpoint]";
  const ShardMetadata m = model.get_shard_metadata();
  const std::string path = shard_file(prefix, m.rank, m.world_size, suffix);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // Written by another world size? Say so, with both.
    for (const RankFile& f : find_rank_files(prefix, suffix))
      AXLE_CHECK(f.world == m.world_size, what, ": '", prefix, "' was written by world size ", f.world, " (found '",
                 f.path, "'), this run has world size ", m.world_size, " (no '", path, "')");
  }
  SafeTensors file = load(path);
  const ShardMetadata fm = metadata_of(file, what);
  AXLE_CHECK(fm.world_size == m.world_size, what, ": '", path, "' was written by world size ", fm.world_size,
             ", this run has world size ", m.world_size);
  AXLE_CHECK(fm.rank == m.rank, what, ": '", path, "' was written by rank ", fm.rank, ", this is rank ", m.rank);
  const std::string diff = difference(fm, m, "the file", "the model");
  AXLE_CHECK(diff.empty(), what, ": '", path, "' does not match the model's sharding: ", diff);
  into.model = &model;
  Checkpoint out = st::load_checkpoint(file, std::move(into));
  out.metadata.erase(kShardKey);
  out.metadata.erase(kLayoutKey);
  return out;
}

nn::StateDict consolidate_sharded_model_checkpoints(const std::string& prefix, const std::string& suffix) {
  const std::string what = "[consolidate_sharded_model_checkpoints]";
  const std::vector<RankFile> found = find_rank_files(prefix, suffix);
  AXLE_CHECK(!found.empty(), what, ": no files match '", prefix, "rank-*-of-*", suffix, "'");
  const int world = found.front().world;
  for (const RankFile& f : found)
    AXLE_CHECK(f.world == world, what, ": files of different world sizes match '", prefix, "rank-*-of-*", suffix,
               "': '", found.front().path, "' (", world, ") and '", f.path, "' (", f.world, ")");
  std::vector<std::string> paths(static_cast<size_t>(world));
  for (const RankFile& f : found)
    if (f.rank < world) paths[size_t(f.rank)] = f.path;
  std::string missing;
  int first_missing = -1;
  for (int r = 0; r < world; ++r)
    if (paths[size_t(r)].empty()) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      if (first_missing < 0) first_missing = r;
    }
  AXLE_CHECK(missing.empty(), what, ": expected the files of ranks 0..", world - 1, " (world size ", world,
             "), missing rank(s) ", missing, " (no '",
             first_missing < 0 ? std::string() : shard_file(prefix, first_missing, world, suffix), "')");

  std::vector<SafeTensors> files;
  std::vector<ShardMetadata> metas;
  for (int r = 0; r < world; ++r) {
    files.push_back(load(paths[size_t(r)]));
    metas.push_back(metadata_of(files.back(), what));
    const ShardMetadata& m = metas.back();
    AXLE_CHECK(m.world_size == world && m.rank == r, what, ": '", paths[size_t(r)], "' holds rank ", m.rank,
               " of world size ", m.world_size, ", its name says rank ", r, " of ", world);
    if (r > 0) {
      const std::string diff = difference(metas[0], m, "rank 0", "rank " + std::to_string(r));
      AXLE_CHECK(diff.empty(), what, ": the rank files disagree: ", diff);
    }
  }
  const ShardMetadata& m = metas[0];
  auto lit = files[0].metadata.find(kLayoutKey);
  AXLE_CHECK(lit != files[0].metadata.end(), what, ": '", paths[0], "' has no \"", kLayoutKey,
             "\" metadata (not written by save_sharded_checkpoint?)");
  const Layout layout = parse_layout(lit->second, what + " '" + paths[0] + "'");
  AXLE_CHECK(layout.buffer_keys.size() == m.buffer_names.size(), what, ": '", paths[0], "' lists ",
             layout.buffer_keys.size(), " buffer keys for ", m.buffer_names.size(), " buffers");

  std::unordered_map<std::string, Tensor> full;
  auto add = [&](const std::string& name, Tensor t) {
    AXLE_CHECK(full.emplace(name, std::move(t)).second, what, ": \"", name, "\" appears twice in the shard metadata");
  };
  for (const auto& p : m.params) {
    std::vector<Tensor> shards;
    for (int r = 0; r < world; ++r) {
      const Tensor& s = model_tensor(files[size_t(r)], p.shard_name, what);
      Shape want = {p.padded_numel / world};
      if (p.dim0) want.insert(want.end(), p.shapes[0].begin() + 1, p.shapes[0].end());
      AXLE_CHECK(s.shape() == want, what, ": '", paths[size_t(r)], "': shard \"", p.shard_name, "\" has shape ",
                 shape_str(s.shape()), ", its metadata says ", shape_str(want));
      AXLE_CHECK(shards.empty() || s.dtype() == shards[0].dtype(), what, ": shard \"", p.shard_name, "\" has dtype ",
                 s.dtype(), " on rank ", r, ", ", shards[0].dtype(), " on rank 0");
      shards.push_back(s);
    }
    const Tensor whole = cat(shards, 0);  // padded_numel elements (dim0: rows)
    if (p.dim0) {
      add(p.names[0], narrow(whole, 0, 0, p.shapes[0][0]).clone());
      continue;
    }
    int64_t off = 0;
    for (size_t k = 0; k < p.names.size(); ++k) {
      int64_t n = 1;
      for (int64_t d : p.shapes[k]) n *= d;
      add(p.names[k], narrow(whole, 0, off, n).reshape(p.shapes[k]).clone());
      off += n;
    }
  }
  for (size_t i = 0; i < m.buffer_names.size(); ++i)
    add(m.buffer_names[i], model_tensor(files[0], layout.buffer_keys[i], what));

  nn::StateDict out;
  for (const auto& name : layout.order) {
    auto it = full.find(name);
    AXLE_CHECK(it != full.end(), what, ": '", paths[0], "' orders \"", name,
               "\", which the shard metadata does not name (or names twice)");
    out.emplace_back(name, std::move(it->second));
    full.erase(it);
  }
  AXLE_CHECK(full.empty(), what, ": '", paths[0], "' leaves \"", full.empty() ? "" : full.begin()->first,
             "\" out of its order");
  return out;
}

}  // namespace axle::fsdp
