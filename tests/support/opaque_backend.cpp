// The opaque test backend (opaque_backend.h).
#include "opaque_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/tensor_impl.h"
#include "dist/local_devices.h"
#include "ops/replica_groups.h"
#include "ops/schema.h"

namespace axle::test {
namespace {

// A handle is kTag | id: a non-canonical x86-64 address, so any dereference faults.
constexpr uint64_t kTag = 0xA5A5000000000000ull;

uint64_t id_of(const void* handle) {
  const auto v = reinterpret_cast<uintptr_t>(handle);
  AXLE_CHECK((v & 0xFFFF000000000000ull) == kTag, "[opaque] expected a handle of the opaque allocator");
  return v & ~0xFFFF000000000000ull;
}

class OpaqueExecutable final : public backend::Executable {
 public:
  OpaqueExecutable(backend::ExecutablePtr inner, Device device) : inner(std::move(inner)), device_(device) {}
  Device device() const override { return device_; }
  backend::ExecutablePtr inner;  ///< the cpu backend's program, run on host copies

 private:
  Device device_;
};

const OpaqueExecutable& as_opaque(const backend::Executable& ex) {
  const auto* e = dynamic_cast<const OpaqueExecutable*>(&ex);
  AXLE_CHECK(e != nullptr, "[opaque] was given an executable lowered by another backend");
  return *e;
}

// The device a buffer made now belongs to: on device thread k of a replicated run, xla:k.
Device running_device(Device d) {
  const int k = dist::this_device();
  return k >= 0 ? Device(DeviceType::XLA, k) : d;
}

}  // namespace

// ---------------------------------------------------------------- allocator

OpaqueAllocator::Counters& OpaqueAllocator::counters(Device d) {
  for (auto& [dev, c] : counters_)
    if (dev == d) return c;
  counters_.push_back({d, {}});
  return counters_.back().second;
}

void* OpaqueAllocator::allocate(size_t nbytes, Device& device) {
  AXLE_CHECK(device.is_xla(), "[opaque] expected an xla device, got ", device);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_++;
  blocks_[id] = std::make_unique<std::byte[]>(nbytes);
  Counters& c = counters(device);
  c.used += int64_t(nbytes);
  c.peak = std::max(c.peak, c.used);
  return reinterpret_cast<void*>(uintptr_t(kTag | id));
}

void OpaqueAllocator::deallocate(void* handle, size_t nbytes, Device device) {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.erase(id_of(handle));
  counters(device).used -= int64_t(nbytes);
}

std::byte* OpaqueAllocator::bytes(const void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(id_of(handle));
  AXLE_CHECK(it != blocks_.end(), "[opaque] a freed or foreign block");
  return it->second.get();
}

bool OpaqueAllocator::owns(const void* handle) {
  if ((reinterpret_cast<uintptr_t>(handle) & 0xFFFF000000000000ull) != kTag) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.count(id_of(handle)) != 0;
}

int64_t OpaqueAllocator::bytes_used(Device d) {
  std::lock_guard<std::mutex> lock(mu_);
  return counters(d).used;
}
int64_t OpaqueAllocator::peak_bytes_used(Device d) {
  std::lock_guard<std::mutex> lock(mu_);
  return counters(d).peak;
}
int64_t OpaqueAllocator::live_blocks() {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(blocks_.size());
}

// ---------------------------------------------------------------- backend

OpaqueBackend::OpaqueBackend() : host_(backend::backend_for(DeviceType::CPU)) {}

bool OpaqueBackend::owns(const Tensor& t) const {
  const TensorImpl* ti = t.impl();
  return ti && ti->storage && ti->storage->allocator == &alloc_ && alloc_.owns(ti->storage->data);
}

Tensor OpaqueBackend::allocate(const Shape& shape, DType dtype, Device device) {
  // Its device type's allocator is this backend's once registered: core takes the block from it.
  Tensor t = make_tensor(shape, dtype, Device(DeviceType::XLA, device.index));
  AXLE_CHECK(owns(t), "[opaque] allocate: the xla device's allocator is not the opaque backend's (not registered?)");
  return t;
}

xm::MemoryInfo OpaqueBackend::memory_info(Device device) const {
  return {alloc_.bytes_used(device), int64_t(1) << 34, alloc_.peak_bytes_used(device)};
}

void OpaqueBackend::write(const Tensor& buffer, const Tensor& host) {
  AXLE_CHECK(owns(buffer) && buffer.is_contiguous() && buffer.storage_offset() == 0,
             "[opaque] expected a whole buffer of this backend to write");
  Tensor c = host.contiguous();
  const size_t n = size_t(c.numel()) * itemsize(c.dtype());
  if (n) std::memcpy(alloc_.bytes(buffer.impl()->storage->data), c.data_ptr(), n);
}

Tensor OpaqueBackend::to_device(const Tensor& host, Device device) {
  AXLE_CHECK(host.device().is_cpu(), "[opaque] to_device expects a host tensor, got one on ", host.device());
  ++to_devices;
  Tensor buf = allocate(host.shape(), host.dtype(), running_device(device));
  write(buf, host);
  return buf;
}

Tensor OpaqueBackend::to_host(const Tensor& buffer) {
  AXLE_CHECK(owns(buffer), "[opaque] to_host expects a buffer of this backend");
  ++to_hosts;
  // The whole block, then the buffer's view of it (a buffer may be a view: offset, strides).
  const Storage& s = *buffer.impl()->storage;
  const int64_t elems = int64_t(s.nbytes / itemsize(buffer.dtype()));
  Tensor whole = make_tensor({elems}, buffer.dtype());
  std::memcpy(whole.data_ptr(), alloc_.bytes(s.data), size_t(elems) * itemsize(buffer.dtype()));
  return make_view(whole, buffer.shape(), buffer.strides(), buffer.storage_offset()).contiguous();
}

void OpaqueBackend::copy_into(const Tensor& dst, const Tensor& src) {
  const Tensor host_src = owns(src) ? to_host(src) : src;
  if (owns(dst)) {
    write(dst, host_src);
  } else {
    AXLE_CHECK(dst.device().is_cpu(), "[opaque] copy_into: expected a host tensor or a buffer of this backend");
    host_.copy_into(dst, host_src);
  }
}

bool OpaqueBackend::supports(ops::OpKind k) const { return host_.supports(k); }

void OpaqueBackend::add_passes(compiler::PassPipeline& pp) const { host_.add_passes(pp); }

backend::ExecutablePtr OpaqueBackend::lower(const compiler::Program& p, Device device) const {
  auto* self = const_cast<OpaqueBackend*>(this);
  ++self->lowers;
  for (const compiler::PNode& n : p.nodes)
    if (!n.dead && n.kind == compiler::NodeKind::Op && ops::shard_rule(n.op) == ops::ShardRule::Collective &&
        n.attrs.ints.size() >= 1)
      for (int64_t v : n.attrs.ints)
        if (ops::replica_groups_of(v)) {
          ++self->replica_group_collectives;
          break;
        }
  return std::make_shared<OpaqueExecutable>(host_.lower(p, kCPU), device);
}

std::vector<Tensor> OpaqueBackend::run(const backend::Executable& ex, std::vector<Tensor> inputs) {
  const OpaqueExecutable& e = as_opaque(ex);
  ++runs;
  // Into host memory (a cpu scalar graph input is host data already), the cpu program, back.
  std::vector<Tensor> host;
  host.reserve(inputs.size());
  for (Tensor& t : inputs) {
    AXLE_CHECK(!t.defined() || owns(t) || t.device().is_cpu(), "[opaque] run: input on ", t.device(),
               " is neither host data nor a buffer of this backend");
    host.push_back(t.defined() && owns(t) ? to_host(t) : t);
    t = Tensor();
  }
  std::vector<Tensor> out = host_.run(*e.inner, std::move(host));
  std::vector<Tensor> result;
  result.reserve(out.size());
  for (const Tensor& o : out) result.push_back(to_device(o, e.device()));
  return result;
}

std::vector<std::vector<Tensor>> OpaqueBackend::run_replicated(const backend::Executable& ex,
                                                               std::vector<std::vector<Tensor>> inputs) {
  ++replicated_runs;
  const int n = int(inputs.size());
  std::vector<std::vector<Tensor>> results(inputs.size());
  const int threads = std::max(1, omp_get_max_threads() / std::max(n, 1));
  dist::run_on_devices(n, [&](int d) { results[size_t(d)] = run(ex, std::move(inputs[size_t(d)])); }, threads);
  return results;
}

}  // namespace axle::test
