// FSDP v2 (issue 14, spec §3.2 / §6.4, acceptance F6 and F7): SpmdFullyShardedDataParallel
// on N virtual devices in one process. Its shardings (largest parameter dim and the
// output's dim 0 over "fsdp"), training parity with one device, auto-wrapping, per-device
// parameter + optimizer bytes, and the collectives the partitioner derives: an all-gather
// of each sharded weight, a reduce-scatter (Partial -> the weight's tiling) of each weight
// gradient, and never an activation gather or a full-size gradient all-reduce.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/fsdp.h"
#include "axle/metrics.h"
#include "axle/xs.h"
#include "dist/dist_internal.h"
#include "lazy/ir.h"
#include "lazy/lazy_internal.h"
#include "spmd/device_count.h"
#include "spmd_fixture.h"
#include "spmd_harness.h"
#include "test_util.h"

using namespace axle;
using axle::test::error_of;
using fsdp::SpmdFullyShardedDataParallel;
using fsdp::SpmdFullyShardedDataParallelOptions;

namespace {

using axle::test::iota;
// Each test starts from zero counters, a cold cache, SPMD off and no global mesh
// (tests/support/spmd_fixture.h).
using FsdpSpmd = axle::test::SpmdFixture;

// The seed's mlp (784-256-10), as in test_spmd: fc1 = [1], fc2 = [3].
std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
}
nn::Linear& linear(const nn::Sequential& m, size_t i) { return dynamic_cast<nn::Linear&>(*m[i]); }

// The same mlp with typed members, called through operator() (module.h's example style).
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 256));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 10));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x.reshape({x.size(0), 784})))); }
};

// Wraps every Linear (transformer_auto_wrap_policy({"Linear"}), written out here).
bool wrap_linears(nn::Module& m, bool recurse, int64_t) { return recurse || m.name() == "Linear"; }

using spmd_test::Batch;  // the shared parity data (spmd_harness.h)
using spmd_test::batches;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  std::shared_ptr<nn::Module> model;  // the trained (wrapped) model
  std::vector<Tensor> opt_state;      // the optimizer's momentum buffers
  std::string step_table;             // xs::explain of the last step's graph (SPMD runs)
  std::vector<spmd::CollectiveNote> collectives;  // the same, as notes
};

// `devices` 0: SPMD off, the plain mlp (the single-device reference); else the mlp wrapped
// in SpmdFullyShardedDataParallel on a 1-D mesh "fsdp", the images sharded on the batch as
// torch_xla's FSDPv2 examples do; `o` as given (its mesh is filled in).
TrainRun train(int devices, int steps, SpmdFullyShardedDataParallelOptions o = {}) {
  const auto& data = batches(steps);
  struct Threads {  // one kernel thread per device (and for the reference)
    int saved = omp_get_max_threads();
    Threads() { omp_set_num_threads(1); }
    ~Threads() { omp_set_num_threads(saved); }
  } threads;
  std::optional<xs::Mesh> mesh;
  if (devices == 0) {
    dist::detail::set_spmd_mode(false);
  } else {
    setenv("AXLE_CPU_DEVICES", std::to_string(devices).c_str(), 1);
    spmd::reset_device_count();
    runtime::use_spmd();
    mesh = xs::Mesh(iota(devices), {devices}, {"fsdp"});
  }
  manual_seed(0);
  auto mlp = make_mlp();
  mlp->to(device());
  nn::ModulePtr m = mlp;
  if (mesh) {
    o.mesh = *mesh;
    m = std::make_shared<SpmdFullyShardedDataParallel>(mlp, o);
  }
  optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
  TrainRun r;
  std::vector<Tensor> losses;
  for (int s = 0; s < steps; ++s) {
    auto st = axle::step();
    Tensor x = data[size_t(s)].x.to(device()), y = data[size_t(s)].y.to(device());
    if (mesh) xs::mark_sharding(x, *mesh, {"fsdp", xs::None, xs::None, xs::None});
    opt.zero_grad();
    Tensor loss = cross_entropy((*m)(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss);
  }
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const Tensor& p : m->parameters()) {
    r.params.push_back(p.to_vector<float>());
    auto& st = opt.state(p).tensors;
    if (auto it = st.find("momentum_buffer"); it != st.end()) r.opt_state.push_back(it->second);
  }
  if (mesh) {
    const Tensor p = m->parameters()[0];
    r.step_table = xs::explain({p});
    EXPECT_TRUE(lazy::lazy_of(p)->producer) << "the parameter is the output of the step's SPMD graph";
    if (lazy::lazy_of(p)->producer) r.collectives = lazy::lazy_of(p)->producer->collectives;
  }
  r.model = m;
  return r;
}

void expect_parity(const TrainRun& ref, const TrainRun& got, double loss_tol, double param_tol, const std::string& what) {
  ASSERT_EQ(ref.losses.size(), got.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], loss_tol * std::abs(ref.losses[i])) << what << " step " << i;
  ASSERT_EQ(ref.params.size(), got.params.size());
  for (size_t p = 0; p < ref.params.size(); ++p) {
    ASSERT_EQ(ref.params[p].size(), got.params[p].size());
    for (size_t i = 0; i < ref.params[p].size(); ++i)
      ASSERT_NEAR(got.params[p][i], ref.params[p][i], param_tol * (1 + std::abs(ref.params[p][i])))
          << what << " parameter " << p << " element " << i;
  }
}

// ---------------------------------------------------------------- F6: errors and shardings
TEST_F(FsdpSpmd, ErrorsNameWhatIsMissing) {
  EXPECT_NE(error_of([] { SpmdFullyShardedDataParallel(make_mlp(), {}); }).find("requires SPMD"), std::string::npos);
  devices(4);
  EXPECT_NE(error_of([] { SpmdFullyShardedDataParallel(nullptr, {}); }).find("got a null pointer"), std::string::npos);
  EXPECT_NE(error_of([] { SpmdFullyShardedDataParallel(make_mlp(), {}); }).find("no mesh"), std::string::npos);
  // A mesh without "fsdp": the error names the axes it has.
  const std::string e = error_of([] {
    SpmdFullyShardedDataParallel(make_mlp(), {.mesh = xs::Mesh(iota(4), {2, 2}, {"data", "model"})});
  });
  EXPECT_NE(e.find("the mesh must have an axis named 'fsdp', got axes ('data', 'model')"), std::string::npos) << e;
  EXPECT_NE(error_of([] {
              SpmdFullyShardedDataParallel(make_mlp(), {.mesh = xs::get_1d_mesh("fsdp"), .extra_data_axis = "data"});
            }).find("extra_data_axis 'data' must be another axis of the mesh, got axes ('fsdp',)"),
            std::string::npos);
  auto inner = std::make_shared<SpmdFullyShardedDataParallel>(make_mlp(), SpmdFullyShardedDataParallelOptions{
                                                                             .mesh = xs::get_1d_mesh("fsdp")});
  EXPECT_NE(error_of([&] { SpmdFullyShardedDataParallel(inner, {.mesh = xs::get_1d_mesh("fsdp")}); })
                .find("already wrapped"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SpmdFullyShardedDataParallel(inner->module(), {.mesh = xs::get_1d_mesh("fsdp")}); })
                .find("already wrapped"),
            std::string::npos);
}

TEST_F(FsdpSpmd, LargestDimOfEachParameterAndDim0OfTheOutputOnFsdp) {
  devices(4);
  xs::set_global_mesh(xs::get_1d_mesh("fsdp"));  // no mesh in the options: the global one
  auto mlp = make_mlp();                         // on the host: the wrapper moves it
  auto m = std::make_shared<SpmdFullyShardedDataParallel>(mlp);
  EXPECT_EQ(linear(*mlp, 1).weight.device(), device());
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp, 1).weight), "{devices=[1,4]0,1,2,3}");  // [256, 784]: dim 1
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp, 1).bias), "{devices=[4]0,1,2,3}");
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp, 3).weight), "{devices=[1,4]0,1,2,3}");  // [10, 256]: dim 1
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp, 3).bias), "{devices=[4]0,1,2,3}");      // 10 on 4: padded
  EXPECT_EQ(m->parameters().size(), 4u);
  EXPECT_EQ(m->named_parameters()[0].first, "_orig_module.1.weight");
  Tensor x = batches(1)[0].x.to(device());
  xs::mark_sharding(x, m->mesh(), {"fsdp", xs::None, xs::None, xs::None});
  Tensor out = (*m)(x);
  EXPECT_EQ(xs::get_sharding_spec(out), "{devices=[4,1]0,1,2,3}");
  axle::sync();
  EXPECT_EQ(xs::get_sharding_spec(out), "{devices=[4,1]0,1,2,3}");
  // Each device holds a quarter of fc1.weight: [256, 196].
  for (const xs::XLAShard& s : xs::local_shards(linear(*mlp, 1).weight)) EXPECT_EQ(s.data.shape(), (Shape{256, 196}));

  // Ties take the first dim; a parameter sharded already is left as it is; scalars stay
  // unannotated (replicated).
  struct Odd : nn::Module {
    Tensor sq, pre, scalar;
    Odd() {
      sq = register_parameter("sq", zeros({8, 8}));
      pre = register_parameter("pre", zeros({8, 16}));
      scalar = register_parameter("scalar", zeros({}));
    }
    Tensor forward(const Tensor& x) override { return matmul(x, sq); }
  };
  auto odd = std::make_shared<Odd>();
  odd->to(device());
  xs::mark_sharding(odd->pre, m->mesh(), {"fsdp", xs::None});
  SpmdFullyShardedDataParallel w(odd);
  EXPECT_EQ(xs::get_sharding_spec(odd->sq), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(xs::get_sharding_spec(odd->pre), "{devices=[4,1]0,1,2,3}");
  EXPECT_EQ(xs::get_sharding_spec(odd->scalar), "");

  // extra_data_axis: the sharded dim goes over ("data", "fsdp"); so does the output's dim 0.
  xs::Mesh m2(iota(4), {2, 2}, {"data", "fsdp"});
  auto mlp2 = make_mlp();
  SpmdFullyShardedDataParallel hsdp(mlp2, {.mesh = m2, .extra_data_axis = "data"});
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp2, 1).weight), "{devices=[1,4]0,1,2,3}");
  Tensor x2 = batches(1)[0].x.to(device());
  EXPECT_EQ(xs::get_sharding_spec(hsdp(x2)), "{devices=[4,1]0,1,2,3}");
  // Only "fsdp" (the data axis replicates): the weight on 2 tiles, each on 2 devices.
  xs::Mesh m3(iota(4), {2, 2}, {"data", "fsdp"});
  auto mlp3 = make_mlp();
  SpmdFullyShardedDataParallel fsdp_only(mlp3, {.mesh = m3});
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp3, 1).weight), "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
}

// ---------------------------------------------------------------- F6: parity with one device
TEST_F(FsdpSpmd, MlpLossesMatchOneDeviceFor20Steps) {
  const TrainRun ref = train(0, 20);
  metrics::reset();
  const TrainRun got = train(4, 20);
  expect_parity(ref, got, 1e-5, 1e-4, "FSDP v2 mlp on 4 devices");
  EXPECT_LE(metrics::counter_value("UncachedCompile"), 3) << "steady state: one cached step graph";
}

// The longer bound: 100 steps within 1e-4 relative.
TEST_F(FsdpSpmd, MlpLossesStayWithin1e4For100Steps) {
  const TrainRun ref = train(0, 100);
  const TrainRun got = train(4, 100);
  expect_parity(ref, got, 1e-4, 1e-3, "FSDP v2 mlp on 4 devices, 100 steps");
}

// ---------------------------------------------------------------- F6: auto-wrapping
TEST_F(FsdpSpmd, AutoWrapPolicyMakesEachLinearAUnit) {
  devices(4);
  const xs::Mesh mesh = xs::get_1d_mesh("fsdp");
  int calls = 0;
  auto count_and_shard = [&](Tensor& out, const xs::Mesh& me) {
    ++calls;
    xs::mark_sharding(out, me, {"fsdp", xs::None});
  };
  std::vector<std::string> asked;
  auto policy = [&](nn::Module& m, bool recurse, int64_t unwrapped) {
    asked.push_back(m.name() + (recurse ? " recurse " : " wrap ") + std::to_string(unwrapped));
    return wrap_linears(m, recurse, unwrapped);
  };
  auto mlp = make_mlp();
  auto root = std::make_shared<SpmdFullyShardedDataParallel>(
      mlp, SpmdFullyShardedDataParallelOptions{.mesh = mesh, .shard_output = count_and_shard, .auto_wrap_policy = policy});
  // The Sequential's Linear children are units now, each wrapping its Linear.
  const auto children = mlp->named_children();
  ASSERT_EQ(children.size(), 4u);
  for (size_t i : {size_t(1), size_t(3)}) {
    auto* unit = dynamic_cast<SpmdFullyShardedDataParallel*>(children[i].second.get());
    ASSERT_NE(unit, nullptr) << "child " << i << " is " << children[i].second->name();
    EXPECT_EQ(unit->module(), (*mlp)[i]);
    EXPECT_EQ(unit->mesh(), mesh);
  }
  EXPECT_EQ(children[0].second->name(), "Flatten");
  EXPECT_EQ(children[2].second->name(), "ReLU");
  // Children first, each asked "look inside?" then "wrap?"; the root only "look inside?".
  EXPECT_EQ(asked.front(), "Sequential recurse 203530");
  EXPECT_NE(std::find(asked.begin(), asked.end(), "Linear wrap 200960"), asked.end());
  EXPECT_EQ(std::count_if(asked.begin(), asked.end(), [](const std::string& a) { return a.starts_with("Sequential wrap"); }), 0);
  EXPECT_EQ(root->parameters().size(), 4u);
  EXPECT_EQ(root->named_parameters()[0].first, "_orig_module.1._orig_module.weight");
  EXPECT_EQ(xs::get_sharding_spec(linear(*mlp, 1).weight), "{devices=[1,4]0,1,2,3}");
  // One forward shards the output of each Linear and of the root.
  Tensor x = batches(1)[0].x.to(device());
  xs::mark_sharding(x, mesh, {"fsdp", xs::None, xs::None, xs::None});
  Tensor out = (*root)(x);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(xs::get_sharding_spec(out), "{devices=[4,1]0,1,2,3}");

  // A module whose forward calls its typed members through operator() runs the units too.
  calls = 0;
  auto net = std::make_shared<Net>();
  auto root2 = std::make_shared<SpmdFullyShardedDataParallel>(
      net, SpmdFullyShardedDataParallelOptions{.mesh = mesh, .shard_output = count_and_shard, .auto_wrap_policy = wrap_linears});
  EXPECT_NE(dynamic_cast<SpmdFullyShardedDataParallel*>(net->named_children()[0].second.get()), nullptr);
  (*root2)(x);
  EXPECT_EQ(calls, 3);
}

// ---------------------------------------------------------------- F7: memory
// Per device, the steady-state parameter + optimizer (momentum) bytes are those of 1/N of
// the model plus the padding of the uneven shards, within 1% of the single-device bytes.
TEST_F(FsdpSpmd, PerDeviceParameterAndOptimizerBytesAreAQuarter) {
  const int n = 4;
  const TrainRun r = train(n, 3);
  std::vector<Tensor> held = r.model->parameters();
  ASSERT_EQ(r.opt_state.size(), held.size()) << "SGD with momentum: one buffer per parameter";
  held.insert(held.end(), r.opt_state.begin(), r.opt_state.end());
  double single = 0, padding = 0;
  for (const Tensor& t : held) {
    const Shape& s = t.shape();
    const int64_t big = *std::max_element(s.begin(), s.end());
    const double padded = double((big + n - 1) / n * n) * double(t.numel() / big);
    single += 4.0 * double(t.numel());
    padding += 4.0 * (padded - double(t.numel())) / n;
  }
  EXPECT_EQ(single, 2 * 4 * 203530.0);
  std::vector<double> per_device(n, 0.0);
  for (const Tensor& t : held) {
    const auto shards = xs::local_shards(t);
    ASSERT_EQ(shards.size(), size_t(n));
    for (int d = 0; d < n; ++d) per_device[size_t(d)] += 4.0 * double(shards[size_t(d)].data.numel());
  }
  for (int d = 0; d < n; ++d)
    EXPECT_LE(per_device[size_t(d)], single / n + padding + 0.01 * single)
        << "device " << d << " holds " << per_device[size_t(d)] << " bytes of parameters and momentum; one device: "
        << single;
  // The momentum buffers kept their parameters' shardings.
  for (size_t i = 0; i < r.opt_state.size(); ++i)
    EXPECT_EQ(xs::get_sharding_spec(r.opt_state[i]), xs::get_sharding_spec(held[i])) << "buffer " << i;
}

// ---------------------------------------------------------------- F7: collectives
// What the partitioner decided for one steady-state training step (the notes it records
// for every collective it inserts), checked against FSDP: each sharded parameter is
// all-gathered from its sharding to replicated and nothing else is gathered (no activation:
// torch_xla #6778); each parameter's gradient goes Partial -> the parameter's tiling by a
// reduce-scatter; no all-reduce moves anything of a parameter's size (only the loss).
// On the in-process devices a reduce-scatter op runs as an all-reduce and keeps its slice
// (docs/spmd.md, Limits), so this checks the partitioner's decision and the op it emitted,
// not the transport. Returns the failures, one line each ("" when it is FSDP).
std::string fsdp_violations(const TrainRun& r) {
  std::string bad;
  const auto& notes = r.collectives;
  if (notes.empty()) return "no collective notes at all\n";
  int64_t smallest = INT64_MAX;
  for (const Tensor& p : r.model->parameters()) smallest = std::min(smallest, p.numel());
  for (const Tensor& p : r.model->parameters()) {
    const std::string sh = xs::get_sharding_spec(p), shape = shape_str(p.shape());
    int gathers = 0, scatters = 0;
    for (const spmd::CollectiveNote& c : notes) {
      if (!c.value.ends_with(shape)) continue;
      gathers += c.kind == "all-gather" && c.from == sh && c.to == "{replicated}" && c.value.starts_with("parameter ");
      scatters += c.kind == "reduce-scatter" && c.from.starts_with("partial(fsdp) ") && c.to == sh;
    }
    if (gathers != 1) bad += "parameter " + shape + " " + sh + ": " + std::to_string(gathers) + " all-gathers, want 1\n";
    if (scatters != 1)
      bad += "gradient " + shape + ": " + std::to_string(scatters) + " reduce-scatters (partial -> " + sh + "), want 1\n";
  }
  // A value of a parameter's shape, or its transpose's (a weight transposed for backward).
  auto weight_like = [&](const std::string& value) {
    for (const Tensor& p : r.model->parameters()) {
      Shape t = p.shape();
      std::reverse(t.begin(), t.end());
      if (value.ends_with(shape_str(p.shape())) || value.ends_with(shape_str(t))) return true;
    }
    return false;
  };
  for (const spmd::CollectiveNote& c : notes) {
    if (c.kind == "all-gather" && !weight_like(c.value))
      bad += "an activation is gathered: " + c.value + " " + c.from + " -> " + c.to + " (" + c.rule + ")\n";
    if (c.kind == "all-reduce" && c.bytes_per_device >= 2 * 4 * smallest)
      bad += "a full-size all-reduce: " + c.value + " " + c.from + " -> " + c.to + " (" + c.rule + ")\n";
    if (c.kind == "all-to-all" || c.kind == "collective-permute")
      bad += "an unexpected " + c.kind + ": " + c.value + " (" + c.rule + ")\n";
  }
  return bad;
}

// In the local program every device runs (AXLE_SAVE_GRAPHS's <graph>.local.txt), each
// linear's weight operand comes from an all_gather (through permutes and slices): the
// weight is gathered before that use, never read as the device's shard. Returns the
// linears that read something else, one line each.
std::string linears_reading_ungathered_weights(const std::string& local) {
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> def;  // %id -> (op, operands)
  std::vector<std::string> linears;
  std::istringstream in(local);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("%")) continue;
    const size_t eq = line.find(" = "), open = line.find('(');
    if (eq == std::string::npos) continue;
    const std::string id = line.substr(0, eq);
    if (open == std::string::npos || open < eq) {  // "%3 = input 3 : ..."
      def[id] = {line.substr(eq + 3, line.find(' ', eq + 3) - eq - 3), {}};
      continue;
    }
    const std::string op = line.substr(eq + 3, open - eq - 3);
    std::vector<std::string> args;
    std::istringstream a(line.substr(open + 1, line.find(')', open) - open - 1));
    for (std::string x; std::getline(a, x, ',');) args.push_back(x.substr(x.find('%')));
    def[id] = {op, args};
    if (op == "linear") linears.push_back(id);
  }
  std::string bad;
  for (const std::string& l : linears) {
    std::string w = def[l].second.at(1);
    while (def.count(w) && (def[w].first == "permute" || def[w].first == "slice")) w = def[w].second.at(0);
    if (!def.count(w) || def[w].first != "all_gather") bad += l + " reads its weight from " + w + " (" + def[w].first + ")\n";
  }
  return linears.empty() ? "no linear in the local program\n" : bad;
}

TEST_F(FsdpSpmd, StepAllGathersEachWeightAndReduceScattersEachGradient) {
  axle::test::TempDir dir;
  setenv("AXLE_SAVE_GRAPHS", dir.path.c_str(), 1);
  const TrainRun r = train(4, 2);
  unsetenv("AXLE_SAVE_GRAPHS");
  EXPECT_EQ(fsdp_violations(r), "") << r.step_table;
  std::string local;  // the step graph's (the steady one: compiled last under the same name)
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".local.txt")) local = axle::test::slurp(e.path().string());
  }
  EXPECT_EQ(linears_reading_ungathered_weights(local), "") << local;
  // The counters agree. Per step: 4 reduce-scatters (4 parameters) and 5 all-gathers, the
  // 4 parameters for forward and fc2.weight again, transposed, for backward's input
  // gradient (FSDP's backward re-gather; fc1's input needs no gradient).
  EXPECT_EQ(metrics::counter_value("SpmdAllGather"), 2 * 5) << r.step_table;
  EXPECT_EQ(metrics::counter_value("SpmdReduceScatter"), 2 * 4) << r.step_table;
  EXPECT_EQ(metrics::counter_value("SpmdFullRematerialization"), 0) << r.step_table;
}

// The same check on FSDP without the output sharding (a no-op shard_output): the
// partitioner then gathers the activations (torch_xla #6778), and the check says so.
TEST_F(FsdpSpmd, WithoutOutputShardingTheActivationsAreGathered) {
  const TrainRun r = train(4, 2, {.shard_output = [](Tensor&, const xs::Mesh&) {}});
  const std::string bad = fsdp_violations(r);
  EXPECT_NE(bad.find("an activation is gathered"), std::string::npos) << bad << r.step_table;
}

}  // namespace
