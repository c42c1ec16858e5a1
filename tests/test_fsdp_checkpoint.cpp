// FSDP v1 checkpoints (axle/fsdp_checkpoint.h, spec §3.1 "Checkpoints", F5): ShardMetadata's
// JSON, consolidation of hand-written rank files (flattened multi-parameter units, dim-0
// shards, padding, the unwrapped order) and its errors, the axle-fsdp-consolidate tool.
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
#include "test_util.h"

using namespace axle;
namespace fs = std::filesystem;
using axle::test::error_of;
using axle::test::TempDir;
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
  EXPECT_NE(e.find("expected the files of ranks 0..2 (world size 3), missing rank(s) 1"), std::string::npos) << e;

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

}  // namespace
