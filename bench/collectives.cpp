// axle-collectives: all-reduce bandwidth of axle's paths against raw Gloo at the same
// sizes, with 2 processes (or AXLE_NUM_DEVICES) on this host.
//
//   build/bin/axle-collectives            # table on stdout, from rank 0
//
// raw gloo: gloo::allreduce (sum) on a float buffer, its own context over a FileStore (TCP).
// axle cpu: dist::all_reduce(x) on a cpu tensor: a copy into the op's flat buffer, then the
//           group's all-reduce (shared memory between launch()ed ranks; AXLE_SHM=0: Gloo).
// axle xla: y = dist::all_reduce(x) on the lazy device, then sync(): a cached one-op graph.
// Bandwidth is the algorithmic one: buffer bytes / median time.
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
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

std::string fmt_header() {
  return "all-reduce, float32 sum, median ms, GB/s = bytes / time:\n"
         "        MB    gloo ms   GB/s    cpu ms    GB/s cpu/gl     xla ms    GB/s xla/gl";
}

}  // namespace

int main() {
  // The raw Gloo context rendezvouses in a directory the launched children inherit.
  std::string dir;
  if (const char* d = std::getenv("AXLE_BENCH_GLOO_DIR")) {
    dir = d;
  } else {
    std::string tmpl = (std::filesystem::temp_directory_path() / "axle-collectives-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = tmpl;
    ::setenv("AXLE_BENCH_GLOO_DIR", dir.c_str(), 1);
  }
  int world = 2;
  if (const char* n = std::getenv("AXLE_NUM_DEVICES")) world = std::max(2, std::atoi(n));
  try {
    axle::launch(
        [&](int rank) {
          omp_set_num_threads(1);
          gloo::transport::tcp::attr attr;
          attr.hostname = "127.0.0.1";
          auto device = gloo::transport::tcp::CreateDevice(attr);
          gloo::rendezvous::FileStore store(dir);
          auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
          ctx->connectFullMesh(store, device);
          int tag = 0;
          auto barrier = [&] {
            gloo::BarrierOptions o(ctx);
            o.setTag(++tag);
            gloo::barrier(o);
          };
          xm::master_print(fmt_header());
          for (int64_t n : {1024L, 16384L, 262144L, 1048576L, 4194304L}) {
            const int iters = n >= 1048576 ? 20 : 100;
            std::vector<float> buf(size_t(n), 1.0f);
            auto raw = [&] {
              gloo::AllreduceOptions o(ctx);
              o.setOutput(buf.data(), buf.size());
              o.setTag(++tag);
              void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
              o.setReduceFunction(fn);
              gloo::allreduce(o);
            };
            Tensor xc = full({n}, 1.0);
            Tensor xx = xc.to(axle::device());
            auto axle_cpu = [&] { Tensor y = dist::all_reduce(xc); };
            auto axle_xla = [&] {
              Tensor y = dist::all_reduce(xx);
              axle::sync();
            };
            raw(), axle_cpu(), axle_xla();  // warm up (connections, buffers, the graph's compile)
            barrier();
            const double t_raw = median_ms(iters, raw);
            barrier();
            const double t_cpu = median_ms(iters, axle_cpu);
            barrier();
            const double t_xla = median_ms(iters, axle_xla);
            const double mb = double(n) * 4.0 / 1e6;
            char line[256];
            std::snprintf(line, sizeof line, "%10.3f %10.3f %8.2f %10.3f %8.2f %6.2f %10.3f %8.2f %6.2f", mb, t_raw,
                          mb / t_raw, t_cpu, mb / t_cpu, t_cpu / t_raw, t_xla, mb / t_xla, t_xla / t_raw);
            xm::master_print(std::string(line));
          }
          barrier();
          ctx->closeConnections();
        },
        {.world_size = world});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "axle-collectives: error: %s\n", e.what());
    std::filesystem::remove_all(dir);
    return 1;
  }
  if (!std::getenv("AXLE_LAUNCH_RANK")) std::filesystem::remove_all(dir);
  return 0;
}
