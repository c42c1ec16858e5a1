// The tracer: record() builds IR nodes for ops on xla tensors; the live-tensor registry
// remembers every tensor with pending IR until the next sync.
#include <mutex>

#include "lazy/lazy_internal.h"
#include "lazy/replace_value.h"

namespace axle::lazy {
namespace detail {

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

Stats& stats() {
  static Stats* s = new Stats();
  return *s;
}

Tensor make_xla(const Shape& shape, DType dtype, Device dev, std::shared_ptr<LazyTensor> lt) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->device = dev;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->refresh();
  impl->device_state = std::move(lt);
  return Tensor(std::move(impl));
}

}  // namespace detail

namespace {
using namespace detail;

thread_local TraceContext* g_context = nullptr;

NodePtr data_node_for(const std::shared_ptr<LazyTensor>& lt, const Shape& shape, DType dtype) {
  if (!lt->data_node) {
    auto n = std::make_shared<Node>();
    n->kind = NodeKind::Data;
    n->outs = {{shape, dtype}};
    n->data = lt->buffer;
    n->pending = lt->pending;  // async: still being computed; the graph reads it when it runs
    n->owner = lt;
    n->has_owner = true;
    n->label = lt->label;
    if (!lt->shards.empty() || lt->sharding) [[unlikely]] {  // SPMD data
      n->sharding = lt->sharding;
      n->shards = lt->shards;
    }
    seal_node(*n);
    lt->data_node = std::move(n);
  }
  return lt->data_node;
}

Value value_of(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* ti = t.impl();
  if (ti->device.is_cpu()) {
    // A 0-d cpu scalar: 0 and +-1 are constants; any other value is a graph input,
    // so a changing learning rate does not change the graph.
    double v = t.item();
    auto n = std::make_shared<Node>();
    n->outs = {{{}, ti->dtype}};
    if (v == 0.0 || v == 1.0 || v == -1.0) {
      n->kind = NodeKind::Constant;
      n->scalar = v;
    } else {
      n->kind = NodeKind::Data;
      n->data = t.contiguous();
      n->label = "a cpu scalar made a graph input, e.g. a learning rate";
    }
    seal_node(*n);
    return {n, 0};
  }
  const std::shared_ptr<LazyTensor> lt = shared_lazy_of(t);
  if (lt->ir) return lt->ir;
  return {data_node_for(lt, ti->shape, ti->dtype), 0};
}

void track(const std::shared_ptr<LazyTensor>& lt) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (r.pending.size() >= r.prune_at) {
    // Drop dead and already materialised tensors, so the list stays proportional to live work.
    std::erase_if(r.pending, [](const std::weak_ptr<LazyTensor>& w) {
      auto l = w.lock();
      return !l || !l->ir;
    });
    r.prune_at = std::max<size_t>(4096, 2 * r.pending.size());
  }
  r.pending.push_back(lt);
}

}  // namespace
using namespace detail;

namespace detail {
std::atomic<int64_t> g_live_lazy{0};
}  // namespace detail

LazyTensor* lazy_of(const Tensor& t) {
  return t.defined() ? static_cast<LazyTensor*>(t.impl()->device_state.get()) : nullptr;
}

std::shared_ptr<LazyTensor> shared_lazy_of(const Tensor& t) {
  return t.defined() ? std::static_pointer_cast<LazyTensor>(t.impl()->device_state) : nullptr;
}

LazyTensor::LazyTensor() { g_live_lazy.fetch_add(1, std::memory_order_relaxed); }
LazyTensor::~LazyTensor() {
  g_live_lazy.fetch_sub(1, std::memory_order_relaxed);
  stats().destroy.add();
}

ops::Tensors record(ops::OpKind k, const ops::Tensors& in, const ops::Attrs& a, const std::vector<ops::Meta>& metas,
                    Device dev) {
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::Op;
  n->op = k;
  n->attrs = a;
  n->outs = metas;
  n->operands.reserve(in.size());
  for (const Tensor& t : in) n->operands.push_back(value_of(t));
  seal_node(*n);
  ops::Tensors out;
  out.reserve(metas.size());
  for (size_t j = 0; j < metas.size(); ++j) {
    auto lt = std::make_shared<LazyTensor>();
    lt->ir = {n, int(j)};
    track(lt);
    out.push_back(make_xla(metas[j].shape, metas[j].dtype, dev, std::move(lt)));
  }
  stats().create.add(int64_t(metas.size()));
  return out;
}

void set_label(const Tensor& t, const std::string& label, LabelRank rank) {
  if (!t.defined() || !t.device().is_xla()) return;
  LazyTensor& lt = *lazy_of(t);
  if (lt.label_rank > rank) return;
  lt.label = label;
  lt.label_rank = rank;
  if (lt.data_node) lt.data_node->label = label;
}

void replace_value(const Tensor& dst, const Tensor& src) {
  AXLE_CHECK(dst.defined() && src.defined() && dst.device().is_xla() && src.device().is_xla(),
             "[replace_value] expected two xla tensors");
  AXLE_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "[replace_value] expected ", dst.dtype(),
             " ", shape_str(dst.shape()), ", got ", src.dtype(), " ", shape_str(src.shape()));
  LazyTensor& d = *lazy_of(dst);
  const LazyTensor& s = *lazy_of(src);
  if (&d == &s) return;
  d.ir = s.ir;
  d.buffer = s.buffer;
  d.pending = s.pending;
  d.data_node.reset();  // made again for d when a graph reads its data
  d.sharding = s.sharding;
  d.shards = s.shards;
  d.updates.reset();
  d.producer = s.producer;
  if (d.ir) track(shared_lazy_of(dst));
}

std::string label_of(const Tensor& t) {
  return t.defined() && t.device().is_xla() ? lazy_of(t)->label : std::string();
}

TraceContext* current_context() { return g_context; }
void set_current_context(TraceContext* c) { g_context = c; }

metrics::Timer& trace_timer() { return stats().trace; }

size_t pending_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.pending.size();
}

}  // namespace axle::lazy
