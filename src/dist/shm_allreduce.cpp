// Shared-memory all-reduce (shm_allreduce.h).
//
// Layout of the segment: a header page (per-rank arrival counters, each on its own cache
// line, and a futex word), then two areas of `world` slots of kSlotBytes each. A chunk of
// the buffer goes through one area:
//   1. each rank copies its chunk into its slot;                       barrier
//   2. rank k reduces share k of the chunk over every slot (rank order)
//      and writes it into share k of its own slot;                       barrier
//   3. each rank copies share p from slot p, for every p.
// The next chunk uses the other area, so its barriers also prove that every rank has
// finished reading this one before anyone overwrites it.
#include "dist/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <new>
#include <vector>

#include "axle/error.h"
#include "dist/dist_internal.h"

namespace axle::dist::detail {
namespace {

constexpr size_t kSlotBytes = size_t(4) << 20;
constexpr size_t kPage = 4096;
constexpr uint32_t kMagic = 0x61786c65;  // "axle"

struct alignas(64) Flag {
  std::atomic<uint64_t> v;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

size_t header_bytes(int world) {
  const size_t b = 3 * 64 + size_t(world) * sizeof(Flag);
  return (b + kPage - 1) / kPage * kPage;
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

template <class T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Min: return b < a ? b : a;
    case ReduceOp::Max: return a < b ? b : a;
    default: return a + b;
  }
}

// dst[i] = reduce over ranks r (in order) of slot_r[i], for i in [0, n).
template <class T>
void reduce_share(T* dst, const char* const* slots, int world, size_t off, size_t n, ReduceOp op) {
  const T* s0 = reinterpret_cast<const T*>(slots[0]) + off;
  if (world == 1 || n == 0) return;
  const T* s1 = reinterpret_cast<const T*>(slots[1]) + off;
  if (op == ReduceOp::Min || op == ReduceOp::Max) {
    for (size_t i = 0; i < n; ++i) dst[i] = combine(s0[i], s1[i], op);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = T(s0[i] + s1[i]);
  }
  for (int r = 2; r < world; ++r) {
    const T* s = reinterpret_cast<const T*>(slots[r]) + off;
    if (op == ReduceOp::Min || op == ReduceOp::Max) {
      for (size_t i = 0; i < n; ++i) dst[i] = combine(dst[i], s[i], op);
    } else {
      for (size_t i = 0; i < n; ++i) dst[i] = T(dst[i] + s[i]);
    }
  }
}

void reduce_share_typed(DType t, void* dst, const char* const* slots, int world, size_t off, size_t n, ReduceOp op) {
  switch (t) {
    case DType::Float32: return reduce_share(static_cast<float*>(dst), slots, world, off, n, op);
    case DType::Int64: return reduce_share(static_cast<int64_t*>(dst), slots, world, off, n, op);
    case DType::Int32: return reduce_share(static_cast<int32_t*>(dst), slots, world, off, n, op);
    case DType::UInt8: return reduce_share(static_cast<uint8_t*>(dst), slots, world, off, n, op);
    default: AXLE_FAIL("[all_reduce] expected a float32, int64, int32 or uint8 tensor, got ", t);
  }
}

}  // namespace

struct ShmAllReduce::Header {
  uint32_t magic;
  uint32_t world;
  alignas(64) std::atomic<uint32_t> gen;      ///< bumped at every arrival: the futex word
  alignas(64) std::atomic<uint32_t> waiters;  ///< ranks asleep (or about to sleep) on gen
  /// [world] flags after the header: the last barrier each rank reached.
  Flag* arrived() {
    static_assert(sizeof(Header) <= 3 * 64, "the flags follow the header's three cache lines");
    return reinterpret_cast<Flag*>(reinterpret_cast<char*>(this) + 3 * 64);
  }
};

std::string ShmAllReduce::name_for(const std::string& dir) {
  return "/axle-" + std::filesystem::path(dir).filename().string();
}

std::unique_ptr<ShmAllReduce> ShmAllReduce::open(const std::string& name, int rank, int world, bool create) {
  const size_t bytes = header_bytes(world) + 2 * size_t(world) * kSlotBytes;
  const int fd = create ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)
                        : ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  AXLE_CHECK(fd >= 0, "[dist] shm_open(", name, ") failed: ", std::strerror(errno));
  if (create && ::ftruncate(fd, off_t(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    AXLE_FAIL("[dist] cannot size the shared segment ", name, " to ", bytes, " bytes: ", std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes) {
    ::close(fd);
    AXLE_FAIL("[dist] shared segment ", name, " has ", st.st_size, " bytes, expected ", bytes);
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  AXLE_CHECK(p != MAP_FAILED, "[dist] mmap of the shared segment ", name, " failed: ", std::strerror(errno));
  std::unique_ptr<ShmAllReduce> s(new ShmAllReduce());
  s->map_bytes_ = bytes;
  s->hdr_ = static_cast<Header*>(p);
  s->data_ = static_cast<char*>(p) + header_bytes(world);
  s->rank_ = rank;
  s->world_ = world;
  if (create) {  // the pages are zero: counters start at 0
    s->hdr_->magic = kMagic;
    s->hdr_->world = uint32_t(world);
  } else {  // rank 0 wrote the header before the barrier that precedes this open
    AXLE_CHECK(s->hdr_->magic == kMagic && s->hdr_->world == uint32_t(world), "[dist] shared segment ", name,
               " is not this job's: expected an axle segment for ", world, " ranks, found magic ", s->hdr_->magic,
               " and ", s->hdr_->world, " ranks");
  }
  return s;
}

ShmAllReduce::~ShmAllReduce() {
  if (hdr_) ::munmap(hdr_, map_bytes_);
}

void ShmAllReduce::barrier(double timeout_s) {
  const uint64_t b = ++barriers_;
  Header& h = *hdr_;
  h.arrived()[rank_].v.store(b, std::memory_order_seq_cst);
  h.gen.fetch_add(1, std::memory_order_seq_cst);
  if (h.waiters.load(std::memory_order_seq_cst) > 0) futex(&h.gen, FUTEX_WAKE, INT_MAX, nullptr);
  auto all_here = [&] {
    for (int r = 0; r < world_; ++r)
      if (h.arrived()[r].v.load(std::memory_order_acquire) < b) return false;
    return true;
  };
  // Spin briefly (the ranks of a step usually arrive together), then sleep on the futex.
  for (int i = 0; i < 4000; ++i) {
    if (all_here()) return;
    __builtin_ia32_pause();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  h.waiters.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const uint32_t g = h.gen.load(std::memory_order_seq_cst);
    if (all_here()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      h.waiters.fetch_sub(1, std::memory_order_seq_cst);
      note_comm_failure();
      int missing = 0;
      while (missing < world_ && h.arrived()[missing].v.load() >= b) ++missing;
      AXLE_FAIL("[all_reduce] timed out after ", timeout_s, " s on rank ", rank_, " of ", world_, ": rank ", missing,
                " did not join (it may have failed, or the ranks called different collectives)");
    }
    const timespec ts{0, 20'000'000};  // re-check the deadline every 20 ms
    futex(&h.gen, FUTEX_WAIT, g, &ts);
  }
  h.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmAllReduce::all_reduce(void* buf, int64_t n, DType t, ReduceOp op, double timeout_s) {
  const size_t item = itemsize(t);
  const size_t per_chunk = kSlotBytes / item;
  char* out = static_cast<char*>(buf);
  const char* slots[64];
  std::vector<const char*> many;
  const char** sl = slots;
  if (world_ > 64) {
    many.resize(size_t(world_));
    sl = many.data();
  }
  for (size_t start = 0; start < size_t(n); start += per_chunk) {
    const size_t len = std::min(per_chunk, size_t(n) - start);
    char* area = data_ + (chunks_++ % 2) * size_t(world_) * kSlotBytes;
    for (int r = 0; r < world_; ++r) sl[r] = area + size_t(r) * kSlotBytes;
    char* mine = area + size_t(rank_) * kSlotBytes;
    std::memcpy(mine, out + start * item, len * item);
    barrier(timeout_s);
    // Rank k's share: elements [k * len / world, (k + 1) * len / world). This rank's own
    // contribution is read from its buffer, because the result overwrites its slot.
    auto share = [&](int k) { return std::make_pair(size_t(k) * len / size_t(world_), size_t(k + 1) * len / size_t(world_)); };
    const auto [lo, hi] = share(rank_);
    sl[rank_] = out + start * item;
    reduce_share_typed(t, mine + lo * item, sl, world_, lo, hi - lo, op == ReduceOp::Mean ? ReduceOp::Sum : op);
    sl[rank_] = mine;
    barrier(timeout_s);
    for (int p = 0; p < world_; ++p) {
      const auto [plo, phi] = share(p);
      std::memcpy(out + (start + plo) * item, sl[p] + plo * item, (phi - plo) * item);
    }
  }
  if (op == ReduceOp::Mean) {
    AXLE_CHECK(t == kFloat32, "[all_reduce] mean expects a floating tensor, got ", t);
    float* f = static_cast<float*>(buf);
    const float scale = 1.0f / float(world_);
    for (int64_t i = 0; i < n; ++i) f[i] *= scale;
  }
}

}  // namespace axle::dist::detail
