#include "compiler/disk_cache.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "ops/schema.h"

namespace axle::compiler {
namespace {

// A file starts with kMagic and the format version, 8 bytes: a hash of the op table
// (ops::schema_text(): every op's name, arity, traits and attributes, in enum order) and of
// kPipelineVersion. A program written by a build with another table (an op added, an
// attribute changed, op numbers moved) or another pass pipeline is never run by this one.
// kPipelineVersion: bump when a pass changes what a stored program means without a change
// to ops.def (e.g. a new fused-program encoding). 4: the version became a hash.
constexpr char kMagic[7] = {'A', 'X', 'L', 'E', 'P', 'G', 'M'};
constexpr int kPipelineVersion = 4;

uint64_t fnv(const char* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 0x100000001B3ull;
  return h;
}

std::string hex(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

struct Writer {
  std::string out;
  void u64(uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) { out.append(reinterpret_cast<const char*>(&v), 8); }
  void str(const std::string& s) { u64(s.size()); out += s; }
  void meta(const ops::Meta& m) {
    u64(uint64_t(m.dtype));
    u64(m.shape.size());
    for (int64_t d : m.shape) i64(d);
  }
};

struct Reader {
  const std::string& in;
  size_t pos = 0;
  void need(size_t n) {
    AXLE_CHECK(n <= in.size() && pos <= in.size() - n, "[cache] truncated cache file");
  }
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, in.data() + pos, 8);
    pos += 8;
    return v;
  }
  int64_t i64() { return int64_t(u64()); }
  double f64() {
    uint64_t b = u64();
    double v;
    std::memcpy(&v, &b, 8);
    return v;
  }
  uint64_t count(uint64_t limit) {
    uint64_t n = u64();
    AXLE_CHECK(n <= limit, "[cache] implausible count ", n, " in cache file");
    return n;
  }
  std::string str() {
    uint64_t n = count(in.size());
    need(n);
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
  ops::Meta meta() {
    ops::Meta m;
    uint64_t dt = u64();
    AXLE_CHECK(dt <= uint64_t(DType::Float16), "[cache] bad dtype in cache file");
    m.dtype = DType(dt);
    uint64_t nd = count(16);
    for (uint64_t i = 0; i < nd; ++i) {
      int64_t d = i64();
      AXLE_CHECK(d >= 0 && d < (int64_t(1) << 40), "[cache] bad dimension in cache file");
      m.shape.push_back(d);
    }
    return m;
  }
};

}  // namespace

uint64_t format_version_of(const std::string& table_text) {
  return ops::hash_text(table_text + "\npipeline " + std::to_string(kPipelineVersion));
}

uint64_t cache_format_version() {
  static const uint64_t v = format_version_of(ops::schema_text());
  return v;
}

std::string serialize(const Program& p, uint64_t hash, uint64_t version) {
  Writer w;
  w.out.append(kMagic, 7);
  w.u64(version);
  w.u64(hash);
  w.u64(uint64_t(p.num_inputs));
  w.u64(p.nodes.size());
  for (const PNode& n : p.nodes) {
    w.u64(uint64_t(n.kind));
    w.str(n.kind == NodeKind::Op ? ops::op_name(n.op) : "");
    w.u64(n.attrs.ints.size());
    for (int64_t v : n.attrs.ints) w.i64(v);
    w.u64(n.attrs.floats.size());
    for (double v : n.attrs.floats) w.f64(v);
    w.u64(n.operands.size());
    for (const Ref& r : n.operands) {
      w.i64(r.node);
      w.i64(r.index);
    }
    w.u64(n.outs.size());
    for (const ops::Meta& m : n.outs) w.meta(m);
    w.i64(n.input);
    if (n.kind == NodeKind::Constant) {
      Tensor c = n.constant.contiguous();
      w.str(std::string(static_cast<const char*>(c.data_ptr()), size_t(c.numel()) * itemsize(c.dtype())));
    }
  }
  w.u64(p.outputs.size());
  for (const Ref& r : p.outputs) {
    w.i64(r.node);
    w.i64(r.index);
  }
  w.u64(fnv(w.out.data(), w.out.size()));
  return w.out;
}

Program deserialize(const std::string& bytes, uint64_t expect_hash) {
  AXLE_CHECK(bytes.size() >= 7 && std::memcmp(bytes.data(), kMagic, 7) == 0, "[cache] not an axle cache file");
  AXLE_CHECK(bytes.size() >= 7 + 8, "[cache] truncated cache file (", bytes.size(), " bytes)");
  uint64_t v;
  std::memcpy(&v, bytes.data() + 7, 8);
  AXLE_CHECK(v == cache_format_version(), "[cache] cache file has format version ", hex(v),
             ", this build reads version ", hex(cache_format_version()), " (another op table or pass pipeline)");
  // Magic and version, graph hash, checksum: a shorter file was cut off.
  AXLE_CHECK(bytes.size() >= 7 + 8 + 8 + 8, "[cache] truncated cache file (", bytes.size(), " bytes)");
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  AXLE_CHECK(stored == fnv(bytes.data(), bytes.size() - 8), "[cache] checksum mismatch: the file is truncated or corrupt");
  std::string body = bytes.substr(0, bytes.size() - 8);
  Reader r{body, 7 + 8};
  AXLE_CHECK(r.u64() == expect_hash, "[cache] file is for another graph");
  Program p;
  p.num_inputs = int(r.count(1 << 20));
  uint64_t n_nodes = r.count(1 << 22);
  for (uint64_t i = 0; i < n_nodes; ++i) {
    PNode n;
    uint64_t kind = r.u64();
    AXLE_CHECK(kind <= uint64_t(NodeKind::Constant), "[cache] bad node kind");
    n.kind = NodeKind(kind);
    std::string op = r.str();
    if (n.kind == NodeKind::Op) n.op = ops::op_from_name(op);
    uint64_t ni = r.count(1 << 16);
    for (uint64_t k = 0; k < ni; ++k) n.attrs.ints.push_back(r.i64());
    uint64_t nf = r.count(1 << 16);
    for (uint64_t k = 0; k < nf; ++k) n.attrs.floats.push_back(r.f64());
    uint64_t no = r.count(64);
    for (uint64_t k = 0; k < no; ++k) {
      Ref ref;
      ref.node = int(r.i64());
      ref.index = int(r.i64());
      n.operands.push_back(ref);
    }
    uint64_t nouts = r.count(64);
    for (uint64_t k = 0; k < nouts; ++k) n.outs.push_back(r.meta());
    n.input = int(r.i64());
    if (n.kind == NodeKind::Constant) {
      AXLE_CHECK(nouts == 1, "[cache] bad constant");
      std::string raw = r.str();
      int64_t numel = shape_numel(n.outs[0].shape);
      AXLE_CHECK(raw.size() == size_t(numel) * itemsize(n.outs[0].dtype), "[cache] bad constant size");
      n.constant = from_blob(raw.data(), n.outs[0].shape, n.outs[0].dtype, {.dtype = n.outs[0].dtype});
    }
    p.nodes.push_back(std::move(n));
  }
  uint64_t nout = r.count(1 << 20);
  for (uint64_t k = 0; k < nout; ++k) {
    Ref ref;
    ref.node = int(r.i64());
    ref.index = int(r.i64());
    p.outputs.push_back(ref);
  }
  AXLE_CHECK(r.pos == body.size(), "[cache] trailing bytes in cache file");
  p.verify("read from the disk cache");
  return p;
}

uint64_t disk_cache_key(uint64_t graph_hash, const std::string& backend_tag) {
  uint64_t h = graph_hash ^ (ops::hash_text("backend " + backend_tag) + 0x9E3779B97F4A7C15ull + (graph_hash << 6) + (graph_hash >> 2));
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

std::string disk_cache_dir() {
  const char* d = std::getenv("AXLE_CACHE_DIR");
  return d && *d ? std::string(d) : std::string();
}

static std::string path_for(const std::string& dir, uint64_t hash) {
  char name[40];
  std::snprintf(name, sizeof name, "/%016llx.axlegraph", static_cast<unsigned long long>(hash));
  return dir + name;
}

std::optional<Program> disk_cache_load(const std::string& dir, uint64_t hash) {
  std::string path = path_for(dir, hash);
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return deserialize(ss.str(), hash);
  } catch (const Error& e) {
    std::fprintf(stderr, "[axle] warning: discarding corrupt compilation cache file %s (%s)\n", path.c_str(), e.what());
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
}

void disk_cache_store(const std::string& dir, uint64_t hash, const Program& p) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = path_for(dir, hash);
  // A name no other writer uses, whether another process or another thread of this one.
  static std::atomic<uint64_t> serial{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;  // an unwritable cache directory only costs speed
    std::string bytes = serialize(p, hash);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace axle::compiler
