// Sharding propagation (partition.h): forward and backward sweeps over the global program
// to a fixed point, each op's proposals coming from its rule's hooks (rules.h).
//
// Fixed (never changed): inputs (their given shardings), constants (replicated),
// sharding_constraint outputs and pinned program outputs. Anything else takes proposals by
// the merge policy: unknown takes any; otherwise the proposal with more tiles wins, and on
// a tie a forward proposal replaces a backward one (a tie keeps the forward-derived one).
// After the sweeps whatever is unknown is replicated.
#include <algorithm>

#include "axle/error.h"
#include "spmd/partition.h"
#include "spmd/rules.h"

namespace axle::spmd {

using compiler::NodeKind;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;

namespace {

struct Slot {
  MaybeSharding s;
  bool fixed = false;
  bool forward = false;  // the current sharding came from a forward proposal
};

bool is_constraint(const PNode& n) {
  return n.kind == NodeKind::Op && ops::shard_rule(n.op) == ops::ShardRule::Constraint;
}

}  // namespace

// The program's mesh: the one every meshed sharding (inputs, constraints, pins) is on; an
// error names two that differ. Null when none has a mesh.
std::shared_ptr<const xs::Mesh> program_mesh(const Program& g, const std::vector<Sharding>& inputs,
                                             const PartitionOptions& o) {
  std::shared_ptr<const xs::Mesh> mesh;
  std::string first;
  auto see = [&](const Sharding& s, const std::string& what) {
    if (!s.mesh) return;
    if (!mesh) {
      mesh = s.mesh;
      first = what;
      return;
    }
    AXLE_CHECK(*mesh == *s.mesh, "[spmd] expected every sharding of program '", g.name, "' on one mesh, but ", first,
               " is on ", mesh->str(), " and ", what, " on ", s.mesh->str());
  };
  for (size_t i = 0; i < inputs.size(); ++i) see(inputs[i], "input " + std::to_string(i));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const PNode& n = g.nodes[i];
    if (n.dead || !is_constraint(n)) continue;
    const auto c = ops::attr::ShardingConstraint::of(n.attrs);
    see(decode(c.sharding.data(), c.sharding.size()), "the constraint %" + std::to_string(i));
  }
  for (size_t j = 0; j < o.output_pins.size(); ++j)
    if (o.output_pins[j]) see(*o.output_pins[j], "the pin of output " + std::to_string(j));
  return mesh;
}

std::vector<std::vector<Sharding>> propagate(const Program& g, const std::vector<Sharding>& inputs,
                                             const PartitionOptions& o) {
  AXLE_CHECK(int(inputs.size()) == g.num_inputs, "[spmd] program '", g.name, "' has ", g.num_inputs,
             " inputs, but ", inputs.size(), " shardings were given");
  AXLE_CHECK(o.output_pins.empty() || o.output_pins.size() == g.outputs.size(), "[spmd] program '", g.name, "' has ",
             g.outputs.size(), " outputs, but ", o.output_pins.size(), " output pins were given");
  const auto mesh = program_mesh(g, inputs, o);
  const RuleTable& table = rule_table();
  std::vector<std::vector<Slot>> st(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const PNode& n = g.nodes[i];
    st[i].resize(n.outs.size());
    if (n.dead) continue;
    if (n.kind == NodeKind::Data) {
      st[i][0] = {inputs[size_t(n.input)], true, true};
      if (!st[i][0].s->mesh && mesh && st[i][0].s->is_replicated()) st[i][0].s = Sharding::replicated(mesh);
    } else if (n.kind == NodeKind::Constant) {
      st[i][0] = {Sharding::replicated(mesh), true, true};
    } else if (is_constraint(n)) {
      const auto c = ops::attr::ShardingConstraint::of(n.attrs);
      st[i][0] = {decode(c.sharding.data(), c.sharding.size()), true, true};
    }
  }
  for (size_t j = 0; j < o.output_pins.size(); ++j) {
    if (!o.output_pins[j]) continue;
    const Ref r = g.outputs[j];
    Slot& s = st[size_t(r.node)][size_t(r.index)];
    if (!s.fixed) s = {*o.output_pins[j], true, true};
  }
  if (!mesh) {  // nothing is split: everything is replicated
    std::vector<std::vector<Sharding>> r(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) r[i].assign(g.nodes[i].outs.size(), Sharding::replicated());
    return r;
  }
  auto merge = [&](Slot& slot, const MaybeSharding& p, bool forward) {
    if (slot.fixed || !p || p->is_partial()) return false;
    if (slot.s) {
      const int64_t have = total_tiles(*slot.s), want = total_tiles(*p);
      if (want < have || *slot.s == *p) return false;
      if (want == have && !(forward && !slot.forward)) return false;
    }
    slot = {p, false, forward};
    return true;
  };
  auto view_of = [&](size_t i) {
    const PNode& n = g.nodes[i];
    PropagationView v{g, int(i), n, {}, {}, mesh};
    for (const Ref& r : n.operands)
      v.operands.push_back(r.node < 0 ? std::nullopt : st[size_t(r.node)][size_t(r.index)].s);
    for (const Slot& s : st[i]) v.outputs.push_back(s.s);
    return v;
  };
  for (int round = 0; round < 8; ++round) {
    bool changed = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const PNode& n = g.nodes[i];
      if (n.dead || n.kind != NodeKind::Op) continue;
      // A manual region (an operand sharded {manual}): the op runs as written on each
      // device's local values, and its outputs are manual too.
      const MaybeSharding* manual = nullptr;
      for (const Ref& r : n.operands)
        if (r.node >= 0 && st[size_t(r.node)][size_t(r.index)].s &&
            st[size_t(r.node)][size_t(r.index)].s->kind == Sharding::Kind::Manual)
          manual = &st[size_t(r.node)][size_t(r.index)].s;
      if (manual) {
        for (Slot& s : st[i])
          if (!s.fixed) s = {*manual, true, true}, changed = true;
        continue;
      }
      const RuleHooks& h = table[ops::shard_rule(n.op)];
      std::vector<MaybeSharding> p;
      if (!h.partition) p.assign(n.outs.size(), Sharding::replicated(mesh));  // Opaque: outputs replicated
      else if (h.forward) p = h.forward(view_of(i));
      for (size_t j = 0; j < p.size() && j < n.outs.size(); ++j) changed |= merge(st[i][j], p[j], true);
    }
    for (size_t i = g.nodes.size(); i-- > 0;) {
      const PNode& n = g.nodes[i];
      if (n.dead || n.kind != NodeKind::Op) continue;
      const RuleHooks& h = table[ops::shard_rule(n.op)];
      if (!h.partition || !h.backward) continue;
      if (std::any_of(st[i].begin(), st[i].end(), [](const Slot& s) { return s.s && s.s->kind == Sharding::Kind::Manual; }))
        continue;
      const std::vector<MaybeSharding> p = h.backward(view_of(i));
      for (size_t k = 0; k < p.size() && k < n.operands.size(); ++k) {
        const Ref r = n.operands[k];
        if (r.node >= 0) changed |= merge(st[size_t(r.node)][size_t(r.index)], p[k], false);
      }
    }
    if (!changed) break;
  }
  std::vector<std::vector<Sharding>> r(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const Slot& s : st[i]) r[i].push_back(s.s ? *s.s : Sharding::replicated(mesh));
  return r;
}

}  // namespace axle::spmd
