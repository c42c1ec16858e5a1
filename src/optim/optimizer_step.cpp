// xm::optimizer_step: all-reduce the gradients over ranks, then step (axle/xm.h).
#include <map>

#include "axle/autograd.h"
#include "axle/dist.h"
#include "axle/fsdp.h"
#include "axle/optim/optimizer.h"
#include "axle/runtime.h"
#include "axle/xm.h"

namespace axle::xm {

void optimizer_step(optim::Optimizer& opt, const OptimizerStepOptions& o) {
  for (const Tensor& p : opt.parameters())
    AXLE_CHECK(fsdp::param_role(p) != fsdp::ParamRole::Shard,
               "[optimizer_step] FSDP parameters: call optimizer.step(); xm::optimizer_step would all-reduce already "
               "reduce-scattered gradients (parameter '", fsdp::param_name(p), "')");
  const bool multi = runtime::world_size() > 1;
  bool on_xla = false;
  if (multi) {
    NoGradGuard no_grad;
    // One bucket per (dtype, device): each is one all-reduce of every gradient in it.
    std::map<std::pair<int, std::string>, std::vector<Tensor>> buckets;
    for (const Tensor& p : opt.parameters()) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      on_xla = on_xla || g.device().is_xla();
      buckets[{int(g.dtype()), g.device().str()}].push_back(p);
    }
    for (auto& [key, params] : buckets) {
      std::vector<Tensor> grads;
      grads.reserve(params.size());
      for (const Tensor& p : params) grads.push_back(p.grad());
      std::vector<Tensor> reduced = dist::all_reduce(grads, dist::ReduceOp::Mean);
      for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(reduced[i]);
    }
  }
  opt.step();
  if (o.barrier) {
    if (!on_xla)
      for (const Tensor& p : opt.parameters()) on_xla = on_xla || p.device().is_xla();
    if (on_xla) axle::sync();
    if (multi) dist::barrier();
  }
}

}  // namespace axle::xm
