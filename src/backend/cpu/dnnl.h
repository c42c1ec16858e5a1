// oneDNN glue for axle's cpu kernels (internal): one engine, a stream per thread,
// a cache of configured primitives keyed by the full configuration, and
// memory-descriptor helpers that describe axle's strided tensors without copies.
//
//   auto e = dnnl_glue::cached<Entry>(key, [&] { return std::make_shared<Entry>(...); });
//   dnnl_glue::Exec ex;  ex.arg(DNNL_ARG_SRC, e->src.input(x, ex)); ...; ex.run(e->prim);
//
// Primitives use a user-managed scratchpad (taken from axle's caching allocator per call),
// so a cached primitive may run on several threads at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "core/tensor_impl.h"

namespace axle::cpu::dnnl_glue {

dnnl::engine& engine();
/// The calling thread's stream on engine() (cpu streams execute in the calling thread).
dnnl::stream& stream();

/// Configured-primitive cache entries created so far (each entry is one primitive plus its
/// reorders). A repeated call with the same configuration must not change it (tests use this).
int64_t primitives_created();
/// Number of cache entries alive.
int64_t cache_size();

/// Builds cache keys from ints and strings.
class Key {
 public:
  explicit Key(const char* op) : s_(op) {}
  Key& operator<<(int64_t v) {
    s_ += ',';
    s_ += std::to_string(v);
    return *this;
  }
  Key& operator<<(const Shape& v) {
    s_ += '[';
    for (int64_t x : v) *this << x;
    s_ += ']';
    return *this;
  }
  Key& operator<<(const char* v) {
    s_ += '|';
    s_ += v;
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

std::shared_ptr<void> cache_lookup(const std::string& key, const std::function<std::shared_ptr<void>()>& make);
/// The entry under `key`, built once with make() (thread-safe; counts primitives_created()).
template <class T, class F>
std::shared_ptr<T> cached(const Key& key, F&& make) {
  return std::static_pointer_cast<T>(cache_lookup(key.str(), [&]() -> std::shared_ptr<void> { return make(); }));
}

dnnl::memory::data_type to_dnnl(DType t);
/// A plain strided descriptor.
dnnl::memory::desc strided_desc(const Shape& dims, const Shape& strides, DType t);
/// Descriptor of tensor `t` as it is laid out in memory (strides of size-1 dims normalised).
dnnl::memory::desc desc_of(const Tensor& t);
/// Whether oneDNN can describe a strided layout: its dims of size > 1 (stride 0 ones left out:
/// broadcasts), in stride order, do not interleave, each stride at least the extent (size *
/// stride) of the dim below it. A strided view can interleave without overlapping (a
/// [2, 3, 1] column of every 4th element, batch stride 9 < 3 * 4).
bool non_interleaving(const Shape& dims, const Shape& strides);
/// `t` itself when oneDNN can describe it (no negative or zero strides on dims > 1), else a contiguous copy.
Tensor describable(const Tensor& t);

// ---- 4-D activations: NCHW shape, NCHW or NHWC (channels-last) memory ----
enum class Layout { NCHW, NHWC };
/// Whether `t` (4-D) is densely packed in layout `l` (size-1 dims ignored).
bool is_dense(const Tensor& t, Layout l);
Shape layout_strides(const Shape& nchw, Layout l);
/// A new NCHW-shaped tensor whose memory is in layout `l`.
Tensor empty_4d(const Shape& nchw, Layout l, DType t = kFloat32);
dnnl::memory::format_tag tag_of(Layout l);

/// One primitive argument: the axle tensor's layout (`user`) and the primitive's (`inner`),
/// with a cached reorder between them when they differ.
struct Slot {
  dnnl::memory::desc user, inner;
  std::shared_ptr<dnnl::reorder> reorder;  ///< user->inner (input) or inner->user (output); null when equal
  void init_input(const dnnl::memory::desc& u, const dnnl::memory::desc& in);
  void init_output(const dnnl::memory::desc& u, const dnnl::memory::desc& in);
};

/// Runs one primitive call: wraps tensors, reorders inputs/outputs, supplies a scratchpad.
class Exec {
 public:
  /// Memory for input `t` in slot's inner layout (reordered into a temporary if needed).
  dnnl::memory input(const Slot& s, const Tensor& t);
  /// Memory the primitive writes into for output `t`; the reorder back happens in run().
  dnnl::memory output(const Slot& s, const Tensor& t);
  /// Wraps a tensor as memory of the given desc, no reorder.
  dnnl::memory wrap(const dnnl::memory::desc& d, const Tensor& t);
  void arg(int id, const dnnl::memory& m) { args_[id] = m; }
  /// Executes `p` (with a scratchpad of `scratch` bytes), then any pending output reorders.
  void run(const dnnl::primitive& p, size_t scratch_bytes);

 private:
  Tensor temp(size_t bytes);
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<Tensor> keep_;
  struct Pending { std::shared_ptr<dnnl::reorder> r; dnnl::memory from, to; };
  std::vector<Pending> post_;
};

/// How convolutions lay out activations: plain NCHW throughout; channels-last (NCHW-shaped
/// tensors with NHWC strides, as PyTorch's channels_last); or oneDNN's blocked formats inside
/// the primitive with reorders to and from NCHW at its boundary. Env AXLE_CONV_LAYOUT=nchw|nhwc|blocked.
enum class ConvMode { Plain, ChannelsLast, Blocked };
ConvMode conv_mode();
void set_conv_mode(ConvMode m);  ///< for benchmarks and tests; part of every conv cache key

/// Attributes every axle primitive uses (user scratchpad).
dnnl::primitive_attr default_attr();

}  // namespace axle::cpu::dnnl_glue
