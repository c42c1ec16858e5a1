// The dispatcher: one path for every op call. Shape rule -> device kernel -> autograd record.
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "axle/autograd.h"
#include "axle/metrics.h"
#include "axle/ops.h"
#include "ops/autocast.h"
#include "ops/hooks.h"
#include "ops/kernels.h"
#include "ops/op.h"

namespace axle::ops {
namespace {

constexpr size_t kNumOps = size_t(OpKind::kNumOps);
const char* const kNames[] = {
#define AXLE_OP(name, str, ...) str,
#include "ops/ops.def"
#undef AXLE_OP
};

std::array<OpDef, kNumOps>& table() {
  static std::array<OpDef, kNumOps> t{};
  return t;
}

thread_local bool g_grad_enabled = true;

const char* const kOpTimerNames[] = {
#define AXLE_OP(name, str, ...) "op::" str,
#include "ops/ops.def"
#undef AXLE_OP
};

}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("AXLE_PROFILE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}
const char* op_timer_name(OpKind k) { return kOpTimerNames[size_t(k)]; }

bool checking_numerics() {
  static const bool on = [] {
    const char* v = std::getenv("AXLE_CHECK_NUMERICS");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

void check_finite(const Tensor& t, const std::string& what) {
  if (!t.defined() || t.dtype() != kFloat32 || !t.device().is_cpu()) return;
  Tensor c = t.contiguous();
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  int64_t bad = n;
#pragma omp parallel for reduction(min : bad) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) bad = std::min(bad, i);
  if (bad == n) return;
  AXLE_FAIL("[numerics] ", what, " produced ", std::isnan(p[bad]) ? "NaN" : "Inf", " at element ", bad, " of ",
            shape_str(t.shape()), " (AXLE_CHECK_NUMERICS=1)");
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_ops();
    register_shape_ops();
    register_index_ops();
    register_reduce_ops();
    register_linalg_ops();
    register_conv_ops();
    register_pool_ops();
    register_attention_ops();
    register_norm_ops();
    register_fused_ops();
    register_collective_ops();
    register_spmd_ops();
    register_barrier_ops();
  });
}

void register_op(OpKind k, const OpDef& d) { table()[size_t(k)] = d; }
const OpDef& op_def(OpKind k) {
  ensure_registered();
  return table()[size_t(k)];
}
const char* op_name(OpKind k) { return kNames[size_t(k)]; }
OpKind op_from_name(const std::string& name) {
  for (size_t i = 0; i < kNumOps; ++i)
    if (name == kNames[i]) return OpKind(i);
  AXLE_FAIL("[op] unknown op '", name, "'");
}

Tensors call(OpKind k, const Tensors& in, const Attrs& a) {
  const OpDef& d = op_def(k);
  AXLE_CHECK(d.infer, "[", op_name(k), "] op has no registered definition");
  // All inputs live on one device; a 0-d cpu tensor (a scalar) may join any device.
  Device dev = kCPU;
  bool have = false;
  for (const Tensor& t : in) {
    if (!t.defined()) continue;
    const TensorImpl* ti = t.impl();
    if (ti->device.is_cpu() && ti->shape.empty()) continue;
    if (!have) { dev = ti->device; have = true; continue; }
    AXLE_CHECK(ti->device == dev, "[", op_name(k), "] expected all tensors on one device, got ", dev, " and ",
               ti->device);
  }
  // Autocast (ops.def's AC_ column): inside a region of this device type, the op runs on
  // its inputs cast by cast ops (traced and autograd-recorded like any op); the cast inputs
  // need no further cast, so the call below takes this branch once.
  if (const AutocastRule rule = autocast_rule(k); rule != AutocastRule::None) [[unlikely]] {
    Tensors cast_in;
    if (autocast_inputs(k, rule, dev.type, in, cast_in)) return call(k, cast_in, a);
  }
  // TraceTime: what an op on the lazy device costs the training loop (shape rule,
  // recording, autograd), reported against the step time by bench/run.
  std::optional<metrics::ScopedTimer> trace;
  const LazyHooks* lazy = dev.is_cpu() ? nullptr : &lazy_hooks();
  if (lazy) trace.emplace(lazy->trace_timer());
  std::vector<Meta> metas = d.infer(in, a);
  Tensors out;
  if (lazy) {
    out = lazy->record(k, in, a, metas, dev);
    if (lazy->eager_active()) [[unlikely]] {
      trace.reset();
      lazy->run_eagerly(out);
    }
  } else if (profiling()) [[unlikely]] {
    static metrics::Timer* timers[size_t(OpKind::kNumOps)] = {};
    if (!timers[size_t(k)]) timers[size_t(k)] = &metrics::timer(kOpTimerNames[size_t(k)]);
    metrics::ScopedTimer t(*timers[size_t(k)]);
    out = kernels_for(dev.type).get(k)(in, a, metas);
  } else {
    out = kernels_for(dev.type).get(k)(in, a, metas);
  }
  if (dev.is_cpu() && checking_numerics()) [[unlikely]]
    for (size_t j = 0; j < out.size(); ++j)
      check_finite(out[j], std::string("op '") + op_name(k) + "' output " + std::to_string(j));
  // Outputs are always fresh handles, so autograd never relabels an input.
  for (Tensor& o : out)
    for (const Tensor& i : in)
      if (o.is_same(i)) o = o.detach();

  if (g_grad_enabled && d.vjp) {
    std::vector<bool> needs(in.size(), false);
    bool any = false;
    for (size_t i = 0; i < in.size(); ++i) {
      needs[i] = in[i].defined() && in[i].requires_grad();
      any = any || needs[i];
    }
    if (any) autograd_hooks().record(k, a, in, out, std::move(needs));
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  const Shape& gs = g.shape();
  if (gs == shape) return g;
  const int64_t lead = int64_t(gs.size()) - int64_t(shape.size());
  AXLE_CHECK(lead >= 0, "[sum_to] cannot reduce ", shape_str(gs), " to ", shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < int64_t(gs.size()); ++i)
    if (i < lead || (shape[size_t(i - lead)] == 1 && gs[size_t(i)] != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  return r.shape() == shape ? r : reshape(r, shape);
}

}  // namespace axle::ops

namespace axle {
bool grad_enabled() { return ops::g_grad_enabled; }
void set_grad_enabled(bool on) { ops::g_grad_enabled = on; }
}  // namespace axle
