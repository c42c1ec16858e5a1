// axle::autocast: the per-thread region state, and the casts the dispatcher inserts.
#include "axle/autocast.h"

#include "axle/ops.h"
#include "ops/autocast.h"

namespace axle {
namespace {

struct Region {
  bool enabled = false;
  DType dtype = DType::BFloat16;
};
// One region per device type, per thread (PyTorch keeps one per device type too).
thread_local Region g_region[2];

Region& region(DeviceType t) { return g_region[t == DeviceType::CPU ? 0 : 1]; }

}  // namespace

autocast::autocast(const Device& device, DType dtype, bool enabled) : type_(device.type) {
  AXLE_CHECK(dtype == DType::BFloat16 || dtype == DType::Float32,
             "[autocast] expected dtype bfloat16 (or float32, which casts nothing down), got ", dtype);
  Region& r = region(type_);
  prev_enabled_ = r.enabled;
  prev_dtype_ = r.dtype;
  r.enabled = enabled;
  r.dtype = dtype;
}

autocast::~autocast() {
  Region& r = region(type_);
  r.enabled = prev_enabled_;
  r.dtype = prev_dtype_;
}

bool autocast::is_enabled(const Device& device) { return region(device.type).enabled; }
DType autocast::dtype(const Device& device) { return region(device.type).dtype; }

namespace ops {

std::optional<DType> autocast_target(AutocastRule rule, DType region, const std::vector<DType>& floating) {
  switch (rule) {
    case AutocastRule::None: return std::nullopt;
    case AutocastRule::Lower: return region;
    case AutocastRule::Fp32: return DType::Float32;
    case AutocastRule::Promote: {  // the widest floating input type
      if (floating.empty()) return std::nullopt;
      DType to = floating[0];
      for (DType t : floating) to = promote(to, t);
      return to;
    }
  }
  return std::nullopt;
}

bool autocast_inputs(OpKind k, AutocastRule rule, DeviceType dev, const Tensors& in, Tensors& out) {
  const Region& r = region(dev);
  if (!r.enabled || rule == AutocastRule::None) return false;
  // Eligible: defined floating tensors on the region's device type (a 0-d cpu scalar joining
  // an xla op keeps its type, and so do integer inputs such as targets and indices).
  auto eligible = [&](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && t.device().type == dev;
  };
  std::vector<DType> floating;
  for (const Tensor& t : in)
    if (eligible(t)) floating.push_back(t.dtype());
  const std::optional<DType> to = autocast_target(rule, r.dtype, floating);
  if (!to) return false;
  bool changed = false;
  for (const Tensor& t : in) changed = changed || (eligible(t) && t.dtype() != *to);
  if (!changed) return false;
  out.clear();
  out.reserve(in.size());
  for (const Tensor& t : in) out.push_back(eligible(t) && t.dtype() != *to ? cast(t, *to) : t);
  return true;
}

Tensor autocast_fp32(const Tensor& x) {
  if (!x.defined()) return x;
  Tensors out;
  return autocast_inputs(OpKind::Cast, AutocastRule::Fp32, x.device().type, {x}, out) ? out[0] : x;
}

}  // namespace ops
}  // namespace axle
