// N virtual devices in one process (src/dist/local_devices.h): the device threads, the
// in-process collectives on raw buffers and through the cpu kernels (eager ops and a compiled
// program), subgroups, bitwise determinism, failures (timeout, a device that finishes or
// throws, mismatched collectives) and per-device memory counters.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "axle/axle.h"
#include "axle/dist.h"
#include "axle/xm.h"
#include "backend/backend.h"
#include "backend/cpu/executable.h"
#include "backend/cpu/loops.h"
#include "compiler/program.h"
#include "core/hooks.h"
#include "dist/dist_internal.h"
#include "dist/local_devices.h"
#include "ops/op.h"
#include "test_util.h"

namespace {

using namespace axle;
using dist::ReduceOp;
using test::error_of;

// The group of all n devices.
int64_t all_of(int n) {
  std::vector<int> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), 0);
  return dist::local_group_id({g});
}
dist::ProcessGroup& group(int64_t id) { return dist::detail::group_by_id(id); }

// Sets the local collective timeout for a scope.
class ScopedTimeout {
 public:
  explicit ScopedTimeout(double s) : saved_(dist::local_timeout()) { dist::set_local_timeout(s); }
  ~ScopedTimeout() { dist::set_local_timeout(saved_); }

 private:
  double saved_;
};

// What device d contributes: distinct per device and element, with fractions so float sums
// depend on their order.
float value(int d, int64_t i) { return float(d + 1) * 1.25f + float(i) * 0.5f - float((i * 7 + d * 3) % 5); }

// ---------------------------------------------------------------- device threads

TEST(SpmdDevices, ThisDeviceAndPersistentThreads) {
  EXPECT_EQ(dist::this_device(), -1);
  std::vector<std::thread::id> first(4), second(4);
  std::vector<int> seen(4, -2), omp_threads(4, 0);
  dist::run_on_devices(4, [&](int d) {
    seen[size_t(d)] = dist::this_device();
    first[size_t(d)] = std::this_thread::get_id();
    omp_threads[size_t(d)] = omp_get_max_threads();
  }, 2);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(omp_threads, (std::vector<int>{2, 2, 2, 2}));
  dist::run_on_devices(2, [&](int d) {
    second[size_t(d)] = std::this_thread::get_id();
    omp_threads[size_t(d)] = omp_get_max_threads();
  }, 1);
  // The threads are reused, and each run sets the OpenMP thread count again.
  EXPECT_EQ(second[0], first[0]);
  EXPECT_EQ(second[1], first[1]);
  EXPECT_EQ(omp_threads[0], 1);
  for (int d = 0; d < 4; ++d) EXPECT_NE(first[size_t(d)], std::this_thread::get_id());
  EXPECT_EQ(dist::this_device(), -1);
}

TEST(SpmdDevices, BadArgumentsAreErrors) {
  EXPECT_NE(error_of([] { dist::run_on_devices(0, [](int) {}, 1); }).find("at least one device"), std::string::npos);
  EXPECT_NE(error_of([] { dist::run_on_devices(2, [](int) {}, 0); }).find("at least one thread"), std::string::npos);
  const std::string nested = error_of([] {
    dist::run_on_devices(2, [](int) { dist::run_on_devices(2, [](int) {}, 1); }, 1);
  });
  EXPECT_NE(nested.find("not reentrant"), std::string::npos) << nested;
  EXPECT_NE(error_of([] { dist::local_group_id({{0, 1}, {2}}); }).find("one size"), std::string::npos);
  EXPECT_NE(error_of([] { dist::local_group_id({{0, 1}, {1, 2}}); }).find("more than one"), std::string::npos);
  EXPECT_NE(error_of([] { dist::local_group_id({{0, 5}}); }).find("partition"), std::string::npos);
  EXPECT_NE(error_of([] { dist::set_local_timeout(0); }).find("positive"), std::string::npos);
  // Outside a device thread a local group has no rank.
  const int64_t id = all_of(2);
  EXPECT_NE(error_of([&] { (void)group(id).rank(); }).find("outside a device thread"), std::string::npos);
  EXPECT_NE(error_of([] { dist::detail::group_by_id(1000000 + 99999); }).find("unknown process group"),
            std::string::npos);
}

TEST(SpmdDevices, GroupsAreInterned) {
  const int64_t a = dist::local_group_id({{0, 2}, {1, 3}});
  EXPECT_EQ(dist::local_group_id({{0, 2}, {1, 3}}), a);
  EXPECT_NE(dist::local_group_id({{0, 1}, {2, 3}}), a);
  EXPECT_EQ(group(a).id(), a);
  EXPECT_EQ(group(a).size(), 2);
}

// ---------------------------------------------------------------- raw collectives, 2, 3 and 4 devices

class RawCollectives : public ::testing::TestWithParam<int> {};

TEST_P(RawCollectives, AllReduceEveryOp) {
  const int n = GetParam();
  const int64_t id = all_of(n);
  for (int64_t numel : {int64_t(0), int64_t(2), int64_t(7), int64_t(1000)}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max}) {
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      std::vector<std::vector<int64_t>> got_i(static_cast<size_t>(n));
      dist::run_on_devices(n, [&](int d) {
        dist::ProcessGroup& g = group(id);
        EXPECT_EQ(g.rank(), d);
        EXPECT_EQ(g.size(), n);
        std::vector<float> f(static_cast<size_t>(numel));
        std::vector<int64_t> k(static_cast<size_t>(numel));
        for (int64_t i = 0; i < numel; ++i) {
          f[size_t(i)] = value(d, i);
          k[size_t(i)] = int64_t(value(d, i) * 4);
        }
        g.all_reduce(f.data(), numel, kFloat32, op);
        if (op != ReduceOp::Mean) g.all_reduce(k.data(), numel, kInt64, op);
        got[size_t(d)] = f;
        got_i[size_t(d)] = k;
      }, 1);
      for (int64_t i = 0; i < numel; ++i) {
        float want = value(0, i);
        int64_t want_i = int64_t(value(0, i) * 4);
        for (int d = 1; d < n; ++d) {
          const float x = value(d, i);
          const int64_t xi = int64_t(value(d, i) * 4);
          if (op == ReduceOp::Min) want = std::min(want, x), want_i = std::min(want_i, xi);
          else if (op == ReduceOp::Max) want = std::max(want, x), want_i = std::max(want_i, xi);
          else want += x, want_i += xi;
        }
        if (op == ReduceOp::Mean) want /= float(n);
        for (int d = 0; d < n; ++d) {
          ASSERT_EQ(got[size_t(d)][size_t(i)], want) << "op " << int(op) << " device " << d << " element " << i;
          if (op != ReduceOp::Mean) {
            ASSERT_EQ(got_i[size_t(d)][size_t(i)], want_i) << "op " << int(op);
          }
        }
      }
    }
  }
}

TEST_P(RawCollectives, AllGatherBroadcastBarrier) {
  const int n = GetParam();
  const int64_t id = all_of(n);
  const int64_t numel = 5;
  std::vector<std::vector<float>> gathered(static_cast<size_t>(n)), bcast(size_t(n) * size_t(n));
  dist::run_on_devices(n, [&](int d) {
    dist::ProcessGroup& g = group(id);
    std::vector<float> in(static_cast<size_t>(numel)), out(size_t(numel * n), -1);
    for (int64_t i = 0; i < numel; ++i) in[size_t(i)] = value(d, i);
    g.all_gather(in.data(), out.data(), numel, kFloat32);
    gathered[size_t(d)] = out;
    g.barrier();
    for (int root = 0; root < n; ++root) {
      std::vector<float> b = in;
      g.broadcast(b.data(), numel, kFloat32, root);
      bcast[size_t(root * n + d)] = b;
    }
  }, 1);
  for (int d = 0; d < n; ++d) {
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < numel; ++i) {
        EXPECT_EQ(gathered[size_t(d)][size_t(r * numel + i)], value(r, i)) << "device " << d;
        EXPECT_EQ(bcast[size_t(r * n + d)][size_t(i)], value(r, i)) << "root " << r << " device " << d;
      }
  }
}

TEST_P(RawCollectives, AllToAllAndPermute) {
  const int n = GetParam();
  const int64_t id = all_of(n);
  const int64_t c = 3;  // chunk size
  // Device d sends chunk r = {100 d + 10 r + j}; chunk r of its output is device r's chunk d.
  std::vector<int> shift(static_cast<size_t>(n)), partial(size_t(n), -1);
  for (int d = 0; d < n; ++d) shift[size_t(d)] = (d + 1) % n;  // d receives from d + 1
  partial[0] = n - 1;                                          // only device 0 receives
  std::vector<std::vector<int32_t>> a2a(static_cast<size_t>(n)), perm(static_cast<size_t>(n)), part(static_cast<size_t>(n));
  dist::run_on_devices(n, [&](int d) {
    dist::ProcessGroup& g = group(id);
    std::vector<int32_t> in(static_cast<size_t>(c * n)), out(size_t(c * n), -1);
    for (int r = 0; r < n; ++r)
      for (int64_t j = 0; j < c; ++j) in[size_t(r * c + j)] = int32_t(100 * d + 10 * r + j);
    g.all_to_all(in.data(), out.data(), c, kInt32);
    a2a[size_t(d)] = out;
    std::vector<int32_t> p(size_t(c * n), -1), q(size_t(c * n), -1);
    g.permute(in.data(), p.data(), c * n, kInt32, shift);
    g.permute(in.data(), q.data(), c * n, kInt32, partial);
    perm[size_t(d)] = p;
    part[size_t(d)] = q;
  }, 1);
  for (int d = 0; d < n; ++d)
    for (int r = 0; r < n; ++r)
      for (int64_t j = 0; j < c; ++j) {
        EXPECT_EQ(a2a[size_t(d)][size_t(r * c + j)], 100 * r + 10 * d + j) << "device " << d;
        const int s = (d + 1) % n;
        EXPECT_EQ(perm[size_t(d)][size_t(r * c + j)], 100 * s + 10 * r + j) << "device " << d;
        EXPECT_EQ(part[size_t(d)][size_t(r * c + j)], d == 0 ? 100 * (n - 1) + 10 * r + j : 0) << "device " << d;
      }
}

INSTANTIATE_TEST_SUITE_P(Devices, RawCollectives, ::testing::Values(2, 3, 4));

TEST(SpmdComm, RawArgumentErrors) {
  const int64_t id = all_of(2);
  std::vector<std::string> errs(2);
  dist::run_on_devices(2, [&](int d) {
    dist::ProcessGroup& g = group(id);
    float buf[4] = {};
    errs[size_t(d)] = error_of([&] { g.broadcast(buf, 4, kFloat32, 2); }) + "|" +
                      error_of([&] { g.permute(buf, buf + 1, 2, kFloat32, {0, 1}); }) + "|" +
                      error_of([&] { g.permute(buf, buf + 2, 2, kFloat32, {0, 2}); }) + "|" +
                      error_of([&] { g.all_to_all(buf, buf + 1, 1, kFloat32); }) + "|" +
                      error_of([&] { g.all_reduce(buf, 4, kInt64, ReduceOp::Mean); });
  }, 1);
  for (const std::string& e : errs) {
    EXPECT_NE(e.find("[broadcast] expected a source rank in [0, 2), got 2"), std::string::npos) << e;
    EXPECT_NE(e.find("[permute] expected distinct input and output buffers"), std::string::npos) << e;
    EXPECT_NE(e.find("[permute] expected source ranks in [-1, 2), got 2"), std::string::npos) << e;
    EXPECT_NE(e.find("[all_to_all] expected distinct input and output buffers"), std::string::npos) << e;
    EXPECT_NE(e.find("mean expects a floating buffer"), std::string::npos) << e;
  }
}

// The size-1 default group outside launch(): all_to_all and permute are copies.
TEST(SpmdComm, GroupOfOneAllToAllAndPermute) {
  dist::ProcessGroup& g = dist::default_group();
  ASSERT_EQ(g.size(), 1);
  float in[3] = {1, 2, 3}, out[3] = {};
  g.all_to_all(in, out, 3, kFloat32);
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{1, 2, 3}));
  g.permute(in, out, 3, kFloat32, {-1});
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{0, 0, 0}));
  g.permute(in, out, 3, kFloat32, {0});
  EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(g.permute(in, out, 3, kFloat32, {1}), Error);
}

// ---------------------------------------------------------------- subgroups: a 2x2 mesh

TEST(SpmdComm, SubgroupsOfA2x2Mesh) {
  const int64_t cols = dist::local_group_id({{0, 2}, {1, 3}});  // devices sharing a column
  const int64_t rows = dist::local_group_id({{0, 1}, {2, 3}});
  std::vector<int> rank_c(4), rank_r(4);
  std::vector<float> sum_c(4), sum_r(4);
  std::vector<std::vector<float>> gat(4);
  dist::run_on_devices(4, [&](int d) {
    rank_c[size_t(d)] = group(cols).rank();
    rank_r[size_t(d)] = group(rows).rank();
    float x = float(1 << d);
    group(cols).all_reduce(&x, 1, kFloat32, ReduceOp::Sum);
    sum_c[size_t(d)] = x;
    float y = float(1 << d);
    group(rows).all_reduce(&y, 1, kFloat32, ReduceOp::Sum);
    sum_r[size_t(d)] = y;
    std::vector<float> out(2);
    const float me = float(d);
    group(cols).all_gather(&me, out.data(), 1, kFloat32);
    gat[size_t(d)] = out;
  }, 1);
  EXPECT_EQ(rank_c, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(rank_r, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(sum_c, (std::vector<float>{5, 10, 5, 10}));  // {0,2}: 1+4, {1,3}: 2+8
  EXPECT_EQ(sum_r, (std::vector<float>{3, 3, 12, 12}));  // {0,1}: 1+2, {2,3}: 4+8
  EXPECT_EQ(gat[0], (std::vector<float>{0, 2}));
  EXPECT_EQ(gat[2], (std::vector<float>{0, 2}));
  EXPECT_EQ(gat[1], (std::vector<float>{1, 3}));
  EXPECT_EQ(gat[3], (std::vector<float>{1, 3}));
}

// ---------------------------------------------------------------- determinism

// Float sums whose result depends on the order: every device gets the same bits, two runs
// give the same bits, and they are the bits of the sum in device order.
TEST(SpmdComm, AllReduceIsBitwiseDeterministicInDeviceOrder) {
  const int n = 4;
  const int64_t id = all_of(n), numel = 4099;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(size_t(numel)));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-20, 20);
  for (auto& v : inputs)
    for (float& x : v) x = std::ldexp(mant(rng), expo(rng));
  auto run = [&] {
    std::vector<std::vector<float>> out(n);
    dist::run_on_devices(n, [&](int d) {
      std::vector<float> b = inputs[size_t(d)];
      group(id).all_reduce(b.data(), numel, kFloat32, ReduceOp::Sum);
      out[size_t(d)] = b;
    }, 1);
    return out;
  };
  const auto a = run(), b = run();
  int order_matters = 0;
  for (int64_t i = 0; i < numel; ++i) {
    float in_order = inputs[0][size_t(i)];
    for (int d = 1; d < n; ++d) in_order += inputs[size_t(d)][size_t(i)];
    float reversed = inputs[n - 1][size_t(i)];
    for (int d = n - 2; d >= 0; --d) reversed += inputs[size_t(d)][size_t(i)];
    order_matters += in_order != reversed;
    for (int d = 0; d < n; ++d) {
      ASSERT_EQ(std::memcmp(&a[size_t(d)][size_t(i)], &in_order, sizeof(float)), 0) << "device " << d << " element " << i;
      ASSERT_EQ(std::memcmp(&b[size_t(d)][size_t(i)], &in_order, sizeof(float)), 0) << "run 2 device " << d;
    }
  }
  EXPECT_GT(order_matters, 100);  // the test can tell the orders apart
}

// ---------------------------------------------------------------- through the cpu kernels

Tensor device_input(int d, const Shape& shape) {
  std::vector<float> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(d, int64_t(i));
  return from_vector(v, shape);
}

TEST(SpmdComm, CollectiveOpsOnDeviceThreads) {
  for (int n : {2, 3, 4}) {
    const int64_t id = all_of(n);
    std::vector<std::vector<float>> ar(static_cast<size_t>(n)), ag(static_cast<size_t>(n)), rs(static_cast<size_t>(n)), bc(static_cast<size_t>(n));
    dist::run_on_devices(n, [&](int d) {
      const Tensor x = device_input(d, {n, 2});
      ar[size_t(d)] = ops::call1(ops::OpKind::AllReduce, {x}, {.ints = {int64_t(ReduceOp::Sum), id}}).to_vector<float>();
      ag[size_t(d)] = ops::call1(ops::OpKind::AllGather, {x}, {.ints = {id, n}}).to_vector<float>();
      rs[size_t(d)] =
          ops::call1(ops::OpKind::ReduceScatter, {x}, {.ints = {int64_t(ReduceOp::Sum), id, n}}).to_vector<float>();
      bc[size_t(d)] = ops::call1(ops::OpKind::Broadcast, {x}, {.ints = {n - 1, id}}).to_vector<float>();
    }, 1);
    const int64_t m = 2 * n;
    for (int d = 0; d < n; ++d) {
      ASSERT_EQ(ag[size_t(d)].size(), size_t(m * n));
      for (int64_t i = 0; i < m; ++i) {
        float sum = value(0, i);
        for (int r = 1; r < n; ++r) sum += value(r, i);
        EXPECT_EQ(ar[size_t(d)][size_t(i)], sum) << n << " devices";
        EXPECT_EQ(bc[size_t(d)][size_t(i)], value(n - 1, i));
        for (int r = 0; r < n; ++r) EXPECT_EQ(ag[size_t(d)][size_t(r * m + i)], value(r, i));
      }
      ASSERT_EQ(rs[size_t(d)].size(), 2u);
      for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(rs[size_t(d)][size_t(j)], ar[0][size_t(2 * d + j)]);
    }
  }
}

// all_to_all of x [A, B, C] on device d, split along s and concatenated along c, against
// the definition: chunk r of the output along c is device r's chunk d along s.
TEST(SpmdComm, AllToAllOpAndItsGradient) {
  const Shape shape = {4, 6, 2};
  for (int n : {2, 3}) {
    const int64_t id = all_of(n);
    for (auto [s, c] : std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {1, 2}, {1, 1}}) {
      if (shape[size_t(s)] % n != 0) continue;
      std::vector<Tensor> outs(static_cast<size_t>(n)), grads(static_cast<size_t>(n));
      dist::run_on_devices(n, [&](int d) {
        Tensor x = device_input(d, shape);
        // A non-contiguous input: the kernel reads strided chunks.
        Tensor xt = x.permute({2, 1, 0}).contiguous().permute({2, 1, 0});
        xt.set_requires_grad(true);
        Tensor y = ops::call1(ops::OpKind::AllToAll, {xt},
                              ops::attr::AllToAll{.split_dim = s, .concat_dim = c, .group = id, .world = n}.pack());
        outs[size_t(d)] = y.detach();
        // d(sum(y * w_d)) / dx where w_d = device_input(10 + d): the gradient of chunk r of x
        // on device d is chunk d of w_r (sent back by the reverse all_to_all).
        (y * device_input(10 + d, y.shape())).sum().backward();
        grads[size_t(d)] = xt.grad();
      }, 1);
      for (int d = 0; d < n; ++d) {
        std::vector<Tensor> parts;
        const int64_t cs = shape[size_t(s)] / n;
        for (int r = 0; r < n; ++r) parts.push_back(device_input(r, shape).narrow(s, d * cs, cs));
        const Tensor want = cat(parts, c);
        ASSERT_EQ(outs[size_t(d)].shape(), want.shape()) << "split " << s << " concat " << c;
        EXPECT_EQ(outs[size_t(d)].to_vector<float>(), want.to_vector<float>()) << "split " << s << " concat " << c;
        std::vector<Tensor> gparts;
        for (int r = 0; r < n; ++r) {
          const Tensor w = device_input(10 + r, want.shape());
          const int64_t cc = want.shape()[size_t(c)] / n;
          gparts.push_back(w.narrow(c, d * cc, cc));
        }
        EXPECT_EQ(grads[size_t(d)].to_vector<float>(), cat(gparts, s).contiguous().to_vector<float>())
            << "gradient, split " << s << " concat " << c;
      }
    }
  }
}

TEST(SpmdComm, CollectivePermuteOpAndItsGradient) {
  const int n = 4;
  const int64_t id = all_of(n);
  // Device d receives from source_of[d]; device 2 from nobody; device 3 sends to nobody.
  const std::vector<int64_t> source_of = {1, 0, -1, 2};
  std::vector<std::vector<float>> outs(n), grads(n);
  dist::run_on_devices(n, [&](int d) {
    Tensor x = device_input(d, {3});
    x.set_requires_grad(true);
    Tensor y = ops::call1(ops::OpKind::CollectivePermute, {x},
                          ops::attr::CollectivePermute{.group = id, .source_of = source_of}.pack());
    outs[size_t(d)] = y.to_vector<float>();
    (y * device_input(10 + d, {3})).sum().backward();
    grads[size_t(d)] = x.grad().to_vector<float>();
  }, 1);
  for (int d = 0; d < n; ++d) {
    const int src = int(source_of[size_t(d)]);
    const std::vector<float> want = src < 0 ? std::vector<float>(3, 0.f) : device_input(src, {3}).to_vector<float>();
    EXPECT_EQ(outs[size_t(d)], want) << "device " << d;
    // x_d went to the device t with source_of[t] == d, whose weight is w_t.
    int t = -1;
    for (int k = 0; k < n; ++k)
      if (source_of[size_t(k)] == d) t = k;
    const std::vector<float> gwant = t < 0 ? std::vector<float>(3, 0.f) : device_input(10 + t, {3}).to_vector<float>();
    EXPECT_EQ(grads[size_t(d)], gwant) << "gradient on device " << d;
  }
  EXPECT_NE(error_of([&] {
              ops::call1(ops::OpKind::CollectivePermute, {device_input(0, {3})},
                         ops::attr::CollectivePermute{.group = id, .source_of = {1, 1, 0, 2}}.pack());
            }).find("at most one rank"),
            std::string::npos);
}

// A compiled program (Data -> all_gather -> output) run by the cpu backend on each device:
// the kernels find the local group, and the buffers are charged to the running device.
TEST(SpmdComm, CompiledProgramOnDevicesChargesEachDevice) {
  ensure_initialized();
  const int n = 3;
  const int64_t id = all_of(n);
  const int64_t rows = 1 << 12;  // 16 KiB per device input, 48 KiB gathered
  compiler::Program p;
  p.num_inputs = 1;
  compiler::PNode in;
  in.kind = compiler::NodeKind::Data;
  in.input = 0;
  in.outs = {{{rows}, kFloat32}};
  compiler::PNode gather;
  gather.op = ops::OpKind::AllGather;
  gather.attrs = {.ints = {id, n}};
  gather.operands = {{0, 0}};
  gather.outs = {{{rows * n}, kFloat32}};
  p.nodes = {in, gather};
  p.outputs = {{1, 0}};
  p.verify();
  const Device xla0{DeviceType::XLA, 0};
  auto ex = cpu::lower(p, xla0);
  std::vector<int64_t> before(n), during(n), after(n), peak(n);
  std::vector<std::vector<float>> got(n);
  dist::run_on_devices(n, [&](int d) {
    const Device mine{DeviceType::XLA, d};
    EXPECT_EQ(cpu::charged_device(xla0), mine);
    before[size_t(d)] = xm::get_memory_info(mine).bytes_used;
    {
      Tensor x = backend::backend_for(DeviceType::XLA).allocate({rows}, kFloat32, xla0);
      cpu::copy_into(x, device_input(d, {rows}));
      std::vector<Tensor> out = ex->run({x});
      x = Tensor();
      during[size_t(d)] = xm::get_memory_info(mine).bytes_used;
      got[size_t(d)] = out[0].to_vector<float>();
    }
    after[size_t(d)] = xm::get_memory_info(mine).bytes_used;
    peak[size_t(d)] = xm::get_memory_info(mine).peak_bytes_used;
  }, 1);
  for (int d = 0; d < n; ++d) {
    EXPECT_EQ(during[size_t(d)] - before[size_t(d)], rows * n * 4) << "device " << d << ": the gathered output";
    EXPECT_EQ(after[size_t(d)], before[size_t(d)]) << "device " << d;
    EXPECT_GE(peak[size_t(d)], before[size_t(d)] + rows * (n + 1) * 4) << "device " << d << ": input and output";
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(d)][size_t(r * rows + 5)], value(r, 5));
  }
  // Off the device threads the executable charges its own device again.
  EXPECT_EQ(cpu::charged_device(xla0), xla0);
}

// ---------------------------------------------------------------- more devices than cores

TEST(SpmdComm, EightDevicesOnFewCores) {
  const int n = 8;
  const int64_t id = all_of(n);
  std::vector<float> sums(n);
  std::vector<int> gathered_ok(n, 0);
  dist::run_on_devices(n, [&](int d) {
    float total = 0;
    for (int step = 0; step < 50; ++step) {
      float x = float(d + step);
      group(id).all_reduce(&x, 1, kFloat32, ReduceOp::Sum);
      total += x;
      std::vector<int32_t> all(n);
      const int32_t me = d * step;
      group(id).all_gather(&me, all.data(), 1, kInt32);
      bool ok = true;
      for (int r = 0; r < n; ++r) ok = ok && all[size_t(r)] == r * step;
      gathered_ok[size_t(d)] += ok;
    }
    sums[size_t(d)] = total;
  }, 1);
  // sum over steps of (28 + 8 step) = 50 * 28 + 8 * 1225
  for (int d = 0; d < n; ++d) {
    EXPECT_EQ(sums[size_t(d)], 50.f * 28 + 8.f * 1225) << "device " << d;
    EXPECT_EQ(gathered_ok[size_t(d)], 50) << "device " << d;
  }
}

// ---------------------------------------------------------------- failures end, naming the cause

// Device 3 never reaches the all-reduce (it waits for the others to give up): the others time
// out and the error names the collective and device 3.
TEST(SpmdFailures, CollectiveReachedByThreeOfFourTimesOut) {
  ScopedTimeout timeout(1);
  const int64_t id = all_of(4);
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::vector<std::string> seen(4);
  const std::string err = error_of([&] {
    dist::run_on_devices(4, [&](int d) {
      if (d == 3) {
        std::unique_lock<std::mutex> l(mu);
        cv.wait_for(l, std::chrono::seconds(30), [&] { return released; });
        return;
      }
      float x[6] = {};
      try {
        group(id).all_reduce(x, 6, kFloat32, ReduceOp::Sum);
      } catch (const Error& e) {
        seen[size_t(d)] = e.what();
        std::lock_guard<std::mutex> l(mu);
        released = true;
        cv.notify_all();
        throw;
      }
    }, 1);
  });
  EXPECT_NE(err.find("[spmd] device 0 failed: [spmd] all_reduce (sum) of 6 float32 elements over devices {0,1,2,3} "
                     "timed out after 1 s: device 3 did not arrive"),
            std::string::npos)
      << err;
  for (int d = 0; d < 3; ++d) EXPECT_NE(seen[size_t(d)].find("device 3 did not arrive"), std::string::npos) << d;
  // The devices and the group work again in the next run.
  std::vector<float> ok(4);
  dist::run_on_devices(4, [&](int d) {
    float x = 1;
    group(id).all_reduce(&x, 1, kFloat32, ReduceOp::Sum);
    ok[size_t(d)] = x;
  }, 1);
  EXPECT_EQ(ok, (std::vector<float>{4, 4, 4, 4}));
}

// Device 3 returns without calling the collective: the others fail at once (the default
// timeout is far away) naming device 3.
TEST(SpmdFailures, DeviceThatFinishedFailsItsPeersAtOnce) {
  ScopedTimeout timeout(600);
  const int64_t id = all_of(4);
  const std::string err = error_of([&] {
    dist::run_on_devices(4, [&](int d) {
      if (d == 3) return;
      std::vector<float> out(8);
      const float x[2] = {1, 2};
      group(id).all_gather(x, out.data(), 2, kFloat32);
    }, 1);
  });
  EXPECT_NE(err.find("all_gather of 2 float32 elements over devices {0,1,2,3} cannot complete: device 3 finished its "
                     "program without reaching it"),
            std::string::npos)
      << err;
}

// Device 2 throws before the collective: the others, waiting in it, are aborted (they do not
// wait for the timeout), and the error reported is device 2's.
TEST(SpmdFailures, ThrowingDeviceAbortsItsPeers) {
  ScopedTimeout timeout(600);
  const int64_t id = all_of(4);
  std::vector<std::string> seen(4);
  const std::string err = error_of([&] {
    dist::run_on_devices(4, [&](int d) {
      if (d == 2) throw std::runtime_error("boom on purpose");
      float x = 1;
      try {
        group(id).all_reduce(&x, 1, kFloat32, ReduceOp::Sum);
      } catch (const Error& e) {
        seen[size_t(d)] = e.what();
        throw;
      }
    }, 1);
  });
  EXPECT_EQ(err, "[spmd] device 2 failed: boom on purpose");
  for (int d : {0, 1, 3})
    EXPECT_EQ(seen[size_t(d)], "[spmd] aborted: device 2 failed: boom on purpose") << "device " << d;
}

// A device waiting in another group's collective is aborted too.
TEST(SpmdFailures, AbortReachesEveryGroup) {
  ScopedTimeout timeout(600);
  const int64_t pairs = dist::local_group_id({{0, 1}, {2, 3}});
  const int64_t all = all_of(4);
  std::vector<std::string> seen(4);
  const std::string err = error_of([&] {
    dist::run_on_devices(4, [&](int d) {
      if (d == 0) throw std::runtime_error("device zero fails");
      try {
        float x = 1;
        group(pairs).all_reduce(&x, 1, kFloat32, ReduceOp::Sum);  // 1 waits for 0; 2 and 3 complete it
        if (d >= 2) group(all).barrier();                         // 2 and 3 wait for 0 and 1
      } catch (const Error& e) {
        seen[size_t(d)] = e.what();
        throw;
      }
    }, 1);
  });
  EXPECT_EQ(err, "[spmd] device 0 failed: device zero fails");
  // Each was stopped by the abort, not by noticing later that device 0 had finished.
  for (int d : {1, 2, 3}) EXPECT_EQ(seen[size_t(d)], "[spmd] aborted: device 0 failed: device zero fails") << d;
}

// A group over 4 devices used in a run of 2: the collective fails at once.
TEST(SpmdFailures, GroupLargerThanTheRun) {
  ScopedTimeout timeout(600);
  const int64_t id = all_of(4);
  const std::string err = error_of([&] { dist::run_on_devices(2, [&](int) { group(id).barrier(); }, 1); });
  EXPECT_NE(err.find("barrier over devices {0,1,2,3} cannot complete: devices 2,3 not running (run_on_devices "
                     "started 2)"),
            std::string::npos)
      << err;
}

TEST(SpmdFailures, MismatchedCollectivesAreNamed) {
  ScopedTimeout timeout(600);
  const int64_t id = all_of(2);
  const std::string err = error_of([&] {
    dist::run_on_devices(2, [&](int d) {
      float x[4] = {};
      if (d == 0) group(id).all_reduce(x, 4, kFloat32, ReduceOp::Sum);
      else group(id).broadcast(x, 4, kFloat32, 0);
    }, 1);
  });
  EXPECT_NE(err.find("collectives over devices {0,1} do not match: device 0 called all_reduce (sum) of 4 float32 "
                     "elements, device 1 called broadcast (root 0) of 4 float32 elements"),
            std::string::npos)
      << err;
}

}  // namespace
