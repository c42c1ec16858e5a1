// Distributed checkpoints (spec §6.5): metadata.json + one safetensors file per host, only
// replica 0's unpadded shards, written to a temporary directory and renamed into place;
// loading copies, for each target shard, the parts of the chunks it overlaps.
#include "axle/distributed_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "axle/dist.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "axle/serialize.h"
#include "axle/xm.h"
#include "axle/xs.h"
#include "core/tensor_impl.h"
#include "dist/local_devices.h"
#include "serialize/safetensors.h"

namespace axle::experimental::distributed_checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "axle.distributed_checkpoint";
constexpr int kVersion = 1;
constexpr const char* kMetadataFile = "metadata.json";
std::atomic<uint64_t> g_tmp_counter{0};

/// One piece of a tensor in the files: the box [offsets, offsets + sizes) of the global tensor.
struct Chunk {
  Shape offsets, sizes;
  std::string file, key;
};

int64_t volume(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// An annotated xla tensor whose layout local_shards describes (replicated ones included).
bool annotated(const Tensor& t) {
  if (!t.device().is_xla() || !runtime::is_spmd()) return false;
  return xs::get_sharding_type(t).has_value();
}

// Copies the global box [lo, hi) from `src` (contiguous, the box [so, so + ss)) into `dst`
// (contiguous, the box starting at `dorg` with shape `ds`), `item` bytes per element.
void copy_box(const char* src, const Shape& ss, const Shape& so, char* dst, const Shape& ds, const Shape& dorg,
              const Shape& lo, const Shape& hi, size_t item) {
  const size_t r = lo.size();
  if (r == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  std::vector<size_t> sst(r), dstr(r);
  sst[r - 1] = dstr[r - 1] = item;
  for (size_t d = r - 1; d-- > 0;) {
    sst[d] = sst[d + 1] * size_t(ss[d + 1]);
    dstr[d] = dstr[d + 1] * size_t(ds[d + 1]);
  }
  const size_t row = size_t(hi[r - 1] - lo[r - 1]) * item;
  Shape idx(lo.begin(), lo.end());
  for (;;) {
    size_t s = 0, o = 0;
    for (size_t d = 0; d < r; ++d) {
      s += size_t(idx[d] - so[d]) * sst[d];
      o += size_t(idx[d] - dorg[d]) * dstr[d];
    }
    std::memcpy(dst + o, src + s, row);
    size_t d = r - 1;  // the odometer over every dim but the last
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return;
    }
    if (r == 1) return;
  }
}

// The intersection of boxes [alo, ahi) and [blo, bhi); nullopt when empty.
std::optional<std::pair<Shape, Shape>> intersect(const Shape& alo, const Shape& ahi, const Shape& blo,
                                                 const Shape& bhi) {
  Shape lo(alo.size()), hi(alo.size());
  for (size_t d = 0; d < alo.size(); ++d) {
    lo[d] = std::max(alo[d], blo[d]);
    hi[d] = std::min(ahi[d], bhi[d]);
    if (lo[d] >= hi[d]) return std::nullopt;
  }
  return std::make_pair(lo, hi);
}

Shape box_end(const Shape& offsets, const Shape& sizes) {
  Shape e(offsets.size());
  for (size_t d = 0; d < offsets.size(); ++d) e[d] = offsets[d] + sizes[d];
  return e;
}

std::string errno_str(int e) { return std::strerror(e); }

void write_synced(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  AXLE_CHECK(fd >= 0, "[distributed_checkpoint::save] can't create '", path.string(), "': ", errno_str(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      AXLE_FAIL("[distributed_checkpoint::save] can't write '", path.string(), "': ", errno_str(e));
    }
    done += size_t(w);
  }
  const bool ok = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  AXLE_CHECK(ok, "[distributed_checkpoint::save] can't flush '", path.string(), "': ", errno_str(e));
}

void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);  // some filesystems can't: not an error
    ::close(fd);
  }
}

bool is_checkpoint_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_empty(dir, ec) && !ec) return true;
  std::ifstream f(dir / kMetadataFile);
  if (!f) return false;
  const json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.value("format", "") == kFormat;
}

// Moves the finished `tmp` to `dir`; an existing checkpoint there is swapped out atomically
// (renameat2 RENAME_EXCHANGE) where the filesystem allows it, else renamed aside first.
void commit_dir(const fs::path& tmp, const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    AXLE_CHECK(::rename(tmp.c_str(), dir.c_str()) == 0, "[distributed_checkpoint::save] can't rename '", tmp.string(),
               "' to '", dir.string(), "': ", errno_str(errno));
  } else {
    AXLE_CHECK(fs::is_directory(dir, ec) && is_checkpoint_dir(dir), "[distributed_checkpoint::save] '", dir.string(),
               "' exists and is not a distributed checkpoint (nor empty): not replacing it");
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);  // now the old checkpoint
    } else {
      const fs::path old = tmp.string() + ".old";
      AXLE_CHECK(::rename(dir.c_str(), old.c_str()) == 0, "[distributed_checkpoint::save] can't move the old '",
                 dir.string(), "' aside: ", errno_str(errno));
      AXLE_CHECK(::rename(tmp.c_str(), dir.c_str()) == 0, "[distributed_checkpoint::save] can't rename '",
                 tmp.string(), "' to '", dir.string(), "' (the previous checkpoint is in '", old.string(),
                 "'): ", errno_str(errno));
      fs::remove_all(old, ec);
    }
  }
  sync_dir(dir.parent_path().empty() ? fs::path(".") : dir.parent_path());
}

json shape_json(const Shape& s) { return json(std::vector<int64_t>(s.begin(), s.end())); }

}  // namespace

namespace {

// What a save writes, already on the host: the metadata's tensor entries and the chunks.
struct Snapshot {
  json tensors = json::object();
  nn::StateDict pieces;  ///< chunk key -> its cpu data (contiguous)
  std::string host_file;
};

// Syncs and copies every replica-0 shard of `state_dict` to the host. `own`: cpu tensors
// are copied too (the snapshot must not change when the caller's tensors do).
Snapshot snapshot(const nn::StateDict& state_dict, const std::string& op, bool own) {
  std::set<std::string> names;
  bool any_xla = false;
  for (const auto& [name, t] : state_dict) {
    AXLE_CHECK(t.defined(), op, " tensor \"", name, "\" is undefined");
    AXLE_CHECK(names.insert(name).second, op, " the name \"", name, "\" appears twice");
    any_xla = any_xla || t.device().is_xla();
  }
  if (any_xla) axle::sync();

  Snapshot snap;
  snap.host_file = "shard-" + std::to_string(runtime::global_ordinal()) + ".safetensors";
  for (const auto& [name, t] : state_dict) {
    json e;
    e["dtype"] = st::dtype_code(t.dtype());
    e["shape"] = shape_json(t.shape());
    json chunks = json::array();
    auto add = [&](const Shape& offsets, const Tensor& data) {
      const std::string key = name + "/" + std::to_string(chunks.size());
      chunks.push_back({{"offsets", shape_json(offsets)}, {"sizes", shape_json(data.shape())}, {"file", snap.host_file},
                        {"key", key}});
      snap.pieces.emplace_back(key, data.contiguous());
    };
    if (annotated(t)) {
      const auto type = xs::get_sharding_type(t);
      AXLE_CHECK(type != xs::ShardingType::MANUAL, op, " tensor \"", name,
                 "\" is manually sharded: save it after disable_manual_sharding");
      e["sharding"] = xs::get_sharding_spec(t);
      for (const xs::XLAShard& s : xs::local_shards(t)) {  // fresh host copies
        if (s.replica_id != 0) continue;  // another device holds the same values
        Shape offsets(t.dim(), 0);
        if (s.indices) {
          for (int64_t d = 0; d < t.dim(); ++d) offsets[d] = (*s.indices)[d].start;
        }
        Tensor data = s.unpadded_data();
        if (data.numel() == 0 && t.numel() != 0) continue;  // a shard that is all padding
        add(offsets, data);
      }
    } else {
      e["sharding"] = "";
      Tensor host = t.detach().cpu();
      // Several hosts: every host holds it whole; host 0 writes it.
      if (dist::host_index() == 0) add(Shape(t.dim(), 0), own && t.device().is_cpu() ? host.clone() : host);
    }
    e["chunks"] = std::move(chunks);
    snap.tensors[name] = std::move(e);
  }
  return snap;
}

// Writes `snap` to a temporary directory beside `dir`, then renames it into place.
void write_snapshot(const Snapshot& snap, const fs::path& dir, const std::string& op) {
  fs::path target = dir;
  if (target.filename().empty()) target = target.parent_path();  // "ckpt/" -> "ckpt"
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  AXLE_CHECK(fs::is_directory(parent, ec), op, " the parent directory '", parent.string(), "' of '", dir.string(),
             "' does not exist");
  const fs::path tmp =
      target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
  fs::remove_all(tmp, ec);
  AXLE_CHECK(fs::create_directory(tmp, ec) && !ec, op, " can't create the temporary directory '", tmp.string(),
             "': ", ec.message());
  try {
    axle::save(snap.pieces, (tmp / snap.host_file).string());
    json meta;
    meta["format"] = kFormat;
    meta["version"] = kVersion;
    meta["hosts"] = 1;
    meta["tensors"] = snap.tensors;
    write_synced(tmp / kMetadataFile, meta.dump(1) + "\n");
    sync_dir(tmp);
    commit_dir(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::vector<char> bytes_of(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

// Several SPMD hosts (a directory every host sees): host 0 makes the temporary directory,
// every host writes its own shard-<host>.safetensors into it, then host 0 writes the
// metadata with every host's chunks and renames it into place. Each step is a collective
// of every host (dist::gather_hosts), so a host that failed fails every host, naming it.
void write_snapshot_hosts(const Snapshot& snap, const fs::path& dir, const std::string& op) {
  const int me = dist::host_index();
  fs::path target = dir;
  if (target.filename().empty()) target = target.parent_path();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  std::string made, why;
  if (me == 0) {
    const fs::path tmp =
        target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
    if (!fs::is_directory(parent, ec)) {
      why = "the parent directory '" + parent.string() + "' of '" + dir.string() + "' does not exist";
    } else {
      fs::remove_all(tmp, ec);
      if (fs::create_directory(tmp, ec) && !ec) made = tmp.string();
      else why = "can't create the temporary directory '" + tmp.string() + "': " + ec.message();
    }
  }
  const std::vector<std::vector<char>> named = dist::gather_hosts(bytes_of(made.empty() ? "!" + why : made));
  const std::string tmp(named[0].begin(), named[0].end());
  AXLE_CHECK(tmp.empty() || tmp[0] != '!', op, " on host 0: ", tmp.substr(1));
  std::string err;
  try {
    axle::save(snap.pieces, (fs::path(tmp) / snap.host_file).string());
  } catch (const std::exception& e) {
    err = e.what();
  }
  const json mine = {{"tensors", snap.tensors}, {"error", err}};
  const std::vector<std::vector<char>> all = dist::gather_hosts(bytes_of(mine.dump()));
  std::string failed;
  json meta;
  meta["tensors"] = snap.tensors;
  for (size_t h = 0; h < all.size(); ++h) {
    const json j = json::parse(std::string(all[h].begin(), all[h].end()));
    if (!j.at("error").get<std::string>().empty())
      failed += (failed.empty() ? "" : "; ") + std::string("host ") + std::to_string(h) + ": " + j.at("error").get<std::string>();
    if (h == 0) continue;
    for (const auto& [name, e] : j.at("tensors").items())
      for (const json& c : e.at("chunks")) meta["tensors"][name]["chunks"].push_back(c);
  }
  if (me == 0) {
    try {
      if (failed.empty()) {
        meta["format"] = kFormat;
        meta["version"] = kVersion;
        meta["hosts"] = int(all.size());
        write_synced(fs::path(tmp) / kMetadataFile, meta.dump(1) + "\n");
        sync_dir(tmp);
        commit_dir(tmp, target);
      }
    } catch (const std::exception& e) {
      failed = std::string("host 0: ") + e.what();
    }
    if (!failed.empty()) fs::remove_all(tmp, ec);
  }
  // Nobody goes on (and perhaps reads the checkpoint) before it is in place.
  const std::vector<std::vector<char>> done = dist::gather_hosts(bytes_of(me == 0 ? failed : std::string()));
  if (failed.empty()) failed.assign(done[0].begin(), done[0].end());
  AXLE_CHECK(failed.empty(), op, " '", dir.string(), "' failed: ", failed);
}

}  // namespace

void save(const nn::StateDict& state_dict, const fs::path& dir) {
  const std::string op = "[distributed_checkpoint::save]";
  AXLE_CHECK(!dir.empty(), op, " expected a directory, got an empty path");
  const Snapshot snap = snapshot(state_dict, op, /*own=*/false);
  if (dist::host_count() > 1) return write_snapshot_hosts(snap, dir, op);
  if (st::is_master_ordinal()) write_snapshot(snap, dir, op);
  // As xm::save: no process goes on (and perhaps reads the checkpoint) before it is written.
  if (runtime::world_size() > 1) (void)xm::rendezvous("axle::distributed_checkpoint::save");
}

void load(const nn::StateDict& state_dict, const fs::path& dir) {
  const std::string op = "[distributed_checkpoint::load] '" + dir.string() + "'";
  std::ifstream mf(dir / kMetadataFile);
  AXLE_CHECK(mf.good(), op, ": no ", kMetadataFile, " (not a distributed checkpoint, or not written completely)");
  std::stringstream text;
  text << mf.rdbuf();
  const json meta = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  AXLE_CHECK(meta.is_object() && meta.value("format", "") == kFormat, op, ": ", kMetadataFile,
             " is not an axle distributed checkpoint's metadata");
  AXLE_CHECK(meta.value("version", 0) == kVersion, op, ": format version ", meta.value("version", 0),
             ", this build reads version ", kVersion);
  const json& tensors = meta["tensors"];
  AXLE_CHECK(tensors.is_object(), op, ": ", kMetadataFile, " has no \"tensors\" object");

  // Every check runs before the first tensor changes.
  std::string missing;
  for (const auto& [name, t] : state_dict)
    if (!tensors.contains(name)) missing += (missing.empty() ? "\"" : ", \"") + name + "\"";
  AXLE_CHECK(missing.empty(), op, ": the checkpoint has no tensor ", missing);

  std::map<std::string, SafeTensors> files;
  std::vector<std::vector<Chunk>> plan;
  for (const auto& [name, t] : state_dict) {
    AXLE_CHECK(t.defined(), op, ": target tensor \"", name, "\" is undefined");
    const json& e = tensors[name];
    const std::string what = op + ": tensor \"" + name + "\"";
    AXLE_CHECK(e.is_object() && e.contains("shape") && e.contains("dtype") && e["chunks"].is_array(), what,
               ": malformed entry in ", kMetadataFile);
    const Shape shape = e["shape"].get<Shape>();
    AXLE_CHECK(shape == t.shape(), what, ": the checkpoint holds shape ", shape_str(shape), ", the target has ",
               shape_str(t.shape()));
    const std::string dtype = e["dtype"].get<std::string>();
    AXLE_CHECK(dtype == st::dtype_code(t.dtype()), what, ": the checkpoint holds dtype ", dtype, ", the target is ",
               st::dtype_code(t.dtype()));
    std::vector<Chunk> chunks;
    int64_t covered = 0;
    for (const json& c : e["chunks"]) {
      Chunk ch{c.at("offsets").get<Shape>(), c.at("sizes").get<Shape>(), c.at("file").get<std::string>(),
               c.at("key").get<std::string>()};
      AXLE_CHECK(ch.offsets.size() == shape.size() && ch.sizes.size() == shape.size(), what, ": chunk \"", ch.key,
                 "\" has the wrong rank");
      for (size_t d = 0; d < shape.size(); ++d)
        AXLE_CHECK(ch.offsets[d] >= 0 && ch.sizes[d] >= 0 && ch.offsets[d] + ch.sizes[d] <= shape[d], what,
                   ": chunk \"", ch.key, "\" lies outside the tensor");
      AXLE_CHECK(!ch.file.empty() && ch.file.find('/') == std::string::npos && ch.file != "." && ch.file != "..",
                 what, ": chunk file \"", ch.file, "\" is not a file name in the checkpoint directory");
      auto fit = files.find(ch.file);
      if (fit == files.end()) fit = files.emplace(ch.file, axle::load((dir / ch.file).string())).first;
      const Tensor& data = fit->second.at(ch.key);
      AXLE_CHECK(data.shape() == ch.sizes && data.dtype() == t.dtype(), what, ": chunk \"", ch.key, "\" in ",
                 ch.file, " holds ", shape_str(data.shape()), " ", dtype_name(data.dtype()), ", the metadata says ",
                 shape_str(ch.sizes), " ", dtype);
      for (const Chunk& o : chunks)
        AXLE_CHECK(!intersect(ch.offsets, box_end(ch.offsets, ch.sizes), o.offsets, box_end(o.offsets, o.sizes)),
                   what, ": chunks \"", o.key, "\" and \"", ch.key, "\" overlap");
      covered += volume(ch.sizes);
      chunks.push_back(std::move(ch));
    }
    AXLE_CHECK(covered == volume(shape), what, ": its chunks cover ", covered, " of ", volume(shape), " elements");
    plan.push_back(std::move(chunks));
  }

  for (size_t i = 0; i < state_dict.size(); ++i) {
    const Tensor& t = state_dict[i].second;
    const size_t item = itemsize(t.dtype());
    // Fills `buf` (contiguous cpu, the box from `origin`) with every chunk's part in [lo, hi).
    auto fill = [&](Tensor& buf, const Shape& origin, const Shape& lo, const Shape& hi) {
      for (const Chunk& ch : plan[i]) {
        const Shape end = box_end(ch.offsets, ch.sizes);
        auto box = intersect(lo, hi, ch.offsets, end);  // rank 0: the empty box, always there
        if (!box) continue;
        const Tensor& src = files.at(ch.file).at(ch.key);
        copy_box(static_cast<const char*>(src.impl()->data()), ch.sizes, ch.offsets,
                 static_cast<char*>(buf.impl()->data()), buf.shape(), origin, box->first, box->second, item);
      }
    };
    if (annotated(t) && xs::get_sharding_type(t) != xs::ShardingType::REPLICATED) {
      // Each device's shard (padded shape, the global ranges it holds) from the chunks it overlaps.
      std::vector<xs::XLAShard> shards = xs::local_shards(t);
      for (xs::XLAShard& s : shards) {
        Tensor buf = zeros(s.data.shape(), {.dtype = t.dtype()});
        Shape lo(t.dim(), 0), hi = t.shape();
        if (s.indices) {
          for (int64_t d = 0; d < t.dim(); ++d) lo[d] = (*s.indices)[d].start, hi[d] = (*s.indices)[d].stop;
        }
        bool empty = false;
        for (int64_t d = 0; d < t.dim(); ++d) empty = empty || lo[d] >= hi[d];
        if (!empty) fill(buf, lo, lo, hi);
        s.data = buf;
      }
      Tensor target = t;
      xs::load_local_shards_(target, shards);
    } else {
      Tensor full = zeros(t.shape(), {.dtype = t.dtype()});
      if (t.numel() > 0) fill(full, Shape(t.dim(), 0), Shape(t.dim(), 0), t.shape());
      const bool replicated = annotated(t);
      t.set_data(t.device().is_cpu() ? full : full.to(t.device()));
      if (replicated && !annotated(t)) {
        // New data is unannotated: mark it replicated again (every mesh replicates alike).
        Tensor target = t;
        xs::mark_sharding(target, xs::get_1d_mesh(), xs::PartitionSpec(size_t(t.dim()), xs::None));
      }
    }
  }
}

// ---------------------------------------------------------------- CheckpointManager

CheckpointManager::CheckpointManager(fs::path path, int64_t save_interval, int64_t max_to_keep)
    : path_(std::move(path)), save_interval_(save_interval), max_to_keep_(max_to_keep) {
  AXLE_CHECK(!path_.empty(), "[CheckpointManager] expected a directory, got an empty path");
  AXLE_CHECK(save_interval_ >= 1, "[CheckpointManager] expected save_interval >= 1, got ", save_interval_);
  AXLE_CHECK(max_to_keep_ >= 0, "[CheckpointManager] expected max_to_keep >= 0 (0: keep all), got ", max_to_keep_);
  std::error_code ec;
  fs::create_directories(path_, ec);
  AXLE_CHECK(fs::is_directory(path_, ec), "[CheckpointManager] can't create the directory '", path_.string(), "'");
}

CheckpointManager::~CheckpointManager() {
  try {
    join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[CheckpointManager] warning: a background save failed: %s\n", e.what());
  }
}

bool CheckpointManager::should_save(int64_t step, bool force) const {
  AXLE_CHECK(step >= 0, "[CheckpointManager] expected a step >= 0, got ", step);
  return force || step % save_interval_ == 0;
}

void CheckpointManager::finish_save() {
  if (max_to_keep_ == 0) return;
  std::vector<int64_t> steps = all_steps();
  std::error_code ec;
  for (size_t i = 0; i + size_t(max_to_keep_) < steps.size(); ++i) fs::remove_all(path_ / std::to_string(steps[i]), ec);
}

bool CheckpointManager::save(int64_t step, const nn::StateDict& state_dict, bool force) {
  if (!should_save(step, force)) return false;
  join();
  distributed_checkpoint::save(state_dict, path_ / std::to_string(step));
  finish_save();
  return true;
}

bool CheckpointManager::save_async(int64_t step, const nn::StateDict& state_dict, bool force) {
  if (!should_save(step, force)) return false;
  join();  // one save at a time; an earlier failure is thrown here
  const std::string op = "[CheckpointManager::save_async]";
  auto snap = std::make_shared<Snapshot>(snapshot(state_dict, op, /*own=*/true));
  if (!st::is_master_ordinal()) return true;
  const fs::path dir = path_ / std::to_string(step);
  worker_ = std::thread([this, snap, dir, op] {
    try {
      write_snapshot(*snap, dir, op);
      finish_save();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return true;
}

void CheckpointManager::join() {
  if (worker_.joinable()) worker_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::vector<int64_t> CheckpointManager::all_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.size() > 18 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (fs::exists(e.path() / kMetadataFile, ec)) steps.push_back(std::stoll(name));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointManager::restore(int64_t step, const nn::StateDict& state_dict) {
  join();
  const std::vector<int64_t> steps = all_steps();
  AXLE_CHECK(std::find(steps.begin(), steps.end(), step) != steps.end(), "[CheckpointManager] no checkpoint of step ",
             step, " in '", path_.string(), "' (steps there: ", steps.size(), ")");
  distributed_checkpoint::load(state_dict, path_ / std::to_string(step));
}

}  // namespace axle::experimental::distributed_checkpoint
