// xm::reduce_gradients and xm::optimizer_step: average the gradients over ranks, then step (axle/xm.h).
#include <map>

#include "axle/autograd.h"
#include "axle/dist.h"
#include "axle/fsdp.h"
#include "axle/optim/optimizer.h"
#include "axle/runtime.h"
#include "axle/xm.h"

namespace axle::xm {

void reduce_gradients(optim::Optimizer& opt) {
  for (const Tensor& p : opt.parameters())
    AXLE_CHECK(fsdp::param_role(p) != fsdp::ParamRole::Shard,
               "[optimizer_step] FSDP parameters: call optimizer.step(); xm::optimizer_step would all-reduce already "
               "reduce-scattered gradients (parameter '", fsdp::param_name(p), "')");
  if (runtime::world_size() <= 1) return;
  NoGradGuard no_grad;
  // One bucket per (dtype, device): each is one all-reduce of every gradient in it.
  std::map<std::pair<int, std::string>, std::vector<Tensor>> buckets;
  for (const Tensor& p : opt.parameters()) {
    Tensor g = p.grad();
    if (g.defined()) buckets[{int(g.dtype()), g.device().str()}].push_back(p);
  }
  for (auto& [key, params] : buckets) {
    std::vector<Tensor> grads;
    grads.reserve(params.size());
    for (const Tensor& p : params) grads.push_back(p.grad());
    std::vector<Tensor> reduced = dist::all_reduce(grads, dist::ReduceOp::Mean);
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(reduced[i]);
  }
}

void optimizer_step(optim::Optimizer& opt, const OptimizerStepOptions& o) {
  reduce_gradients(opt);
  opt.step();
  if (o.barrier) {
    bool on_xla = false;
    for (const Tensor& p : opt.parameters())
      on_xla = on_xla || p.device().is_xla() || (p.grad().defined() && p.grad().device().is_xla());
    if (on_xla) axle::sync();
    if (runtime::world_size() > 1) dist::barrier();
  }
}

}  // namespace axle::xm
