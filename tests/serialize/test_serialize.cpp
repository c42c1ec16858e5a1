// Serialization: safetensors round trips, the on-disk layout, atomic writes, PyTorch
// interop (weights and outputs written by torch 1.13, tests/golden/gen_torch_safetensors.py),
// every bad-input case as a clear axle::Error, and bit-identical checkpoint resume on cpu and xla.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "test_paths.h"
#include "core/tensor_impl.h"
#include "serialize/safetensors.h"

using namespace axle;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "axle_serialize_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t count() const { return size_t(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.impl()->data()), size_t(c.numel()) * itemsize(c.dtype()));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file from a header text and data bytes (the length prefix is the header's true length).
std::string raw(const std::string& header, const std::string& data = "") { return le64(header.size()) + header + data; }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR_HAS(stmt, needle)                                                   \
  do {                                                                                   \
    std::string msg_ = error_of([&] { stmt; });                                          \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_;              \
  } while (0)

Tensor raw_tensor(const Shape& shape, DType t, const std::string& bytes) {
  Tensor r = make_tensor(shape, t);
  std::memcpy(r.impl()->data(), bytes.data(), bytes.size());
  return r;
}

nn::StateDict all_dtypes() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f = {1.5f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-45f};
  nn::StateDict sd;
  sd.emplace_back("w.float", from_vector(f, {2, 3}));
  sd.emplace_back("a.int64", from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0,
                                                              std::numeric_limits<int64_t>::max()},
                                         {4}));
  sd.emplace_back("int32", from_vector(std::vector<int32_t>{-7, 1 << 30}, {2, 1}));
  sd.emplace_back("mask", raw_tensor({3}, kBool, std::string("\1\0\1", 3)));
  sd.emplace_back("bytes", raw_tensor({2, 2}, kUInt8, std::string("\0\xff\x10\x80", 4)));
  sd.emplace_back("half", raw_tensor({2}, DType::Float16, std::string("\x00\x3c\x00\xc0", 4)));
  sd.emplace_back("bf", raw_tensor({1}, DType::BFloat16, std::string("\x80\x3f", 2)));
  sd.emplace_back("scalar", scalar_tensor(3.25));
  sd.emplace_back("empty", zeros({0, 5}));
  return sd;
}

}  // namespace

// ---------------------------------------------------------------- round trips and layout

TEST(Serialize, RoundTripKeepsEveryBitNameOrderAndMetadata) {
  TempDir d;
  nn::StateDict sd = all_dtypes();
  save(sd, d.file("a.safetensors"), {{"format", "pt"}, {"note", "h\xc3\xa9llo"}});
  SafeTensors f = load(d.file("a.safetensors"));
  ASSERT_EQ(f.tensors.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    SCOPED_TRACE(sd[i].first);
    EXPECT_EQ(f.tensors[i].first, sd[i].first);  // data order = save order
    EXPECT_EQ(f.tensors[i].second.dtype(), sd[i].second.dtype());
    EXPECT_EQ(f.tensors[i].second.shape(), sd[i].second.shape());
    EXPECT_TRUE(f.tensors[i].second.device().is_cpu());
    EXPECT_EQ(bytes_of(f.tensors[i].second), bytes_of(sd[i].second));
  }
  EXPECT_EQ(f.metadata, (Metadata{{"format", "pt"}, {"note", "h\xc3\xa9llo"}}));
  EXPECT_TRUE(f.contains("mask"));
  EXPECT_EQ(f.at("scalar").item(), 3.25);
  EXPECT_EQ(d.count(), 1u);  // no temporary file left behind
}

TEST(Serialize, FileLayoutFollowsTheSpec) {
  // Parse the written bytes independently of axle's reader.
  TempDir d;
  Tensor w = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}).t();  // non-contiguous view
  Tensor b = from_vector(std::vector<int64_t>{7, 8}, {2});
  save({{"w", w}, {"b", b}}, d.file("x.safetensors"), {{"k", "v"}});
  std::string bytes = read_file(d.file("x.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section starts 8-byte aligned";
  auto j = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(j["__metadata__"], nlohmann::json({{"k", "v"}}));
  EXPECT_EQ(j["w"]["dtype"], "F32");
  EXPECT_EQ(j["w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(j["b"]["dtype"], "I64");
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({24, 40}));
  ASSERT_EQ(bytes.size(), 8 + n + 40);
  std::vector<float> wt(6);
  std::memcpy(wt.data(), bytes.data() + 8 + n, 24);
  EXPECT_EQ(wt, (std::vector<float>{1, 3, 5, 2, 4, 6}));  // logical row-major order of the transposed view
  int64_t b0 = 0;
  std::memcpy(&b0, bytes.data() + 8 + n + 24, 8);
  EXPECT_EQ(b0, 7);
}

TEST(Serialize, SingleTensorAndOverwrite) {
  TempDir d;
  Tensor t = randn({5, 7});
  save(t, d.file("t.safetensors"));
  EXPECT_EQ(bytes_of(load_tensor(d.file("t.safetensors"))), bytes_of(t));
  Tensor u = arange(10);
  save(u, d.file("t.safetensors"));  // replaces the previous file
  EXPECT_EQ(load_tensor(d.file("t.safetensors")).to_vector<int64_t>(), u.to_vector<int64_t>());
  save(nn::StateDict{}, d.file("empty.safetensors"));
  EXPECT_TRUE(load(d.file("empty.safetensors")).tensors.empty());
  EXPECT_ERROR_HAS(load_tensor(d.file("empty.safetensors")), "holds 0 tensors");
  save(all_dtypes(), d.file("many.safetensors"));
  EXPECT_ERROR_HAS(load_tensor(d.file("many.safetensors")), "expected exactly one");
  EXPECT_EQ(d.count(), 3u);
}

TEST(Serialize, SaveErrors) {
  TempDir d;
  Tensor t = ones({2});
  EXPECT_ERROR_HAS(save({{"a", t}, {"a", t}}, d.file("x")), "appears twice");
  EXPECT_ERROR_HAS(save({{"__metadata__", t}}, d.file("x")), "reserved");
  EXPECT_ERROR_HAS(save({{"u", Tensor()}}, d.file("x")), "\"u\" is undefined");
  EXPECT_ERROR_HAS(save(t, d.file("no/such/dir/x.safetensors")), "can't create a temporary file");
  EXPECT_ERROR_HAS(save({{std::string("bad\xff"), t}}, d.file("x")), "UTF-8");
  EXPECT_EQ(d.count(), 0u);
}

TEST(Serialize, SavingAnXlaTensorSaysToMoveItToCpu) {
  TempDir d;
  Tensor x = randn({3, 4});
  Tensor y = mul(x.to(axle::device()), 2.0);  // pending lazy computation
  std::string msg = error_of([&] { save({{"y", y}}, d.file("y.safetensors")); });
  EXPECT_NE(msg.find("xla:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".cpu()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("axle::xm::save"), std::string::npos) << msg;
  EXPECT_EQ(d.count(), 0u);
  // xm::save syncs, moves to cpu and writes.
  xm::save({{"y", y}, {"x", x}}, d.file("y.safetensors"));
  SafeTensors f = load(d.file("y.safetensors"));
  EXPECT_EQ(bytes_of(f.at("y")), bytes_of(mul(x, 2.0)));
  EXPECT_EQ(bytes_of(f.at("x")), bytes_of(x));
  xm::save(y, d.file("single.safetensors"));
  EXPECT_EQ(bytes_of(load_tensor(d.file("single.safetensors"))), bytes_of(mul(x, 2.0)));
}

TEST(Serialize, XmSaveWritesOnTheMasterOrdinalOnly) {
  TempDir d;
  st::set_master_ordinal_hook([] { return false; });
  xm::save(ones({2}), d.file("not_master.safetensors"));
  st::set_master_ordinal_hook(nullptr);
  EXPECT_FALSE(fs::exists(d.file("not_master.safetensors")));
  xm::save(ones({2}), d.file("master.safetensors"));
  EXPECT_TRUE(fs::exists(d.file("master.safetensors")));
}

// ---------------------------------------------------------------- atomic writes

TEST(Serialize, FailedWriteKeepsThePreviousFile) {
  TempDir d;
  const std::string path = d.file("model.safetensors");
  Tensor old = randn({64, 64});
  save({{"w", old}}, path);
  const std::string before = read_file(path);
  for (uint64_t at : {uint64_t(0), uint64_t(5), uint64_t(100), uint64_t(9000)}) {
    SCOPED_TRACE(at);
    st::set_write_fault_for_testing(at, 1);
    EXPECT_ERROR_HAS(save({{"w", randn({64, 64})}}, path), "injected I/O error");
    st::set_write_fault_for_testing(0, 0);
    EXPECT_EQ(read_file(path), before);
    EXPECT_EQ(d.count(), 1u) << "the temporary file is removed";
  }
  EXPECT_EQ(bytes_of(load(path).at("w")), bytes_of(old));
}

TEST(SerializeDeathTest, CrashMidWriteKeepsThePreviousFile) {
  // "fast" (fork, no re-exec): the child must write to this test's directory.
  GTEST_FLAG_SET(death_test_style, "fast");
  TempDir d;
  const std::string path = d.file("model.safetensors");
  Tensor old = randn({128, 32});
  save({{"w", old}, {"b", ones({32})}}, path);
  const std::string before = read_file(path);
  const nn::StateDict next = {{"w", randn({128, 32})}, {"b", zeros({32})}};
  EXPECT_EXIT(
      {
        st::set_write_fault_for_testing(2000, 2);  // _exit(3) after 2000 bytes of the new file
        save(next, path);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EQ(read_file(path), before);
  SafeTensors f = load(path);
  EXPECT_EQ(bytes_of(f.at("w")), bytes_of(old));
  // The crashed writer's half-written temporary file is next to it, never at `path`.
  size_t tmp = 0;
  for (const auto& e : fs::directory_iterator(d.path))
    if (e.path().filename().string().rfind("model.safetensors.tmp.", 0) == 0) ++tmp;
  EXPECT_EQ(tmp, 1u);
}

// ---------------------------------------------------------------- bad input

TEST(SerializeBadInput, EachCaseIsAClearError) {
  const std::string f4 = std::string(16, '\x01');
  const std::string hdr_ok = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"empty file", "", "too short"},
      {"shorter than the length prefix", "abc", "too short"},
      {"header length over the limit", le64(200'000'000) + "{}", "exceeds the 100000000-byte limit"},
      {"header length past the end", le64(1000) + hdr_ok + f4, "runs past the end of the file"},
      {"header length zero", le64(0) + f4, "too small"},
      {"truncated data", raw(hdr_ok, f4.substr(0, 9)), "run past the end of the data section"},
      {"malformed JSON", raw(R"({"a":{"dtype":"F32",)"), "malformed JSON header"},
      {"not an object", raw("[1,2,3]"), "expected a JSON object"},
      {"not UTF-8", raw("{\"\xff\":1}"), "malformed JSON header"},
      {"unknown dtype", raw(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", f4), "dtype \"F64\""},
      {"nonsense dtype", raw(R"({"a":{"dtype":"ZZZ","shape":[2],"data_offsets":[0,16]}})", f4), "dtype \"ZZZ\""},
      {"dtype not a string", raw(R"({"a":{"dtype":3,"shape":[4],"data_offsets":[0,16]}})", f4), "dtype must be a string"},
      {"negative dimension", raw(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", f4), "non-negative integers"},
      {"fractional dimension", raw(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,16]}})", f4), "non-negative integers"},
      {"shape not an array", raw(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", f4), "shape must be an array"},
      {"size lies (shape)", raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", f4), "needs 12 bytes"},
      {"size lies (dtype)", raw(R"({"a":{"dtype":"I64","shape":[4],"data_offsets":[0,16]}})", f4), "needs 32 bytes"},
      {"numel overflows", raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", f4),
       "more than 2^64"},
      {"huge tensor claimed", raw(R"({"a":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}})", f4),
       "run past the end of the data section"},
      {"offsets overlap", raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              f4.substr(0, 12)), "overlaps"},
      {"gap between tensors", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                  f4.substr(0, 12)), "gap in the data section"},
      {"trailing bytes", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f4), "12 trailing bytes"},
      {"offsets reversed", raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", f4), "end before they begin"},
      {"offsets not a pair", raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16]}})", f4), "must be [begin, end]"},
      {"negative offset", raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}})", f4), "non-negative integers"},
      {"missing field", raw(R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", f4), "has no \"shape\""},
      {"entry not an object", raw(R"({"a":7})"), "expected an object"},
      {"duplicate tensor", raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f4),
       "appears twice"},
      {"deep nesting", raw("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"), "nested deeper"},
      {"metadata not strings", raw(R"({"__metadata__":{"k":1}})"), "must be a string"},
      {"metadata not an object", raw(R"({"__metadata__":[1]})"), "__metadata__ must be an object"},
      {"bool bytes other than 0/1", raw(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\0\7", 2)),
       "BOOL elements must be 0 or 1"},
  };
  TempDir d;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(d.file("bad.safetensors"), c.bytes);
    std::string msg = error_of([&] { load(d.file("bad.safetensors")); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << "the message names the file: " << msg;
    // The in-memory parser (the fuzz target's entry point) agrees, except for the data-dependent BOOL check.
    if (std::string(c.name).find("bool") == std::string::npos) {
      EXPECT_THROW(st::parse_buffer(reinterpret_cast<const unsigned char*>(c.bytes.data()), c.bytes.size(), "buf"),
                   Error);
    }
  }
}

TEST(SerializeBadInput, MissingNamesAndFiles) {
  TempDir d;
  save({{"0.weight", ones({2})}, {"0.bias", zeros({1})}}, d.file("m.safetensors"));
  SafeTensors f = load(d.file("m.safetensors"));
  std::string msg = error_of([&] { f.at("1.weight"); });
  EXPECT_NE(msg.find("no tensor named \"1.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"0.weight\", \"0.bias\""), std::string::npos) << msg;
  EXPECT_ERROR_HAS(load(d.file("missing.safetensors")), "can't open");
  EXPECT_ERROR_HAS(load(d.path.string()), "not a regular file");
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(load(d.file("fifo")), "not a regular file");  // no hang waiting for a writer
  // Loading into a model by name reports the missing key.
  auto lin = std::make_shared<nn::Linear>(2, 1);
  EXPECT_ERROR_HAS(lin->load_state_dict(f.tensors), "missing key");
}

TEST(SerializeBadInput, EveryTruncationAndByteFlipIsAnErrorOrAValidFile) {
  TempDir d;
  save({{"a", from_vector(std::vector<float>{1, 2, 3}, {3})}, {"m", raw_tensor({2}, kBool, std::string("\1\0", 2))}},
       d.file("ok.safetensors"), {{"k", "v"}});
  const std::string good = read_file(d.file("ok.safetensors"));
  const std::string p = d.file("mut.safetensors");
  for (size_t len = 0; len < good.size(); ++len) {
    write_file(p, good.substr(0, len));
    EXPECT_THROW(load(p), Error) << "truncated to " << len;
  }
  const unsigned char values[] = {0x00, 0x01, 0x22, 0x30, 0x39, 0x5b, 0x7b, 0x7d, 0x80, 0xff};
  size_t loaded = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char v : values) {
      std::string m = good;
      m[i] = char(v);
      write_file(p, m);
      try {
        SafeTensors f = load(p);
        ++loaded;  // e.g. a flipped data byte of the float tensor: still a valid file
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(loaded, 0u);
}

// ---------------------------------------------------------------- PyTorch interop

namespace {
nn::ModulePtr make_cnn() {
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}
}  // namespace

TEST(Interop, TorchCnnWeightsGiveTorchOutputs) {
  SafeTensors weights = load(std::string(AXLE_TEST_DATA) + "/torch_cnn.safetensors");
  SafeTensors io = load(std::string(AXLE_TEST_DATA) + "/torch_cnn_io.safetensors");
  EXPECT_EQ(weights.metadata.at("format"), "pt");
  EXPECT_EQ(weights.tensors.size(), 8u);
  auto model = make_cnn();
  model->load_state_dict(weights.tensors);  // by name: "0.weight", "3.bias", "7.weight", ...
  model->eval();
  EXPECT_EQ(bytes_of(model->state_dict()[2].second), bytes_of(weights.at("3.weight")));
  Tensor out = (*model)(io.at("input"));
  Tensor ref = io.at("output");
  ASSERT_EQ(out.shape(), (Shape{4, 10}));
  ASSERT_EQ(ref.shape(), (Shape{4, 10}));
  auto a = out.to_vector<float>(), b = ref.to_vector<float>();
  double max_err = 0;
  for (size_t i = 0; i < a.size(); ++i) max_err = std::max(max_err, double(std::fabs(a[i] - b[i])));
  EXPECT_LE(max_err, 1e-5);
  // And on the lazy device.
  model->to(axle::device());
  Tensor lazy_out = (*model)(io.at("input").to(axle::device())).cpu();
  auto c = lazy_out.to_vector<float>();
  max_err = 0;
  for (size_t i = 0; i < c.size(); ++i) max_err = std::max(max_err, double(std::fabs(c[i] - b[i])));
  EXPECT_LE(max_err, 1e-5);
}

// ---------------------------------------------------------------- checkpoints

namespace {

struct Position {
  int64_t epoch = 0, batch = 0, step = 0;
};

struct Trainer {
  Device dev;
  std::string opt_name;
  nn::ModulePtr model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::StepLR> sched;
  std::shared_ptr<data::TensorDataset> ds;
  std::unique_ptr<data::DataLoader> loader;

  Trainer(Device d, std::string o, uint64_t seed) : dev(d), opt_name(std::move(o)) {
    Generator g(5);
    std::vector<int64_t> labels(40);
    for (int64_t i = 0; i < 40; ++i) labels[size_t(i)] = i % 4;
    ds = std::make_shared<data::TensorDataset>(randn({40, 12}, {}, &g), from_vector(labels, {40}));
    loader = std::make_unique<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 3});
    manual_seed(seed);
    model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
        std::make_shared<nn::Linear>(16, 4)});
    model->to(dev);
    if (opt_name == "sgd")
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    else
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  }

  // Trains from `pos` until `stop` steps are done; returns the position of the next batch.
  Position run(Position pos, int64_t stop) {
    int64_t skip = pos.batch;
    for (int64_t epoch = pos.epoch;; ++epoch, skip = 0) {
      loader->set_epoch(epoch);
      int64_t bi = 0;
      for (const auto& b : *loader) {
        if (bi < skip) {
          ++bi;
          continue;
        }
        if (pos.step == stop) return {epoch, bi, pos.step};
        if (dev.is_xla()) {
          auto s = axle::step();
          one_step(b.data.to(dev), b.target.to(dev));
        } else {
          one_step(b.data, b.target);
        }
        ++bi;
        if (++pos.step % 2 == 0) sched->step();
      }
    }
  }

  void one_step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    opt->step();
  }

  std::vector<std::string> param_bytes() const {
    std::vector<std::string> out;
    for (const Tensor& p : model->parameters()) out.push_back(bytes_of(p.cpu()));
    return out;
  }
};

class CheckpointResume : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

}  // namespace

TEST_P(CheckpointResume, IsBitIdenticalToAnUninterruptedRun) {
  const auto& [dev_name, opt_name] = GetParam();
  const Device dev = Device::parse(dev_name);
  TempDir d;
  const std::string path = d.file("ckpt.safetensors");
  const int64_t total = 8, cut = 5;  // cut mid-epoch: 4 batches per epoch

  Trainer full(dev, opt_name, 0);
  full.run({}, total);
  const auto expected = full.param_bytes();
  const double expected_lr = full.opt->lr();

  Position pos;
  {
    Trainer first(dev, opt_name, 0);
    pos = first.run({}, cut);
    EXPECT_EQ(pos.epoch, 1);
    EXPECT_EQ(pos.batch, 1);
    save_checkpoint(path, {.model = first.model.get(), .optimizer = first.opt.get(), .scheduler = first.sched.get(),
                           .generator = &default_generator(), .epoch = pos.epoch, .batch = pos.batch,
                           .step = pos.step, .metadata = {{"run", "test"}}});
  }
  Trainer second(dev, opt_name, 1234);  // different initial weights and generator state
  default_generator().manual_seed(777);
  Checkpoint ck = load_checkpoint(path, {.model = second.model.get(), .optimizer = second.opt.get(),
                                         .scheduler = second.sched.get(), .generator = &default_generator()});
  EXPECT_EQ(ck.epoch, pos.epoch);
  EXPECT_EQ(ck.batch, pos.batch);
  EXPECT_EQ(ck.step, cut);
  EXPECT_EQ(ck.metadata, (Metadata{{"run", "test"}}));
  EXPECT_TRUE(second.model->parameters()[0].device() == dev);
  second.run({ck.epoch, ck.batch, ck.step}, total);
  EXPECT_EQ(second.param_bytes(), expected);
  EXPECT_EQ(second.opt->lr(), expected_lr);
  EXPECT_EQ(second.sched->last_epoch(), full.sched->last_epoch());

  // Control: the same resume without the generator state draws other dropout masks.
  Trainer third(dev, opt_name, 1234);
  default_generator().manual_seed(777);
  ck = load_checkpoint(path, {.model = third.model.get(), .optimizer = third.opt.get(), .scheduler = third.sched.get()});
  third.run({ck.epoch, ck.batch, ck.step}, total);
  EXPECT_NE(third.param_bytes(), expected);
}

INSTANTIATE_TEST_SUITE_P(Serialize, CheckpointResume,
                         ::testing::Combine(::testing::Values("cpu", "xla"), ::testing::Values("sgd", "adamw")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(Checkpoint, MismatchIsAnErrorAndChangesNothing) {
  TempDir d;
  const std::string path = d.file("ckpt.safetensors");
  Trainer a(kCPU, "sgd", 0);
  a.run({}, 3);
  save_checkpoint(path, {.model = a.model.get(), .optimizer = a.opt.get(), .step = 3});

  // A model of another shape.
  manual_seed(0);
  auto other = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(12, 8)});
  std::string before = bytes_of(other->parameters()[0]);
  EXPECT_ERROR_HAS(load_checkpoint(path, {.model = other.get()}),
                   "\"0.weight\": the checkpoint has shape [16, 12], the model has [8, 12]");
  EXPECT_EQ(bytes_of(other->parameters()[0]), before);

  // The model matches, the optimizer does not (a different parameter layout): the model is untouched.
  Trainer b(kCPU, "sgd", 42);
  optim::SGD wrong({b.model->parameters()[0]}, {.lr = 0.1, .momentum = 0.9});
  before = bytes_of(b.model->parameters()[0]);
  EXPECT_ERROR_HAS(load_checkpoint(path, {.model = b.model.get(), .optimizer = &wrong}), "parameter(s)");
  EXPECT_EQ(bytes_of(b.model->parameters()[0]), before);

  // Parts the file does not hold, and a file that is not a checkpoint.
  EXPECT_ERROR_HAS(load_checkpoint(path, {.model = b.model.get(), .scheduler = b.sched.get()}), "no scheduler state");
  EXPECT_ERROR_HAS(load_checkpoint(path, {.generator = &default_generator()}), "no generator state");
  save(b.model->state_dict(), d.file("weights.safetensors"));
  EXPECT_ERROR_HAS(load_checkpoint(d.file("weights.safetensors"), {.model = b.model.get()}), "not an axle checkpoint");
  EXPECT_ERROR_HAS(save_checkpoint(path, {.metadata = {{"axle.checkpoint", "x"}}}), "reserved");

  // Only the model: loading weights from a checkpoint without an optimizer works.
  Checkpoint ck = load_checkpoint(path, {.model = b.model.get()});
  EXPECT_EQ(ck.step, 3);
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
}
