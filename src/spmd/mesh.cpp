// Partition-spec entries (xs::Dim), meshes (xs::Mesh), the global mesh, xs::ShardingSpec,
// and the virtual device count read from the environment.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>

#include "axle/xs.h"
#include "dist/local_devices.h"
#include "spmd/device_count.h"

namespace axle::runtime {
namespace {

constexpr int64_t kMaxDevices = 4096;
constexpr const char* kXlaFlag = "--xla_force_host_platform_device_count=";

struct Count {
  int64_t n = 1;
  std::string source;
};

std::mutex count_mu;
std::optional<Count> cached;

// A device count from `text`; `shown` names the variable and its value in errors.
int64_t parse_count(const std::string& text, const std::string& shown) {
  size_t used = 0;
  long long v = 0;
  bool ok = !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-' || text[0] == '+');
  if (ok) {
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  AXLE_CHECK(ok && used == text.size() && v >= 1 && v <= kMaxDevices, "[runtime] ", shown,
             " is not a device count (expected an integer from 1 to ", kMaxDevices, ")");
  return v;
}

Count read_count() {
  struct Seen {
    std::string shown;  // "AXLE_CPU_DEVICES=4"
    int64_t n;
  };
  std::vector<Seen> seen;
  for (const char* var : {"AXLE_CPU_DEVICES", "CPU_NUM_DEVICES"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    std::string shown = std::string(var) + "=" + v;
    seen.push_back({shown, parse_count(v, shown)});
  }
  if (const char* flags = std::getenv("XLA_FLAGS")) {
    std::istringstream is(flags);
    std::string word, value;
    bool found = false;
    while (is >> word)
      if (word.rfind(kXlaFlag, 0) == 0) {
        value = word.substr(std::string(kXlaFlag).size());
        found = true;  // the last occurrence wins, as with any flag
      }
    if (found) {
      std::string shown = std::string("XLA_FLAGS=") + kXlaFlag + value;
      seen.push_back({shown, parse_count(value, shown)});
    }
  }
  if (seen.empty()) return {1, "default: AXLE_CPU_DEVICES unset"};
  for (size_t i = 1; i < seen.size(); ++i)
    AXLE_CHECK(seen[i].n == seen[0].n, "[runtime] the device count is set twice with different values: ",
               seen[0].shown, " and ", seen[i].shown, " (set one, or make them agree)");
  return {seen[0].n, seen[0].shown};
}

const Count& count() {
  std::lock_guard<std::mutex> lock(count_mu);
  if (!cached) cached = read_count();  // an error leaves nothing cached: the next call throws again
  return *cached;
}

}  // namespace

// Several hosts (one SPMD process per host, dist::host_count()): every host has the same
// local count, and the global devices are numbered host by host.
int64_t global_runtime_device_count() { return count().n * dist::host_count(); }
int64_t addressable_runtime_device_count() { return count().n; }

}  // namespace axle::runtime

namespace axle::spmd {
std::string device_count_source() {
  runtime::global_runtime_device_count();
  std::lock_guard<std::mutex> lock(runtime::count_mu);
  return runtime::cached ? runtime::cached->source : std::string();
}
void reset_device_count() {
  std::lock_guard<std::mutex> lock(runtime::count_mu);
  runtime::cached.reset();
}
}  // namespace axle::spmd

namespace axle::xs {

// ---- Dim ----

Dim::Dim(const char* axis) : Dim(std::string(axis == nullptr ? "" : axis)) {
  AXLE_CHECK(axis != nullptr, "[xs::Dim] a null axis name (use xs::None for a replicated dim)");
}
Dim::Dim(std::string axis) {
  AXLE_CHECK(!axis.empty(), "[xs::Dim] an empty axis name (use xs::None for a replicated dim)");
  AXLE_CHECK(axis[0] != '#', "[xs::Dim] axis name '", axis, "' may not start with '#' (axes by index: xs::Dim(1))");
  items_.push_back(std::move(axis));
}
Dim::Dim(int axis_index) {
  AXLE_CHECK(axis_index >= 0, "[xs::Dim] mesh axis index ", axis_index, " is negative");
  items_.push_back("#" + std::to_string(axis_index));
}
Dim Dim::axes(std::vector<Dim> axes) {
  AXLE_CHECK(!axes.empty(), "[xs::axes] an empty tuple of mesh axes (use xs::None for a replicated dim)");
  Dim d;
  d.tuple_ = true;
  for (size_t i = 0; i < axes.size(); ++i) {
    AXLE_CHECK(!axes[i].is_tuple(), "[xs::axes] entry ", i, " is a tuple: tuples of mesh axes do not nest");
    AXLE_CHECK(!axes[i].is_none(), "[xs::axes] entry ", i, " is None: a tuple holds mesh axes only");
    d.items_.push_back(axes[i].items_[0]);
  }
  return d;
}

// ---- Mesh ----

namespace {
std::string join_ints(const std::vector<int64_t>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

Mesh::Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> mesh_shape, std::vector<std::string> axis_names)
    : device_ids_(std::move(device_ids)), mesh_shape_(std::move(mesh_shape)), axis_names_(std::move(axis_names)) {
  AXLE_CHECK(!mesh_shape_.empty(), "[Mesh] mesh_shape is empty: a mesh has at least one axis");
  for (size_t i = 0; i < mesh_shape_.size(); ++i)
    AXLE_CHECK(mesh_shape_[i] >= 1, "[Mesh] mesh_shape (", join_ints(mesh_shape_), ") has size ", mesh_shape_[i],
               " on axis ", i, "; every axis needs at least one device");
  AXLE_CHECK(axis_names_.empty() || axis_names_.size() == mesh_shape_.size(), "[Mesh] ", axis_names_.size(),
             " axis names for a ", mesh_shape_.size(), "-D mesh_shape (", join_ints(mesh_shape_),
             "): give one name per mesh axis");
  for (size_t i = 0; i < axis_names_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      AXLE_CHECK(axis_names_[i] != axis_names_[j], "[Mesh] axis name '", axis_names_[i], "' is used twice (axes ", j,
                 " and ", i, "): axis names must be unique");
  int64_t n = runtime::global_runtime_device_count();
  AXLE_CHECK(int64_t(device_ids_.size()) == n, "[Mesh] ", device_ids_.size(), " device ids but ", n,
             " runtime devices (", spmd::device_count_source(), "): a mesh uses every device");
  int64_t sz = size();
  AXLE_CHECK(int64_t(device_ids_.size()) == sz, "[Mesh] ", device_ids_.size(), " device ids but mesh_shape (",
             join_ints(mesh_shape_), ") has ", sz, " positions");
  std::set<int64_t> seen;
  for (int64_t id : device_ids_) {
    AXLE_CHECK(seen.insert(id).second, "[Mesh] device id ", id, " appears twice in device_ids: ids must be unique");
    AXLE_CHECK(id >= 0 && id < sz, "[Mesh] device id ", id, " is not in 0..", sz - 1,
               ": device ids must be less than the mesh size ", sz);
  }
}

int64_t Mesh::size() const {
  int64_t n = 1;
  for (int64_t s : mesh_shape_)
    if (__builtin_mul_overflow(n, s, &n)) return INT64_MAX;  // only a mesh the constructor rejects
  return n;
}

std::vector<std::pair<std::string, int64_t>> Mesh::shape() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t i = 0; i < mesh_shape_.size(); ++i)
    out.emplace_back(axis_names_.empty() ? std::to_string(i) : axis_names_[i], mesh_shape_[i]);
  return out;
}

Tensor Mesh::get_logical_mesh() const { return from_vector(device_ids_, mesh_shape_); }

std::optional<int> Mesh::get_axis_name_idx(std::string_view name) const {
  for (size_t i = 0; i < axis_names_.size(); ++i)
    if (axis_names_[i] == name) return int(i);
  return std::nullopt;
}

namespace {
// Python-style quoting: 'name', with \\ and \' escaped.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') q += '\\';
    q += c;
  }
  return q + "'";
}

// A small reader for Mesh::str's text.
struct Reader {
  std::string_view s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool eat(std::string_view t) {
    ws();
    if (s.substr(i, t.size()) != t) return false;
    i += t.size();
    return true;
  }
  std::optional<int64_t> integer() {
    ws();
    size_t j = i;
    if (j < s.size() && s[j] == '-') ++j;
    size_t digits = j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == digits || j - digits > 18) return std::nullopt;
    int64_t v = std::stoll(std::string(s.substr(i, j - i)));
    i = j;
    return v;
  }
  std::optional<std::string> str() {
    ws();
    if (i >= s.size() || s[i] != '\'') return std::nullopt;
    std::string out;
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        out += s[++i];
      } else if (s[i] == '\'') {
        ++i;
        return out;
      } else {
        out += s[i];
      }
    }
    return std::nullopt;
  }
  // A comma-separated sequence between `open` and `close` (a trailing comma allowed).
  template <class F>
  bool seq(char open, char close, F item) {
    if (!eat(std::string_view(&open, 1))) return false;
    if (eat(std::string_view(&close, 1))) return true;
    while (true) {
      if (!item()) return false;
      if (eat(std::string_view(&close, 1))) return true;
      if (!eat(",")) return false;
      if (eat(std::string_view(&close, 1))) return true;
    }
  }
};
}  // namespace

std::string Mesh::str() const {
  std::string s = "Mesh(device_ids=[" + join_ints(device_ids_) + "], mesh_shape=(" + join_ints(mesh_shape_) +
                  (mesh_shape_.size() == 1 ? ",)" : ")") + ", axis_names=";
  if (axis_names_.empty()) return s + "None)";
  s += "(";
  for (size_t i = 0; i < axis_names_.size(); ++i) s += (i ? ", " : "") + quote(axis_names_[i]);
  return s + (axis_names_.size() == 1 ? ",))" : "))");
}

std::optional<Mesh> Mesh::from_str(std::string_view text) {
  Reader r{text};
  std::vector<int64_t> ids, shape;
  std::vector<std::string> names;
  auto int_into = [&r](std::vector<int64_t>& v) {
    return [&r, &v] {
      auto x = r.integer();
      if (x) v.push_back(*x);
      return x.has_value();
    };
  };
  if (!r.eat("Mesh(") || !r.eat("device_ids=") || !r.seq('[', ']', int_into(ids)) || !r.eat(",") ||
      !r.eat("mesh_shape=") || !r.seq('(', ')', int_into(shape)) || !r.eat(",") || !r.eat("axis_names="))
    return std::nullopt;
  if (!r.eat("None")) {
    bool ok = r.seq('(', ')', [&] {
      auto n = r.str();
      if (n) names.push_back(*n);
      return n.has_value();
    });
    if (!ok) return std::nullopt;
  }
  if (!r.eat(")")) return std::nullopt;
  r.ws();
  if (r.i != text.size()) return std::nullopt;
  return Mesh(std::move(ids), std::move(shape), std::move(names));  // a well-formed but invalid mesh throws
}

Mesh get_1d_mesh(std::optional<std::string> axis_name) {
  int64_t n = runtime::global_runtime_device_count();
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<std::string> names;
  if (axis_name) names.push_back(*axis_name);
  return Mesh(std::move(ids), {n}, std::move(names));
}

namespace {
std::mutex global_mesh_mu;
std::optional<Mesh> global_mesh;
}  // namespace

void set_global_mesh(std::optional<Mesh> mesh) {
  std::lock_guard<std::mutex> lock(global_mesh_mu);
  global_mesh = std::move(mesh);
}
std::optional<Mesh> get_global_mesh() {
  std::lock_guard<std::mutex> lock(global_mesh_mu);
  return global_mesh;
}

// ---- ShardingSpec ----

ShardingSpec::ShardingSpec(Mesh m, PartitionSpec spec, bool mb)
    : mesh(std::move(m)), partition_spec(std::move(spec)), minibatch(mb) {}

bool ShardingSpec::can_apply(const Tensor& t) const { return t.dim() == int64_t(partition_spec.size()); }

}  // namespace axle::xs
