#include "backend/cpu/dnnl.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "backend/cpu/loops.h"

namespace axle::cpu::dnnl_glue {
namespace {

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<void>> entries;
  std::atomic<int64_t> created{0};
};
Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: primitives may be used during static destruction
  return *c;
}

}  // namespace

dnnl::engine& engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

int64_t primitives_created() { return cache().created.load(); }
int64_t cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return int64_t(c.entries.size());
}

std::shared_ptr<void> cache_lookup(const std::string& key, const std::function<std::shared_ptr<void>()>& make) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end()) return it->second;
  }
  // Built outside the lock (creation takes 0.2-1 ms and may look up other entries).
  std::shared_ptr<void> v;
  try {
    v = make();
  } catch (const dnnl::error& e) {
    AXLE_FAIL("[onednn] could not create a primitive for ", key, ": ", e.what());
  }
  std::lock_guard<std::mutex> g(c.mu);
  auto [it, fresh] = c.entries.emplace(key, std::move(v));
  if (fresh) c.created.fetch_add(1);
  return it->second;
}

dnnl::memory::data_type to_dnnl(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::Float32: return dt::f32;
    case DType::Int32: return dt::s32;
    case DType::UInt8: return dt::u8;
    case DType::BFloat16: return dt::bf16;
    case DType::Float16: return dt::f16;
    default: AXLE_FAIL("[onednn] dtype ", t, " is not supported by oneDNN kernels");
  }
}

dnnl::memory::desc strided_desc(const Shape& dims, const Shape& strides, DType t) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), to_dnnl(t),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc desc_of(const Tensor& t) {
  const Shape& s = t.shape();
  Shape st = t.strides();
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i)
    if (s[size_t(i)] == 1) st[size_t(i)] = i + 1 < int64_t(s.size()) ? st[size_t(i + 1)] * s[size_t(i + 1)] : 1;
  return strided_desc(s, st, t.dtype());
}

bool non_interleaving(const Shape& dims, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> by_stride;  // (stride, size) of the dims of size > 1
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] > 1 && strides[i] != 0) by_stride.emplace_back(strides[i], dims[i]);
  std::sort(by_stride.begin(), by_stride.end());
  for (size_t k = 1; k < by_stride.size(); ++k)
    if (by_stride[k].first < by_stride[k - 1].first * by_stride[k - 1].second) return false;
  return true;
}

Tensor describable(const Tensor& t) {
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.shape()[size_t(i)] > 1 && t.strides()[size_t(i)] <= 0) {
      Tensor c = make_tensor(t.shape(), t.dtype());
      copy_into(c, t);
      return c;
    }
  return t;
}

Shape layout_strides(const Shape& s, Layout l) {
  if (l == Layout::NCHW) return contiguous_strides(s);
  const int64_t C = std::max<int64_t>(s[1], 1), H = std::max<int64_t>(s[2], 1), W = std::max<int64_t>(s[3], 1);
  return {H * W * C, 1, W * C, C};
}

bool is_dense(const Tensor& t, Layout l) {
  if (t.dim() != 4) return false;
  Shape want = layout_strides(t.shape(), l);
  for (size_t i = 0; i < 4; ++i)
    if (t.shape()[i] != 1 && t.strides()[i] != want[i]) return false;
  return true;
}

Tensor empty_4d(const Shape& nchw, Layout l, DType t) {
  if (l == Layout::NCHW) return make_tensor(nchw, t);
  Tensor flat = make_tensor({nchw[0], nchw[2], nchw[3], nchw[1]}, t);
  return make_view(flat, nchw, layout_strides(nchw, l), 0);
}

dnnl::memory::format_tag tag_of(Layout l) {
  return l == Layout::NCHW ? dnnl::memory::format_tag::nchw : dnnl::memory::format_tag::nhwc;
}

void Slot::init_input(const dnnl::memory::desc& u, const dnnl::memory::desc& in) {
  user = u;
  inner = in;
  if (!(u == in)) reorder = std::make_shared<dnnl::reorder>(dnnl::reorder::primitive_desc(engine(), u, engine(), in));
}

void Slot::init_output(const dnnl::memory::desc& u, const dnnl::memory::desc& in) {
  user = u;
  inner = in;
  if (!(u == in)) reorder = std::make_shared<dnnl::reorder>(dnnl::reorder::primitive_desc(engine(), in, engine(), u));
}

namespace {
ConvMode initial_conv_mode() {
  const char* e = std::getenv("AXLE_CONV_LAYOUT");
  std::string v = e ? e : "";
  if (v == "nchw") return ConvMode::Plain;
  if (v == "blocked") return ConvMode::Blocked;
  if (v == "nhwc") return ConvMode::ChannelsLast;
  return ConvMode::ChannelsLast;  // fastest per cnn step here: see the measurements in conv.cpp
}
std::atomic<int> g_conv_mode{int(initial_conv_mode())};
}  // namespace

ConvMode conv_mode() { return ConvMode(g_conv_mode.load(std::memory_order_relaxed)); }
void set_conv_mode(ConvMode m) { g_conv_mode.store(int(m)); }

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

Tensor Exec::temp(size_t bytes) {
  Tensor t = make_tensor({int64_t(bytes)}, kUInt8);
  keep_.push_back(t);
  return t;
}

dnnl::memory Exec::wrap(const dnnl::memory::desc& d, const Tensor& t) {
  return dnnl::memory(d, engine(), t.impl()->data());
}

dnnl::memory Exec::input(const Slot& s, const Tensor& t) {
  if (!s.reorder) return wrap(s.inner, t);
  dnnl::memory u = wrap(s.user, t);
  dnnl::memory in(s.inner, engine(), temp(s.inner.get_size()).impl()->data());
  s.reorder->execute(stream(), u, in);
  return in;
}

dnnl::memory Exec::output(const Slot& s, const Tensor& t) {
  if (!s.reorder) return wrap(s.inner, t);
  dnnl::memory in(s.inner, engine(), temp(s.inner.get_size()).impl()->data());
  post_.push_back({s.reorder, in, wrap(s.user, t)});
  return in;
}

void Exec::run(const dnnl::primitive& p, size_t scratch_bytes) {
  if (scratch_bytes > 0) {
    dnnl::memory::desc sd({int64_t(scratch_bytes)}, dnnl::memory::data_type::u8, dnnl::memory::format_tag::a);
    args_[DNNL_ARG_SCRATCHPAD] = dnnl::memory(sd, engine(), temp(scratch_bytes).impl()->data());
  }
  try {
    p.execute(stream(), args_);
    for (Pending& q : post_) q.r->execute(stream(), q.from, q.to);
    stream().wait();
  } catch (const dnnl::error& e) {
    AXLE_FAIL("[onednn] primitive execution failed: ", e.what());
  }
}

}  // namespace axle::cpu::dnnl_glue
