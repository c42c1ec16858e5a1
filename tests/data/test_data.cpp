// Data pipeline: IDX parsing of the real Fashion-MNIST files (checked against values
// computed independently with numpy), error reporting for broken files, samplers,
// TensorDataset batching and the DataLoader (order, workers, errors, shutdown).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <set>
#include <thread>

#include "axle/axle.h"

namespace fs = std::filesystem;
using namespace axle;
using namespace axle::data;

namespace {

const std::string kRoot = kFashionMNISTRoot;

bool have_real_data() { return fs::exists(kRoot + "/train-images-idx3-ubyte.gz"); }

// A fresh temporary directory removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/axle_test_data_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::vector<unsigned char> idx_bytes(int ndim, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<unsigned char> b{0, 0, 0x08, static_cast<unsigned char>(ndim)};
  for (uint32_t d : dims) {
    b.push_back(d >> 24);
    b.push_back((d >> 16) & 255);
    b.push_back((d >> 8) & 255);
    b.push_back(d & 255);
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_raw(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Compressed with the system's gzip (an independent writer of the format axle reads).
void write_gz(const std::string& path, const std::vector<unsigned char>& bytes) {
  const std::string raw = path + ".raw";
  write_raw(raw, bytes);
  const std::string cmd = "gzip -n -c '" + raw + "' > '" + path + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove(raw);
}

std::vector<unsigned char> read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

// Deterministic "noisy" pixels so deflate cannot compress them to almost nothing.
std::vector<uint8_t> noise(size_t n, uint32_t seed = 1) {
  std::vector<uint8_t> v(n);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<uint8_t>(s >> 24);
  }
  return v;
}

// A small but valid Fashion-MNIST directory: n images of 28x28 and n labels.
void write_fmnist(const TempDir& d, const std::string& prefix, uint32_t n, std::vector<uint8_t> labels = {}) {
  if (labels.empty())
    for (uint32_t i = 0; i < n; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  write_gz(d / (prefix + "-images-idx3-ubyte.gz"), idx_bytes(3, {n, 28, 28}, noise(size_t(n) * 784)));
  write_gz(d / (prefix + "-labels-idx1-ubyte.gz"), idx_bytes(1, {static_cast<uint32_t>(labels.size())}, labels));
}

// Runs f and returns the axle::Error message it throws (fails the test if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const axle::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an axle::Error";
  return "";
}

#define EXPECT_CONTAINS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

// Raw byte value behind a normalized pixel.
int raw_pixel(float x) { return static_cast<int>(std::lround((double(x) * kFashionMNISTStd + kFashionMNISTMean) * 255.0)); }

float normalized(int v) { return (float(v) / 255.0f - kFashionMNISTMean) / kFashionMNISTStd; }

}  // namespace

// ---------------------------------------------------------------- real files

TEST(FashionMNIST, TrainSplitMatchesNumpy) {
  if (!have_real_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  // Load time is a benchmark figure (axle-train's JSON reports data_load_seconds), not asserted here.
  FashionMNIST ds(kRoot, true);

  ASSERT_EQ(ds.size(), 60000);
  EXPECT_EQ(ds.data().shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(ds.data().dtype(), kFloat32);
  EXPECT_EQ(ds.targets().shape(), (Shape{60000}));
  EXPECT_EQ(ds.targets().dtype(), kInt64);

  // Reference values from numpy on the same files.
  const int64_t* t = ds.targets().data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(t, t + 10), (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  std::vector<int64_t> counts(10, 0);
  for (int64_t i = 0; i < ds.size(); ++i) {
    ASSERT_GE(t[i], 0);
    ASSERT_LE(t[i], 9);
    ++counts[t[i]];
  }
  EXPECT_EQ(counts, std::vector<int64_t>(10, 6000));

  const float* x = ds.data().data<float>();
  int64_t raw_sum = 0, img0 = 0, img_last = 0;
  double sum = 0, sq = 0;
  const int64_t total = ds.data().numel();
  for (int64_t i = 0; i < total; ++i) {
    const int v = raw_pixel(x[i]);
    raw_sum += v;
    if (i < 784) img0 += v;
    if (i >= total - 784) img_last += v;
    sum += x[i];
    sq += double(x[i]) * x[i];
  }
  EXPECT_EQ(raw_sum, 3431114169LL);
  EXPECT_EQ(img0, 76247);
  EXPECT_EQ(img_last, 16684);
  EXPECT_EQ(x[14 * 28 + 14], normalized(217));
  EXPECT_FLOAT_EQ(x[14 * 28 + 14], 1.6005111f);
  const double mean = sum / total, sd = std::sqrt(sq / total - mean * mean);
  EXPECT_NEAR(mean, 0.000114984, 1e-5);
  EXPECT_NEAR(sd, 1.0000687, 1e-5);
}

TEST(FashionMNIST, TestSplitMatchesNumpy) {
  if (!have_real_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMNIST ds(kRoot, false);
  ASSERT_EQ(ds.size(), 10000);
  EXPECT_FALSE(ds.is_train());
  const int64_t* t = ds.targets().data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(t, t + 10), (std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  std::vector<int64_t> counts(10, 0);
  for (int64_t i = 0; i < ds.size(); ++i) ++counts.at(t[i]);
  EXPECT_EQ(counts, std::vector<int64_t>(10, 1000));
  const float* x = ds.data().data<float>();
  int64_t raw_sum = 0, img0 = 0;
  for (int64_t i = 0; i < ds.data().numel(); ++i) {
    const int v = raw_pixel(x[i]);
    raw_sum += v;
    if (i < 784) img0 += v;
  }
  EXPECT_EQ(raw_sum, 573469082LL);
  EXPECT_EQ(img0, 33456);
  EXPECT_FLOAT_EQ(x[14 * 28 + 14], 0.41182023f);
  // get(i) is row i.
  Example e = ds.get(3);
  EXPECT_EQ(e.data.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(e.target.item(), 1.0);
  EXPECT_EQ(e.data.to_vector<float>(), std::vector<float>(x + 3 * 784, x + 4 * 784));
}

TEST(FashionMNIST, ReadIdxRealLabels) {
  if (!have_real_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Tensor l = read_idx(kRoot + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(l.dtype(), kUInt8);
  EXPECT_EQ(l.shape(), (Shape{10000}));
  EXPECT_EQ(l.data<uint8_t>()[0], 9);
}

// ---------------------------------------------------------------- small files and errors

TEST(ReadIdx, GzipAndPlainRoundTrip) {
  TempDir d;
  const auto px = noise(2 * 3 * 5, 7);
  write_gz(d / "a.gz", idx_bytes(3, {2, 3, 5}, px));
  write_raw(d / "a", idx_bytes(3, {2, 3, 5}, px));
  for (const std::string& p : {d / "a.gz", d / "a"}) {
    Tensor t = read_idx(p, 3);
    EXPECT_EQ(t.shape(), (Shape{2, 3, 5}));
    EXPECT_EQ(t.to_vector<uint8_t>(), px);
  }
}

TEST(ReadIdx, MissingFile) {
  TempDir d;
  const std::string p = d / "nope-idx3-ubyte.gz";
  const std::string m = error_of([&] { read_idx(p); });
  EXPECT_CONTAINS(m, p);
  EXPECT_CONTAINS(m, "no such file");
}

TEST(ReadIdx, TruncatedGzip) {
  TempDir d;
  write_gz(d / "full.gz", idx_bytes(3, {50, 28, 28}, noise(50 * 784)));
  auto bytes = read_raw(d / "full.gz");
  bytes.resize(bytes.size() / 2);
  write_raw(d / "cut.gz", bytes);
  const std::string m = error_of([&] { read_idx(d / "cut.gz", 3); });
  EXPECT_CONTAINS(m, d / "cut.gz");
  EXPECT_CONTAINS(m, "truncated");
  EXPECT_CONTAINS(m, "expected 39216 bytes");  // 16-byte header + 50*28*28
}

TEST(ReadIdx, GzipMissingOnlyTrailer) {
  TempDir d;
  write_gz(d / "full.gz", idx_bytes(1, {100}, noise(100)));
  auto bytes = read_raw(d / "full.gz");
  bytes.resize(bytes.size() - 8);  // drop CRC32 + ISIZE
  write_raw(d / "cut.gz", bytes);
  const std::string m = error_of([&] { read_idx(d / "cut.gz"); });
  EXPECT_CONTAINS(m, d / "cut.gz");
  EXPECT_CONTAINS(m, "truncated");
}

TEST(ReadIdx, TruncatedPlainData) {
  TempDir d;
  auto bytes = idx_bytes(3, {10, 28, 28}, noise(10 * 784));
  bytes.resize(bytes.size() - 100);
  write_raw(d / "cut", bytes);
  const std::string m = error_of([&] { read_idx(d / "cut"); });
  EXPECT_CONTAINS(m, d / "cut");
  EXPECT_CONTAINS(m, "expected 7856 bytes");
  EXPECT_CONTAINS(m, "found 7756");
}

TEST(ReadIdx, TruncatedHeader) {
  TempDir d;
  write_raw(d / "h", {0, 0, 8, 3, 0, 0});
  const std::string m = error_of([&] { read_idx(d / "h"); });
  EXPECT_CONTAINS(m, "truncated");
  EXPECT_CONTAINS(m, "expected 12 bytes of dimensions");
  write_raw(d / "e", {});
  EXPECT_CONTAINS(error_of([&] { read_idx(d / "e"); }), "found 0 bytes");
}

TEST(ReadIdx, BadMagicAndDims) {
  TempDir d;
  write_raw(d / "m", {0x1f, 0x00, 0x08, 0x03, 0, 0, 0, 1});
  std::string m = error_of([&] { read_idx(d / "m"); });
  EXPECT_CONTAINS(m, d / "m");
  EXPECT_CONTAINS(m, "bad magic number");
  EXPECT_CONTAINS(m, "found 0x1f000803");
  // float32 IDX (type 0x0d) is not unsigned bytes
  write_raw(d / "f", {0, 0, 0x0d, 0x01, 0, 0, 0, 1, 0, 0, 0, 0});
  EXPECT_CONTAINS(error_of([&] { read_idx(d / "f"); }), "bad magic number");
  write_gz(d / "l.gz", idx_bytes(1, {4}, {1, 2, 3, 4}));
  m = error_of([&] { read_idx(d / "l.gz", 3); });
  EXPECT_CONTAINS(m, "expected 3 dimensions");
  EXPECT_CONTAINS(m, "found 1");
}

TEST(ReadIdx, ExtraData) {
  TempDir d;
  auto bytes = idx_bytes(1, {4}, {1, 2, 3, 4});
  bytes.push_back(5);
  write_gz(d / "x.gz", bytes);
  EXPECT_CONTAINS(error_of([&] { read_idx(d / "x.gz"); }), "extra data");
}

TEST(ReadIdx, CorruptGzip) {
  TempDir d;
  write_gz(d / "full.gz", idx_bytes(3, {50, 28, 28}, noise(50 * 784, 3)));
  auto bytes = read_raw(d / "full.gz");
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  write_raw(d / "bad.gz", bytes);
  const std::string m = error_of([&] { read_idx(d / "bad.gz", 3); });
  EXPECT_CONTAINS(m, d / "bad.gz");
  EXPECT_TRUE(m.find("corrupt") != std::string::npos || m.find("truncated") != std::string::npos) << m;
}

TEST(FashionMNIST, SmallDirectory) {
  TempDir d;
  write_fmnist(d, "train", 25);
  write_fmnist(d, "t10k", 12);
  FashionMNIST tr(d.path.string(), true), te(d.path.string(), false);
  EXPECT_EQ(tr.size(), 25);
  EXPECT_EQ(te.size(), 12);
  const auto px = noise(25 * 784);
  const float* x = tr.data().data<float>();
  for (int i = 0; i < 25 * 784; ++i) ASSERT_EQ(x[i], normalized(px[i])) << i;
  EXPECT_EQ(tr.targets().to_vector<int64_t>()[13], 3);
}

TEST(FashionMNIST, Errors) {
  TempDir d;
  // missing directory
  std::string m = error_of([&] { FashionMNIST(d / "absent", true); });
  EXPECT_CONTAINS(m, d / "absent");
  EXPECT_CONTAINS(m, "does not exist");
  // missing file
  m = error_of([&] { FashionMNIST(d.path.string(), true); });
  EXPECT_CONTAINS(m, d / "train-images-idx3-ubyte.gz");
  // label count mismatch
  write_fmnist(d, "train", 20, std::vector<uint8_t>(19, 1));
  m = error_of([&] { FashionMNIST(d.path.string(), true); });
  EXPECT_CONTAINS(m, "expected 20 labels");
  EXPECT_CONTAINS(m, "found 19");
  // label out of range
  std::vector<uint8_t> labels(20, 2);
  labels[7] = 10;
  write_fmnist(d, "train", 20, labels);
  m = error_of([&] { FashionMNIST(d.path.string(), true); });
  EXPECT_CONTAINS(m, "expected labels in 0..9, found 10 at index 7");
  // wrong image size
  write_gz(d / "t10k-images-idx3-ubyte.gz", idx_bytes(3, {2, 32, 32}, noise(2 * 1024)));
  write_gz(d / "t10k-labels-idx1-ubyte.gz", idx_bytes(1, {2}, {0, 1}));
  m = error_of([&] { FashionMNIST(d.path.string(), false); });
  EXPECT_CONTAINS(m, "expected 28x28 images, found 32x32");
  // images and labels swapped
  write_gz(d / "t10k-images-idx3-ubyte.gz", idx_bytes(1, {2}, {0, 1}));
  EXPECT_CONTAINS(error_of([&] { FashionMNIST(d.path.string(), false); }), "expected 3 dimensions");
}

// ---------------------------------------------------------------- samplers

TEST(Sampler, Sequential) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
  EXPECT_THROW(SequentialSampler(-1), axle::Error);
}

TEST(Sampler, RandomIsADeterministicPermutationPerSeedAndEpoch) {
  RandomSampler a(1000, 42), b(1000, 42), c(1000, 43);
  const auto a0 = a.indices();
  // a permutation
  std::vector<int64_t> sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(a0, iota);
  // same seed and epoch: same order, whatever the global generator does
  manual_seed(1234);
  (void)randn({100});
  EXPECT_EQ(b.indices(), a0);
  EXPECT_EQ(a.indices(), a0);  // repeated calls in one epoch agree
  // another seed or epoch: another order
  EXPECT_NE(c.indices(), a0);
  a.set_epoch(1);
  const auto a1 = a.indices();
  EXPECT_NE(a1, a0);
  b.set_epoch(1);
  EXPECT_EQ(b.indices(), a1);
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), a0);
  // epoch e of seed s is not epoch 0 of seed s + e
  RandomSampler d(1000, 43);
  EXPECT_NE(a1, d.indices());
  EXPECT_THROW(a.set_epoch(-1), axle::Error);
}

TEST(Sampler, RandomIsRoughlyUniform) {
  // Position of element 0 over many epochs: each of 8 slots about equally often.
  RandomSampler s(8, 5);
  std::vector<int> hits(8, 0);
  for (int e = 0; e < 8000; ++e) {
    s.set_epoch(e);
    auto v = s.indices();
    ++hits[std::find(v.begin(), v.end(), 0) - v.begin()];
  }
  for (int h : hits) EXPECT_NEAR(h, 1000, 150);
}

// ---------------------------------------------------------------- datasets

namespace {

// data row i = [i*3, i*3+1, i*3+2], target i.
std::shared_ptr<TensorDataset> counting_dataset(int64_t n) {
  std::vector<float> d(n * 3);
  std::iota(d.begin(), d.end(), 0.0f);
  std::vector<int64_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return std::make_shared<TensorDataset>(from_vector(d, {n, 3}), from_vector(t, {n}));
}

std::vector<int64_t> targets_of(const Example& b) { return b.target.to_vector<int64_t>(); }

// A dataset implementing only get(): exercises the default get_batch.
class PlainDataset : public Dataset {
 public:
  explicit PlainDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    return {full({2, 2}, double(i)), scalar_tensor(double(i), {.dtype = kInt64})};
  }

 private:
  int64_t n_;
};

// Throws on `bad` index; optionally sleeps per batch and counts get_batch calls.
class FlakyDataset : public TensorDataset {
 public:
  FlakyDataset(int64_t n, int64_t bad, int sleep_ms = 0)
      : TensorDataset(counting_dataset(n)->data(), counting_dataset(n)->targets()), bad_(bad), sleep_ms_(sleep_ms) {}
  Example get_batch(const std::vector<int64_t>& idx) const override {
    ++calls;
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (int64_t i : idx) AXLE_CHECK(i != bad_, "[FlakyDataset] bad example ", i);
    return TensorDataset::get_batch(idx);
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t bad_;
  int sleep_ms_;
};

}  // namespace

TEST(TensorDataset, GetAndBatch) {
  auto ds = counting_dataset(10);
  EXPECT_EQ(ds->size(), 10);
  Example e = ds->get(4);
  EXPECT_EQ(e.data.to_vector<float>(), (std::vector<float>{12, 13, 14}));
  EXPECT_EQ(e.target.item(), 4.0);
  Example b = ds->get_batch({7, 0, 7, 2});
  EXPECT_EQ(b.data.shape(), (Shape{4, 3}));
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{21, 22, 23, 0, 1, 2, 21, 22, 23, 6, 7, 8}));
  EXPECT_EQ(targets_of(b), (std::vector<int64_t>{7, 0, 7, 2}));
  EXPECT_CONTAINS(error_of([&] { ds->get_batch({1, 10}); }), "index 10 out of range");
  EXPECT_THROW(ds->get(-1), axle::Error);
  EXPECT_THROW(ds->get_batch({}), axle::Error);
  EXPECT_THROW(TensorDataset(zeros({3, 2}), zeros({4})), axle::Error);
}

TEST(TensorDataset, NonContiguousSourceAndLargeParallelBatch) {
  // [8, 3] transposed storage: rows are strided; the dataset must see logical rows.
  Tensor base = arange(24, {.dtype = kFloat32}).reshape({3, 8});
  TensorDataset ds(base.t(), arange(8));
  Example b = ds.get_batch({5, 1});
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{5, 13, 21, 1, 9, 17}));
  // A batch above the parallel threshold (4 MB) against a scalar reference.
  const int64_t n = 3000, w = 1000;
  Tensor big = rand({n, w});
  TensorDataset bd(big, arange(n));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 1200; ++i) idx.push_back((i * 7919) % n);
  Example bb = bd.get_batch(idx);
  const float* src = big.data<float>();
  const float* out = bb.data.data<float>();
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < w; j += 97) ASSERT_EQ(out[i * w + j], src[idx[i] * w + j]);
  EXPECT_EQ(targets_of(bb), idx);
}

TEST(Dataset, DefaultGetBatchStacks) {
  PlainDataset ds(6);
  Example b = ds.get_batch({5, 2});
  EXPECT_EQ(b.data.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{5, 5, 5, 5, 2, 2, 2, 2}));
  EXPECT_EQ(targets_of(b), (std::vector<int64_t>{5, 2}));
  EXPECT_THROW(ds.get_batch({6}), axle::Error);
}

// ---------------------------------------------------------------- DataLoader

namespace {
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& l) {
  std::vector<std::vector<int64_t>> out;
  for (const Example& b : l) out.push_back(targets_of(b));
  return out;
}
}  // namespace

TEST(DataLoader, SequentialBatchesAndDropLast) {
  auto ds = counting_dataset(10);
  DataLoader l(ds, {.batch_size = 4});
  EXPECT_EQ(l.size(), 3);
  auto e = epoch_targets(l);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(e[2], (std::vector<int64_t>{8, 9}));
  DataLoader d(ds, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(d.size(), 2);
  e = epoch_targets(d);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1], (std::vector<int64_t>{4, 5, 6, 7}));
  DataLoader exact(ds, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(epoch_targets(exact).size(), 2u);
  // batch data matches the targets
  for (const Example& b : l) {
    auto t = targets_of(b);
    auto x = b.data.to_vector<float>();
    for (size_t i = 0; i < t.size(); ++i) ASSERT_EQ(x[i * 3], float(t[i] * 3));
  }
}

TEST(DataLoader, EmptyDatasetAndBadOptions) {
  auto ds = counting_dataset(0);
  DataLoader l(ds, {.batch_size = 4, .num_workers = 2});
  EXPECT_EQ(l.size(), 0);
  EXPECT_TRUE(l.begin() == l.end());
  auto d = counting_dataset(3);
  EXPECT_THROW(DataLoader(d, {.batch_size = 0}), axle::Error);
  EXPECT_THROW(DataLoader(d, {.num_workers = -1}), axle::Error);
  EXPECT_THROW(DataLoader(d, {.prefetch_factor = 0}), axle::Error);
  EXPECT_THROW(DataLoader(d, {.shuffle = true}, std::make_shared<SequentialSampler>(3)), axle::Error);
  EXPECT_THROW(DataLoader(nullptr), axle::Error);
}

TEST(DataLoader, ShuffleFollowsRandomSamplerPerEpoch) {
  auto ds = counting_dataset(103);
  DataLoader l(ds, {.batch_size = 10, .shuffle = true, .seed = 9});
  RandomSampler ref(103, 9);
  for (int64_t epoch : {0, 1, 2}) {
    l.set_epoch(epoch);
    ref.set_epoch(epoch);
    std::vector<int64_t> flat;
    for (auto& b : epoch_targets(l)) flat.insert(flat.end(), b.begin(), b.end());
    EXPECT_EQ(flat, ref.indices()) << "epoch " << epoch;
  }
  // Without set_epoch each begin() moves to the next epoch; a new loader repeats the sequence.
  DataLoader a(ds, {.batch_size = 10, .shuffle = true, .seed = 9});
  DataLoader b(ds, {.batch_size = 10, .shuffle = true, .seed = 9});
  auto a0 = epoch_targets(a), a1 = epoch_targets(a);
  EXPECT_NE(a0, a1);
  EXPECT_EQ(epoch_targets(b), a0);
  EXPECT_EQ(epoch_targets(b), a1);
}

TEST(DataLoader, WorkersDeliverTheSameOrder) {
  auto ds = counting_dataset(517);
  DataLoader ref(ds, {.batch_size = 16, .shuffle = true, .seed = 3});
  ref.set_epoch(2);
  const auto expect = epoch_targets(ref);
  ASSERT_EQ(expect.size(), 33u);
  for (int workers : {1, 2, 3, 8})
    for (int prefetch : {1, 2, 5}) {
      DataLoader l(ds, {.batch_size = 16, .shuffle = true, .num_workers = workers, .seed = 3, .prefetch_factor = prefetch});
      l.set_epoch(2);
      EXPECT_EQ(epoch_targets(l), expect) << workers << " workers, prefetch " << prefetch;
    }
  // Several epochs through one loader with workers.
  DataLoader w(ds, {.batch_size = 50, .shuffle = true, .drop_last = true, .num_workers = 2, .seed = 3});
  DataLoader s(ds, {.batch_size = 50, .shuffle = true, .drop_last = true, .seed = 3});
  for (int e = 0; e < 3; ++e) EXPECT_EQ(epoch_targets(w), epoch_targets(s));
}

TEST(DataLoader, WorkerErrorIsRethrownAtItsBatch) {
  for (int workers : {0, 1, 3}) {
    auto ds = std::make_shared<FlakyDataset>(100, 37);
    DataLoader l(ds, {.batch_size = 10, .num_workers = workers});
    std::vector<int64_t> seen;
    int64_t failed_at = -1;
    std::string msg;
    auto it = l.begin();
    while (it != l.end()) {
      seen.push_back(targets_of(*it)[0]);
      try {
        ++it;
      } catch (const axle::Error& e) {
        failed_at = it.index();
        msg = e.what();
        EXPECT_FALSE(it->data.defined());  // the failed batch has no value; step past it
        ++it;
      }
    }
    EXPECT_EQ(failed_at, 3) << workers << " workers";
    EXPECT_CONTAINS(msg, "bad example 37");
    // every other batch still arrives, in order (the failed one is skipped)
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 10, 20, 40, 50, 60, 70, 80, 90})) << workers << " workers";
  }
  // An error in the first batch comes out of begin().
  auto ds = std::make_shared<FlakyDataset>(10, 0);
  DataLoader l(ds, {.batch_size = 4, .num_workers = 2});
  EXPECT_THROW(l.begin(), axle::Error);
}

TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<FlakyDataset>(1000, -1);
  DataLoader l(ds, {.batch_size = 10, .num_workers = 2, .prefetch_factor = 3});
  auto settle = [&](int64_t expect) {  // wait (up to 10 s) for the workers, then give them time to overrun
    for (int i = 0; i < 1000 && ds->calls.load() < expect; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  auto it = l.begin();  // batch 0 taken: workers may run ahead by 6 batches
  settle(1 + 6);
  EXPECT_EQ(ds->calls.load(), 1 + 6);
  ++it;
  settle(2 + 6);
  EXPECT_EQ(ds->calls.load(), 2 + 6);
}

TEST(DataLoader, EarlyDestructionAndRestartDoNotHang) {
  auto run_with_deadline = [](auto&& f) {
    auto fut = std::async(std::launch::async, f);
    if (fut.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      std::fprintf(stderr, "DataLoader shutdown hung\n");
      std::_Exit(1);
    }
    fut.get();
  };
  run_with_deadline([] {
    auto ds = std::make_shared<FlakyDataset>(10000, -1, 2);
    const auto t0 = std::chrono::steady_clock::now();
    {
      DataLoader l(ds, {.batch_size = 8, .num_workers = 4, .prefetch_factor = 4});
      auto it = l.begin();
      ++it;
      ++it;
    }  // loader destroyed mid-epoch with 4 busy workers
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0);
    EXPECT_LT(ds->calls.load(), 3 + 16 + 4 + 1);  // nothing ran past the window
  });
  run_with_deadline([] {
    auto ds = std::make_shared<FlakyDataset>(1000, -1, 1);
    DataLoader l(ds, {.batch_size = 10, .num_workers = 3});
    auto it = l.begin();
    ++it;
    // A second begin() stops the first epoch; its iterator then reports that.
    auto it2 = l.begin();
    EXPECT_EQ(targets_of(*it2)[0], 0);
    EXPECT_THROW(++it, axle::Error);
    int n = 1;
    for (++it2; it2 != l.end(); ++it2) ++n;
    EXPECT_EQ(n, 100);
  });
  run_with_deadline([] {
    // Iterator outliving its loader: the epoch is stopped, no hang, a clear error.
    auto ds = std::make_shared<FlakyDataset>(1000, -1, 1);
    DataLoader::Iterator it;
    {
      DataLoader l(ds, {.batch_size = 10, .num_workers = 2});
      it = l.begin();
    }
    EXPECT_CONTAINS(error_of([&] { ++it; }), "stopped");
  });
}

TEST(DistributedSampler, CoversEverySampleOncePerEpochAcrossRanks) {
  for (int replicas : {2, 3}) {
    for (int64_t epoch : {0, 1}) {
      std::vector<int> seen(10, 0);
      std::vector<std::vector<int64_t>> per_rank;
      for (int r = 0; r < replicas; ++r) {
        axle::data::DistributedSampler s(10, replicas, r, true, 5);
        s.set_epoch(epoch);
        per_rank.push_back(s.indices());
        EXPECT_EQ(int64_t(per_rank.back().size()), s.size());
        for (int64_t i : per_rank.back()) ++seen[size_t(i)];
      }
      const int padding = int((10 + replicas - 1) / replicas * replicas - 10);
      int extra = 0;
      for (int c : seen) {
        EXPECT_GE(c, 1);
        extra += c - 1;
      }
      EXPECT_EQ(extra, padding) << replicas << " replicas";
    }
  }
  // A new epoch reshuffles; the same epoch repeats.
  axle::data::DistributedSampler a(100, 2, 0, true, 5), b(100, 2, 0, true, 5);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), a.indices());
  EXPECT_THROW(axle::data::DistributedSampler(10, 2, 2), axle::Error);
}

TEST(MpDeviceLoader, YieldsTheLoadersBatchesInOrderOnTheDevice) {
  auto ds = counting_dataset(103);
  for (int threads : {1, 3}) {
    for (int prefetch : {1, 8}) {
      DataLoader plain(ds, {.batch_size = 10, .shuffle = true, .num_workers = 2, .seed = 7});
      DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .num_workers = 2, .seed = 7});
      pl::MpDeviceLoader mp(loader, axle::device(),
                            {.loader_prefetch_size = prefetch, .device_prefetch_size = prefetch,
                             .host_to_device_transfer_threads = threads});
      EXPECT_EQ(mp.size(), 11);
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        plain.set_epoch(epoch);
        loader.set_epoch(epoch);
        std::vector<std::vector<float>> want, got;
        for (const Example& b : plain) want.push_back(b.data.to_vector<float>());
        int64_t i = 0;
        for (const Example& b : mp) {
          EXPECT_EQ(b.data.device(), axle::device());
          EXPECT_EQ(b.target.device(), axle::device());
          EXPECT_EQ(b.target.dtype(), kInt64);
          got.push_back(b.data.cpu().to_vector<float>());
          ++i;
        }
        EXPECT_EQ(got, want) << threads << " transfer threads, prefetch " << prefetch << ", epoch " << epoch;
      }
    }
  }
}

TEST(MpDeviceLoader, SyncsEveryBatchesPerExecution) {
  auto ds = counting_dataset(50);  // 5 batches
  DataLoader loader(ds, {.batch_size = 10});
  // One sync before handing out each batches_per_execution-th batch (batch 0 included), one at the end.
  for (auto [per_execution, syncs] : {std::pair{1, 6}, std::pair{2, 4}, std::pair{5, 2}}) {
    pl::MpDeviceLoader mp(loader, axle::device(), {.batches_per_execution = per_execution});
    const int64_t before = metrics::counter_value("MarkStep");
    Tensor acc = zeros({}, {.device = axle::device()});
    for (const Example& b : mp) acc = acc + b.data.sum();  // traced, run by the loader's syncs
    EXPECT_EQ(metrics::counter_value("MarkStep") - before, syncs) << per_execution;
    EXPECT_DOUBLE_EQ(acc.item(), 149.0 * 150.0 / 2.0);  // every value 0..149 once
  }
}

TEST(MpDeviceLoader, WorkerErrorReachesTheLoop) {
  auto ds = std::make_shared<FlakyDataset>(100, 37);
  DataLoader loader(ds, {.batch_size = 10, .num_workers = 2});
  pl::MpDeviceLoader mp(loader, axle::device());
  std::vector<int64_t> seen;
  int64_t failed_at = -1;
  std::string msg;
  auto it = mp.begin();
  while (it != mp.end()) {
    seen.push_back(it->target.cpu().to_vector<int64_t>()[0]);
    try {
      ++it;
    } catch (const axle::Error& e) {
      failed_at = it.index();
      msg = e.what();
      EXPECT_FALSE(it->data.defined());
      ++it;  // step past it, as with DataLoader
    }
  }
  EXPECT_EQ(failed_at, 3);
  EXPECT_CONTAINS(msg, "bad example 37");
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 10, 20, 40, 50, 60, 70, 80, 90}));
  // In a range-for the error leaves the loop; the next epoch starts afresh.
  auto first_bad = std::make_shared<FlakyDataset>(10, 0);
  DataLoader l2(first_bad, {.batch_size = 4});
  pl::MpDeviceLoader mp2(l2, axle::device());
  EXPECT_THROW(mp2.begin(), axle::Error);
  EXPECT_THROW(mp2.begin(), axle::Error);
}

TEST(MpDeviceLoader, PrefetchIsBoundedAndRestartBeginsTheEpochAgain) {
  auto ds = std::make_shared<FlakyDataset>(1000, -1);
  DataLoader loader(ds, {.batch_size = 10});
  {
    pl::MpDeviceLoader mp(loader, axle::device(), {.loader_prefetch_size = 3, .device_prefetch_size = 2});
    auto it = mp.begin();
    // Batch 0 handed out, batches 1-2 on the device (2 ahead), 3 on the host queue, and one
    // more the loader thread holds while it waits for room: the threads stop at 7 batches.
    constexpr int64_t kBound = 1 + 2 + 3 + 1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ds->calls.load() < kBound && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // give them the chance to overrun
    EXPECT_EQ(ds->calls.load(), kBound);
    ++it;
  }  // destroyed mid-epoch: threads stop, no hang
  pl::MpDeviceLoader mp(loader, axle::device());
  DataLoader plain(ds, {.batch_size = 10});
  std::vector<int64_t> want;
  for (const Example& b : plain) want.push_back(targets_of(b)[0]);
  for (int round = 0; round < 2; ++round) {
    std::vector<int64_t> got;
    for (auto it = mp.begin(); it != mp.end() && got.size() < 3; ++it) got.push_back(it->target.cpu().to_vector<int64_t>()[0]);
    EXPECT_EQ(got, std::vector<int64_t>(want.begin(), want.begin() + 3)) << "round " << round;
  }
  auto stale = mp.begin();
  auto fresh = mp.begin();  // stops the epoch `stale` belongs to
  EXPECT_THROW(++stale, axle::Error);
  EXPECT_EQ(fresh->target.cpu().to_vector<int64_t>()[0], want[0]);
  EXPECT_THROW(pl::MpDeviceLoader(loader, axle::device(), {.device_prefetch_size = 0}), axle::Error);
  EXPECT_THROW(pl::MpDeviceLoader(loader, axle::device(), {.batches_per_execution = -1}), axle::Error);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  auto small = counting_dataset(20);
  DataLoader l2(small, {.batch_size = 5});
  pl::ParallelLoader para(l2, {axle::device()});
  std::vector<int64_t> firsts;
  for (const Example& b : para.per_device_loader(axle::device())) firsts.push_back(b.target.cpu().to_vector<int64_t>()[0]);
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 5, 10, 15}));
  EXPECT_THROW(pl::ParallelLoader(l2, {axle::device(), kCPU}), axle::Error);
  EXPECT_THROW(para.per_device_loader(kCPU), axle::Error);
#pragma GCC diagnostic pop
}
