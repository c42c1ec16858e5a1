// The backward engine: topological order over the grad_fn graph, gradients summed per input.
#include <atomic>
#include <functional>
#include <unordered_map>

#include "axle/autocast.h"
#include "axle/autograd.h"
#include "axle/ops.h"
#include "autograd/node.h"

namespace axle::autograd {

Edge gradient_edge(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd || !impl->autograd->requires_grad) return {};
  AutogradMeta& m = *impl->autograd;
  // Every GradNode is an autograd::Node (FSDP's hook nodes in src/nn derive from Node too).
  if (m.grad_fn) return {std::static_pointer_cast<Node>(m.grad_fn), m.output_nr};
  if (!m.accumulator) {
    auto acc = std::make_shared<AccumulateGrad>();
    acc->leaf = t.impl_ptr();
    m.accumulator = acc;
  }
  return {std::static_pointer_cast<Node>(m.accumulator), 0};
}

ops::Tensors OpNode::apply(ops::Tensors&& grads) {
  AXLE_CHECK(!released, "[backward] tried to run backward through the graph a second time (at ",
             ops::op_name(kind), "); its saved tensors were freed after the first backward()");
  ops::VjpArgs v{in, out, grads, attrs, needs};
  ops::Tensors g = ops::op_def(kind).vjp(v);
  AXLE_CHECK(g.size() == in.size(), "[backward] internal: vjp of ", ops::op_name(kind), " returned ", g.size(),
             " gradients for ", in.size(), " inputs");
  for (size_t i = 0; i < g.size(); ++i) {
    if (!needs[i]) { g[i] = Tensor(); continue; }
    if (g[i].defined() && g[i].shape() != in[i].shape())
      AXLE_FAIL("[backward] internal: vjp of ", ops::op_name(kind), " gave a gradient of shape ",
                shape_str(g[i].shape()), " for input ", i, " of shape ", shape_str(in[i].shape()));
    // A gradient takes its input's dtype (PyTorch's engine does the same): a bf16 operand of a
    // promoting op (add(fp32, bf16) -> fp32 under autocast) gets a bf16 gradient.
    if (g[i].defined() && g[i].dtype() != in[i].dtype() && is_floating(in[i].dtype()))
      g[i] = cast(g[i], in[i].dtype());
  }
  released = true;
  in.clear();
  out.clear();
  return g;
}

std::string OpNode::name() const { return std::string(ops::op_name(kind)) + "Backward"; }

ops::Tensors AccumulateGrad::apply(ops::Tensors&& grads) {
  auto t = leaf.lock();
  if (!t || !grads[0].defined()) return {};
  AutogradMeta& m = t->meta();
  Tensor g = grads[0].contiguous();
  if (g.dtype() != t->dtype) g = g.to(t->dtype);
  // Never modify a gradient in place: it may alias another tensor's.
  m.grad = m.grad.defined() ? add(m.grad, g) : g;
  if (!m.grad_hooks.empty()) {
    const Tensor param(t);
    auto hooks = m.grad_hooks;  // a hook may register or remove hooks
    for (auto& [id, hook] : hooks) hook(param);
  }
  return {};
}

namespace {
// Callbacks queued during the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* g_callbacks = nullptr;
std::atomic<int64_t> g_next_hook_id{1};
}  // namespace

int64_t register_post_accumulate_grad_hook(const Tensor& param, GradHook hook) {
  AXLE_CHECK(param.defined(), "[register_post_accumulate_grad_hook] expected a defined tensor");
  AXLE_CHECK(param.is_leaf() && param.requires_grad(),
             "[register_post_accumulate_grad_hook] expected a leaf tensor that requires grad (a parameter), got ",
             param.is_leaf() ? "a leaf that does not require grad" : "the result of an op");
  AXLE_CHECK(hook != nullptr, "[register_post_accumulate_grad_hook] expected a callable hook, got an empty one");
  const int64_t id = g_next_hook_id.fetch_add(1);
  param.impl()->meta().grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_hook(const Tensor& param, int64_t id) {
  if (!param.defined() || !param.impl()->autograd) return;
  std::erase_if(param.impl()->autograd->grad_hooks, [id](const auto& h) { return h.first == id; });
}

void queue_callback(std::function<void()> fn) {
  AXLE_CHECK(g_callbacks != nullptr, "[queue_callback] expected to be called during backward() (from a hook), "
             "but no backward pass is running on this thread");
  g_callbacks->push_back(std::move(fn));
}

namespace {
void run_graph(const Tensor& root, const Tensor& grad);
}  // namespace

void run_backward(const Tensor& root, const Tensor& grad) {
  std::vector<std::function<void()>> callbacks;
  auto* outer = g_callbacks;
  g_callbacks = &callbacks;
  try {
    run_graph(root, grad);
    NoGradGuard no_grad;
    for (size_t i = 0; i < callbacks.size(); ++i) {  // a callback may queue more
      auto fn = std::move(callbacks[i]);
      fn();
    }
  } catch (...) {
    g_callbacks = outer;
    throw;
  }
  g_callbacks = outer;
}

namespace {
void run_graph(const Tensor& root, const Tensor& grad) {
  NoGradGuard no_grad;
  // Autocast off: each vjp computes in the dtypes its forward ran in (a cast's vjp casts the
  // gradient back), whether or not backward() is called inside an autocast region.
  autocast no_autocast_cpu(kCPU, autocast::dtype(kCPU), false);
  autocast no_autocast_xla(Device(DeviceType::XLA), autocast::dtype(Device(DeviceType::XLA)), false);
  Edge start = gradient_edge(root);
  if (!start.fn) return;
  // Count, for each node, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<std::shared_ptr<Node>> all{start.fn};
  std::vector<Node*> stack{start.fn.get()};
  deps[start.fn.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.fn) continue;
      auto [it, fresh] = deps.try_emplace(e.fn.get(), 0);
      ++it->second;
      if (fresh) {
        all.push_back(e.fn);
        stack.push_back(e.fn.get());
      }
    }
  }
  std::unordered_map<Node*, ops::Tensors> buffers;
  buffers[start.fn.get()].resize(size_t(start.fn->num_outputs));
  buffers[start.fn.get()][size_t(start.index)] = grad;
  std::vector<Node*> ready{start.fn.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    ops::Tensors in_grads;
    if (auto it = buffers.find(n); it != buffers.end()) {
      in_grads = std::move(it->second);
      buffers.erase(it);
    }
    in_grads.resize(size_t(n->num_outputs));
    bool any = false;
    for (const Tensor& g : in_grads) any = any || g.defined();
    // A node no gradient reached still runs its bookkeeping so its inputs' counts fall.
    ops::Tensors out = any ? n->apply(std::move(in_grads)) : ops::Tensors();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.fn) continue;
      Node* m = e.fn.get();
      if (i < out.size() && out[i].defined()) {
        ops::Tensors& buf = buffers[m];
        buf.resize(size_t(m->num_outputs));
        Tensor& slot = buf[size_t(e.index)];
        slot = slot.defined() ? add(slot, out[i]) : out[i];
      }
      if (--deps[m] == 0) ready.push_back(m);
    }
  }
}

}  // namespace

}  // namespace axle::autograd
