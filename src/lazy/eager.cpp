// Eager mode (debugging): each op on an xla tensor runs at once as a cached one-op graph.
#include "axle/runtime.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
namespace detail {
std::atomic<bool> g_eager{false};
}  // namespace detail
using namespace detail;

bool eager_active() { return g_eager.load(std::memory_order_relaxed) && current_context() == nullptr; }

void run_eagerly(const ops::Tensors& outs) {
  std::vector<std::shared_ptr<LazyTensor>> targets;
  for (const Tensor& t : outs) targets.push_back(shared_lazy_of(t));
  execute(targets, "eager op", "eager");
}

}  // namespace axle::lazy

namespace axle {
namespace experimental {
void eager_mode(bool on) { lazy::detail::g_eager.store(on); }
bool is_eager_mode() { return lazy::detail::g_eager.load(); }
}  // namespace experimental
}  // namespace axle
