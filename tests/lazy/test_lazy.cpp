// The lazy xla device: tracing, sync/step boundaries, the compilation cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>

#include "axle/axle.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "test_util.h"
#include "lazy/ir.h"

using namespace axle;

namespace {
void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}
// Counts start from zero and every graph from a cold in-memory cache, whatever ran before
// (--gtest_repeat, --gtest_shuffle).
void cold_start() {
  metrics::reset();
  lazy::clear_graph_cache();
}
}  // namespace

TEST(Lazy, OpsAreTracedNotRun) {
  cold_start();
  Tensor a = randn({4, 5}).to(device());
  Tensor b = relu(a * 2.5 + 1.0);
  EXPECT_EQ(b.device(), device());
  EXPECT_EQ(b.shape(), (Shape{4, 5}));
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 0);
  Tensor c = b.cpu();  // a value read executes what b needs
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  expect_close(c, relu(a.cpu() * 2.5 + 1.0));
}

TEST(Lazy, SameGraphNewDataHitsCache) {
  cold_start();
  Tensor w = randn({8, 3}).to(device());
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({2, 8}).to(device());
    expect_close(matmul(x, w).cpu(), matmul(x.cpu(), w.cpu()));
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 3);
}

TEST(Lazy, ChangingScalarDoesNotRecompile) {
  cold_start();
  Tensor p = randn({16}).to(device());
  std::vector<float> expect = p.to_vector<float>();
  for (double lr : {0.1, 0.05, 0.025}) {
    p.set_data(p - lr * p);  // a learning-rate style update
    axle::sync();
    // Each step used its own scalar: a graph with the first lr baked in would repeat 0.9.
    for (float& e : expect) e = float(e - lr * e);
    std::vector<float> got = p.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expect[i], 1e-6 * (1 + std::abs(expect[i]))) << "lr " << lr << " at " << i;
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 2);
}

TEST(Lazy, NewShapeCompilesOnce) {
  cold_start();
  for (int64_t n : {3, 5, 3, 5, 5}) {
    Tensor x = ones({n, 4}).to(device());
    EXPECT_NEAR(sum(exp(x)).item(), double(n) * 4 * std::exp(1.0), 1e-4);
  }
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
}

TEST(Lazy, StepAddsTwoMarkStepsAlsoOnThrow) {
  metrics::reset();
  { auto s = step(); }
  EXPECT_EQ(metrics::counter_value("MarkStep"), 2);
  Tensor kept;
  try {
    auto s = step();
    kept = ones({3}).to(device()) * 3.0;
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(metrics::counter_value("MarkStep"), 4);
  // The exit sync ran: the pending value was materialised without another compile.
  int64_t compiles = metrics::counter_value("UncachedCompile");
  EXPECT_EQ(kept.to_vector<float>(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), compiles);
}

TEST(Lazy, AutogradTracesAndMatchesEager) {
  manual_seed(3);
  Tensor w0 = randn({5, 4}), x0 = randn({6, 4});
  Tensor w = w0.clone();
  w.set_requires_grad(true);
  (relu(matmul(x0, w.t())) * 0.5).sum().backward();
  Tensor wx = w0.to(device());
  wx.set_requires_grad(true);
  Tensor xx = x0.to(device());
  (relu(matmul(xx, wx.t())) * 0.5).sum().backward();
  axle::sync();
  ASSERT_TRUE(wx.grad().defined());
  EXPECT_EQ(wx.grad().device(), device());
  expect_close(wx.grad().cpu(), w.grad());
}

// ---- the in-memory cache's eviction, and the persistent cache (AXLE_CACHE_DIR): these
// run the test program again as a child process (fresh caches, its own environment).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "compiler/disk_cache.h"
#include "lazy/graph.h"
#include <set>

namespace {
namespace fs = std::filesystem;

std::string self_exe() { return "/proc/" + std::to_string(::getpid()) + "/exe"; }

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A fresh directory under the temp directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("axle-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The disk-cache child's graph: graph "relu" (the default) or "sigmoid", which has the
// same inputs and output shape but another op, so a file for one run for the other
// gives wrong values rather than an error.
Tensor child_graph(const std::string& which, Device dev) {
  manual_seed(5);
  Tensor w = randn({8, 4}).to(dev), x = randn({3, 8}).to(dev);
  Tensor y = matmul(x, w);
  return (which == "sigmoid" ? sigmoid(y) : relu(y)) * 3.0;
}
}  // namespace

// Run only as a child process by the tests below (hence DISABLED_): writes for each
// step whether it compiled ("1") or hit the in-memory cache ("0").
TEST(CacheChild, DISABLED_Lru) {
  cold_start();
  std::string pattern;
  for (int64_t n : {2, 3, 2, 4, 2, 3}) {
    const int64_t before = metrics::counter_value("UncachedCompile");
    EXPECT_NEAR(sum(exp(ones({n}).to(device()))).item(), double(n) * std::exp(1.0), 1e-4);
    pattern += metrics::counter_value("UncachedCompile") > before ? '1' : '0';
  }
  std::ofstream(std::getenv("AXLE_CHILD_OUT")) << pattern;
}

TEST(Cache, LeastRecentlyUsedGraphIsEvicted) {
  TempDir dir("lru-test");
  fs::path out = dir.path / "out";
  std::string cmd = "AXLE_CACHE_SIZE=2 AXLE_CHILD_OUT=" + out.string() + " " + self_exe() +
                    " --gtest_also_run_disabled_tests --gtest_filter=CacheChild.DISABLED_Lru > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // Graphs A B A C A B (sizes 2 3 2 4 2 3) with room for two. LRU: C evicts B (A was used
  // since), so A hits and B compiles again: 110101. FIFO would evict A (110111), evicting
  // the most recent would keep B (110110), and no eviction would give 110100.
  EXPECT_EQ(read_all(out), "110101");
}

// Run only as a child process by the tests below: computes child_graph(AXLE_CHILD_GRAPH)
// with AXLE_CACHE_DIR set by the parent and writes its counters and values. With
// AXLE_CHILD_GATE it first waits for that file, so that children start together.
TEST(DiskCacheChild, DISABLED_Run) {
  if (const char* gate = std::getenv("AXLE_CHILD_GATE"))
    for (int i = 0; i < 10000 && !fs::exists(gate); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cold_start();
  const char* which = std::getenv("AXLE_CHILD_GRAPH");
  std::vector<float> v = child_graph(which ? which : "relu", device()).to_vector<float>();
  std::ofstream f(std::getenv("AXLE_CHILD_OUT"));
  f << metrics::counter_value("UncachedCompile") << " " << metrics::counter_value("PersistentCacheHit") << " "
    << metrics::counter_value("PersistentCacheMiss");
  char buf[32];
  for (float x : v) {
    std::snprintf(buf, sizeof buf, " %a", double(x));  // exact
    f << buf;
  }
}

namespace {
struct ChildRun {
  int status = -1;
  int64_t uncached = -1, hit = -1, miss = -1;
  std::vector<float> values;
  std::string err;  // its stderr
};

// The shell command for one disk-cache child; `tag` names its output files in `dir`/...
std::string child_cmd(const fs::path& cache, const fs::path& files, const std::string& tag, const std::string& graph,
                      const std::string& gate = "") {
  return "AXLE_CACHE_DIR=" + cache.string() + " AXLE_CHILD_OUT=" + (files / (tag + ".out")).string() +
         " AXLE_CHILD_GRAPH=" + graph + (gate.empty() ? "" : " AXLE_CHILD_GATE=" + gate) + " " + self_exe() +
         " --gtest_also_run_disabled_tests --gtest_filter=DiskCacheChild.DISABLED_Run > /dev/null 2> " +
         (files / (tag + ".err")).string();
}
ChildRun child_result(const fs::path& files, const std::string& tag) {
  ChildRun r;
  std::istringstream in(read_all(files / (tag + ".out")));
  in >> r.uncached >> r.hit >> r.miss;
  std::string hex;
  while (in >> hex) r.values.push_back(float(std::strtod(hex.c_str(), nullptr)));
  r.err = read_all(files / (tag + ".err"));
  return r;
}
ChildRun run_child(const fs::path& cache, const fs::path& files, const std::string& tag,
                   const std::string& graph = "relu") {
  int status = std::system(child_cmd(cache, files, tag, graph).c_str());
  ChildRun r = child_result(files, tag);
  r.status = status;
  return r;
}

// The one cache file in `cache`, and the graph hash its name gives.
fs::path only_cache_file(const fs::path& cache, uint64_t* hash = nullptr) {
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(cache)) files.push_back(e.path());
  EXPECT_EQ(files.size(), 1u) << "files in " << cache;
  if (files.empty()) return {};
  EXPECT_EQ(files[0].extension(), ".axlegraph") << files[0];
  if (hash) *hash = std::strtoull(files[0].stem().c_str(), nullptr, 16);
  return files[0];
}

// The values child_graph must produce, computed eagerly on the cpu.
std::vector<float> reference(const std::string& graph = "relu") { return child_graph(graph, kCPU).to_vector<float>(); }

void expect_values(const ChildRun& r, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(r.values.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(r.values[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " at " << i;
}
}  // namespace

TEST(DiskCache, SecondProcessCompilesNothingAndComputesTheSame) {
  TempDir dir("disk-cache-test");
  fs::path cache = dir.path / "cache";
  ChildRun first = run_child(cache, dir.path, "first");
  EXPECT_EQ(first.status, 0) << first.err;
  EXPECT_EQ(first.uncached, 1);  // compiled
  EXPECT_EQ(first.miss, 1);      // and missed the disk
  EXPECT_EQ(first.hit, 0);
  expect_values(first, reference(), "fresh compile");
  ChildRun second = run_child(cache, dir.path, "second");
  EXPECT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.uncached, 0);  // compiled nothing
  EXPECT_EQ(second.hit, 1);       // found it on disk
  EXPECT_EQ(second.values, first.values);  // the same program: the same bits
  EXPECT_EQ(second.err.find("discarding"), std::string::npos) << second.err;
}

// A damaged or foreign file under a graph's name is discarded with a warning that says
// why; the graph compiles again, computes the right values, and the file is rewritten.
TEST(DiskCache, DamagedOrForeignFilesAreRejected) {
  TempDir dir("disk-cache-reject");
  // A valid file for graph "relu", and one for graph "sigmoid" in another directory.
  ChildRun fresh = run_child(dir.path / "good", dir.path, "good");
  ASSERT_EQ(fresh.status, 0) << fresh.err;
  expect_values(fresh, reference(), "fresh compile");
  uint64_t hash = 0;
  const std::string good = read_all(only_cache_file(dir.path / "good", &hash));
  ASSERT_EQ(run_child(dir.path / "other", dir.path, "other", "sigmoid").status, 0);
  const std::string other = read_all(only_cache_file(dir.path / "other"));
  ASSERT_GT(good.size(), 64u);
  ASSERT_NE(good, other);
  ASSERT_NE(reference("sigmoid"), reference("relu"));

  struct Damage {
    const char* name;
    std::string bytes;
    const char* reason;  // in the warning
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;  // in the program, after the header, before the checksum
  std::string older = good;
  older[7] ^= 1;  // another format version (another op table)
  const std::vector<Damage> damages = {
      {"not a cache file", "garbage", "not an axle cache file"},
      {"a flipped byte", flipped, "checksum mismatch"},
      {"cut off in the program", good.substr(0, good.size() - 20), "checksum mismatch"},
      {"cut off in the header", good.substr(0, 12), "truncated cache file"},
      {"another format version", older, "another op table or pass pipeline"},
      {"another graph's valid file", other, "file is for another graph"},
  };
  int k = 0;
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    fs::path cache = dir.path / ("case" + std::to_string(k));
    fs::create_directories(cache);
    char name[40];
    std::snprintf(name, sizeof name, "%016llx.axlegraph", static_cast<unsigned long long>(hash));
    write_all(cache / name, d.bytes);
    ChildRun r = run_child(cache, dir.path, "case" + std::to_string(k++));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.hit, 0);
    EXPECT_EQ(r.miss, 1);
    EXPECT_EQ(r.uncached, 1);  // compiled again
    EXPECT_EQ(r.values, fresh.values);
    EXPECT_NE(r.err.find("discarding corrupt compilation cache file"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(d.reason), std::string::npos) << r.err;
    // ... and stored a good file in its place.
    EXPECT_EQ(read_all(cache / name), good);
  }
}

// The format version is derived from the op table: any change to any ops.def entry gives
// another version, and a file written under another version is never loaded.
TEST(DiskCache, FormatVersionFollowsTheOpTable) {
  const std::string table = ops::schema_text();
  EXPECT_EQ(compiler::cache_format_version(), compiler::format_version_of(table));
  // The text is the table: every op's entry, in enum order.
  size_t at = 0;
  for (const ops::OpInfo* i = ops::op_infos_begin(); i != ops::op_infos_end(); ++i) {
    const std::string entry = std::string(", \"") + i->name + "\", ";
    const size_t pos = table.find(entry, at);
    ASSERT_NE(pos, std::string::npos) << "no entry for " << i->name << " after offset " << at;
    at = pos + entry.size();
  }
  // Any one-entry change (a trait dropped, an attribute added, two entries swapped) is another version.
  std::vector<std::string> lines;
  for (size_t s = 0, e; s < table.size(); s = e + 1) {
    e = table.find('\n', s);
    lines.push_back(table.substr(s, e - s));
  }
  ASSERT_EQ(lines.size(), size_t(ops::OpKind::kNumOps));
  std::set<uint64_t> versions = {compiler::cache_format_version()};
  auto version_with = [&](size_t k, const std::string& line) {
    std::vector<std::string> l = lines;
    l[k] = line;
    std::string t;
    for (const std::string& x : l) t += x + "\n";
    return compiler::format_version_of(t);
  };
  for (size_t k = 0; k < lines.size(); ++k) {
    EXPECT_TRUE(versions.insert(version_with(k, lines[k] + " | DIFF")).second) << lines[k];
    if (k + 1 < lines.size()) {  // two ops swap numbers
      std::vector<std::string> l = lines;
      std::swap(l[k], l[k + 1]);
      std::string t;
      for (const std::string& x : l) t += x + "\n";
      EXPECT_TRUE(versions.insert(compiler::format_version_of(t)).second) << lines[k];
    }
  }
  // A file written by a build whose table differs in one entry is rejected, naming the reason.
  Tensor x = (randn({4}).to(device()) * 2.0).relu();
  const lazy::Graph g = lazy::build_graph({lazy::lazy_of(x)->ir});
  compiler::Program p = lazy::to_program(g);
  const uint64_t other = version_with(0, lines[0] + " ");
  const std::string ours = compiler::serialize(p, 7), theirs = compiler::serialize(p, 7, other);
  EXPECT_NO_THROW(compiler::deserialize(ours, 7));
  try {
    compiler::deserialize(theirs, 7);
    ADD_FAILURE() << "a file from another op table was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another op table"), std::string::npos) << e.what();
  }
  axle::sync();
}

// Two processes compiling the same graph at once both succeed, and leave one valid file.
TEST(DiskCache, ConcurrentWritersLeaveAValidEntry) {
  TempDir dir("disk-cache-race");
  const std::vector<float> want = reference();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    fs::path cache = dir.path / ("cache" + std::to_string(round));
    fs::path gate = dir.path / ("gate" + std::to_string(round));
    std::string a = "a" + std::to_string(round), b = "b" + std::to_string(round);
    // Both children wait at the gate, which opens once both have started.
    std::string cmd = "(" + child_cmd(cache, dir.path, a, "relu", gate.string()) + "; echo $? > " +
                      (dir.path / (a + ".rc")).string() + ") & (" + child_cmd(cache, dir.path, b, "relu", gate.string()) +
                      "; echo $? > " + (dir.path / (b + ".rc")).string() + ") & sleep 0.3; touch " + gate.string() +
                      "; wait";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    for (const std::string& tag : {a, b}) {
      ChildRun r = child_result(dir.path, tag);
      EXPECT_EQ(read_all(dir.path / (tag + ".rc")), "0\n") << r.err;
      EXPECT_EQ(r.uncached + r.hit, 1) << tag;  // compiled, or found the other's file
      expect_values(r, want, tag);
      EXPECT_EQ(r.err.find("discarding"), std::string::npos) << tag << ": " << r.err;  // never saw a partial file
    }
    // One entry, no temporaries left, and it holds the program: a third process hits.
    uint64_t hash = 0;
    fs::path file = only_cache_file(cache, &hash);
    EXPECT_NO_THROW((void)compiler::deserialize(read_all(file), hash));
    ChildRun third = run_child(cache, dir.path, "third" + std::to_string(round));
    EXPECT_EQ(third.hit, 1);
    EXPECT_EQ(third.uncached, 0);
    expect_values(third, want, "third");
  }
}

TEST(Lazy, UpdatedParameterKeepsItsBuffer) {
  Tensor p = randn({64, 32}).to(device()), buf = zeros({64, 32}).to(device());
  Tensor g = randn({64, 32}).to(device());
  axle::sync();
  const void* p_mem = lazy::ready_buffer(*lazy::lazy_of(p)).data_ptr();
  const void* b_mem = lazy::ready_buffer(*lazy::lazy_of(buf)).data_ptr();
  std::vector<float> expect = p.to_vector<float>();
  std::vector<float> gv = g.to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    buf.set_data(buf * 0.9 + g);      // momentum buffer
    p.set_data(p - buf * 0.01);       // parameter
    axle::sync();
    // Donation: the updates were written over the old buffers, not into new memory.
    EXPECT_EQ(lazy::ready_buffer(*lazy::lazy_of(p)).data_ptr(), p_mem) << "step " << i;
    EXPECT_EQ(lazy::ready_buffer(*lazy::lazy_of(buf)).data_ptr(), b_mem) << "step " << i;
  }
  // ... and the values are right: b1 = g, b2 = 1.9 g, b3 = 2.71 g; p -= 0.01 * (b1 + b2 + b3).
  auto got = p.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expect[i] - 0.01f * 5.61f * gv[i], 1e-5);
  // A tensor someone still holds is never overwritten.
  Tensor keep = p;
  std::vector<float> before = keep.to_vector<float>();
  Tensor q = p;  // same LazyTensor as keep
  p.set_data(p * 2.0);
  axle::sync();
  (void)q;
  EXPECT_EQ(keep.to_vector<float>(), p.to_vector<float>());  // set_data moved both handles' shared impl
  EXPECT_NE(before, p.to_vector<float>());
}

TEST(Lazy, LiveTensorIsNotDonated) {
  Tensor a = full({1000}, 1.0).to(device());
  axle::sync();
  Tensor old = a.detach();  // a second handle to the old value
  a.set_data(a + 1.0);
  axle::sync();
  EXPECT_EQ(old.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(a.to_vector<float>()[0], 2.0f);
}

TEST(Lazy, EagerModeWithoutSyncDoesNotAccumulate) {
  // Eager mode materialises every op; nothing is left for a sync, and nothing piles up.
  experimental::eager_mode(true);
  metrics::reset();
  Tensor x = ones({8}).to(device());
  for (int i = 0; i < 20000; ++i) x = x * 1.0001;
  experimental::eager_mode(false);
  EXPECT_NEAR(x.to_vector<float>()[0], ::pow(1.0001, 20000), 1e-2);
  const int64_t live = metrics::counter_value("CreateXlaTensor") - metrics::counter_value("DestroyXlaTensor");
  EXPECT_LT(live, 10);
  EXPECT_LT(lazy::pending_count(), size_t(10000));  // 20000 ops, the registry pruned
}

TEST(Lazy, GraphHashTellsApartWhichInputEachUseReads) {
  // Node hashes are made at record time and cover ops, attrs and shapes, not which data
  // node an operand is: the graph hash must still tell these apart.
  cold_start();
  Tensor x = full({3}, 2.0).to(device()), y = full({3}, 5.0).to(device());
  axle::sync();
  EXPECT_EQ(((x + y) - x).to_vector<float>()[0], 5.0f);
  EXPECT_EQ(((x + y) - y).to_vector<float>()[0], 2.0f);  // same ops and shapes, other data use
  EXPECT_EQ((x + x).to_vector<float>()[0], 4.0f);
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 3);
  EXPECT_EQ(((y + x) - y).to_vector<float>()[0], 2.0f);  // the first graph's structure: cached
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 1);
}

TEST(Lazy, GraphHashTellsApartWhichNodeEachUseReads) {
  // The same for two nodes of one content that are not data: neg(x) and neg(y) hash alike
  // (a neg of a float32[3] input each), so a * b * b and a * b * a (a = neg(x), b = neg(y))
  // differ only in which of them the last use reads. (Found by the bf16 golden row chain_fused:
  // the gradients of x and y through tanh(cast(x) * cast(y)), read one after the other, ran
  // one program.)
  cold_start();
  Tensor x = full({3}, 2.0).to(device()), y = full({3}, 5.0).to(device());
  axle::sync();
  auto last_reads_b = [&] {
    Tensor a = neg(x), b = neg(y);
    return mul(mul(a, b), b).to_vector<float>()[0];
  };
  auto last_reads_a = [&] {
    Tensor a = neg(x), b = neg(y);
    return mul(mul(a, b), a).to_vector<float>()[0];
  };
  EXPECT_EQ(last_reads_b(), -50.0f);
  EXPECT_EQ(last_reads_a(), -20.0f);
  EXPECT_EQ(metrics::counter_value("UncachedCompile"), 2);
  EXPECT_EQ(last_reads_b(), -50.0f);  // the first graph again: cached
  EXPECT_EQ(metrics::counter_value("CachedCompile"), 1);
}

// ---- asynchronous execution (experimental::async_execution / AXLE_ASYNC=1)
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "lazy/lazy_internal.h"

namespace {
// Async execution on (and a test hook set) for one test; both restored at its end.
struct AsyncScope {
  bool was = experimental::is_async_execution();
  explicit AsyncScope(bool on = true) { experimental::async_execution(on); }
  ~AsyncScope() {
    lazy::detail::set_execute_hook(nullptr);
    try { axle::wait_device_ops(); } catch (...) {}
    experimental::async_execution(was);
  }
};
using axle::test::error_of;
}  // namespace

TEST(Async, ErrorReachesTheNextReadOrSyncNamingTheGraph) {
  cold_start();
  AsyncScope async;
  Tensor x = full({4}, 1.0).to(device());
  axle::sync();
  lazy::detail::set_execute_hook([](const std::string& graph) { throw Error("injected failure in " + graph); });
  Tensor y = x * 2.0;
  axle::sync();  // hands the graph over and returns: the failure happens on the device thread
  std::string e = error_of([&] { (void)y.to_vector<float>(); });
  EXPECT_NE(e.find("graph 'step'"), std::string::npos) << e;
  EXPECT_NE(e.find("injected failure in step"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { (void)y.to_vector<float>(); }), "(no error)");  // its data never came
  // A failure nobody read is thrown by the next sync, before it traces on.
  Tensor z = x * 3.0;
  axle::sync();
  lazy::detail::drain();  // z's execution has failed by now (drain never throws)
  Tensor w = x + 1.0;
  e = error_of([] { axle::sync(); });
  EXPECT_NE(e.find("graph 'step'"), std::string::npos) << e;
  lazy::detail::set_execute_hook(nullptr);
  axle::sync();  // reported once; w stayed pending and runs now
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 2.0f));
  EXPECT_NE(error_of([&] { (void)z.to_vector<float>(); }).find("injected failure"), std::string::npos);
}

TEST(Async, ReadWaitsOnlyForItsProducer) {
  cold_start();
  AsyncScope async;
  Tensor x = full({4}, 1.0).to(device());
  Tensor a = x * 2.0;
  axle::sync();
  axle::wait_device_ops();
  // The next execution blocks on the device thread until the test lets it go (or 20 s pass).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> b_ran{false};
  lazy::detail::set_execute_hook([&](const std::string&) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return release; });
    b_ran = true;
  });
  Tensor b = x * 3.0;
  axle::sync();
  // a's producer ran already: reading it must not wait for b's execution.
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 2.0f));
  EXPECT_FALSE(b_ran.load()) << "reading a waited for b's execution";
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 3.0f));  // waits for its producer
  EXPECT_TRUE(b_ran.load());
  lazy::detail::set_execute_hook(nullptr);  // before mu and cv go
}

namespace {
// A few SGD steps of a two-layer net; the loss of each step, read after the loop.
std::vector<float> train_losses() {
  manual_seed(11);
  Tensor w1 = (randn({16, 8}) * 0.3).to(device()), w2 = (randn({3, 16}) * 0.3).to(device());
  w1.set_requires_grad(true);
  w2.set_requires_grad(true);
  std::vector<Tensor> losses;
  for (int step = 0; step < 6; ++step) {
    Tensor x = randn({5, 8}).to(device()), t = randn({5, 3}).to(device());
    Tensor d = matmul(relu(matmul(x, w1.t())), w2.t()) - t;
    Tensor loss = (d * d).mean();
    loss.backward();
    for (Tensor* w : {&w1, &w2}) {
      w->set_data(w->detach() - 0.1 * w->grad());
      w->set_grad(Tensor());
    }
    losses.push_back(loss.detach());
    axle::sync();
  }
  std::vector<float> out;
  for (const Tensor& l : losses) out.push_back(l.item<float>());
  return out;
}
}  // namespace

TEST(Async, TrainingLossesMatchSyncBitForBit) {
  cold_start();
  std::vector<float> sync_losses = train_losses(), async_losses;
  {
    AsyncScope async;
    async_losses = train_losses();
  }
  EXPECT_EQ(sync_losses, async_losses);
  EXPECT_LT(sync_losses.back(), sync_losses.front());
}
