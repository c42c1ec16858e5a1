// xm::optimizer_step, master_print and rendezvous.
#include <cstdio>
#include <cstring>
#include <map>

#include "axle/autograd.h"
#include "axle/dist.h"
#include "axle/optim/optimizer.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "dist/dist_internal.h"

namespace axle::xm {

void optimizer_step(optim::Optimizer& opt, const OptimizerStepOptions& o) {
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

void master_print(const std::string& line) {
  if (runtime::global_ordinal() != 0) return;
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> rendezvous(const std::string& tag, const std::string& payload) {
  const int world = runtime::world_size();
  if (world == 1) return {payload};
  dist::ProcessGroup& g = dist::default_group();
  // Exchange lengths, then the padded (tag, payload) records.
  const std::string rec = tag + '\0' + payload;
  std::vector<int64_t> lens(static_cast<size_t>(world));
  int64_t mine = int64_t(rec.size());
  g.all_gather(&mine, lens.data(), 1, kInt64);
  int64_t max_len = 0;
  for (int64_t l : lens) max_len = std::max(max_len, l);
  std::vector<uint8_t> in(size_t(max_len), 0), all(size_t(max_len) * size_t(world));
  std::memcpy(in.data(), rec.data(), rec.size());
  g.all_gather(in.data(), all.data(), max_len, kUInt8);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    std::string s(reinterpret_cast<const char*>(all.data()) + size_t(r) * size_t(max_len), size_t(lens[size_t(r)]));
    const size_t z = s.find('\0');
    const std::string their_tag = s.substr(0, z);
    AXLE_CHECK(their_tag == tag, "[rendezvous] rank ", g.rank(), " reached rendezvous '", tag, "' but rank ", r,
               " reached '", their_tag, "': every rank must pass the same rendezvous points in the same order");
    out.push_back(z == std::string::npos ? std::string() : s.substr(z + 1));
  }
  return out;
}

}  // namespace axle::xm
