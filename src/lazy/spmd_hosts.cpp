// SPMD over several hosts, the lazy device's part: a split value read on the host needs
// every host's shards (dist::gather_hosts). The collectives inside programs are
// dist/local_devices.cpp's (hierarchical across hosts).
#include <cstring>

#include "dist/local_devices.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy::detail {

std::vector<Tensor> gather_host_shards(std::vector<Tensor> host, int first, int local) {
  // Each host's shards as (rank, dims..., bytes), every host's gathered over Gloo.
  std::vector<char> mine;
  auto put = [&](const void* p, size_t bytes) { mine.insert(mine.end(), static_cast<const char*>(p), static_cast<const char*>(p) + bytes); };
  for (int d = first; d < first + local; ++d) {
    const Tensor& t = host[size_t(d)];
    const int64_t rank = t.dim(), dtype = int64_t(t.dtype());
    put(&dtype, sizeof dtype);
    put(&rank, sizeof rank);
    for (int64_t k : t.shape()) put(&k, sizeof k);
    put(t.data_ptr(), size_t(t.numel()) * itemsize(t.dtype()));
  }
  const std::vector<std::vector<char>> all = dist::gather_hosts(mine);
  for (size_t h = 0; h < all.size(); ++h) {
    if (int(h) * local == first) continue;
    const char* p = all[h].data();
    auto get = [&](void* dst, size_t bytes) {
      std::memcpy(dst, p, bytes);
      p += bytes;
    };
    for (int k = 0; k < local; ++k) {
      int64_t dtype = 0, rank = 0;
      get(&dtype, sizeof dtype);
      get(&rank, sizeof rank);
      Shape shape(static_cast<size_t>(rank));
      for (int64_t& x : shape) get(&x, sizeof x);
      Tensor t = empty(shape, {.dtype = DType(dtype)});
      get(t.data_ptr(), size_t(t.numel()) * itemsize(t.dtype()));
      host[h * size_t(local) + size_t(k)] = t;
    }
  }
  return host;
}

}  // namespace axle::lazy::detail
