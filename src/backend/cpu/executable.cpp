#include "backend/cpu/executable.h"

#include <algorithm>
#include <unordered_map>

#include "axle/autograd.h"
#include "axle/metrics.h"
#include "backend/cpu/backend.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/allocator.h"
#include "dist/local_devices.h"
#include "ops/fused.h"
#include "ops/kernels.h"
#include "ops/replica_groups.h"
#include "ops/schema.h"

namespace axle::cpu {

using compiler::PNode;
using compiler::Program;
using compiler::Ref;

Device charged_device(Device device) {
  const int k = dist::this_device();
  return k >= 0 && device.is_xla() ? Device(DeviceType::XLA, k) : device;
}

namespace {

// A collective whose `group` names replica groups (the SPMD partitioner's, ops/replica_groups.h)
// gets its communicator here: the in-process group over those devices.
ops::Attrs with_communicator(ops::OpKind op, const ops::Attrs& a) {
  namespace attr = ops::attr;
  auto map = [](int64_t& group) {
    if (const auto* groups = ops::replica_groups_of(group)) group = dist::local_group_id(*groups);
  };
  switch (op) {
    case ops::OpKind::AllReduce: { auto v = attr::AllReduce::of(a); map(v.group); return v.pack(); }
    case ops::OpKind::AllGather: { auto v = attr::AllGather::of(a); map(v.group); return v.pack(); }
    case ops::OpKind::ReduceScatter: { auto v = attr::ReduceScatter::of(a); map(v.group); return v.pack(); }
    case ops::OpKind::Broadcast: { auto v = attr::Broadcast::of(a); map(v.group); return v.pack(); }
    case ops::OpKind::AllToAll: { auto v = attr::AllToAll::of(a); map(v.group); return v.pack(); }
    case ops::OpKind::CollectivePermute: { auto v = attr::CollectivePermute::of(a); map(v.group); return v.pack(); }
    default: return a;
  }
}

}  // namespace

std::shared_ptr<const Executable> lower(const Program& p, Device device) {
  auto ex = std::make_shared<Executable>();
  ex->device_ = device;
  ex->kernels_ = &ops::kernels(kName);
  // One slot per (node, output).
  std::vector<std::vector<int>> slot(p.nodes.size());
  int next = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (size_t j = 0; j < p.nodes[i].outs.size(); ++j) slot[i].push_back(next++);
  ex->num_slots_ = next;
  ex->input_slots_.assign(size_t(p.num_inputs), -1);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const PNode& n = p.nodes[i];
    if (n.kind == compiler::NodeKind::Data) ex->input_slots_[size_t(n.input)] = slot[i][0];
    if (n.kind == compiler::NodeKind::Constant) ex->constants_.push_back({slot[i][0], n.constant});
    if (n.kind != compiler::NodeKind::Op) continue;
    AXLE_CHECK(supports_op(n.op), "[compile] op '", ops::op_name(n.op),
               "' has no cpu kernel; the cpu backend cannot run this program");
    Executable::Step s{n.op, ops::has_side_effects(n.op) ? with_communicator(n.op, n.attrs) : n.attrs, {}, slot[i], n.outs, {}};
    for (const Ref& r : n.operands) s.in.push_back(r.node >= 0 ? slot[size_t(r.node)][size_t(r.index)] : -1);
    ex->steps_.push_back(std::move(s));
  }
  for (const Ref& r : p.outputs) ex->output_slots_.push_back(slot[size_t(r.node)][size_t(r.index)]);
  // Liveness: release each slot after its last reader, unless it is a graph output.
  std::vector<int> last(size_t(next), -1);
  for (size_t k = 0; k < ex->steps_.size(); ++k)
    for (int s : ex->steps_[k].in)
      if (s >= 0) last[size_t(s)] = int(k);
  std::vector<bool> is_out(size_t(next), false);
  for (int s : ex->output_slots_) is_out[size_t(s)] = true;
  for (int s = 0; s < next; ++s)
    if (last[size_t(s)] >= 0 && !is_out[size_t(s)]) ex->steps_[size_t(last[size_t(s)])].release.push_back(s);
  // Fused steps may write an output over an operand at its last use (checked again at run
  // time: only if nothing else holds that buffer).
  for (Executable::Step& st : ex->steps_) {
    if (st.op != ops::OpKind::FusedElementwise) continue;
    std::vector<std::pair<int64_t, int64_t>> donate;
    for (auto [k, j] : ops::fused_donation_candidates(st.attrs)) {
      const int s = st.in[size_t(j)];
      const bool released = std::find(st.release.begin(), st.release.end(), s) != st.release.end();
      const bool once = std::count(st.in.begin(), st.in.end(), s) == 1;
      if (released && once) donate.push_back({k, j});
    }
    if (donate.empty()) continue;
    ops::FProgram prog = ops::parse(st.attrs);
    prog.donate = std::move(donate);
    st.attrs = {};
    prog.encode(st.attrs);
  }
  return ex;
}

std::vector<Tensor> Executable::run(std::vector<Tensor> inputs) const {
  NoGradGuard no_grad;
  // Every buffer made here is the device's; on SPMD device thread k, virtual device xla:k's.
  ChargeHostMemoryTo charge(charged_device(device_));
  std::vector<Tensor> slots(static_cast<size_t>(num_slots_));
  for (size_t i = 0; i < input_slots_.size(); ++i)
    if (input_slots_[i] >= 0) slots[size_t(input_slots_[i])] = std::move(inputs[i]);
  for (auto& [s, t] : constants_) slots[size_t(s)] = t;
  ops::Tensors in;
  for (const Step& st : steps_) {
    in.clear();
    for (int s : st.in) in.push_back(s >= 0 ? slots[size_t(s)] : Tensor());
    // Free last uses before the kernel runs: an operand only `in` holds may be donated.
    for (int s : st.release) slots[size_t(s)] = Tensor();
    ops::Tensors out;
    if (ops::profiling()) [[unlikely]] {
      metrics::ScopedTimer t(ops::op_timer_name(st.op));
      out = kernels_->get(st.op)(in, st.attrs, st.metas);
    } else {
      out = kernels_->get(st.op)(in, st.attrs, st.metas);
    }
    in.clear();
    for (size_t j = 0; j < st.out.size(); ++j) slots[size_t(st.out[j])] = std::move(out[j]);
  }
  std::vector<Tensor> result;
  result.reserve(output_slots_.size());
  for (int s : output_slots_) {
    const Tensor& t = slots[size_t(s)];
    // Dense results keep their layout (a channels-last activation stays channels-last
    // across graphs, e.g. in eager mode); views of part of a buffer are copied out.
    result.push_back(t.is_contiguous() || cpu::is_dense(t) ? t : cpu::contiguous_as(t, t.dtype()));
  }
  return result;
}

}  // namespace axle::cpu
