// Multi-process tests: launch(), collectives on cpu tensors and inside lazy xla graphs,
// xm::optimizer_step parity with single-process training, failure handling.
//
// launch() re-executes this test binary; main() below (launch_test_main, test_util.h)
// narrows a child to the test that launched it, so the child re-runs that test's body,
// reaches launch() and runs the rank function. Parent-side code never touches the xla device
// (launch() refuses a process that did).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "axle/axle.h"
#include "compiler/program.h"
#include "dist/dist_internal.h"
#include "ops/op.h"
#include "test_util.h"

using namespace axle;
namespace fs = std::filesystem;

namespace {

using axle::test::in_launched_child;
using axle::test::prepare_launch;
using axle::test::run_ranks;

// A scratch directory shared by the parent and its children (children inherit it).
std::string shared_dir() {
  if (in_launched_child()) return std::getenv("AXLE_DIST_TEST_OUT");
  std::string tmpl = (fs::temp_directory_path() / "axle-dist-test-XXXXXX").string();
  const char* d = ::mkdtemp(tmpl.data());
  if (!d) throw std::runtime_error("mkdtemp failed");
  ::setenv("AXLE_DIST_TEST_OUT", d, 1);
  return d;
}

// Runs `cmd` (helpers of this binary) with stdout and stderr captured together.
axle::test::Result run_merged(const std::string& cmd) {
  return axle::test::run_captured(cmd, axle::test::Stderr::kIntoStdout);
}

void expect_values(const Tensor& t, const std::vector<float>& want, const std::string& what) {
  auto got = t.cpu().to_vector<float>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << what << " [" << i << "]";
}

std::vector<float> iota_times(int n, double k) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = float(i * k);
  return v;
}

// Every collective against a hand-computed result, on `dev` (cpu: at once; xla: in a graph).
void check_collectives(int rank, int world, Device dev) {
  const double tri = world * (world + 1) / 2.0;  // sum over ranks of (rank + 1)
  Tensor x = (arange(6, {.dtype = kFloat32}).reshape({2, 3}) * double(rank + 1)).to(dev);
  Tensor s = dist::all_reduce(x, dist::ReduceOp::Sum);
  Tensor m = dist::all_reduce(x, dist::ReduceOp::Mean);
  Tensor mn = dist::all_reduce(x, dist::ReduceOp::Min);
  Tensor mx = dist::all_reduce(x, dist::ReduceOp::Max);
  Tensor g = dist::all_gather(full({2}, double(rank), {.device = kCPU}).to(dev));
  Tensor rs = dist::reduce_scatter((arange(2 * world, {.dtype = kFloat32}) * double(rank + 1)).to(dev));
  Tensor b = dist::broadcast(full({3}, 10.0 * rank).to(dev), 1);
  const int64_t k = rank + 1;
  Tensor xi = from_vector(std::vector<int64_t>{0, k, 2 * k, 3 * k}, {4}).to(dev);  // int64 sum
  Tensor si = dist::all_reduce(xi);
  std::vector<Tensor> many = dist::all_reduce({x, x * 2.0, full({5}, 1.0).to(dev)}, dist::ReduceOp::Sum);
  // all_to_all (Gloo's alltoall): row q of rank r goes to rank q, which stacks the rows it
  // receives in rank order along dim 1.
  Tensor rows = (arange(world, {.dtype = kFloat32}).reshape({world, 1}) + 100.0 * rank).to(dev);
  Tensor a2a = ops::call1(ops::OpKind::AllToAll, {rows},
                          ops::attr::AllToAll{.split_dim = 0, .concat_dim = 1, .group = 0, .world = world}.pack());
  if (dev.is_xla()) {
    EXPECT_EQ(s.device(), dev);
    axle::sync();  // one graph runs every collective above, in order
  }
  expect_values(s, iota_times(6, tri), "sum");
  expect_values(m, iota_times(6, tri / world), "mean");
  expect_values(mn, iota_times(6, 1), "min");
  expect_values(mx, iota_times(6, world), "max");
  std::vector<float> gw;
  for (int r = 0; r < world; ++r) gw.insert(gw.end(), {float(r), float(r)});
  expect_values(g, gw, "all_gather");
  expect_values(rs, {float(2 * rank * tri), float((2 * rank + 1) * tri)}, "reduce_scatter");
  expect_values(b, {10, 10, 10}, "broadcast");
  EXPECT_EQ(si.dtype(), kInt64);
  EXPECT_EQ(si.cpu().to_vector<int64_t>(), (std::vector<int64_t>{0, int64_t(tri), int64_t(2 * tri), int64_t(3 * tri)}));
  ASSERT_EQ(many.size(), 3u);
  expect_values(many[0], iota_times(6, tri), "bucket 0");
  expect_values(many[1], iota_times(6, 2 * tri), "bucket 1");
  expect_values(many[2], std::vector<float>(5, float(world)), "bucket 2");
  std::vector<float> aw;
  for (int r = 0; r < world; ++r) aw.push_back(float(100 * r + rank));
  EXPECT_EQ(a2a.shape(), (Shape{1, world}));
  expect_values(a2a, aw, "all_to_all");
}

}  // namespace

TEST(Dist, RuntimeQueriesOutsideLaunch) {
  EXPECT_EQ(runtime::world_size(), 1);
  EXPECT_EQ(runtime::global_ordinal(), 0);
  EXPECT_EQ(runtime::local_ordinal(), 0);
}

TEST(Dist, CollectivesOnCpuTensors2And3Ranks) {
  for (int world : {2, 3}) {
    run_ranks(world, [world](int rank) {
      EXPECT_EQ(runtime::world_size(), world);
      EXPECT_EQ(runtime::global_ordinal(), rank);
      EXPECT_EQ(runtime::local_ordinal(), rank);
      check_collectives(rank, world, kCPU);
      dist::barrier();
      auto payloads = xm::rendezvous("done", "r" + std::to_string(rank));
      ASSERT_EQ(int(payloads.size()), world);
      for (int r = 0; r < world; ++r) EXPECT_EQ(payloads[size_t(r)], "r" + std::to_string(r));
      xm::master_print("master says hi");
    });
  }
}

// Ranks of one launch() share a host: all-reduce goes through shared memory, in 4 MiB
// chunks alternating between two slot areas. Sizes that span several chunks and do not
// divide by the world size, every dtype and reduce op, against exact results.
void check_large_all_reduce(int rank, int world, DType t, int64_t n, int64_t period) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n));
  std::vector<int64_t> mine(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = (rank + 1) * (i % period);
  const Tensor x = from_vector(mine, {n}).to(t);
  const int64_t tri = world * (world + 1) / 2;
  for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Min, dist::ReduceOp::Max}) {
    const Tensor r = dist::all_reduce(x, op);
    ASSERT_EQ(r.dtype(), t);
    const std::vector<int64_t> got = r.to_vector<int64_t>();
    const int64_t k = op == dist::ReduceOp::Sum ? tri : op == dist::ReduceOp::Min ? 1 : world;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got[size_t(i)] != k * (i % period);
    EXPECT_EQ(bad, 0) << "reduce op " << int(op);
  }
}

TEST(Dist, SharedMemoryAllReduceAcrossChunks) {
  for (int world : {2, 3}) {
    run_ranks(world, [world](int rank) {
      const int64_t before = metrics::counter_value("CollectiveAllReduceShm");
      check_large_all_reduce(rank, world, kFloat32, 2 * (int64_t(1) << 20) + 7, 1000);  // 3 chunks, last one tiny
      check_large_all_reduce(rank, world, kInt64, (int64_t(1) << 19) + 1, 100000);
      check_large_all_reduce(rank, world, kInt32, 5, 7);
      check_large_all_reduce(rank, world, kUInt8, 3000001, 40);  // 6 * 39 < 256: no wrap
      Tensor m = dist::all_reduce(full({4097}, double(rank + 1)), dist::ReduceOp::Mean);
      for (float v : m.to_vector<float>()) ASSERT_FLOAT_EQ(v, float(world + 1) / 2.0f);
      EXPECT_EQ(metrics::counter_value("CollectiveAllReduceShm") - before, 3 * 4 + 1);
    });
  }
  // No shared-memory segment outlives its job. A segment is named after its job's rendezvous
  // directory ("axle-" + the directory's name), which the job removes just before the segment:
  // one whose directory is gone and that is still there a moment later is an orphan. Segments
  // of jobs still running (other test programs run beside this one) are left alone.
  auto orphans = [] {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("axle-", 0) == 0 && !fs::exists(fs::path("/tmp") / name.substr(5)))  // launch makes the directories there
        found.push_back(name);
    }
    return found;
  };
  std::vector<std::string> first = orphans();
  if (!first.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (const std::string& name : orphans())
    if (std::find(first.begin(), first.end(), name) != first.end()) ADD_FAILURE() << "orphaned /dev/shm/" << name;
}

TEST(Dist, GlooTcpPathWhenSharedMemoryIsOff) {
  ::setenv("AXLE_SHM", "0", 1);
  run_ranks(2, [](int rank) {
    check_large_all_reduce(rank, 2, kFloat32, 300001, 1000);
    EXPECT_EQ(metrics::counter_value("CollectiveAllReduceShm"), 0);
    EXPECT_GT(metrics::counter_value("CollectiveAllReduce"), 0);
    // A write whose reader is gone fails with EPIPE, the rank lives on (SIGPIPE ignored once a
    // Gloo group exists): what a rank sending to a killed rank meets, so its collective can
    // fail naming that rank instead of the rank dying of SIGPIPE.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ::close(fds[0]);
    errno = 0;
    EXPECT_EQ(::write(fds[1], "x", 1), -1);
    EXPECT_EQ(errno, EPIPE);
    ::close(fds[1]);
  });
  ::unsetenv("AXLE_SHM");
}

TEST(Dist, WorldSizeFromEnvironmentAndDeprecatedSpawn) {
  ::setenv("CPU_NUM_DEVICES", "3", 1);
  run_ranks(0, [](int rank) {
    EXPECT_EQ(runtime::world_size(), 3);
    EXPECT_EQ(dist::all_reduce(full({1}, 1.0)).item(), 3.0);
  });
  ::setenv("AXLE_NUM_DEVICES", "2", 1);  // wins over CPU_NUM_DEVICES
  prepare_launch();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  xmp::spawn([](int rank) {
    if (runtime::world_size() != 2 || runtime::global_ordinal() != rank) throw std::runtime_error("bad world");
  });
#pragma GCC diagnostic pop
  ::unsetenv("AXLE_NUM_DEVICES");
  ::unsetenv("CPU_NUM_DEVICES");
}

TEST(Dist, CollectivesInLazyGraph) {
  run_ranks(2, [](int rank) {
    const int64_t before = metrics::counter_value("UncachedCompile");
    check_collectives(rank, 2, device());
    EXPECT_GE(metrics::counter_value("UncachedCompile"), before + 1);

    // Two identical collectives on one value are two calls (no CSE), and one whose
    // result is dropped before the sync never entered a graph; a dead-looking one inside
    // a graph still runs (no DCE): both ranks count the same calls or they would hang.
    Tensor x = full({4}, double(rank + 1)).to(device());
    Tensor a = dist::all_reduce(x), b = dist::all_reduce(x);
    Tensor c = a + b;
    axle::sync();
    expect_values(c, std::vector<float>(4, 6.f), "a + b");

    // Gradients flow through all_reduce (sum): d/dx sum(all_reduce(x * w)) = all_reduce(1) * w.
    Tensor w = full({3}, double(rank + 1)).to(device()).set_requires_grad(true);
    Tensor y = dist::all_reduce(w * 2.0).sum();
    y.backward();
    axle::sync();
    expect_values(y.reshape({1}), {float(2 * 3 * 3)}, "forward");
    expect_values(w.grad(), std::vector<float>(3, 4.f), "grad");  // 2 ranks * 2

    // Same graph again: cached, and still correct.
    const int64_t cached = metrics::counter_value("CachedCompile");
    check_collectives(rank, 2, device());
    EXPECT_GT(metrics::counter_value("CachedCompile"), cached);
  });
}

namespace {

// Weights that differ by rank and position: w_r[i] = (r + 1) * (i + 1).
Tensor rank_weights(int rank, Shape shape) {
  const int64_t n = shape_numel(shape);
  return (arange(n, {.dtype = kFloat32}) + 1.0).reshape(shape) * double(rank + 1);
}

// Gradients of all_gather, reduce_scatter (sum and mean), broadcast and all_reduce (mean)
// on `dev`. Each rank r takes L_r = sum(collective(x_r) * w_r); backward on every rank gives
// x_q the gradient of the total sum_r L_r, worked out by hand below.
void check_collective_gradients(int rank, int world, Device dev) {
  const double tri = world * (world + 1) / 2.0;  // sum over ranks of (rank + 1)
  auto leaf = [&](Shape s) {
    return (arange(shape_numel(s), {.dtype = kFloat32}).reshape(s) * double(rank + 2)).to(dev).set_requires_grad(true);
  };
  // all_gather: x_q [2, 3] lands in rows 2q, 2q + 1 of every rank's [2 * world, 3];
  // dL/dx_q[i] = sum_r w_r[6q + i] = tri * (6q + i + 1).
  Tensor xg = leaf({2, 3});
  Tensor yg = dist::all_gather(xg);
  EXPECT_EQ(yg.shape(), (Shape{2 * world, 3}));
  sum(yg * rank_weights(rank, {2 * world, 3}).to(dev)).backward();
  std::vector<float> want_g;
  for (int i = 0; i < 6; ++i) want_g.push_back(float(tri * (6 * rank + i + 1)));

  // reduce_scatter: y_r = sum_q x_q[2r : 2r + 2], so dL/dx_q[k] = w_{k / 2}[k % 2]
  // = (k / 2 + 1) * (k % 2 + 1), divided by world for mean.
  Tensor xs = leaf({2 * world}), xm = leaf({2 * world});
  sum(dist::reduce_scatter(xs, dist::ReduceOp::Sum) * rank_weights(rank, {2}).to(dev)).backward();
  sum(dist::reduce_scatter(xm, dist::ReduceOp::Mean) * rank_weights(rank, {2}).to(dev)).backward();
  std::vector<float> want_s, want_m;
  for (int k = 0; k < 2 * world; ++k) {
    want_s.push_back(float((k / 2 + 1) * (k % 2 + 1)));
    want_m.push_back(float((k / 2 + 1) * (k % 2 + 1)) / float(world));
  }

  // broadcast from rank 1: every y_r is x_1, so dL/dx_1 = sum_r w_r = tri * (i + 1); 0 elsewhere.
  Tensor xb = leaf({4});
  sum(dist::broadcast(xb, 1) * rank_weights(rank, {4}).to(dev)).backward();
  std::vector<float> want_b;
  for (int i = 0; i < 4; ++i) want_b.push_back(rank == 1 ? float(tri * (i + 1)) : 0.f);

  // all_reduce mean: y_r = mean_q x_q, so dL/dx_q = sum_r w_r / world = tri / world * (i + 1).
  Tensor xa = leaf({3});
  sum(dist::all_reduce(xa, dist::ReduceOp::Mean) * rank_weights(rank, {3}).to(dev)).backward();
  std::vector<float> want_a;
  for (int i = 0; i < 3; ++i) want_a.push_back(float(tri / world * (i + 1)));

  if (dev.is_xla()) axle::sync();
  for (const Tensor* t : {&xg, &xs, &xm, &xb, &xa}) ASSERT_TRUE(t->grad().defined());
  expect_values(xg.grad().reshape({6}), want_g, "all_gather grad");
  expect_values(xs.grad(), want_s, "reduce_scatter sum grad");
  expect_values(xm.grad(), want_m, "reduce_scatter mean grad");
  expect_values(xb.grad(), want_b, "broadcast grad");
  expect_values(xa.grad(), want_a, "all_reduce mean grad");
}

}  // namespace

TEST(Dist, CollectiveGradients3Ranks) {
  run_ranks(3, [](int rank) {
    check_collective_gradients(rank, 3, kCPU);
    check_collective_gradients(rank, 3, device());
  });
}

// The ranks of one launch() all-reduce through shared memory, each reducing its share of
// every rank's chunk in rank order, so every rank gets the same bits: for float sums that is
// ((x_0 + x_1) + x_2) in float32, exactly. Random floats on 3 ranks (sizes over several 4 MiB
// chunks and not divisible by 3), compared bit for bit across ranks and with that sum.
TEST(Dist, AllReduceOfRandomFloatsIsBitIdenticalOn3Ranks) {
  constexpr int kWorld = 3;
  run_ranks(kWorld, [](int rank) {
    for (int64_t n : {int64_t(1000), int64_t(3) * (int64_t(1) << 20) + 5}) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<std::vector<float>> xs;
      for (int r = 0; r < kWorld; ++r) {
        Generator gen(uint64_t(1000 + r));
        xs.push_back((randn({n}, {}, &gen) * std::pow(10.0, r - 1)).to_vector<float>());  // magnitudes differ: order matters
      }
      const Tensor mine = from_vector(xs[size_t(rank)], {n});
      const std::vector<float> sum = dist::all_reduce(mine, dist::ReduceOp::Sum).to_vector<float>();
      const std::vector<float> mean = dist::all_reduce(mine, dist::ReduceOp::Mean).to_vector<float>();
      int64_t off_order = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = (xs[0][size_t(i)] + xs[1][size_t(i)]) + xs[2][size_t(i)];
        off_order += std::memcmp(&sum[size_t(i)], &want, sizeof(float)) != 0;
      }
      EXPECT_EQ(off_order, 0) << "sums that are not (x0 + x1) + x2 in float32";
      // Every rank's bits, gathered: all equal to rank 0's.
      for (const std::vector<float>* v : {&sum, &mean}) {
        const std::vector<float> all = dist::all_gather(from_vector(*v, {n})).to_vector<float>();
        ASSERT_EQ(int64_t(all.size()), kWorld * n);
        for (int r = 1; r < kWorld; ++r)
          EXPECT_EQ(std::memcmp(all.data(), all.data() + r * n, size_t(n) * sizeof(float)), 0)
              << "rank " << r << " differs from rank 0 (" << (v == &sum ? "sum" : "mean") << ")";
      }
      int64_t far = 0;
      for (int64_t i = 0; i < n; ++i) far += std::abs(mean[size_t(i)] - sum[size_t(i)] / kWorld) > 1e-6f * (1 + std::abs(sum[size_t(i)]));
      EXPECT_EQ(far, 0) << "mean is not sum / world";
    }
  });
}

TEST(Dist, CollectivesInEagerMode) {
  run_ranks(2, [](int rank) {
    experimental::eager_mode(true);
    check_collectives(rank, 2, device());
    experimental::eager_mode(false);
  });
}

TEST(Dist, CompilerMergesOnlyIdenticalCollectivesAndNeverDropsThem) {
  // A program by hand: %0 = data; %1 = all_reduce(%0); %2 = all_reduce(%0) (same key,
  // result unused): CSE merges %2 into %1 (every rank runs the same graph and merges the
  // same pair). %3 = all_reduce max of %0 (another key, result unused): DCE keeps it.
  compiler::Program p;
  compiler::PNode in;
  in.kind = compiler::NodeKind::Data;
  in.input = 0;
  in.outs = {{{4}, kFloat32}};
  p.nodes.push_back(in);
  p.num_inputs = 1;
  for (int k = 0; k < 3; ++k) {
    compiler::PNode ar;
    ar.op = ops::OpKind::AllReduce;
    ar.attrs.ints = {k == 2 ? 3 : 0, 0};
    ar.operands = {{0, 0}};
    ar.outs = {{{4}, kFloat32}};
    p.nodes.push_back(ar);
  }
  // A collective over constants must not be folded either.
  compiler::PNode c;
  c.kind = compiler::NodeKind::Constant;
  c.constant = full({}, 2.0);
  c.outs = {{{}, kFloat32}};
  p.nodes.push_back(c);
  compiler::PNode ar;
  ar.op = ops::OpKind::AllReduce;
  ar.attrs.ints = {0, 0};
  ar.operands = {{4, 0}};
  ar.outs = {{{}, kFloat32}};
  p.nodes.push_back(ar);
  p.outputs = {{1, 0}};
  compiler::PassPipeline::standard().run(p);
  int collectives = 0;
  for (const auto& n : p.nodes)
    if (!n.dead && n.kind == compiler::NodeKind::Op && n.op == ops::OpKind::AllReduce) ++collectives;
  EXPECT_EQ(collectives, 3) << p.text();  // %1, %3 and the one over a constant
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.nodes[size_t(p.outputs[0].node)].op, ops::OpKind::AllReduce);
  // In a group of one the kernels are copies: the program still runs.
  EXPECT_EQ(dist::all_reduce(full({2}, 3.0)).to_vector<float>(), (std::vector<float>{3, 3}));
}

namespace {

// Synthetic classification data, the same in every process.
struct Data {
  Tensor x, y;
};
Data make_data(int steps, int batch) {
  Generator gen(123);
  Tensor x = randn({steps, batch, 20}, {}, &gen);
  std::vector<int64_t> labels;
  auto xs = x.to_vector<float>();
  for (int i = 0; i < steps * batch; ++i) labels.push_back((xs[size_t(i) * 20] > 0) + 2 * (xs[size_t(i) * 20 + 1] > 0));
  return {x, from_vector(labels, {steps, batch})};
}

nn::ModulePtr make_mlp() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)});
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
};

// How gradients are averaged over ranks.
enum class Sync { OptimizerStep, Ddp, DdpBucketView };

// world == 1: plain single-process training on the full batch (cpu, eager).
// world > 1: this rank's contiguous share of each batch on `dev`, with xm::optimizer_step
// or DistributedDataParallel.
TrainRun train(Device dev, int rank, int world, int steps, int batch, Sync how = Sync::OptimizerStep) {
  Data d = make_data(steps, batch);
  auto net = make_mlp();
  net->to(dev);
  nn::ModulePtr model = net;
  if (world > 1 && how != Sync::OptimizerStep) {
    // Small buckets: the mlp's four gradients go out in more than one all-reduce.
    model = std::make_shared<nn::parallel::DistributedDataParallel>(
        net, nn::parallel::DistributedDataParallelOptions{.gradient_as_bucket_view = how == Sync::DdpBucketView,
                                                          .bucket_cap_mb = 0.003});
  }
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  const int64_t per = batch / world;
  TrainRun r;
  std::vector<Tensor> losses;
  for (int s = 0; s < steps; ++s) {
    Tensor x = d.x.narrow(0, s, 1).squeeze(0).narrow(0, rank * per, per).contiguous();
    Tensor y = d.y.narrow(0, s, 1).squeeze(0).narrow(0, rank * per, per).contiguous();
    auto body = [&] {
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x.to(dev)), y.to(dev));
      loss.backward();
      if (world > 1) {
        if (how == Sync::OptimizerStep) xm::optimizer_step(opt);
        else opt.step();  // DDP averaged the gradients when backward() finished
        loss = dist::all_reduce(loss.detach(), dist::ReduceOp::Mean);  // the global batch's loss
      } else {
        opt.step();
      }
      losses.push_back(loss);
    };
    if (dev.is_xla()) {
      auto guard = axle::step();
      body();
    } else {
      body();
    }
  }
  for (const Tensor& l : losses) r.losses.push_back(l.item());
  for (const Tensor& p : model->parameters()) r.params.push_back(p.cpu().to_vector<float>());
  return r;
}

void expect_same_training(const TrainRun& got, const TrainRun& want, double rtol) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], rtol * std::abs(want.losses[i])) << "loss at step " << i;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t k = 0; k < want.params.size(); ++k) {
    ASSERT_EQ(got.params[k].size(), want.params[k].size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.params[k].size(); ++i) scale = std::max(scale, double(std::abs(want.params[k][i])));
    for (size_t i = 0; i < want.params[k].size(); ++i)
      worst = std::max(worst, std::abs(double(got.params[k][i]) - want.params[k][i]) / scale);
    EXPECT_LT(worst, rtol) << "parameter " << k;
  }
}

}  // namespace

TEST(Dist, OptimizerStepWorld2MatchesSingleProcess) {
  constexpr int kSteps = 10, kBatch = 16;
  run_ranks(2, [](int rank) {
    const TrainRun ref = train(kCPU, 0, 1, kSteps, kBatch);
    // Training must actually move.
    EXPECT_LT(ref.losses.back(), ref.losses.front());
    const TrainRun cpu = train(kCPU, rank, 2, kSteps, kBatch);
    expect_same_training(cpu, ref, 1e-5);
    const int64_t calls = metrics::counter_value("UncachedCompile");
    const TrainRun xla = train(device(), rank, 2, kSteps, kBatch);
    expect_same_training(xla, ref, 1e-5);
    EXPECT_GT(metrics::counter_value("UncachedCompile"), calls);
  });
}

TEST(Dist, DdpMatchesOptimizerStepAndSingleProcess) {
  constexpr int kSteps = 10, kBatch = 16;
  run_ranks(2, [](int rank) {
    const TrainRun ref = train(kCPU, 0, 1, kSteps, kBatch);
    for (Device dev : {Device(kCPU), device()}) {
      const TrainRun opt_step = train(dev, rank, 2, kSteps, kBatch, Sync::OptimizerStep);
      for (Sync how : {Sync::Ddp, Sync::DdpBucketView}) {
        const int64_t before = metrics::counter_value("CollectiveAllReduce");
        const TrainRun ddp = train(dev, rank, 2, kSteps, kBatch, how);
        SCOPED_TRACE(dev.str() + (how == Sync::Ddp ? " ddp" : " ddp bucket view"));
        expect_same_training(ddp, ref, 1e-5);
        // The same averaged gradients as optimizer_step: bit-identical parameters.
        EXPECT_EQ(ddp.params, opt_step.params);
        // Per step: 2 gradient buckets (cap 0.003 MiB) + the loss (the construction-time model
        // check and broadcasts are all_gather / broadcast calls, not counted here).
        EXPECT_EQ(metrics::counter_value("CollectiveAllReduce") - before, kSteps * 3);
      }
    }
  });
}

TEST(Dist, DdpBroadcastsRank0AndBucketsGradientsAsViews) {
  run_ranks(2, [](int rank) {
    manual_seed(uint64_t(100 + rank));  // different initialisation on each rank
    auto net = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)});
    dist::init_process_group("xla", "xla://");
    nn::parallel::DistributedDataParallel ddp(net, {.gradient_as_bucket_view = true});
    // Rank 0's parameters everywhere.
    for (const Tensor& p : net->parameters()) {
      Tensor r0 = dist::broadcast(p, 0);
      EXPECT_EQ(p.to_vector<float>(), r0.to_vector<float>());
    }
    // One bucket at the default cap, gradients in reverse registration order; PyTorch's names.
    EXPECT_EQ(ddp.bucket_names(), (std::vector<std::vector<std::string>>{{"2.bias", "2.weight", "0.bias", "0.weight"}}));
    EXPECT_EQ(ddp.state_dict()[0].first, "module.0.weight");
    Tensor x = full({4, 20}, double(rank + 1));
    ddp(x).sum().backward();
    // Every gradient is a view into one bucket: consecutive, in bucket order.
    const auto params = net->parameters();
    const std::vector<int> order{3, 2, 1, 0};
    for (size_t i = 1; i < order.size(); ++i) {
      const Tensor& prev = params[size_t(order[i - 1])];
      const Tensor& cur = params[size_t(order[i])];
      EXPECT_EQ(static_cast<char*>(cur.grad().data_ptr()),
                static_cast<char*>(prev.grad().data_ptr()) + prev.numel() * sizeof(float))
          << "gradient " << order[i] << " is not the next slice of the bucket";
    }
    // The gradients are the average over ranks: equal everywhere.
    for (const Tensor& p : params) EXPECT_EQ(p.grad().to_vector<float>(), dist::broadcast(p.grad(), 1).to_vector<float>());
    // A model that differs between ranks (shapes, or which parameters are trained) is a clear
    // error on every rank.
    {
      auto frozen = std::make_shared<nn::Linear>(2, 2);
      if (rank == 1) frozen->bias.set_requires_grad(false);
      try {
        nn::parallel::DistributedDataParallel bad(frozen);
        ADD_FAILURE() << "expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0 has 'bias:float32[2] requires_grad' where rank 1 has 'bias:float32[2]'"),
                  std::string::npos) << e.what();
      }
    }
    auto other = std::make_shared<nn::Linear>(20, rank == 0 ? 4 : 5);
    try {
      nn::parallel::DistributedDataParallel bad(other);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("every rank must wrap the same model: rank 0 has 'weight:float32[4, 20] "
                                           "requires_grad' where rank 1 has 'weight:float32[5, 20] requires_grad'"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(Dist, DdpNoSyncAccumulatesThenAverages) {
  run_ranks(2, [](int rank) {
    auto lin = std::make_shared<nn::Linear>(3, 2);
    nn::parallel::DistributedDataParallel ddp(lin);
    const double k = rank + 1;
    {
      auto guard = ddp.no_sync();
      ddp(full({1, 3}, k)).sum().backward();  // local only: weight grad = k everywhere
      EXPECT_EQ(lin->weight.grad().to_vector<float>(), std::vector<float>(6, float(k)));
    }
    ddp(full({1, 3}, 10 * k)).sum().backward();  // accumulated 11k, averaged over ranks: 11 * 1.5
    EXPECT_EQ(lin->weight.grad().to_vector<float>(), std::vector<float>(6, 16.5f));
    EXPECT_EQ(lin->bias.grad().to_vector<float>(), std::vector<float>(2, 2.0f));
  });
}

// Three heads: a always takes part in the output, b only where use_b, c never.
struct Heads : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = false;
  Heads() {
    a = register_module("a", std::make_shared<nn::Linear>(3, 1));
    b = register_module("b", std::make_shared<nn::Linear>(3, 1));
    c = register_module("c", std::make_shared<nn::Linear>(3, 1));
  }
  Tensor forward(const Tensor& x) override { return use_b ? (*a)(x) + (*b)(x) : (*a)(x); }
};

TEST(Dist, DdpUnusedParameters) {
  run_ranks(2, [](int rank) {
    auto heads = std::make_shared<Heads>();
    heads->use_b = rank == 1;
    const Tensor x = full({1, 3}, 1.0);
    {
      nn::parallel::DistributedDataParallel strict(heads);
      try {
        strict(x).sum().backward();
        ADD_FAILURE() << "expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("parameter 'c.bias' got no gradient in this backward pass"),
                  std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("find_unused_parameters = true"), std::string::npos) << e.what();
      }
    }
    heads->zero_grad();
    nn::parallel::DistributedDataParallel ddp(heads, {.find_unused_parameters = true});
    ddp(x).sum().backward();
    EXPECT_EQ(heads->a->weight.grad().to_vector<float>(), std::vector<float>(3, 1.0f));  // used on both ranks
    EXPECT_EQ(heads->b->weight.grad().to_vector<float>(), std::vector<float>(3, 0.5f));  // rank 1 only: (0 + 1) / 2
    EXPECT_FALSE(heads->c->weight.grad().defined());  // used by no rank: left undefined
    // A backward through the unwrapped module arms nothing: it stays local.
    heads->zero_grad();
    (*heads->a)(full({1, 3}, double(rank + 1))).sum().backward();
    EXPECT_EQ(heads->a->weight.grad().to_vector<float>(), std::vector<float>(3, float(rank + 1)));
  }, 30);
}

TEST(Dist, DdpBroadcastsBuffersEachTrainingForward) {
  run_ranks(2, [](int rank) {
    auto bn = std::make_shared<nn::BatchNorm2d>(2);
    bn->to(device());
    nn::parallel::DistributedDataParallel ddp(bn);
    {
      NoGradGuard g;
      bn->running_mean.set_data(full({2}, 5.0 * rank).to(device()));  // rank 1 drifts
    }
    Tensor x = arange(16, {.dtype = kFloat32}).reshape({2, 2, 2, 2}).to(device());  // same batch on both ranks
    { auto step = axle::step(); ddp(x).sum().backward(); }
    // Rank 0's running mean (0) went into the update on both ranks: 0.9 * 0 + 0.1 * batch mean.
    expect_values(bn->running_mean, {0.55f, 0.95f}, "running_mean");
  });
}

TEST(Dist, OptimizerStepUsesOneCollectivePerDtype) {
  run_ranks(2, [](int rank) {
    auto model = make_mlp();
    model->to(device());
    optim::SGD opt(model->parameters(), {.lr = 0.1});
    Tensor loss = (*model)(full({2, 20}, double(rank)).to(device())).sum();
    loss.backward();
    const int64_t before = metrics::counter_value("CollectiveAllReduce");
    xm::optimizer_step(opt, {.barrier = true});  // barrier: the step's graph runs now
    // Four gradients, one all_reduce call.
    EXPECT_EQ(metrics::counter_value("CollectiveAllReduce") - before, 1);
    EXPECT_EQ(model->parameters()[0].grad().device(), device());
    // Parameters are equal on both ranks after the step (same init, averaged gradients).
    auto p0 = model->parameters()[0].cpu();
    Tensor other = dist::broadcast(p0, 0);
    expect_values(p0, other.to_vector<float>(), "parameters agree across ranks");
  });
}

// xm::reduce_gradients alone: every gradient becomes the mean over ranks, one all_reduce per
// (dtype, device) bucket (float32 is the one float dtype: the buckets here are cpu and xla),
// a parameter without a gradient keeps none, and nothing steps.
TEST(Dist, ReduceGradientsAveragesPerDeviceBucket) {
  run_ranks(2, [](int rank) {
    auto param = [](const Shape& s, Device dev) { return zeros(s).to(dev).set_requires_grad(true); };
    Tensor a = param({3}, kCPU), b = param({2, 2}, device()), c = param({2}, device());
    Tensor unused = param({4}, kCPU);
    optim::SGD opt(std::vector<Tensor>{a, b, c, unused}, {.lr = 0.1});
    // Gradients that differ between the ranks: rank r's are (r + 1) * k.
    (a * (1.0 + rank)).sum().backward();
    {
      auto step = axle::step();
      ((b * (2.0 + 2 * rank)).sum() + (c * (3.0 + 3 * rank)).sum()).backward();
    }
    const int64_t before = metrics::counter_value("CollectiveAllReduce");
    xm::reduce_gradients(opt);
    axle::sync();
    EXPECT_EQ(metrics::counter_value("CollectiveAllReduce") - before, 2);  // the cpu and the xla bucket
    expect_values(a.grad(), std::vector<float>(3, 1.5f), "a");                // mean of 1 and 2
    expect_values(b.grad(), std::vector<float>(4, 3.0f), "b");                // mean of 2 and 4
    expect_values(c.grad(), std::vector<float>(2, 4.5f), "c");                // mean of 3 and 6
    EXPECT_EQ(b.grad().device(), device());
    EXPECT_FALSE(unused.grad().defined());
    expect_values(a, std::vector<float>(3, 0.0f), "a not stepped");
    expect_values(b, std::vector<float>(4, 0.0f), "b not stepped");
  });
}

// One process: reduce_gradients leaves the gradients as they are and runs no collective.
TEST(Dist, ReduceGradientsWorld1IsANoOp) {
  Tensor a = zeros({3}).set_requires_grad(true);
  optim::SGD opt(std::vector<Tensor>{a}, {.lr = 0.1});
  (a * 2.0).sum().backward();
  const int64_t before = metrics::counter_value("CollectiveAllReduce");
  xm::reduce_gradients(opt);
  EXPECT_EQ(metrics::counter_value("CollectiveAllReduce"), before);
  expect_values(a.grad(), std::vector<float>(3, 2.0f), "a");
}

struct RemoveDir {
  std::string dir;
  ~RemoveDir() { fs::remove_all(dir); }
};

TEST(Dist, ChildExceptionStopsTheJob) {
  const std::string dir = shared_dir();
  RemoveDir cleanup{dir};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(2, [&](int rank) {
      std::ofstream(dir + "/pid" + std::to_string(rank)) << ::getpid();
      dist::barrier();
      if (rank == 1) throw std::runtime_error("boom from the second rank");
      for (;;) dist::all_reduce(full({1}, 1.0));  // blocks: rank 1 never joins
    });
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[launch] rank 1 failed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("boom from the second rank"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(dir + "/pid" + std::to_string(r));
    pid_t pid = 0;
    ASSERT_TRUE(f >> pid) << "rank " << r << " did not start";
    EXPECT_NE(::kill(pid, 0), 0) << "rank " << r << " (pid " << pid << ") is still alive";
  }
}

TEST(Dist, ChildKilledBySignalStopsTheJob) {
  const std::string dir = shared_dir();
  RemoveDir cleanup{dir};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(3, [&](int rank) {
      std::ofstream(dir + "/pid" + std::to_string(rank)) << ::getpid();
      dist::barrier();
      if (rank == 1) ::kill(::getpid(), SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // would run forever
    });
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("signal 9"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(dir + "/pid" + std::to_string(r));
    pid_t pid = 0;
    ASSERT_TRUE(f >> pid) << "rank " << r << " did not start";
    EXPECT_NE(::kill(pid, 0), 0) << "rank " << r << " (pid " << pid << ") is still alive";
  }
}

TEST(Dist, CollectiveTimeoutIsAClearError) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(
        2,
        [](int rank) {
          dist::barrier();
          if (rank == 0) dist::all_reduce(full({1}, 1.0));  // rank 1 never joins
          else std::this_thread::sleep_for(std::chrono::seconds(30));
        },
        /*timeout_s=*/1.5);
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 failed: [all_reduce] timed out after 1.5 s"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Dist, RendezvousTimeoutIsAClearError) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_ranks(
        2,
        [](int rank) {
          if (rank == 0) dist::barrier();  // the first collective rendezvouses; rank 1 never comes
          else std::this_thread::sleep_for(std::chrono::seconds(30));
        },
        /*timeout_s=*/1.5);
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 failed: [dist] rendezvous of 2 ranks failed on rank 0 (timeout 1.5 s)"),
              std::string::npos)
        << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Dist, ChildOutputIsPrefixedWithItsRank) {
  // Run the binary's helper test in a subprocess and read its output.
  const std::string cmd = "AXLE_DIST_HELPER=1 timeout 60 /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_also_run_disabled_tests --gtest_filter=DistHelper.DISABLED_PrintRanks";
  const axle::test::Result r = run_merged(cmd);
  const std::string& out = r.out;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("[rank 0] hello from 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] hello from 1 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] to stderr 1"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 0] only the master"), std::string::npos) << out;
  EXPECT_EQ(out.find("[rank 1] only the master"), std::string::npos) << out;
}

TEST(Dist, DeviceUsedBeforeLaunchIsAnError) {
  const std::string cmd = "AXLE_DIST_HELPER=1 timeout 60 /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_also_run_disabled_tests --gtest_filter=DistHelper.DISABLED_DeviceBeforeLaunch";
  const axle::test::Result r = run_merged(cmd);
  const std::string& out = r.out;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("device used before launch()"), std::string::npos) << out;
}

TEST(Dist, ExternalLauncherWithTcpStore) {
  // Two copies of this binary started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR,
  // MASTER_PORT): launch() spawns nothing; the group rendezvouses through axle's TCP store.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  ::close(s);
  const std::string exe = "/proc/" + std::to_string(::getpid()) + "/exe";
  const std::string common = "AXLE_DIST_HELPER=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             std::to_string(port) + " AXLE_GLOO_HOST=127.0.0.1 timeout 60 " + exe +
                             " --gtest_also_run_disabled_tests --gtest_filter=DistHelper.DISABLED_External";
  const std::string cmd = "sh -c '" + std::string("RANK=0 LOCAL_RANK=0 ") + common + " & p=$!; RANK=1 LOCAL_RANK=1 " +
                          common + " || exit 1; wait $p'";
  const axle::test::Result r = run_merged(cmd);
  const std::string& out = r.out;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("external rank 0 ok"), std::string::npos) << out;
  EXPECT_NE(out.find("external rank 1 ok"), std::string::npos) << out;
}

// ---- helpers run in subprocesses by the tests above (disabled in normal runs) ----

TEST(DistHelper, DISABLED_PrintRanks) {
  if (!std::getenv("AXLE_DIST_HELPER")) GTEST_SKIP();
  run_ranks(2, [](int rank) {
    std::printf("hello from %d of %d\n", rank, runtime::world_size());
    std::fprintf(stderr, "to stderr %d\n", rank);
    xm::master_print("only the master");
  });
}

TEST(DistHelper, DISABLED_DeviceBeforeLaunch) {
  if (!std::getenv("AXLE_DIST_HELPER")) GTEST_SKIP();
  Tensor t = full({2}, 1.0).to(device());
  try {
    launch([](int) {}, {.world_size = 2});
    FAIL() << "launch did not throw";
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
  }
}

TEST(DistHelper, DISABLED_External) {
  if (!std::getenv("AXLE_DIST_HELPER")) GTEST_SKIP();
  launch([](int local) {
    const int rank = runtime::global_ordinal();
    EXPECT_EQ(local, rank);
    EXPECT_EQ(runtime::world_size(), 2);
    Tensor s = dist::all_reduce(full({3}, double(rank + 1)));
    expect_values(s, {3, 3, 3}, "external all_reduce");
    Tensor xs = dist::all_reduce((full({2}, double(rank + 1)).to(device())));
    axle::sync();
    expect_values(xs, {3, 3}, "external all_reduce on xla");
    dist::barrier();
    if (!testing::Test::HasFailure()) std::printf("external rank %d ok\n", rank);
  }, {.timeout_s = 20});
}

int main(int argc, char** argv) { return axle::test::launch_test_main(argc, argv); }
