// The backend seam: what the lazy device needs from the hardware that runs its graphs.
// A backend owns its device buffers (and their allocator's counters), host<->device
// transfers, the passes it adds after the generic ones, lowering a program to an
// executable, and running it, on one device or replicated on several (SPMD), with the
// threads that takes. src/lazy reaches these only through it.
//
// Backends are registered explicitly (register_builtin_backends in backend.cpp, on first
// use of backend_for), never by static initialisers, so registration works however axle
// is linked. See docs/architecture.md ("The backend seam") for where a CUDA backend plugs in.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "axle/device.h"
#include "axle/tensor.h"
#include "axle/xm.h"
#include "compiler/program.h"
#include "core/allocator.h"

namespace axle::backend {

/// A program lowered by one backend for one device: a handle only that backend runs.
class Executable {
 public:
  virtual ~Executable() = default;
  /// The device it runs on (its buffers are charged to that device's memory counters).
  virtual Device device() const = 0;
};
using ExecutablePtr = std::shared_ptr<const Executable>;

class Backend {
 public:
  virtual ~Backend() = default;
  /// Short name: "cpu", later "cuda".
  virtual const char* name() const = 0;

  /// What the persistent cache (compiler/disk_cache.h) keys this backend's programs by:
  /// its name, and its version or instruction set where the programs its passes make
  /// depend on them. The cpu's programs do not (its kernels choose the ISA at run time).
  virtual std::string cache_tag() const { return name(); }

  // ---- device memory
  /// The allocator of this backend's memory: every Storage of a device type this backend
  /// serves takes its block from it (core/allocator.h; bound by register_backend).
  virtual Allocator& allocator() = 0;
  /// A new dense, uninitialised buffer on `device`, counted in its memory counters.
  virtual Tensor allocate(const Shape& shape, DType dtype, Device device) = 0;
  /// Bytes in use now, the device's capacity and the peak use (axle::xm::get_memory_info).
  virtual xm::MemoryInfo memory_info(Device device) const = 0;

  // ---- transfers
  /// A new buffer on `device` holding a copy of the host tensor `host` (any strides).
  virtual Tensor to_device(const Tensor& host, Device device) = 0;
  /// A new contiguous host (cpu) tensor holding a copy of `buffer` (a buffer of this backend).
  virtual Tensor to_host(const Tensor& buffer) = 0;
  /// Copies `src` into `dst` (same shape and dtype; each a host tensor or a buffer of this backend).
  virtual void copy_into(const Tensor& dst, const Tensor& src) = 0;

  // ---- compilation
  /// True if this backend can run op `k` (it has a kernel for it).
  virtual bool supports(ops::OpKind k) const = 0;
  /// Appends this backend's passes (after the generic ones: e.g. the cpu's fusions).
  virtual void add_passes(compiler::PassPipeline& pp) const = 0;
  /// The pipeline a traced program goes through: compiler::PassPipeline::standard(),
  /// then add_passes.
  compiler::PassPipeline pipeline() const;
  /// Lowers an optimised program (the output of pipeline()) to run on `device`. Throws
  /// axle::Error naming the op if the program holds an op this backend does not support.
  virtual ExecutablePtr lower(const compiler::Program& p, Device device) const = 0;

  // ---- execution
  /// Runs `ex` (lowered by this backend) on its inputs, buffers in Program input order;
  /// returns one buffer per program output. Inputs that nothing else holds may be
  /// overwritten (donated).
  virtual std::vector<Tensor> run(const Executable& ex, std::vector<Tensor> inputs) = 0;
  /// Runs `ex` replicated (SPMD): inputs[d] are device d's buffers, one per program input;
  /// returns each device's outputs. The backend owns how: the cpu runs each device on a
  /// device thread of dist::run_on_devices (so collectives between devices meet) with its
  /// share of the kernel threads. Throws axle::Error naming the device that failed.
  virtual std::vector<std::vector<Tensor>> run_replicated(const Executable& ex,
                                                          std::vector<std::vector<Tensor>> inputs) = 0;
  /// Called on the thread that traces: what a run on another thread (the lazy executor's
  /// device thread, src/lazy/async.cpp) must reproduce to compute the same bits, as a
  /// function that thread calls before run() (the cpu: the tracing thread's OpenMP thread
  /// count, on which a reduction's order depends). Empty when nothing needs carrying.
  virtual std::function<void()> thread_settings() const { return {}; }
  // Asynchronous execution is the lazy executor's device thread (src/lazy/async.cpp),
  // which calls run() while the host traces the next step; a backend whose run() only
  // enqueues work (a GPU stream) returns buffers that its transfers wait on.
};

/// The backend serving devices of `type` (cpu and xla: the CPU backend today).
/// Throws axle::Error if none is registered.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device device) { return backend_for(device.type); }

/// Makes `b` serve devices of `type` (its allocator then serves their new storage, its
/// kernel table their eager ops); returns the backend it replaces (null if none).
/// A replaced backend stays alive until the process ends (references to it stay valid).
/// The built-in backends are registered before the first backend_for or register_backend.
std::shared_ptr<Backend> register_backend(DeviceType type, std::shared_ptr<Backend> b);

/// Registers the built-in backends if not yet done (the composition root calls it first).
void ensure_backends_registered();

}  // namespace axle::backend
