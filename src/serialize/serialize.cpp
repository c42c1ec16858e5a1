// axle::save / axle::load / axle::xm::save: safetensors files written atomically
// (temporary file, fsync, rename) and read with every offset validated first.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "axle/runtime.h"
#include "axle/serialize.h"

#include "axle/dist.h"
#include "axle/xm.h"
#include "core/tensor_impl.h"
#include "serialize/safetensors.h"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace axle {
namespace st {

namespace {
std::atomic<bool (*)()> g_master_hook{nullptr};
std::atomic<uint64_t> g_fault_bytes{0};
std::atomic<int> g_fault_mode{0};
std::atomic<uint64_t> g_tmp_counter{0};

std::string errno_str(int e) { return std::strerror(e); }

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A file that appears at `path` only on commit(): written to a temporary name in the
// same directory (so rename is atomic), flushed with fsync, then renamed.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {
    AXLE_CHECK(!path_.empty(), "[save] expected a file path, got an empty string");
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    AXLE_CHECK(fd_ >= 0, "[save] can't create a temporary file next to '", path_, "' (", tmp_,
               "): ", errno_str(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    if (int mode = g_fault_mode.load(); mode != 0 && written_ + n > g_fault_bytes.load()) {
      uint64_t part = g_fault_bytes.load() - written_;
      write_raw(p, part);
      if (mode == 2) ::_exit(3);  // a crash mid-write: the temporary file is left half-written
      AXLE_FAIL("[save] can't write '", tmp_, "': injected I/O error after ", written_, " bytes (test hook)");
    }
    write_raw(p, n);
  }

  void commit() {
    AXLE_CHECK(::fsync(fd_) == 0, "[save] can't flush '", tmp_, "' to disk: ", errno_str(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    AXLE_CHECK(rc == 0, "[save] can't close '", tmp_, "': ", errno_str(errno));
    AXLE_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "[save] can't rename '", tmp_, "' to '", path_,
               "': ", errno_str(errno));
    committed_ = true;
    // Make the rename itself durable; a directory that can't be fsynced (some filesystems) is not an error.
    int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  void write_raw(const char* p, uint64_t n) {
    while (n > 0) {
      size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      ssize_t w = ::write(fd_, p, chunk);
      if (w < 0 && errno == EINTR) continue;
      AXLE_CHECK(w > 0, "[save] can't write '", tmp_, "' after ", written_, " bytes: ", errno_str(errno));
      p += w;
      n -= uint64_t(w);
      written_ += uint64_t(w);
    }
  }

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
};

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO must not hang; regular files ignore the flag.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    AXLE_CHECK(fd_ >= 0, "[load] can't open '", path, "': ", errno_str(errno));
    struct stat sb;
    AXLE_CHECK(::fstat(fd_, &sb) == 0, "[load] can't stat '", path, "': ", errno_str(errno));
    AXLE_CHECK(S_ISREG(sb.st_mode), "[load] '", path, "' is not a regular file");
    size_ = uint64_t(sb.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* out, uint64_t n) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      ssize_t r = ::pread(fd_, p, chunk, off_t(offset));
      if (r < 0 && errno == EINTR) continue;
      AXLE_CHECK(r >= 0, "[load] can't read '", path_, "' at byte ", offset, ": ", errno_str(errno));
      AXLE_CHECK(r > 0, "[load] '", path_, "' ended at byte ", offset, " while reading (did it shrink?)");
      p += r;
      n -= uint64_t(r);
      offset += uint64_t(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace

void set_master_ordinal_hook(bool (*is_master)()) { g_master_hook = is_master; }
bool is_master_ordinal() {
  auto hook = g_master_hook.load();
  return hook ? hook() : runtime::global_ordinal() == 0;
}
void set_write_fault_for_testing(uint64_t bytes, int mode) {
  g_fault_bytes = bytes;
  g_fault_mode = mode;
}

}  // namespace st

// ---------------------------------------------------------------- save
namespace {

void check_savable(const std::string& name, const Tensor& t) {
  AXLE_CHECK(t.defined(), "[save] tensor \"", name, "\" is undefined");
  AXLE_CHECK(!t.device().is_xla(), "[save] tensor \"", name, "\" is on ", t.device(),
             ": move it to CPU first with .cpu() (axle::xm::save does that for you)");
  AXLE_CHECK(t.device().is_cpu(), "[save] tensor \"", name, "\" is on ", t.device(), ": expected a cpu tensor");
}

void write_file(const nn::StateDict& tensors, const std::string& path, const Metadata& metadata) {
  std::vector<st::Entry> entries;
  std::vector<Tensor> dense;
  entries.reserve(tensors.size());
  dense.reserve(tensors.size());
  uint64_t pos = 0;
  std::unordered_set<std::string> names;
  for (const auto& [name, t] : tensors) {
    check_savable(name, t);
    AXLE_CHECK(names.insert(name).second, "[save] the tensor name \"", name, "\" appears twice");
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    st::Entry e;
    e.name = name;
    e.dtype = c.dtype();
    e.shape = c.shape();
    e.begin = pos;
    pos += uint64_t(c.numel()) * st::dtype_size(c.dtype());
    e.end = pos;
    entries.push_back(std::move(e));
    dense.push_back(std::move(c));
  }
  std::string header = st::build_header(entries, metadata);
  st::AtomicFile f(path);
  f.write(header.data(), header.size());
  for (size_t i = 0; i < dense.size(); ++i) {
    const uint64_t n = entries[i].end - entries[i].begin;
    if (n > 0) f.write(dense[i].impl()->data(), n);
  }
  f.commit();
}

nn::StateDict to_cpu_synced(const nn::StateDict& tensors) {
  bool any_xla = false;
  for (const auto& [name, t] : tensors) any_xla = any_xla || (t.defined() && t.device().is_xla());
  if (!any_xla) return tensors;
  axle::sync();
  nn::StateDict out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.defined() ? t.detach().cpu() : t);
  return out;
}

}  // namespace

void save(const nn::StateDict& tensors, const std::string& path, const Metadata& metadata) {
  write_file(tensors, path, metadata);
}

void save(const Tensor& tensor, const std::string& path, const Metadata& metadata) {
  write_file({{"tensor", tensor}}, path, metadata);
}

namespace xm {
void save(const nn::StateDict& tensors, const std::string& path, const Metadata& metadata) {
  nn::StateDict cpu = to_cpu_synced(tensors);
  if (st::is_master_ordinal()) write_file(cpu, path, metadata);
  // As torch_xla: no rank goes on (and perhaps reads the file) before the master has written it.
  if (runtime::world_size() > 1) (void)rendezvous("axle::xm::save");
}
void save(const Tensor& tensor, const std::string& path, const Metadata& metadata) {
  xm::save(nn::StateDict{{"tensor", tensor}}, path, metadata);
}
}  // namespace xm

// ---------------------------------------------------------------- load
SafeTensors load(const std::string& path) {
  const std::string what = "[load] '" + path + "'";
  st::InputFile f(path);
  unsigned char prefix[8] = {};
  if (f.size() >= 8) f.read_at(0, prefix, 8);
  const uint64_t n = st::parse_prefix(prefix, f.size(), what);
  std::string text(n, '\0');
  f.read_at(8, text.data(), n);
  st::Header h = st::parse_header(text, f.size() - 8 - n, what);
  SafeTensors out;
  out.path = path;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const st::Entry& e : h.entries) {
    // Sizes are validated against the file size above, so this allocation is bounded by it.
    Tensor t = make_tensor(e.shape, e.dtype);
    const uint64_t nbytes = e.end - e.begin;
    if (nbytes > 0) {
      f.read_at(8 + n + e.begin, t.impl()->data(), nbytes);
      if (e.dtype == kBool)
        st::check_bool_bytes(reinterpret_cast<const unsigned char*>(t.impl()->data()), nbytes, e.name, what);
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

Tensor load_tensor(const std::string& path) {
  SafeTensors f = load(path);
  if (f.tensors.size() != 1) {
    std::string names;
    for (size_t i = 0; i < f.tensors.size() && i < 10; ++i) names += (i ? ", \"" : "\"") + f.tensors[i].first + "\"";
    if (f.tensors.size() > 10) names += ", ...";
    AXLE_FAIL("[load_tensor] '", path, "' holds ", f.tensors.size(), " tensors", names.empty() ? "" : " (",
              names, names.empty() ? "" : ")", ", expected exactly one; use axle::load");
  }
  return f.tensors.front().second;
}

bool SafeTensors::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& SafeTensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string names;
  for (size_t i = 0; i < tensors.size() && i < 20; ++i) names += (i ? ", \"" : "\"") + tensors[i].first + "\"";
  if (tensors.size() > 20) names += ", ... (" + std::to_string(tensors.size()) + " in all)";
  AXLE_FAIL("[load] '", path, "' has no tensor named \"", name, "\"; it holds ",
            tensors.empty() ? std::string("no tensors") : names);
}

}  // namespace axle
