// The autograd graph: each op output that requires grad points at the Node that made it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_impl.h"
#include "ops/op.h"

namespace axle::autograd {

struct Node;
struct Edge {
  std::shared_ptr<Node> fn;
  int index = 0;  ///< which output of fn this gradient belongs to
};

/// Core holds it as a GradNode (core/tensor_impl.h); gradient_edge casts it back.
struct Node : GradNode {
  /// grads: one per output of this node. Returns one gradient per `next` edge.
  virtual ops::Tensors apply(ops::Tensors&& grads) = 0;
  virtual std::string name() const = 0;
  std::vector<Edge> next;  ///< one per input (fn null where no gradient is needed)
  int num_outputs = 1;
};

/// A recorded op: its vjp runs in backward, then saved tensors are released.
struct OpNode final : Node {
  ops::OpKind kind;
  ops::Attrs attrs;
  ops::Tensors in, out;
  std::vector<bool> needs;
  bool released = false;
  ops::Tensors apply(ops::Tensors&& grads) override;
  std::string name() const override;
};

/// Sink for a leaf: adds the incoming gradient to leaf.grad().
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;
  ops::Tensors apply(ops::Tensors&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
};

/// The edge a gradient for `t` should flow into (empty if t needs none).
Edge gradient_edge(const Tensor& t);
/// Runs backward from `root` with seed gradient `grad`.
void run_backward(const Tensor& root, const Tensor& grad);
/// Makes `out` the outputs of a new OpNode for op `k` on inputs `in` (the dispatcher's
/// autograd record); needs[i]: input i wants a gradient.
void record_op(ops::OpKind k, const ops::Attrs& a, const ops::Tensors& in, const ops::Tensors& out,
               std::vector<bool> needs);
/// Installs autograd's hooks (ops/hooks.h); called by src/init/init.cpp.
void register_hooks();

}  // namespace axle::autograd
