// spmd::Sharding: torch_xla's spec -> sharding algorithm, the V1 text, the placement math
// (tiles, ranges, replica ids, replica groups), the attribute encoding, and host-side
// sharding and assembly of dense tensors.
#include "spmd/sharding.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "core/tensor_impl.h"
#include "spmd/device_count.h"

namespace axle::spmd {
namespace {

using Axes = std::vector<int>;

int64_t axis_size(const xs::Mesh& m, int a) {
  AXLE_CHECK(a >= 0 && a < int(m.mesh_shape().size()), "[spmd] mesh axis ", a, " out of range for a ",
             m.mesh_shape().size(), "-D mesh");
  return m.mesh_shape()[a];
}

std::string axis_label(const xs::Mesh& m, int a) {
  return m.axis_names().empty() ? std::to_string(a) : m.axis_names()[a];
}

// The mesh coordinates of `device` (its position in device_ids, unravelled row-major).
std::vector<int64_t> coords_of(const xs::Mesh& m, int64_t device) {
  const auto& ids = m.device_ids();
  auto it = std::find(ids.begin(), ids.end(), device);
  AXLE_CHECK(it != ids.end(), "[spmd] device ", device, " is not in ", m.str());
  int64_t pos = it - ids.begin();
  const auto& shp = m.mesh_shape();
  std::vector<int64_t> c(shp.size());
  for (int a = int(shp.size()) - 1; a >= 0; --a) {
    c[a] = pos % shp[a];
    pos /= shp[a];
  }
  return c;
}

int64_t device_at(const xs::Mesh& m, const std::vector<int64_t>& c) {
  int64_t pos = 0;
  for (size_t a = 0; a < c.size(); ++a) pos = pos * m.mesh_shape()[a] + c[a];
  return m.device_ids()[pos];
}

// dim_axes without size-1 axes (they split nothing).
std::vector<Axes> split_dims(const Sharding& s) {
  std::vector<Axes> out;
  for (const auto& axes : s.dim_axes) {
    Axes kept;
    for (int a : axes)
      if (axis_size(*s.mesh, a) > 1) kept.push_back(a);
    out.push_back(std::move(kept));
  }
  return out;
}

bool any_split(const std::vector<Axes>& dims) {
  return std::any_of(dims.begin(), dims.end(), [](const Axes& a) { return !a.empty(); });
}

// The V1 tile assignment: the mesh transposed so the split axes come first (in dim order,
// each dim's axes major first), then the other axes ascending; with a trailing replication
// dim (members sorted) when those other axes hold more than one device.
struct Layout {
  std::vector<int64_t> dims;
  std::vector<int64_t> devices;
  int64_t rep = 1;
};

void check_axes(const Sharding& s, const Axes& axes, const char* what);

Layout v1_layout(const Sharding& s) {
  const xs::Mesh& m = *s.mesh;
  int rank = int(m.mesh_shape().size());
  Axes order;
  for (const auto& axes : s.dim_axes) order.insert(order.end(), axes.begin(), axes.end());
  check_axes(s, order, "tile assignment");
  Layout l;
  for (int a = 0; a < rank; ++a)
    if (std::find(order.begin(), order.end(), a) == order.end()) {
      order.push_back(a);
      l.rep *= m.mesh_shape()[a];
    }
  int64_t n = m.size();
  std::vector<int64_t> c(rank);
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i;
    for (int k = rank - 1; k >= 0; --k) {
      int64_t sz = m.mesh_shape()[order[k]];
      c[order[k]] = r % sz;
      r /= sz;
    }
    l.devices.push_back(device_at(m, c));
  }
  for (size_t d = 0; d < s.dim_axes.size(); ++d) l.dims.push_back(s.tiles(int(d)));
  if (l.rep > 1) {
    for (int64_t g = 0; g < n; g += l.rep) std::sort(l.devices.begin() + g, l.devices.begin() + g + l.rep);
    l.dims.push_back(l.rep);
  }
  return l;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

void check_axes(const Sharding& s, const Axes& axes, const char* what) {
  AXLE_CHECK(s.mesh != nullptr || axes.empty(), "[spmd] ", what, " over mesh axes of a sharding without a mesh");
  for (size_t i = 0; i < axes.size(); ++i) {
    axis_size(*s.mesh, axes[i]);
    for (size_t j = 0; j < i; ++j)
      AXLE_CHECK(axes[i] != axes[j], "[spmd] ", what, ": mesh axis ", axes[i], " listed twice");
  }
}

}  // namespace

// ---- construction ----

Sharding Sharding::replicated(std::shared_ptr<const xs::Mesh> mesh) {
  Sharding s;
  s.mesh = std::move(mesh);
  return s;
}

Sharding Sharding::from_spec(const xs::Mesh& mesh, const xs::PartitionSpec& spec, int64_t rank, const char* op) {
  AXLE_CHECK(int64_t(spec.size()) == rank, "[", op, "] partition spec length ", spec.size(), " != tensor rank ", rank,
             ": give one entry per tensor dim (xs::None for a replicated dim)");
  int mesh_rank = int(mesh.mesh_shape().size());
  auto axis_list = [&] {
    std::string s;
    for (int a = 0; a < mesh_rank; ++a) s += (a ? ", " : "") + axis_label(mesh, a);
    return s;
  };
  Sharding s;
  s.mesh = mesh_by_id(mesh_id(mesh));
  s.kind = Kind::Tiled;
  std::vector<int> used_by(mesh_rank, -1);
  for (size_t d = 0; d < spec.size(); ++d) {
    Axes axes;
    for (const std::string& item : spec[d].items()) {
      int a = -1;
      if (item[0] == '#') {
        a = std::stoi(item.substr(1));
        AXLE_CHECK(a < mesh_rank, "[", op, "] partition spec entry ", d, " names mesh axis index ", a,
                   ", but the mesh has ", mesh_rank, " axes (", axis_list(), ")");
      } else {
        auto idx = mesh.get_axis_name_idx(item);
        AXLE_CHECK(idx.has_value(), "[", op, "] partition spec entry ", d, " names mesh axis '", item,
                   "', but the mesh's axes are (", axis_list(), ")");
        a = *idx;
      }
      AXLE_CHECK(used_by[a] < 0, "[", op, "] mesh axis ", axis_label(mesh, a), " is used twice in the partition spec (",
                 "entries ", used_by[a], " and ", d, "): each mesh axis may split one dim");
      used_by[a] = int(d);
      if (mesh.mesh_shape()[a] > 1) axes.push_back(a);
    }
    s.dim_axes.push_back(std::move(axes));
  }
  if (!any_split(s.dim_axes)) return replicated(s.mesh);
  return s;
}

// ---- placement ----

int64_t Sharding::num_devices() const { return mesh ? mesh->size() : runtime::global_runtime_device_count(); }

int64_t Sharding::tiles(int d) const {
  if (d < 0 || d >= int(dim_axes.size()) || !mesh) return 1;
  int64_t t = 1;
  for (int a : dim_axes[d]) t *= axis_size(*mesh, a);
  return t;
}

Shape Sharding::shard_shape(const Shape& global) const {
  AXLE_CHECK(kind == Kind::Replicated || dim_axes.empty() || dim_axes.size() == global.size(), "[spmd] sharding ",
             str(), " is for rank ", dim_axes.size(), ", applied to a tensor of shape ", shape_str(global));
  Shape s(global.size());
  for (size_t d = 0; d < global.size(); ++d) {
    int64_t t = tiles(int(d));
    s[d] = global[d] / t + (global[d] % t != 0);
  }
  return s;
}

int64_t Sharding::tile_index(int d, int64_t device) const {
  if (d < 0 || d >= int(dim_axes.size()) || !mesh || dim_axes[d].empty()) return 0;
  auto c = coords_of(*mesh, device);
  int64_t idx = 0;
  for (int a : dim_axes[d]) {
    int64_t size = axis_size(*mesh, a);  // checks a
    idx = idx * size + c[a];
  }
  return idx;
}

xs::Slice Sharding::range(int d, int64_t device, int64_t global_size) const {
  int64_t t = tiles(d);
  int64_t len = global_size / t + (global_size % t != 0);
  int64_t i = tile_index(d, device);
  return {std::min(i * len, global_size), std::min((i + 1) * len, global_size)};
}

int Sharding::replica_id(int64_t device) const {
  if (kind == Kind::Manual) return 0;
  if (!mesh || !any_split(split_dims(*this))) return int(device);
  Layout l = v1_layout(*this);
  auto it = std::find(l.devices.begin(), l.devices.end(), device);
  AXLE_CHECK(it != l.devices.end(), "[spmd] device ", device, " is not in ", mesh->str());
  return int((it - l.devices.begin()) % l.rep);
}

std::vector<std::vector<int>> Sharding::groups(const std::vector<int>& axes) const {
  check_axes(*this, axes, "replica groups");
  std::vector<std::vector<int>> out;
  if (!mesh) {
    for (int64_t d = 0; d < num_devices(); ++d) out.push_back({int(d)});
    return out;
  }
  // key: coordinates on the other axes; members sorted by their coordinates on `axes`.
  std::map<std::vector<int64_t>, std::vector<std::pair<std::vector<int64_t>, int>>> by_key;
  for (int64_t id : mesh->device_ids()) {
    auto c = coords_of(*mesh, id);
    std::vector<int64_t> key, pos;
    for (int a = 0; a < int(c.size()); ++a)
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) key.push_back(c[a]);
    for (int a : axes) pos.push_back(c[a]);
    by_key[key].emplace_back(pos, int(id));
  }
  for (auto& [key, members] : by_key) {
    std::sort(members.begin(), members.end());
    std::vector<int> g;
    for (auto& m : members) g.push_back(m.second);
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  return out;
}

std::vector<int> Sharding::replicated_axes() const {
  std::vector<int> out;
  if (!mesh) return out;
  for (int a = 0; a < int(mesh->mesh_shape().size()); ++a) {
    bool used = std::find(partial_axes.begin(), partial_axes.end(), a) != partial_axes.end();
    for (const auto& axes : dim_axes) used = used || std::find(axes.begin(), axes.end(), a) != axes.end();
    if (!used) out.push_back(a);
  }
  return out;
}

// ---- text, hash, equality ----

std::string Sharding::to_hlo_v1() const {
  if (kind == Kind::Manual) return "{manual}";
  if (!mesh || !any_split(split_dims(*this))) return "{replicated}";
  Layout l = v1_layout(*this);
  return "{devices=[" + join(l.dims) + "]" + join(l.devices) + (l.rep > 1 ? " last_tile_dim_replicate}" : "}");
}

std::string Sharding::str() const {
  if (!is_partial()) return to_hlo_v1();
  std::string s = partial_op == Reduce::Sum ? "partial(" : partial_op == Reduce::Max ? "partial-max(" : "partial-min(";
  for (size_t i = 0; i < partial_axes.size(); ++i)
    s += (i ? "," : "") + (mesh ? axis_label(*mesh, partial_axes[i]) : std::to_string(partial_axes[i]));
  return s + ") " + to_hlo_v1();
}

namespace {
// What equality and hashing compare: size-1 axes dropped; nothing split and nothing
// partial (and not manual) is plain replicated, whatever the mesh.
struct Canon {
  int kind = 0;  // 0 replicated, 1 tiled, 2 manual
  std::vector<Axes> dims;
  Axes partial;
  Reduce op = Reduce::Sum;
  const xs::Mesh* mesh = nullptr;
};
Canon canon(const Sharding& s) {
  Canon c;
  if (!s.mesh) return c;
  c.dims = split_dims(s);
  for (int a : s.partial_axes)
    if (axis_size(*s.mesh, a) > 1) c.partial.push_back(a);
  std::sort(c.partial.begin(), c.partial.end());
  bool split = any_split(c.dims);
  if (s.kind == Sharding::Kind::Manual) {
    c.kind = 2;
  } else if (split) {
    c.kind = 1;
  } else {
    c.dims.clear();
    if (c.partial.empty()) return c;
  }
  if (!c.partial.empty()) c.op = s.partial_op;
  c.mesh = s.mesh.get();
  return c;
}
}  // namespace

uint64_t Sharding::hash() const {
  Canon c = canon(*this);
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) { h = (h ^ uint64_t(v)) * 1099511628211ull + 0x9e3779b97f4a7c15ull; };
  mix(c.kind);
  if (c.mesh) {
    for (int64_t v : c.mesh->mesh_shape()) mix(v);
    mix(-1);
    for (int64_t v : c.mesh->device_ids()) mix(v);
  }
  for (const auto& axes : c.dims) {
    mix(-2);
    for (int a : axes) mix(a);
  }
  mix(-3);
  for (int a : c.partial) mix(a);
  mix(int(c.op));
  return h;
}

bool Sharding::operator==(const Sharding& o) const {
  Canon a = canon(*this), b = canon(o);
  if (a.kind != b.kind || a.dims != b.dims || a.partial != b.partial || a.op != b.op) return false;
  if ((a.mesh == nullptr) != (b.mesh == nullptr)) return false;
  return a.mesh == nullptr ||
         (a.mesh->mesh_shape() == b.mesh->mesh_shape() && a.mesh->device_ids() == b.mesh->device_ids());
}

// ---- parsing V1 text ----

TileAssignment parse_hlo_v1(std::string_view text) {
  TileAssignment t;
  if (text == "{replicated}") {
    t.replicated = true;
    return t;
  }
  if (text == "{manual}") {
    t.manual = true;
    return t;
  }
  auto bad = [&](const char* why) {
    AXLE_FAIL("[parse_hlo_v1] cannot read sharding '", text, "': ", why,
              " (expected {replicated}, {manual} or {devices=[d0,d1,...]id,id,...[ last_tile_dim_replicate]})");
  };
  size_t i = 0;
  auto eat = [&](std::string_view s) {
    if (text.substr(i, s.size()) != s) return false;
    i += s.size();
    return true;
  };
  auto ints = [&](std::vector<int64_t>& out) {
    do {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      if (j == i || j - i > 9) bad("a number is missing or too long");
      out.push_back(std::stoll(std::string(text.substr(i, j - i))));
      i = j;
    } while (eat(","));
  };
  if (!eat("{devices=[")) bad("no '{devices=['");
  ints(t.dims);
  if (!eat("]")) bad("no ']' after the tile dims");
  ints(t.devices);
  if (eat(" last_tile_dim_replicate")) t.last_tile_dim_replicate = true;
  if (!eat("}") || i != text.size()) bad("unexpected text after the device list");
  int64_t n = 1;
  for (int64_t d : t.dims) {
    if (d < 1) bad("a tile dim is 0");
    n *= d;
    if (n > (int64_t(1) << 31)) bad("too many tiles");
  }
  if (n != int64_t(t.devices.size())) bad("the device count is not the product of the tile dims");
  std::set<int64_t> seen(t.devices.begin(), t.devices.end());
  if (seen.size() != t.devices.size()) bad("a device appears twice");
  if (t.last_tile_dim_replicate && t.dims.size() < 2) bad("last_tile_dim_replicate needs a tensor dim before it");
  return t;
}

// ---- encoding ----

namespace {
std::mutex meshes_mu;
std::vector<std::shared_ptr<const xs::Mesh>> meshes;
}  // namespace

int64_t mesh_id(const xs::Mesh& m) {
  std::lock_guard<std::mutex> lock(meshes_mu);
  for (size_t i = 0; i < meshes.size(); ++i)
    if (*meshes[i] == m) return int64_t(i);
  meshes.push_back(std::make_shared<const xs::Mesh>(m));
  return int64_t(meshes.size()) - 1;
}

std::shared_ptr<const xs::Mesh> mesh_by_id(int64_t id) {
  std::lock_guard<std::mutex> lock(meshes_mu);
  AXLE_CHECK(id >= 0 && id < int64_t(meshes.size()), "[spmd] no mesh with id ", id, " (", meshes.size(),
             " meshes interned)");
  return meshes[id];
}

// Layout: kind, mesh id (-1: none), rank, per dim (count, axes...), partial count, partial
// axes..., partial op.
void encode(const Sharding& s, std::vector<int64_t>& out) {
  out.push_back(int64_t(s.kind));
  out.push_back(s.mesh ? mesh_id(*s.mesh) : -1);
  out.push_back(int64_t(s.dim_axes.size()));
  for (const auto& axes : s.dim_axes) {
    out.push_back(int64_t(axes.size()));
    out.insert(out.end(), axes.begin(), axes.end());
  }
  out.push_back(int64_t(s.partial_axes.size()));
  out.insert(out.end(), s.partial_axes.begin(), s.partial_axes.end());
  out.push_back(int64_t(s.partial_op));
}

Sharding decode(const int64_t* data, size_t n) {
  size_t i = 0;
  auto next = [&](int64_t lo, int64_t hi) {
    AXLE_CHECK(i < n, "[spmd] sharding encoding of ", n, " values ends early");
    int64_t v = data[i++];
    AXLE_CHECK(v >= lo && v <= hi, "[spmd] sharding encoding: value ", v, " at ", i - 1, " not in ", lo, "..", hi);
    return v;
  };
  Sharding s;
  s.kind = Sharding::Kind(next(0, 2));
  int64_t id = next(-1, INT64_MAX);
  if (id >= 0) s.mesh = mesh_by_id(id);
  int max_axis = s.mesh ? int(s.mesh->mesh_shape().size()) - 1 : -1;
  int64_t rank = next(0, 1 << 20);
  for (int64_t d = 0; d < rank; ++d) {
    Axes axes(next(0, max_axis + 1));
    for (int& a : axes) a = int(next(0, max_axis));
    s.dim_axes.push_back(std::move(axes));
  }
  s.partial_axes.resize(next(0, max_axis + 1));
  for (int& a : s.partial_axes) a = int(next(0, max_axis));
  s.partial_op = Reduce(next(0, 2));
  AXLE_CHECK(i == n, "[spmd] sharding encoding has ", n - i, " values left over");
  return s;
}

// ---- host side ----

namespace {
// Copies the box `len` (per dim) from `src` at `src_at` to `dst` at `dst_at`; both contiguous.
void copy_box(const char* src, const Shape& src_shape, const Shape& src_at, char* dst, const Shape& dst_shape,
              const Shape& dst_at, const Shape& len, size_t item) {
  int rank = int(len.size());
  for (int64_t l : len)
    if (l <= 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  Shape ss(rank), ds(rank);
  int64_t s = 1, d = 1;
  for (int k = rank - 1; k >= 0; --k) {
    ss[k] = s;
    ds[k] = d;
    s *= src_shape[k];
    d *= dst_shape[k];
  }
  // Iterate over every index of the outer dims; the last dim is one memcpy.
  Shape idx(rank, 0);
  while (true) {
    int64_t so = 0, dofs = 0;
    for (int k = 0; k < rank; ++k) {
      so += (src_at[k] + idx[k]) * ss[k];
      dofs += (dst_at[k] + idx[k]) * ds[k];
    }
    std::memcpy(dst + dofs * item, src + so * item, size_t(len[rank - 1]) * item);
    int k = rank - 2;
    for (; k >= 0; --k) {
      if (++idx[k] < len[k]) break;
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

template <class T>
void combine_typed(T* acc, const T* x, int64_t n, Reduce op) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      acc[i] = op == Reduce::Min ? (acc[i] && x[i]) : (acc[i] || x[i]);
    } else if (op == Reduce::Sum) {
      acc[i] = T(acc[i] + x[i]);
    } else if (op == Reduce::Max) {
      acc[i] = (x[i] > acc[i] || x[i] != x[i]) ? x[i] : acc[i];  // NaN wins, as torch.max
    } else {
      acc[i] = (x[i] < acc[i] || x[i] != x[i]) ? x[i] : acc[i];
    }
  }
}

void combine(const Tensor& acc, const Tensor& x, Reduce op) {
  int64_t n = acc.numel();
  switch (acc.dtype()) {
    case DType::Float32: return combine_typed(acc.data<float>(), x.data<float>(), n, op);
    case DType::Int64: return combine_typed(acc.data<int64_t>(), x.data<int64_t>(), n, op);
    case DType::Int32: return combine_typed(acc.data<int32_t>(), x.data<int32_t>(), n, op);
    case DType::UInt8: return combine_typed(acc.data<uint8_t>(), x.data<uint8_t>(), n, op);
    case DType::Bool: return combine_typed(acc.data<bool>(), x.data<bool>(), n, op);
    default: AXLE_FAIL("[assemble_host] cannot reduce partial shards of dtype ", dtype_name(acc.dtype()));
  }
}

bool is_first_of_partial_group(const Sharding& s, int64_t device) {
  if (s.partial_op != Reduce::Sum) return true;  // max/min of copies is the value itself
  auto c = coords_of(*s.mesh, device);
  for (int a : s.partial_axes)
    if (c[a] != 0) return false;
  return true;
}
}  // namespace

std::vector<Tensor> shard_host(const Tensor& full, const Sharding& s) {
  AXLE_CHECK(full.defined() && full.device() == kCPU, "[shard_host] expected a cpu tensor");
  check_axes(s, s.partial_axes, "shard_host: partial");
  Tensor x = full.contiguous();
  const Shape& global = x.shape();
  Shape local = s.shard_shape(global);
  int rank = int(global.size());
  size_t item = itemsize(x.dtype());
  std::vector<Tensor> out;
  for (int64_t dev = 0; dev < s.num_devices(); ++dev) {
    Tensor shard = zeros(local, {.dtype = x.dtype()});
    if (!s.is_partial() || is_first_of_partial_group(s, dev)) {
      Shape at(rank), len(rank), zero(rank, 0);
      for (int d = 0; d < rank; ++d) {
        auto r = s.range(d, dev, global[d]);
        at[d] = r.start;
        len[d] = r.stop - r.start;
      }
      copy_box(static_cast<const char*>(x.data_ptr()), global, at, static_cast<char*>(shard.data_ptr()), local, zero,
               len, item);
    }
    out.push_back(std::move(shard));
  }
  return out;
}

Tensor assemble_host(const std::vector<Tensor>& shards, const Sharding& s, const Shape& global) {
  int64_t n = s.num_devices();
  AXLE_CHECK(int64_t(shards.size()) == n, "[assemble_host] ", shards.size(), " shards for ", n, " devices");
  Shape local = s.shard_shape(global);
  std::vector<Tensor> parts;
  for (int64_t dev = 0; dev < n; ++dev) {
    const Tensor& t = shards[dev];
    AXLE_CHECK(t.defined() && t.device() == kCPU, "[assemble_host] shard ", dev, " is not a cpu tensor");
    AXLE_CHECK(t.dtype() == shards[0].dtype(), "[assemble_host] shard ", dev, " has dtype ", dtype_name(t.dtype()),
               ", shard 0 ", dtype_name(shards[0].dtype()));
    AXLE_CHECK(t.shape() == local, "[assemble_host] shard ", dev, " has shape ", shape_str(t.shape()), ", expected ",
               shape_str(local), " (", s.str(), " of ", shape_str(global), ")");
    parts.push_back(t.contiguous());
  }
  if (s.is_partial()) {  // each replica group's shards reduced in group order
    std::vector<Tensor> reduced(n);
    for (const auto& g : s.groups(s.partial_axes)) {
      Tensor acc = parts[g[0]].clone();
      for (size_t k = 1; k < g.size(); ++k) combine(acc, parts[g[k]], s.partial_op);
      for (int dev : g) reduced[dev] = acc;
    }
    parts = std::move(reduced);
  }
  DType dt = shards.empty() ? kFloat32 : shards[0].dtype();
  Tensor out = zeros(global, {.dtype = dt});
  int rank = int(global.size());
  size_t item = itemsize(dt);
  std::set<std::vector<int64_t>> done;  // tiles already copied (replicas hold the same)
  for (int64_t dev = 0; dev < n; ++dev) {
    std::vector<int64_t> tile(rank);
    Shape at(rank), len(rank), zero(rank, 0);
    for (int d = 0; d < rank; ++d) {
      tile[d] = s.tile_index(d, dev);
      auto r = s.range(d, dev, global[d]);
      at[d] = r.start;
      len[d] = r.stop - r.start;
    }
    if (!done.insert(tile).second) continue;
    copy_box(static_cast<const char*>(parts[dev].data_ptr()), local, zero, static_cast<char*>(out.data_ptr()), global,
             at, len, item);
  }
  return out;
}

}  // namespace axle::spmd
