// FSDP v1 checkpoints (axle/fsdp_checkpoint.h, spec §3.1 "Checkpoints", F5): ShardMetadata's
// JSON, consolidation of hand-written rank files (flattened multi-parameter units, dim-0
// shards, padding, the unwrapped order) and its errors, the axle-fsdp-consolidate tool, and
// end to end on 2 ranks: save, consolidate (== the gathered shards, == the unwrapped model),
// resume in a fresh launch (bit-identical to an uninterrupted run), load errors.
//
// launch() re-executes this binary; main() (launch_test_main) narrows a child to its test.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "axle/axle.h"
#include "axle/fsdp.h"
#include "axle/fsdp_checkpoint.h"
#include "core/tensor_impl.h"
#include "fsdp_shards.h"
#include "test_util.h"

using namespace axle;
namespace fs = std::filesystem;
using axle::test::error_of;
using axle::test::TempDir;
using axle::test::in_launched_child;
using axle::test::prepare_launch;
using axle::test::run_ranks;
using fsdp::ShardMetadata;

namespace {

// ---------------------------------------------------------------- helpers

// Same shape, dtype and bytes.
void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  EXPECT_EQ(std::memcmp(x.impl()->data(), y.impl()->data(), size_t(x.numel()) * itemsize(x.dtype())), 0) << what;
}

void expect_same_state(const nn::StateDict& got, const nn::StateDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << "entry " << i;
    expect_identical(got[i].second, want[i].second, want[i].first);
  }
}

// One FSDP "unit" of a hand-written checkpoint: full tensors and how they are sharded.
struct Unit {
  std::string shard_name;
  std::vector<std::pair<std::string, Tensor>> params;  // unwrapped name, full value
  bool dim0 = false;
};

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Writes the rank files a `world`-rank FSDP model would: each unit's parameters flattened,
// concatenated, padded (with 777s) to a multiple of world * multiple and split (dim0: rows
// padded and split), buffers full under "model.<fsdp key>", and the two metadata strings.
// Returns the metadata of rank 0.
ShardMetadata write_rank_files(const std::string& prefix, int world, const std::vector<Unit>& units,
                               const std::vector<std::tuple<std::string, std::string, Tensor>>& buffers,
                               const std::vector<std::string>& order, int multiple = 1) {
  ShardMetadata meta;
  meta.world_size = world;
  std::vector<std::vector<Tensor>> shards(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    ShardMetadata::Param p;
    p.shard_name = units[u].shard_name;
    p.dim0 = units[u].dim0;
    std::vector<float> flat;
    for (const auto& [n, t] : units[u].params) {
      p.names.push_back(n);
      p.shapes.push_back(t.shape());
      auto v = t.contiguous().to_vector<float>();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    const int64_t k = world * multiple;
    if (p.dim0) {
      const Shape s = p.shapes[0];
      const int64_t row = numel_of(s) / s[0];
      p.padded_numel = (s[0] + k - 1) / k * k;
      flat.resize(size_t(p.padded_numel * row), 777.f);
      Shape shard_shape = s;
      shard_shape[0] = p.padded_numel / world;
      for (int r = 0; r < world; ++r) {
        const auto b = flat.begin() + r * shard_shape[0] * row;
        shards[u].push_back(from_vector(std::vector<float>(b, b + shard_shape[0] * row), shard_shape));
      }
    } else {
      p.padded_numel = (int64_t(flat.size()) + k - 1) / k * k;
      flat.resize(size_t(p.padded_numel), 777.f);
      const int64_t n = p.padded_numel / world;
      for (int r = 0; r < world; ++r)
        shards[u].push_back(from_vector(std::vector<float>(flat.begin() + r * n, flat.begin() + (r + 1) * n), {n}));
    }
    meta.params.push_back(std::move(p));
  }
  std::vector<std::string> buffer_keys;
  for (const auto& [name, key, t] : buffers) {
    meta.buffer_names.push_back(name);
    buffer_keys.push_back(key);
  }
  const std::string layout = nlohmann::json{{"order", order}, {"buffer_keys", buffer_keys}}.dump();
  for (int r = 0; r < world; ++r) {
    meta.rank = r;
    nn::StateDict tensors;
    for (size_t u = 0; u < units.size(); ++u) tensors.emplace_back("model." + units[u].shard_name, shards[u][size_t(r)]);
    for (const auto& [name, key, t] : buffers) tensors.emplace_back("model." + key, t);
    save(tensors, fsdp::shard_file(prefix, r, world), {{"shard_metadata", meta.to_json()}, {"shard_layout", layout}});
  }
  meta.rank = 0;
  return meta;
}

// A model's worth of full tensors: a flattened unit over two modules (with padding), a
// single flattened parameter, a dim-0 parameter (padded rows), a scalar; buffers of two
// modules, an int64 one among them; the unwrapped order interleaves parameters and buffers
// and differs from the metadata's order.
struct Fixture {
  nn::StateDict full;  // in the unwrapped order
  std::vector<Unit> units;
  std::vector<std::tuple<std::string, std::string, Tensor>> buffers;
  std::vector<std::string> order;
  Fixture() {
    manual_seed(7);
    auto add = [&](const std::string& n, Tensor t) {
      full.emplace_back(n, t);
      order.push_back(n);
      return t;
    };
    Tensor w1 = add("0.weight", randn({3, 4}));
    Tensor b1 = add("0.bias", randn({3}));
    Tensor bnw = add("1.weight", randn({3}));
    Tensor rm = add("1.running_mean", randn({3}));
    Tensor nb = add("1.num_batches_tracked", from_vector(std::vector<int64_t>{5}, {}));
    Tensor emb = add("2.embedding", randn({5, 2}));
    Tensor w3 = add("3.fc.weight", randn({2, 3}));
    Tensor sc = add("3.scale", randn({}));
    Tensor tail = add("4.weight", randn({7}));
    // Metadata order: the nested unit (3.*) first, as a root lists its inner units' shards.
    units.push_back({"3._fsdp_shard.flat", {{"3.fc.weight", w3}, {"3.scale", sc}}, false});
    units.push_back({"_fsdp_shard.flat0", {{"0.weight", w1}, {"0.bias", b1}, {"1.weight", bnw}}, false});
    units.push_back({"_fsdp_shard.2.embedding", {{"2.embedding", emb}}, true});
    units.push_back({"_fsdp_shard.4.weight", {{"4.weight", tail}}, false});
    buffers.emplace_back("1.running_mean", "module.1.running_mean", rm);
    buffers.emplace_back("1.num_batches_tracked", "module.1.num_batches_tracked", nb);
  }
};

// ---------------------------------------------------------------- ShardMetadata JSON

ShardMetadata sample_metadata() {
  ShardMetadata m;
  m.world_size = 4;
  m.rank = 3;
  m.params.push_back({"_fsdp.flat \"0\"", {"fc1.weight", "fc1.bias", "b\\n\u00e9"}, {{256, 784}, {256}, {}}, false, 200964});
  m.params.push_back({"_fsdp.emb", {"emb.weight"}, {{10, 3}}, true, 12});
  m.params.push_back({"_fsdp.empty", {"z"}, {{0, 4}}, false, 0});
  m.buffer_names = {"bn.running_mean", "bn.num_batches_tracked"};
  return m;
}

TEST(FsdpCheckpoint, ShardMetadataJsonRoundTripIsExact) {
  const ShardMetadata m = sample_metadata();
  const std::string text = m.to_json();
  const ShardMetadata back = ShardMetadata::from_json(text);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.rank, 3);
  ASSERT_EQ(back.params.size(), m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i) {
    EXPECT_EQ(back.params[i].shard_name, m.params[i].shard_name);
    EXPECT_EQ(back.params[i].names, m.params[i].names);
    EXPECT_EQ(back.params[i].shapes, m.params[i].shapes);
    EXPECT_EQ(back.params[i].dim0, m.params[i].dim0);
    EXPECT_EQ(back.params[i].padded_numel, m.params[i].padded_numel);
  }
  EXPECT_EQ(back.buffer_names, m.buffer_names);
  EXPECT_EQ(back.to_json(), text);
  // An empty one too.
  EXPECT_EQ(ShardMetadata::from_json(ShardMetadata{}.to_json()).to_json(), ShardMetadata{}.to_json());
}

TEST(FsdpCheckpoint, ShardMetadataFromBadJsonNamesWhatWasExpected) {
  auto err = [](const std::string& text) { return error_of([&] { (void)ShardMetadata::from_json(text); }); };
  nlohmann::json good = nlohmann::json::parse(sample_metadata().to_json());
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return err(j.dump());
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {err("not json"), "expected JSON text"},
      {err(""), "expected JSON text"},
      {err("[1, 2]"), "expected a JSON object, got array"},
      {err(std::string(100, '[') + std::string(100, ']')), "nested at most"},
      {with([](auto& j) { j.erase("world_size"); }), "expected a field \"world_size\""},
      {with([](auto& j) { j["world_size"] = "2"; }), "\"world_size\" in the object to be an integer, got string"},
      {with([](auto& j) { j["world_size"] = 0; }), "expected world_size >= 1, got 0"},
      {with([](auto& j) { j["rank"] = 4; }), "expected rank in [0, 4), got 4"},
      {with([](auto& j) { j["version"] = 2; }), "expected version 1, got 2"},
      {with([](auto& j) { j["params"] = 3; }), "\"params\" in the object to be an array, got number"},
      {with([](auto& j) { j["params"][0] = "x"; }), "params[0] to be an object, got string"},
      {with([](auto& j) { j["params"][1].erase("shard_name"); }), "expected a field \"shard_name\" in params[1]"},
      {with([](auto& j) { j["params"][0]["names"][1] = 5; }), "params[0].names[1] to be a string, got number"},
      {with([](auto& j) { j["params"][0]["shapes"].erase(0); }), "one shape per name in params[0] (3 names), got 2 shapes"},
      {with([](auto& j) { j["params"][0]["shapes"][1][0] = -1; }), "params[0].shapes[1] to hold sizes in [0, 2^40], got -1"},
      {with([](auto& j) { j["params"][0]["dim0"] = 1; }), "params[0].dim0 to be a boolean, got number"},
      {with([](auto& j) { j["params"][0]["padded_numel"] = 200960; }), "params[0].padded_numel >= 200961"},
      {with([](auto& j) { j["params"][1]["padded_numel"] = 6; }), "multiple of world_size 4, got 6"},
      {with([](auto& j) { j["params"][1]["padded_numel"] = 8; }), "params[1].padded_numel (the padded dim 0) >= 10, got 8"},
      {with([](auto& j) { j["params"][1]["names"].push_back("x"); j["params"][1]["shapes"].push_back({1}); }),
       "params[1] (dim0) to hold one parameter"},
      {with([](auto& j) { j["buffer_names"] = {1}; }), "buffer_names[0] to be a string, got number"},
  };
  for (const auto& [got, want] : cases) {
    EXPECT_NE(got.find("[ShardMetadata::from_json]"), std::string::npos) << got;
    EXPECT_NE(got.find(want), std::string::npos) << "expected \"" << want << "\" in: " << got;
  }
}

// ---------------------------------------------------------------- consolidation

TEST(FsdpCheckpoint, ConsolidateHandWrittenShardsEqualsTheFullTensors) {
  const Fixture fx;
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const TempDir dir;
    const std::string prefix = dir / "step5_";
    write_rank_files(prefix, world, fx.units, fx.buffers, fx.order, /*multiple=*/2);
    expect_same_state(fsdp::consolidate_sharded_model_checkpoints(prefix), fx.full);
  }
  // A directory prefix, another suffix, and files of another prefix beside them.
  const TempDir dir;
  write_rank_files(dir.path.string() + "/", 2, fx.units, fx.buffers, fx.order);
  write_rank_files(dir / "other_", 3, fx.units, fx.buffers, fx.order);
  expect_same_state(fsdp::consolidate_sharded_model_checkpoints(dir.path.string() + "/"), fx.full);
  fs::rename(dir / "rank-0-of-2.safetensors", dir / "rank-0-of-2.st");
  fs::rename(dir / "rank-1-of-2.safetensors", dir / "rank-1-of-2.st");
  expect_same_state(fsdp::consolidate_sharded_model_checkpoints(dir.path.string() + "/", ".st"), fx.full);
}

TEST(FsdpCheckpoint, ConsolidateErrorsNameTheProblem) {
  const Fixture fx;
  const TempDir dir;
  const std::string p = dir / "ck_";
  auto consolidate = [&](const std::string& prefix) {
    return error_of([&] { (void)fsdp::consolidate_sharded_model_checkpoints(prefix); });
  };
  EXPECT_NE(consolidate(p).find("no files match '" + p + "rank-*-of-*.safetensors'"), std::string::npos)
      << consolidate(p);
  EXPECT_NE(consolidate(dir / "nodir/x_").find("no directory"), std::string::npos);

  write_rank_files(p, 3, fx.units, fx.buffers, fx.order);
  fs::remove(fsdp::shard_file(p, 1, 3));
  std::string e = consolidate(p);
  EXPECT_NE(e.find("expected the files of ranks 0..2 (world size 3), missing 1 of them, the first rank 1 (no '" +
                   fsdp::shard_file(p, 1, 3) + "')"),
            std::string::npos)
      << e;
  // A name that lies: a huge world size, a rank beyond it.
  save(load(fsdp::shard_file(p, 0, 3)).tensors, fsdp::shard_file(dir / "huge_", 0, 999999999));
  e = consolidate(dir / "huge_");
  EXPECT_NE(e.find("world size 999999999), missing 999999998 of them, the first rank 1"), std::string::npos) << e;
  save(load(fsdp::shard_file(p, 0, 3)).tensors, dir / "odd_rank-5-of-2.safetensors");
  e = consolidate(dir / "odd_");
  EXPECT_NE(e.find("odd_rank-5-of-2.safetensors' names rank 5 of world size 2"), std::string::npos) << e;

  write_rank_files(p, 3, fx.units, fx.buffers, fx.order);
  write_rank_files(p, 2, fx.units, fx.buffers, fx.order);
  e = consolidate(p);
  EXPECT_NE(e.find("files of different world sizes"), std::string::npos) << e;
  for (int r = 0; r < 2; ++r) fs::remove(fsdp::shard_file(p, r, 2));
  expect_same_state(fsdp::consolidate_sharded_model_checkpoints(p), fx.full);

  // Corrupt metadata in rank 2's file.
  const std::string f2 = fsdp::shard_file(p, 2, 3);
  SafeTensors st = load(f2);
  save(st.tensors, f2, {{"shard_metadata", "{\"version\": 1, \"world_size\": 3"}, {"shard_layout", "{}"}});
  e = consolidate(p);
  EXPECT_NE(e.find("'" + f2 + "': [ShardMetadata::from_json]: expected JSON text"), std::string::npos) << e;
  save(st.tensors, f2);
  e = consolidate(p);
  EXPECT_NE(e.find("is not an FSDP rank file (no \"shard_metadata\" metadata)"), std::string::npos) << e;

  // Rank files that disagree: another shape for one parameter on rank 2.
  Fixture other;
  other.units[1].params[1].second = randn({4});
  const TempDir dir2;
  write_rank_files(dir2 / "ck_", 3, other.units, other.buffers, other.order);
  fs::copy_file(dir2 / "ck_rank-2-of-3.safetensors", f2, fs::copy_options::overwrite_existing);
  e = consolidate(p);
  EXPECT_NE(e.find("the rank files disagree: shard 1 (\"_fsdp_shard.flat0\")'s shapes: rank 0 has [[3, 4], [3], [3]], "
                   "rank 2 has [[3, 4], [4], [3]]"),
            std::string::npos)
      << e;

  // A file whose name and metadata disagree (rank 0's file copied as rank 2's).
  fs::copy_file(fsdp::shard_file(p, 0, 3), f2, fs::copy_options::overwrite_existing);
  e = consolidate(p);
  EXPECT_NE(e.find("holds rank 0 of world size 3, its name says rank 2 of 3"), std::string::npos) << e;
}

TEST(FsdpCheckpoint, ShardFileNamesRankAndWorld) {
  EXPECT_EQ(fsdp::shard_file("ck/step100_", 1, 4), "ck/step100_rank-1-of-4.safetensors");
  EXPECT_EQ(fsdp::shard_file("p", 0, 1, ".st"), "prank-0-of-1.st");
  EXPECT_NE(error_of([] { (void)fsdp::shard_file("p", 2, 2); }).find("expected 0 <= rank < world, got rank 2 and world 2"),
            std::string::npos);
}

// ---------------------------------------------------------------- the tool

test::Result run_tool(const std::string& args) {
  return test::run_captured(std::string("'") + AXLE_FSDP_CONSOLIDATE_BIN + "' " + args);
}

TEST(FsdpCheckpoint, ConsolidateToolWritesTheFullModel) {
  const Fixture fx;
  const TempDir dir;
  write_rank_files(dir / "ck_", 2, fx.units, fx.buffers, fx.order);
  const std::string out = dir / "full.safetensors";
  test::Result r = run_tool("--ckpt-prefix '" + (dir / "ck_") + "' --output '" + out + "'");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("wrote 9 tensors (46 elements) to " + out), std::string::npos) << r.out;
  expect_same_state(load(out).tensors, fx.full);

  r = run_tool("--help");
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* flag : {"--ckpt-prefix", "--ckpt-suffix", "--output"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
}

TEST(FsdpCheckpoint, ConsolidateToolFailsClearly) {
  const TempDir dir;
  const std::string out = dir / "full.safetensors";
  struct Case {
    std::string args, want;
  };
  const std::vector<Case> cases = {
      {"", "--ckpt-prefix is required"},
      {"--ckpt-prefix x_", "--output is required"},
      {"--ckpt-prefix x_ --output o --bogus 1", "--bogus"},
      {"--ckpt-prefix '" + (dir / "none_") + "' --output '" + out + "'", "no files match"},
      {"--ckpt-prefix '" + (dir / "nodir/x_") + "' --output '" + out + "'", "no directory"},
  };
  for (const Case& c : cases) {
    const test::Result r = run_tool(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("axle-fsdp-consolidate: error: "), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

// ---------------------------------------------------------------- end to end, 2 ranks

// A scratch directory the parent makes and its launched children share (they inherit it).
// Call it in the test body, not in the rank function (launch() clears the variables
// in_launched_child reads before it runs the function).
std::string shared_dir() {
  if (in_launched_child()) return std::getenv("AXLE_FSDPCK_TEST_DIR");
  static TempDir* dir = nullptr;  // one per process, removed at exit
  static struct Cleanup {
    ~Cleanup() { delete dir; }
  } cleanup;
  if (!dir) dir = new TempDir();
  ::setenv("AXLE_FSDPCK_TEST_DIR", dir->path.c_str(), 1);
  return dir->path.string();
}

// A module with a parameter and a buffer, so the unwrapped order interleaves parameters and
// buffers (a module's parameters, then its buffers, then its children).
struct Shift : nn::Module {
  explicit Shift(int64_t n) {
    scale = register_parameter("scale", full({n}, 1.0));
    offset = register_buffer("offset", arange(n, {.dtype = kFloat32}) * 0.01);
  }
  Tensor forward(const Tensor& x) override { return x * scale + offset; }
  std::string name() const override { return "Shift"; }
  Tensor scale, offset;
};

// The mlp (20 -> 32 -> 4) with a Shift after the first layer: 0.weight, 0.bias, 1.scale,
// 1.offset, 3.weight, 3.bias.
nn::ModulePtr make_model(uint64_t seed = 0) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(20, 32), std::make_shared<Shift>(32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 4)});
}

// FSDP's layouts: the default (each parameter flattened), flattened units nested one per
// Linear, dim-0 shards (the Linear(32, 4) weight's 4 rows and the biases pad on 3 ranks,
// not on 2: the padding is exercised by the hand-written files above).
std::vector<std::pair<std::string, fsdp::FSDPOptions>> layouts() {
  fsdp::FSDPOptions flat, dim0;
  flat.flatten_parameters = true;
  flat.auto_wrap_policy = fsdp::transformer_auto_wrap_policy({"Linear"});
  dim0.shard_param_on_dim_0 = true;
  return {{"default", {}}, {"flatten_nested", flat}, {"dim0", dim0}};
}

// Trains steps [first, first + n): the global batch of step s (16 rows, from a generator
// seeded by s) split over the ranks; world 1 trains unwrapped on the cpu.
void train_steps(nn::Module& model, optim::Optimizer& opt, int rank, int world, int first, int n, Device dev) {
  for (int s = first; s < first + n; ++s) {
    Generator gen(uint64_t(1000 + s));
    Tensor x = randn({16, 20}, {}, &gen);
    auto xs = x.to_vector<float>();
    std::vector<int64_t> labels;
    for (int i = 0; i < 16; ++i) labels.push_back((xs[size_t(i) * 20] > 0) + 2 * (xs[size_t(i) * 20 + 1] > 0));
    Tensor y = from_vector(labels, {16});
    const int64_t per = 16 / world;
    x = x.narrow(0, rank * per, per).contiguous();
    y = y.narrow(0, rank * per, per).contiguous();
    auto body = [&] {
      opt.zero_grad();
      cross_entropy(model(x.to(dev)), y.to(dev)).backward();
      opt.step();
    };
    if (dev.is_xla()) {
      auto guard = axle::step();
      body();
    } else {
      body();
    }
  }
}

// The full parameters by all-gathering every shard and undoing the sharding by hand (an
// independent stitch of get_shard_metadata), with the buffers of this rank.
std::map<std::string, Tensor> gathered_state(const fsdp::FSDP& model) {
  const ShardMetadata m = model.get_shard_metadata();
  std::map<std::string, Tensor> out = test::gather_full_params(model);  // tests/support/fsdp_shards.h
  const auto buffers = model.named_buffers();
  EXPECT_EQ(buffers.size(), m.buffer_names.size());
  for (size_t i = 0; i < buffers.size() && i < m.buffer_names.size(); ++i) out[m.buffer_names[i]] = buffers[i].second.cpu();
  return out;
}

std::vector<std::string> keys_of(const nn::StateDict& sd) {
  std::vector<std::string> k;
  for (const auto& [n, t] : sd) k.push_back(n);
  return k;
}

TEST(FsdpCheckpoint2Ranks, ConsolidatedEqualsTheUnwrappedModelAndTheGatheredShards) {
  const std::string dir = shared_dir();
  run_ranks(2, [&](int rank) {
    dist::init_process_group("xla", "xla://");
    const nn::StateDict initial = make_model()->state_dict();
    const std::vector<std::string> order = keys_of(initial);
    // The same training unwrapped, on the whole batch (DDP's tolerance: the mean over two
    // half batches is not the same float sum as over the whole batch).
    auto ref = make_model();
    optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
    train_steps(*ref, ref_opt, 0, 1, 0, 3, kCPU);
    for (const auto& [layout, opts] : layouts()) {
      SCOPED_TRACE(layout);
      auto net = make_model();
      net->to(device());
      auto model = std::make_shared<fsdp::FSDP>(net, opts);
      optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
      // Before training: exactly the unwrapped model's state, in its order.
      const std::string p0 = dir + "/" + layout + "_step0_";
      fsdp::save_sharded_checkpoint(p0, *model, {.optimizer = &opt});
      expect_same_state(fsdp::consolidate_sharded_model_checkpoints(p0), initial);

      train_steps(*model, opt, rank, 2, 0, 3, device());
      const std::string p3 = dir + "/" + layout + "_step3_";
      fsdp::save_sharded_checkpoint(p3, *model, {.optimizer = &opt, .step = 3});
      const nn::StateDict full = fsdp::consolidate_sharded_model_checkpoints(p3);
      EXPECT_EQ(keys_of(full), order);
      std::map<std::string, Tensor> gathered = gathered_state(*model);
      ASSERT_EQ(gathered.size(), full.size());
      for (const auto& [n, t] : full) expect_identical(t, gathered[n], n + " (consolidated vs gathered)");
      const nn::StateDict want = ref->state_dict();
      for (size_t i = 0; i < want.size() && i < full.size(); ++i) {
        const auto a = full[i].second.to_vector<float>(), b = want[i].second.to_vector<float>();
        ASSERT_EQ(a.size(), b.size());
        double worst = 0, scale = 0;
        for (size_t k = 0; k < a.size(); ++k) {
          worst = std::max(worst, double(std::abs(a[k] - b[k])));
          scale = std::max(scale, double(std::abs(b[k])));
        }
        EXPECT_LE(worst, 1e-5 * scale) << want[i].first;
      }
      // The trained state moved away from the initial one (the comparisons above can fail).
      EXPECT_NE(full[0].second.to_vector<float>(), initial[0].second.to_vector<float>());
      // The tool writes the same tensors.
      if (rank == 0) {
        const std::string out = dir + "/" + layout + "_full.safetensors";
        const test::Result r = run_tool("--ckpt-prefix '" + p3 + "' --output '" + out + "'");
        EXPECT_EQ(r.status, 0) << r.out << r.err;
        expect_same_state(load(out).tensors, full);
      }
    }
  });
}

// Rank files of a 2-rank run: the parameters after `steps` steps, by layout.
void save_run(int rank, int steps, const std::string& prefix) {
  for (const auto& [layout, opts] : layouts()) {
    auto model = std::make_shared<fsdp::FSDP>(nn::to(make_model(), device()), opts);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    train_steps(*model, opt, rank, 2, 0, steps, device());
    fsdp::save_sharded_checkpoint(prefix + layout + "_", *model, {.optimizer = &opt, .step = steps});
  }
}

TEST(FsdpCheckpoint2Ranks, ResumeInAFreshLaunchIsBitIdentical) {
  const std::string dir = shared_dir();
  // The uninterrupted run (4 steps) and the one that stops after 2, in one launch.
  run_ranks(2, [&](int rank) {
    dist::init_process_group("xla", "xla://");
    save_run(rank, 4, dir + "/uninterrupted_");
    save_run(rank, 2, dir + "/stopped_");
  });
  // Fresh processes: another initialisation, the sharded files, 2 more steps.
  run_ranks(2, [&](int rank) {
    dist::init_process_group("xla", "xla://");
    for (const auto& [layout, opts] : layouts()) {
      SCOPED_TRACE(layout);
      auto model = std::make_shared<fsdp::FSDP>(nn::to(make_model(/*seed=*/99), device()), opts);
      optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
      const Checkpoint ck = fsdp::load_sharded_checkpoint(dir + "/stopped_" + layout + "_", *model, {.optimizer = &opt});
      EXPECT_EQ(ck.step, 2);
      EXPECT_TRUE(ck.metadata.empty());
      train_steps(*model, opt, rank, 2, 2, 2, device());
      fsdp::save_sharded_checkpoint(dir + "/resumed_" + layout + "_", *model, {.optimizer = &opt, .step = 4});
      expect_same_state(fsdp::consolidate_sharded_model_checkpoints(dir + "/resumed_" + layout + "_"),
                        fsdp::consolidate_sharded_model_checkpoints(dir + "/uninterrupted_" + layout + "_"));
      // The momentum buffers too.
      const SafeTensors a = load(fsdp::shard_file(dir + "/resumed_" + layout + "_", rank, 2));
      const SafeTensors b = load(fsdp::shard_file(dir + "/uninterrupted_" + layout + "_", rank, 2));
      expect_same_state(a.tensors, b.tensors);
    }
  });
}

TEST(FsdpCheckpoint2Ranks, LoadErrorsNameBothValues) {
  const std::string dir = shared_dir();
  run_ranks(2, [&](int rank) {
    dist::init_process_group("xla", "xla://");
    auto model = std::make_shared<fsdp::FSDP>(nn::to(make_model(), device()));
    const std::string p = dir + "/errors_";
    fsdp::save_sharded_checkpoint(p, *model);
    if (rank == 0) {
      // The same files under a 3-rank name; rank 0's and rank 1's files swapped.
      for (int r = 0; r < 2; ++r) {
        const auto over = fs::copy_options::overwrite_existing;
        fs::copy_file(fsdp::shard_file(p, r, 2), fsdp::shard_file(dir + "/world3_", r, 3), over);
        fs::copy_file(fsdp::shard_file(p, r, 2), fsdp::shard_file(dir + "/swapped_", 1 - r, 2), over);
      }
    }
    (void)xm::rendezvous("copied");
    std::string e = error_of([&] { (void)fsdp::load_sharded_checkpoint(dir + "/world3_", *model); });
    EXPECT_NE(e.find("was written by world size 3"), std::string::npos) << e;
    EXPECT_NE(e.find("this run has world size 2"), std::string::npos) << e;
    e = error_of([&] { (void)fsdp::load_sharded_checkpoint(dir + "/swapped_", *model); });
    EXPECT_NE(e.find("was written by rank " + std::to_string(1 - rank) + ", this is rank " + std::to_string(rank)),
              std::string::npos)
        << e;
    // Other shapes: a model with 16 hidden units.
    manual_seed(0);
    auto narrow_net = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(20, 16), std::make_shared<Shift>(16), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(16, 4)});
    auto other = std::make_shared<fsdp::FSDP>(nn::to(narrow_net, device()));
    e = error_of([&] { (void)fsdp::load_sharded_checkpoint(p, *other); });
    EXPECT_NE(e.find("does not match the model's sharding"), std::string::npos) << e;
    EXPECT_NE(e.find("the file has [[32, 20]], the model has [[16, 20]]"), std::string::npos) << e;
    // Nothing was changed by the failed loads: the model still loads its own file.
    EXPECT_NO_THROW((void)fsdp::load_sharded_checkpoint(p, *model));
  });
}

}  // namespace

int main(int argc, char** argv) { return axle::test::launch_test_main(argc, argv); }
