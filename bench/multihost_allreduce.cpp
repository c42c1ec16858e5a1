// axle-multihost-allreduce: all-reduce bandwidth of SPMD's collectives, on one host (device
// threads, shared memory) or across hosts (one process per host, Gloo between them), and of
// a raw Gloo all-reduce of ours between the same processes. bench/multihost.sh runs it.
//
//   axle-multihost-allreduce spmd    # AXLE_CPU_DEVICES per host; RANK/WORLD_SIZE/MASTER_ADDR: hosts
//   axle-multihost-allreduce gloo    # RANK, WORLD_SIZE, AXLE_BENCH_GLOO_DIR (a directory both
//                                    # see), AXLE_BENCH_HOST (this host's address)
//
// spmd: x [n, M] split over the mesh "data" (one row per device), y = x.sum(0) then sync:
// every device's row is a partial sum the partitioner all-reduces (M floats). Rank 0 prints
// one line per size: MB, median ms, GB/s (algorithmic: buffer bytes / time).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "axle/axle.h"

using namespace axle;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<int64_t> kSizes = {16384, 262144, 1048576, 4194304};

template <class F>
double median_ms(int iters, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
  return t[t.size() / 2];
}

void line(const char* what, int64_t m, double ms) {
  const double mb = double(m) * 4.0 / 1e6;
  std::printf("%-6s %10.3f MB %10.3f ms %8.3f GB/s\n", what, mb, ms, mb / ms);
  std::fflush(stdout);
}

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

void spmd() {
  omp_set_num_threads(1);
  runtime::use_spmd();
  const int64_t n = runtime::global_runtime_device_count();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  const xs::Mesh mesh(ids, {n}, {"data"});
  for (int64_t m : kSizes) {
    Tensor x = full({n, m}, 1.0).to(device());
    xs::mark_sharding(x, mesh, {"data", xs::None});
    Tensor y;
    auto once = [&] {
      y = x.sum({0});
      axle::sync();
    };
    once();  // compile
    const double ms = median_ms(m >= 1048576 ? 10 : 40, once);
    if (runtime::global_ordinal() == 0) line("spmd", m, ms);
  }
}

void raw_gloo() {
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 2);
  const char* dir = std::getenv("AXLE_BENCH_GLOO_DIR");
  const char* host = std::getenv("AXLE_BENCH_HOST");
  if (!dir || !host) throw std::runtime_error("gloo needs AXLE_BENCH_GLOO_DIR and AXLE_BENCH_HOST");
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->connectFullMesh(store, dev);
  int tag = 0;
  for (int64_t m : kSizes) {
    std::vector<float> buf(size_t(m), 1.0f);
    auto once = [&] {
      gloo::AllreduceOptions o(ctx);
      o.setOutput(buf.data(), buf.size());
      o.setTag(++tag);
      void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      o.setReduceFunction(fn);
      gloo::allreduce(o);
    };
    once();
    gloo::BarrierOptions b(ctx);
    b.setTag(++tag);
    gloo::barrier(b);
    const double ms = median_ms(m >= 1048576 ? 10 : 40, once);
    if (rank == 0) line("gloo", m, ms);
  }
  ctx->closeConnections();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "spmd";
  try {
    if (mode == "gloo") raw_gloo();
    else spmd();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "axle-multihost-allreduce: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
