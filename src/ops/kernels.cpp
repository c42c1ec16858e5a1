// The kernel registry: a kernel table per backend, filled once by each backend's explicit
// registration function.
#include "ops/kernels.h"

#include <atomic>
#include <mutex>

#include "core/allocator.h"
#include "core/hooks.h"

namespace axle::ops {
namespace {

constexpr size_t kNumOps = size_t(OpKind::kNumOps);
constexpr size_t kMaxBackends = 8;

struct Tables {
  std::mutex mu;  ///< serialises additions; lookups read the slots without it
  std::array<std::atomic<KernelTable*>, kMaxBackends> slots{};
};

Tables& tables() {
  static Tables* t = new Tables();  // leaked on purpose: kernels run during static destruction
  return *t;
}

KernelTable* find(Tables& t, std::string_view backend) {
  for (auto& s : t.slots) {
    KernelTable* k = s.load(std::memory_order_acquire);
    if (k == nullptr) return nullptr;
    if (k->backend() == backend) return k;
  }
  return nullptr;
}

}  // namespace

void ensure_kernels_registered() { ensure_initialized(); }

void KernelTable::set(OpKind op, KernelFn fn) {
  AXLE_CHECK(size_t(op) < kNumOps, "[kernels] expected a known op, got ", int(op));
  fns_[size_t(op)] = fn;
}

KernelFn KernelTable::registered(OpKind op) const { return size_t(op) < kNumOps ? fns_[size_t(op)] : nullptr; }

KernelFn registered_kernel(std::string_view backend, OpKind op) { return kernels(backend).registered(op); }

bool KernelTable::supports(OpKind op) const {
  ensure_kernels_registered();
  return size_t(op) < kNumOps && fns_[size_t(op)] != nullptr;
}

KernelFn KernelTable::get(OpKind op) const {
  ensure_kernels_registered();
  KernelFn fn = size_t(op) < kNumOps ? fns_[size_t(op)] : nullptr;
  AXLE_CHECK(fn, "[", size_t(op) < kNumOps ? op_name(op) : "?", "] no kernel registered for this op in the ", backend_,
             " backend");
  return fn;
}

KernelTable& kernels(std::string_view backend) {
  Tables& t = tables();
  if (KernelTable* k = find(t, backend)) return *k;
  std::lock_guard<std::mutex> lock(t.mu);
  if (KernelTable* k = find(t, backend)) return *k;
  for (auto& s : t.slots) {
    if (s.load(std::memory_order_acquire) != nullptr) continue;
    auto* k = new KernelTable(std::string(backend));  // never freed, as the registry
    s.store(k, std::memory_order_release);
    return *k;
  }
  AXLE_FAIL("[kernels] expected at most ", kMaxBackends, " backends with kernels, got another: ", backend);
}

const KernelTable& kernels_for(DeviceType t) { return kernels(backend_name_for(t)); }

void register_kernel(std::string_view backend, OpKind op, KernelFn fn) { kernels(backend).set(op, fn); }
bool supports(std::string_view backend, OpKind op) { return kernels(backend).supports(op); }
KernelFn kernel(std::string_view backend, OpKind op) { return kernels(backend).get(op); }

}  // namespace axle::ops
