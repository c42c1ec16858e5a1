// A second backend for the tests, whose buffers are not host tensors: the proof that the
// backend seam (src/backend/backend.h) reaches down to memory. Its buffers are xla-device
// tensors whose storage holds an opaque handle from its own allocator (a value that is not
// an address: dereferencing it faults), reachable only through its transfers. It computes
// by copying into host memory inside its executable and running the cpu backend's program
// there (it is a test backend), so its results are the cpu backend's bits.
//
// What it adds to axle is this file, opaque_backend.cpp and its registration in a test
// (backend::register_backend(DeviceType::XLA, ...)): nothing in src/ changes for it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace axle::test {

/// Blocks of bytes the host never sees: allocate() returns a handle, not an address.
class OpaqueAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device& device) override;
  void deallocate(void* handle, size_t nbytes, Device device) override;

  /// The bytes behind `handle` (only the backend calls it); throws on a foreign handle.
  std::byte* bytes(const void* handle);
  /// Whether `handle` is one of this allocator's live blocks.
  bool owns(const void* handle);
  /// Live bytes charged to `device`, and their peak.
  int64_t bytes_used(Device device);
  int64_t peak_bytes_used(Device device);
  int64_t live_blocks();

 private:
  struct Counters {
    int64_t used = 0, peak = 0;
  };
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<std::byte[]>> blocks_;
  std::vector<std::pair<Device, Counters>> counters_;
  Counters& counters(Device d);  // needs mu_
};

/// The backend; serves DeviceType::XLA once registered (backend::register_backend).
class OpaqueBackend final : public backend::Backend {
 public:
  OpaqueBackend();
  const char* name() const override { return "opaque"; }
  std::string cache_tag() const override { return "opaque-v1"; }
  Allocator& allocator() override { return alloc_; }
  Tensor allocate(const Shape& shape, DType dtype, Device device) override;
  xm::MemoryInfo memory_info(Device device) const override;
  Tensor to_device(const Tensor& host, Device device) override;
  Tensor to_host(const Tensor& buffer) override;
  void copy_into(const Tensor& dst, const Tensor& src) override;
  bool supports(ops::OpKind k) const override;
  void add_passes(compiler::PassPipeline& pp) const override;
  backend::ExecutablePtr lower(const compiler::Program& p, Device device) const override;
  std::vector<Tensor> run(const backend::Executable& ex, std::vector<Tensor> inputs) override;
  std::vector<std::vector<Tensor>> run_replicated(const backend::Executable& ex,
                                                  std::vector<std::vector<Tensor>> inputs) override;

  /// Whether `t` is one of this backend's buffers (its storage from this allocator).
  bool owns(const Tensor& t) const;
  OpaqueAllocator& opaque_allocator() { return alloc_; }

  std::atomic<int64_t> to_devices{0}, to_hosts{0}, lowers{0}, runs{0}, replicated_runs{0};
  /// Collectives lowered whose `group` named replica groups (ops/replica_groups.h), as the
  /// SPMD partitioner emits them, rather than a communicator made before lowering.
  std::atomic<int64_t> replica_group_collectives{0};

 private:
  void write(const Tensor& buffer, const Tensor& host);  ///< host bytes into a buffer
  mutable OpaqueAllocator alloc_;
  backend::Backend& host_;  ///< the cpu backend: what the executable computes with
};

}  // namespace axle::test
