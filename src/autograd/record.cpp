// Recording an op's grad_fn (what the dispatcher, ops::call, does when an input requires
// grad), and autograd's registration: the hook through which the dispatcher calls it.
#include "autograd/node.h"
#include "ops/hooks.h"

namespace axle::autograd {

void record_op(ops::OpKind k, const ops::Attrs& a, const ops::Tensors& in, const ops::Tensors& out,
               std::vector<bool> needs) {
  auto node = std::make_shared<OpNode>();
  node->kind = k;
  node->attrs = a;
  node->needs = needs;
  node->num_outputs = int(out.size());
  node->in.reserve(in.size());
  node->next.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    node->in.push_back(in[i].defined() ? in[i].detach() : Tensor());
    if (needs[i]) node->next[i] = gradient_edge(in[i]);
  }
  node->out.reserve(out.size());
  for (size_t j = 0; j < out.size(); ++j) {
    node->out.push_back(out[j].detach());
    if (!is_floating(out[j].dtype())) continue;
    AutogradMeta& m = out[j].impl()->meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = int(j);
  }
}

void register_hooks() { ops::set_hooks(ops::AutogradHooks{.record = &record_op}); }

}  // namespace axle::autograd
