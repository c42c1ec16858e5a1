// Transfers between the host (cpu tensors) and the lazy device.
#include "backend/backend.h"
#include "dist/spmd_mode.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
using namespace detail;

Tensor to_device(const Tensor& t, Device dev) {
  metrics::ScopedTimer timer(stats().to_device);
  auto lt = std::make_shared<LazyTensor>();
  lt->buffer = backend::backend_for(dev).to_device(t, dev);
  lt->label = "copied from cpu with .to()";
  lt->label_rank = kLabelOrigin;
  stats().create.add();
  // SPMD: unsharded data stays one buffer (every device reads it) until it is sharded or
  // used (torch_xla's virtual device).
  if (dist::detail::spmd_mode()) [[unlikely]] {
    static metrics::Counter& virtual_usage = metrics::counter("VirtualDeviceUsage");
    virtual_usage.add();
  }
  return make_xla(t.shape(), t.dtype(), dev, std::move(lt));
}

Tensor to_cpu(const Tensor& t, const char* reason) {
  auto lt = shared_lazy_of(t);
  if (lt->ir) {
    TraceContext* ctx = current_context();
    AXLE_CHECK(!ctx || !ctx->full_graph, "[", reason, "] reads a value inside compiled function '", ctx->name,
               "' (full_graph=true), which would split its graph; return the tensor from the function and read "
               "it after the call, or compile with full_graph=false");
    execute({lt}, "value read", ctx ? ctx->name : "step");
  }
  const Tensor& buffer = ready_buffer(*lt);  // waits for the execution producing it, only that one
  rethrow_async_error();                     // an earlier execution failed: a read reports it too
  metrics::ScopedTimer timer(stats().from_device);
  if (!lt->shards.empty()) [[unlikely]]
    return spmd_to_host(*lt, t.shape());
  return backend::backend_for(t.device()).to_host(buffer);
}

}  // namespace axle::lazy
