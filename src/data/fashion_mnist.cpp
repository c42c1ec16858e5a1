// IDX reader (gzip via zlib) and the Fashion-MNIST dataset.
#include "axle/data/fashion_mnist.h"

#include <omp.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/tensor_impl.h"

namespace axle::data {

const char* const kFashionMNISTClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

namespace {

namespace fs = std::filesystem;

struct GzCloser {
  void operator()(gzFile_s* f) const { if (f) gzclose_r(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes; returns the count read. Throws on a zlib error other than a
// truncated stream (which shows up as a short count, reported by the caller).
int64_t gz_read(gzFile f, void* dst, int64_t n, const std::string& path, bool* truncated) {
  char* p = static_cast<char*>(dst);
  int64_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - got, int64_t(1) << 30));
    const int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      if (err == Z_BUF_ERROR) { *truncated = true; return got; }
      AXLE_FAIL("[read_idx] ", path, ": corrupt gzip data after ", got, " decompressed bytes (zlib: ",
                msg ? msg : "unknown error", ")");
    }
    if (r == 0) break;
    got += r;
  }
  if (got < n) {  // short read: a truncated gzip stream sets Z_BUF_ERROR
    int err = 0;
    const char* msg = gzerror(f, &err);
    if (err == Z_BUF_ERROR) *truncated = true;
    else if (err != Z_OK)
      AXLE_FAIL("[read_idx] ", path, ": corrupt gzip data after ", got, " decompressed bytes (zlib: ",
                msg ? msg : "unknown error", ")");
  }
  return got;
}

std::string dims_str(const Shape& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s.empty() ? "scalar" : s;
}

}  // namespace

Tensor read_idx(const std::string& path, int expected_ndim) {
  std::error_code ec;
  AXLE_CHECK(fs::exists(path, ec), "[read_idx] cannot open ", path, ": no such file");
  AXLE_CHECK(!fs::is_directory(path, ec), "[read_idx] cannot open ", path, ": expected a file, found a directory");
  errno = 0;
  GzPtr f(gzopen(path.c_str(), "rb"));
  AXLE_CHECK(f != nullptr, "[read_idx] cannot open ", path, ": ", errno ? std::strerror(errno) : "zlib error");
  gzbuffer(f.get(), 1 << 20);

  bool truncated = false;
  unsigned char magic[4];
  int64_t got = gz_read(f.get(), magic, 4, path, &truncated);
  AXLE_CHECK(got == 4, "[read_idx] ", path, ": truncated: expected a 4-byte IDX magic number, found ", got,
             " bytes");
  AXLE_CHECK(magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 && magic[3] >= 1 && magic[3] <= 4,
             "[read_idx] ", path, ": bad magic number: expected 0x0000080N (unsigned bytes, N = 1..4 dims), found 0x",
             [&] {
               char b[9];
               std::snprintf(b, sizeof b, "%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
               return std::string(b);
             }());
  const int ndim = magic[3];
  AXLE_CHECK(expected_ndim <= 0 || ndim == expected_ndim, "[read_idx] ", path, ": expected ", expected_ndim,
             " dimensions (magic 0x0000080", expected_ndim, "), found ", ndim);

  unsigned char hdr[16];
  got = gz_read(f.get(), hdr, 4 * ndim, path, &truncated);
  AXLE_CHECK(got == 4 * ndim, "[read_idx] ", path, ": truncated: expected ", 4 * ndim,
             " bytes of dimensions after the magic number, found ", got);
  Shape dims(ndim);
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t v = (uint32_t(hdr[4 * d]) << 24) | (uint32_t(hdr[4 * d + 1]) << 16) |
                       (uint32_t(hdr[4 * d + 2]) << 8) | uint32_t(hdr[4 * d + 3]);
    AXLE_CHECK(v < (1u << 31), "[read_idx] ", path, ": dimension ", d, " is ", v, ", expected < 2^31");
    dims[d] = v;
    total *= v;
    AXLE_CHECK(total <= (int64_t(1) << 36), "[read_idx] ", path, ": implausible size ", dims_str(dims),
               " (more than 2^36 bytes)");
  }

  Tensor out = make_tensor(dims, kUInt8);
  const int64_t header = 4 + 4 * int64_t(ndim);
  got = gz_read(f.get(), out.data_ptr(), total, path, &truncated);
  AXLE_CHECK(got == total, "[read_idx] ", path, ": truncated", truncated ? " gzip stream" : "", ": expected ",
             header + total, " bytes (", header, "-byte header + ", dims_str(dims), " bytes), found ", header + got);
  // Nothing may follow the data; this read also makes zlib check the gzip CRC trailer.
  unsigned char extra[64];
  got = gz_read(f.get(), extra, sizeof extra, path, &truncated);
  AXLE_CHECK(!truncated, "[read_idx] ", path, ": truncated gzip stream: the ", header + total,
             " bytes of IDX data are complete but the gzip trailer is missing");
  AXLE_CHECK(got == 0, "[read_idx] ", path, ": expected ", header + total, " bytes (", header, "-byte header + ",
             dims_str(dims), " bytes), found extra data after them");
  return out;
}

namespace {
std::string idx_path(const std::string& root, const std::string& name) {
  const std::string base = (fs::path(root) / name).string();
  std::error_code ec;
  if (fs::exists(base + ".gz", ec)) return base + ".gz";
  if (fs::exists(base, ec)) return base;
  AXLE_FAIL("[FashionMNIST] cannot open ", base, ".gz: no such file (nor an uncompressed ", name, ")");
}
}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train) : train_(train) {
  std::error_code ec;
  AXLE_CHECK(fs::is_directory(root, ec), "[FashionMNIST] data directory ", root,
             " does not exist (expected the IDX files of Debian's dataset-fashion-mnist package)");
  const std::string prefix = train ? "train" : "t10k";
  const std::string img_path = idx_path(root, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = idx_path(root, prefix + "-labels-idx1-ubyte");
  // The labels are tiny: decode them on another thread while this one inflates the images.
  Tensor labels;
  std::exception_ptr lbl_err;
  Tensor images;
  {
    std::thread t([&] {
      try { labels = read_idx(lbl_path, 1); } catch (...) { lbl_err = std::current_exception(); }
    });
    try {
      images = read_idx(img_path, 3);
    } catch (...) {
      t.join();
      throw;
    }
    t.join();
  }
  if (lbl_err) std::rethrow_exception(lbl_err);
  const int64_t n = images.size(0);
  AXLE_CHECK(images.size(1) == 28 && images.size(2) == 28, "[FashionMNIST] ", img_path,
             ": expected 28x28 images, found ", images.size(1), "x", images.size(2));
  AXLE_CHECK(labels.size(0) == n, "[FashionMNIST] ", lbl_path, ": expected ", n, " labels (one per image in ",
             img_path, "), found ", labels.size(0));

  // ((x / 255) - mean) / std, evaluated in float exactly as torchvision's ToTensor + Normalize,
  // through a 256-entry table.
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = (float(v) / 255.0f - kFashionMNISTMean) / kFashionMNISTStd;
  Tensor data = make_tensor({n, 1, 28, 28}, kFloat32);
  Tensor targets = make_tensor({n}, kInt64);
  const uint8_t* src = images.data<uint8_t>();
  float* dst = data.data<float>();
  const int64_t total = n * 28 * 28;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total; ++i) dst[i] = lut[src[i]];
  const uint8_t* ls = labels.data<uint8_t>();
  int64_t* lt = targets.data<int64_t>();
  int64_t bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (ls[i] > 9 && bad < 0) bad = i;
    lt[i] = ls[i];
  }
  AXLE_CHECK(bad < 0, "[FashionMNIST] ", lbl_path, ": expected labels in 0..9, found ", int(ls[bad]),
             " at index ", bad);
  reset(std::move(data), std::move(targets));
}

}  // namespace axle::data
