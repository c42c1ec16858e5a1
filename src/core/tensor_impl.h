// Internal layout of a tensor. Only src/ sees this.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "axle/tensor.h"

namespace axle {
class Allocator;  // core/allocator.h

/// A block of device memory from the allocator of its device type's backend (the cpu's:
/// a size-bucketed caching allocator, src/backend/cpu/allocator.h).
struct Storage {
  void* data = nullptr;  ///< the block's handle: a host pointer only for host (cpu) allocators
  size_t nbytes = 0;     ///< the allocated size (the request rounded up)
  Device device;         ///< the device whose memory counters hold this block
  Allocator* allocator = nullptr;  ///< its device type's backend's (core/allocator.h), which frees it
  /// A block from the allocator of the backend serving d's device type.
  Storage(size_t nbytes, Device d);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

/// A node of the backward graph as core holds it: core links tensors to nodes without
/// calling them. The autograd layer's `autograd::Node` (src/autograd/node.h) implements it,
/// and that layer alone casts it back (`autograd::gradient_edge`).
struct GradNode {
  virtual ~GradNode() = default;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<GradNode> grad_fn;  ///< null for leaves
  int output_nr = 0;                  ///< which output of grad_fn this is
  std::shared_ptr<GradNode> accumulator;  ///< leaves: the AccumulateGrad node
  /// Leaves: (id, hook) run after each gradient accumulation (autograd.h).
  std::vector<std::pair<int64_t, std::function<void(const Tensor&)>>> grad_hooks;
};

/// State that a device layer above core attaches to a tensor whose data core does not hold
/// (an xla tensor: its pending computation or its device buffer; its `storage` is null).
/// Core carries it without reading it: a view shares its base's, and rebinding or
/// set_data moves it with the data (set_data hands the replaced one back through
/// core/hooks.h). The layer that attaches it is the only one that knows its type, so it
/// alone casts it back. A slot rather than a TensorImpl subclass (PyTorch's choice) because
/// core makes views and rebinds impls itself, and with a slot it needs no hook to do so.
struct DeviceState {
  virtual ~DeviceState() = default;
};

struct TensorImpl {
  DType dtype = kFloat32;
  Device device;
  Shape shape, strides;
  int64_t offset = 0;  ///< in elements
  int64_t numel = 1;
  bool contiguous = true;
  std::shared_ptr<Storage> storage;
  std::unique_ptr<AutogradMeta> autograd;
  std::shared_ptr<DeviceState> device_state;  ///< set by the layer serving the device (storage is then null)

  char* data() const { return static_cast<char*>(storage->data) + offset * static_cast<int64_t>(itemsize(dtype)); }
  void refresh();  ///< recomputes numel and contiguous from shape/strides
  AutogradMeta& meta();  ///< creates the autograd meta on first use
};

Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
/// A new contiguous tensor with uninitialised memory.
Tensor make_tensor(const Shape& shape, DType dtype, Device device = kCPU);
/// A view of `base`'s storage (no autograd link).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);
/// Wraps a dimension index (negative counts from the end) and checks it; `op` names the caller.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);
std::string shape_str(const Shape& s);

}  // namespace axle
