// torch.autocast('xla', dtype=torch.bfloat16): kernels on PyTorch's AutocastXLA dispatch key.
//
// Inside a region, PyTorch dispatches an op on xla tensors to the AutocastXLA key before
// autograd. Each op below gets a boxed kernel there that casts its eligible floating tensor
// arguments (xla, floating, not float64) with at::autocast::cached_cast (an aten::_to_copy
// recorded by autograd, so a float32 parameter gets a float32 gradient; PyTorch's cast cache
// for leaf weights within the region), then calls the op again with AutocastXLA excluded.
// Every other op falls through to autograd in its inputs' types.
//
// The lists are the C++ autocast's (axle::autocast): each aten op names the ops.def entry it
// lowers to, and its rule is that entry's AC_* trait (ops::autocast_rule); the dtype it casts
// to is ops::autocast_target, the dispatcher's own decision. The composites with no table row
// take AC_FP32, as axle's composites apply it at entry (src/ops/nn_functional.cpp).
// docs/precision.md lists both and where they differ from PyTorch's CPU lists.
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bridge.h"
#include "ops/autocast.h"
#include "ops/op.h"

namespace axle_py {
namespace {

using axle::ops::AutocastRule;
using axle::ops::OpKind;

/// A PyTorch operator (name.overload, as its autocast lists spell it) and the ops.def entry
/// whose AC_* rule it takes: the op it lowers to.
struct ByTable {
  const char* aten;
  OpKind kind;
};
const ByTable kByTable[] = {
    // AC_LOWER: the matrix products, convolutions and attention.
    {"mm", OpKind::Matmul},
    {"bmm", OpKind::Matmul},
    {"matmul", OpKind::Matmul},
    {"baddbmm", OpKind::Matmul},
    {"addbmm", OpKind::Matmul},
    {"addmm", OpKind::Linear},
    {"_addmm_activation", OpKind::Linear},
    {"linear", OpKind::Linear},
    {"conv1d", OpKind::Conv2d},  // lowered as a conv2d of height 1
    {"conv1d.padding", OpKind::Conv2d},
    {"conv2d", OpKind::Conv2d},
    {"conv2d.padding", OpKind::Conv2d},
    {"_convolution.deprecated", OpKind::Conv2d},
    {"conv_transpose1d", OpKind::ConvTranspose2d},
    {"conv_transpose2d.input", OpKind::ConvTranspose2d},
    {"scaled_dot_product_attention", OpKind::ScaledDotProductAttention},
    // AC_FP32: softmax, log_softmax, layer_norm, the negative log likelihood, prod.
    {"softmax.int", OpKind::Softmax},
    {"log_softmax.int", OpKind::LogSoftmax},
    {"layer_norm", OpKind::LayerNorm},
    {"nll_loss", OpKind::NllLoss},
    {"nll_loss_nd", OpKind::NllLoss},
    {"nll_loss2d", OpKind::NllLoss},
    {"prod", OpKind::Prod},
    {"prod.dim_int", OpKind::Prod},
    // AC_PROMOTE: cat (and stack, a cat of unsqueezed tensors).
    {"cat", OpKind::Cat},
    {"stack", OpKind::Cat},
};

/// PyTorch operators that are composites in axle (no ops.def row): float32, as axle's
/// cross_entropy, mse_loss, batch_norm and group_norm apply AC_FP32 at entry.
const char* const kFp32Composites[] = {"cross_entropy_loss", "mse_loss", "batch_norm", "group_norm"};

constexpr c10::DeviceType kXla = c10::DeviceType::XLA;

/// The AutocastXLA kernel of one operator: its rule, applied to the tensors on the stack.
struct AutocastKernel final : c10::OperatorKernel {
  explicit AutocastKernel(AutocastRule r) : rule(r) {}
  AutocastRule rule;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) const {
    const at::ScalarType region = at::autocast::get_autocast_dtype(at::kXLA);
    TORCH_CHECK(region == at::kBFloat16 || region == at::kFloat, "[autocast] expected dtype bfloat16 on the xla ",
                "device (axle), or float32, which casts nothing down; got ", c10::toString(region));
    const size_t n = op.schema().arguments().size();
    const size_t first = stack->size() - n;
    auto eligible = [](const at::Tensor& t) { return at::autocast::is_eligible(t, kXla); };
    std::vector<axle::DType> floating;
    for (size_t i = first; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      if (v.isTensor() && eligible(v.toTensor())) floating.push_back(to_axle_dtype(v.toTensor().scalar_type(), "autocast"));
      if (v.isTensorList())
        for (const at::Tensor& t : v.toTensorVector())
          if (eligible(t)) floating.push_back(to_axle_dtype(t.scalar_type(), "autocast"));
    }
    const std::optional<axle::DType> to =
        axle::ops::autocast_target(rule, to_axle_dtype(region, "autocast"), floating);
    if (to) {
      const at::ScalarType st = to_torch_dtype(*to);
      for (size_t i = first; i < stack->size(); ++i) {
        c10::IValue& v = (*stack)[i];
        if (v.isTensor()) {
          if (eligible(v.toTensor())) v = at::autocast::cached_cast(st, v.toTensor(), kXla);
        } else if (v.isTensorList()) {
          c10::List<at::Tensor> cast_list;
          for (const at::Tensor& t : v.toTensorVector()) cast_list.push_back(eligible(t) ? at::autocast::cached_cast(st, t, kXla) : t);
          v = std::move(cast_list);
        }
      }
    }
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastXLA);
    op.callBoxed(stack);
  }
};

torch::CppFunction kernel(AutocastRule r) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutocastKernel>(r));
}

const char* rule_name(AutocastRule r) {
  switch (r) {
    case AutocastRule::Lower: return "lower";
    case AutocastRule::Fp32: return "fp32";
    case AutocastRule::Promote: return "promote";
    case AutocastRule::None: break;
  }
  return "none";
}

}  // namespace

/// The Python path's list: (aten operator, ops.def entry or "" for a composite, rule).
std::vector<std::tuple<std::string, std::string, std::string>> autocast_ops() {
  std::vector<std::tuple<std::string, std::string, std::string>> r;
  for (const ByTable& e : kByTable)
    r.emplace_back(e.aten, axle::ops::op_name(e.kind), rule_name(axle::ops::autocast_rule(e.kind)));
  for (const char* c : kFp32Composites) r.emplace_back(c, "", rule_name(AutocastRule::Fp32));
  return r;
}

TORCH_LIBRARY_IMPL(_, AutocastXLA, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastXLA, m) {
  for (const ByTable& e : kByTable) m.impl(e.aten, kernel(axle::ops::autocast_rule(e.kind)));
  for (const char* c : kFp32Composites) m.impl(c, kernel(AutocastRule::Fp32));
}

}  // namespace axle_py
