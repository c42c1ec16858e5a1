#include "backend/cpu/bf16.h"

#include <atomic>
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include <dnnl.hpp>

#include "axle/error.h"

namespace axle::cpu {
namespace {

struct Features {
  bool avx2 = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false, amx_tile = false;
};

Features cpu_features() {
  Features f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1;
#endif
  return f;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown processor";
}

const char* isa_name(dnnl::cpu_isa i) {
  switch (i) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

bool debug_on() {
  const char* e = std::getenv("AXLE_DEBUG");
  return e && *e && std::strcmp(e, "0") != 0;
}

Bf16Compute decide() {
  const Features f = cpu_features();
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const bool amx = f.amx_bf16 && f.amx_tile && isa == dnnl::cpu_isa::avx512_core_amx;
  Bf16Compute c = amx ? Bf16Compute::Native : Bf16Compute::F32;
  const char* why = amx ? "AMX-BF16: oneDNN bf16 primitives with float32 accumulation"
                        : (f.avx512_bf16 ? "AVX512_BF16 without AMX: bf16 GEMM is slower than float32 here"
                                         : "no bf16 instructions");
  if (const char* e = std::getenv("AXLE_BF16_COMPUTE"); e && *e) {
    const std::string v = e;
    AXLE_CHECK(v == "native" || v == "fp32", "[bf16] AXLE_BF16_COMPUTE: expected native or fp32, got '", v, "'");
    c = v == "native" ? Bf16Compute::Native : Bf16Compute::F32;
    why = "forced by AXLE_BF16_COMPUTE";
  }
  if (debug_on())
    std::fprintf(stderr, "[axle] bf16 compute: %s (%s; %s)\n", bf16_compute_name(c), why, bf16_cpu_summary().c_str());
  return c;
}

std::atomic<int> g_mode{-1};
std::once_flag g_once;

}  // namespace

Bf16Compute bf16_compute() {
  std::call_once(g_once, [] {
    int expected = -1;
    g_mode.compare_exchange_strong(expected, int(decide()));
  });
  return Bf16Compute(g_mode.load(std::memory_order_relaxed));
}

Bf16Compute set_bf16_compute(Bf16Compute c) {
  const Bf16Compute old = bf16_compute();
  g_mode.store(int(c));
  return old;
}

const char* bf16_compute_name(Bf16Compute c) { return c == Bf16Compute::Native ? "native" : "fp32"; }

std::string bf16_cpu_summary() {
  const Features f = cpu_features();
  std::string s = cpu_name() + ":";
  if (f.avx2) s += " avx2";
  if (f.avx512f) s += " avx512f";
  if (f.avx512_bf16) s += " avx512_bf16";
  if (f.amx_bf16) s += " amx_bf16";
  if (f.amx_tile) s += " amx_tile";
  s += std::string("; oneDNN isa ") + isa_name(dnnl::get_effective_cpu_isa());
  return s;
}

}  // namespace axle::cpu
