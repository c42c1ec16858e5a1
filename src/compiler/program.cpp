#include "compiler/program.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "axle/metrics.h"
#include "axle/tensor.h"
#include "core/tensor_impl.h"

namespace axle::compiler {

void Program::replace_uses(Ref from, Ref to) {
  for (PNode& n : nodes)
    for (Ref& r : n.operands)
      if (r == from) r = to;
  for (Ref& r : outputs)
    if (r == from) r = to;
}

void Program::compact() {
  std::vector<int> remap(nodes.size(), -1);
  std::vector<PNode> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    remap[i] = int(kept.size());
    kept.push_back(std::move(nodes[i]));
  }
  auto fix = [&](Ref& r) {
    if (r.node < 0) return;
    AXLE_CHECK(remap[size_t(r.node)] >= 0, "[compiler] internal: a pass removed node %", r.node, " still in use");
    r.node = remap[size_t(r.node)];
  };
  for (PNode& n : kept)
    for (Ref& r : n.operands) fix(r);
  for (Ref& r : outputs) fix(r);
  nodes = std::move(kept);
}

void Program::hoist_leaves() {
  std::vector<int> order;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind != NodeKind::Op) order.push_back(int(i));
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == NodeKind::Op) order.push_back(int(i));
  std::vector<int> remap(nodes.size());
  std::vector<PNode> sorted;
  sorted.reserve(nodes.size());
  for (int i : order) {
    remap[size_t(i)] = int(sorted.size());
    sorted.push_back(std::move(nodes[size_t(i)]));
  }
  for (PNode& n : sorted)
    for (Ref& r : n.operands)
      if (r.node >= 0) r.node = remap[size_t(r.node)];
  for (Ref& r : outputs) r.node = remap[size_t(r.node)];
  nodes = std::move(sorted);
}

int Program::op_count() const {
  int c = 0;
  for (const PNode& n : nodes) c += !n.dead && n.kind == NodeKind::Op;
  return c;
}

namespace {
std::string meta_str(const ops::Meta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }
// `%3`, `%3.1` for output 1 of a node with several, `_` for an absent operand. A reference
// past the end (which the verifier rejects) prints with its index.
std::string ref_str(const Program& p, const Ref& r) {
  if (r.node < 0) return "_";
  std::string s = "%" + std::to_string(r.node);
  if (size_t(r.node) >= p.nodes.size() || p.nodes[size_t(r.node)].outs.size() > 1) s += "." + std::to_string(r.index);
  return s;
}
}  // namespace

std::string Program::node_text(size_t i) const {
  std::ostringstream os;
  const PNode& n = nodes[i];
  os << "%" << i << " = ";
  if (n.kind == NodeKind::Data) os << "input " << n.input;
  else if (n.kind == NodeKind::Constant)
    os << "constant " << (n.constant.defined() && n.constant.numel() == 1 ? n.constant.item() : 0.0);
  else {
    os << ops::op_name(n.op) << "(";
    for (size_t j = 0; j < n.operands.size(); ++j) os << (j ? ", " : "") << ref_str(*this, n.operands[j]);
    os << ")";
    if (!n.attrs.ints.empty() || !n.attrs.floats.empty()) {
      os << " {";
      for (size_t j = 0; j < n.attrs.ints.size(); ++j) os << (j ? "," : "") << n.attrs.ints[j];
      if (!n.attrs.floats.empty()) os << ";";
      for (size_t j = 0; j < n.attrs.floats.size(); ++j) os << (j ? "," : "") << n.attrs.floats[j];
      os << "}";
    }
  }
  os << " : ";
  for (size_t j = 0; j < n.outs.size(); ++j) os << (j ? ", " : "") << meta_str(n.outs[j]);
  return os.str();
}

std::string Program::text() const {
  std::string s;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!nodes[i].dead) s += node_text(i) + "\n";
  s += "return ";
  for (size_t j = 0; j < outputs.size(); ++j) s += (j ? ", " : "") + ref_str(*this, outputs[j]);
  return s + "\n";
}

Tensor meta_tensor(const ops::Meta& m) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = m.dtype;
  impl->device = Device(DeviceType::XLA, 0);
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->refresh();
  return Tensor(std::move(impl));
}

namespace {
std::string metas_str(const std::vector<ops::Meta>& ms) {
  std::string s;
  for (size_t j = 0; j < ms.size(); ++j) s += (j ? ", " : "") + meta_str(ms[j]);
  return ms.empty() ? "no outputs" : s;
}
}  // namespace

void Program::verify(const std::string& stage) const {
  const std::string where = "[verify] program" + (name.empty() ? "" : " '" + name + "'") +
                            (stage.empty() ? "" : " " + stage) + ": ";
  // `what()` names the reference in an error (made only then).
  auto check_ref = [&](const Ref& r, size_t user, const auto& what) {
    AXLE_CHECK(size_t(r.node) < nodes.size() && size_t(r.node) < user, where, what(), " refers to %", r.node,
               ", which does not come before it");
    const PNode& d = nodes[size_t(r.node)];
    AXLE_CHECK(!d.dead, where, what(), " refers to dead node %", r.node);
    AXLE_CHECK(r.index >= 0 && size_t(r.index) < d.outs.size(), where, what(), " uses output ", r.index, " of %",
               r.node, ", which has ", d.outs.size());
  };
  std::vector<bool> input_seen(size_t(std::max(num_inputs, 0)), false);
  // Operand tensors for the shape rules, made once per (node, output).
  std::vector<std::vector<Tensor>> metas(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const PNode& n = nodes[i];
    if (n.dead) continue;
    AXLE_CHECK(n.kind != NodeKind::Op || size_t(n.op) < size_t(ops::OpKind::kNumOps), where, "node %", i,
               " has op kind ", int(n.op), ", which is not in the op table");
    auto line = [&] { return "node `" + node_text(i) + "`"; };  // made only for an error
    AXLE_CHECK(!n.outs.empty(), where, line(), " has no outputs");
    if (n.kind == NodeKind::Data) {
      AXLE_CHECK(n.input >= 0 && n.input < num_inputs, where, line(), ": expected an input position in 0..",
                 num_inputs - 1, ", found ", n.input);
      AXLE_CHECK(!input_seen[size_t(n.input)], where, line(), ": input position ", n.input, " is taken twice");
      input_seen[size_t(n.input)] = true;
    }
    if (n.kind == NodeKind::Constant) {
      AXLE_CHECK(n.constant.defined(), where, line(), " has no value");
      const ops::Meta have{n.constant.shape(), n.constant.dtype()};
      AXLE_CHECK(n.outs.size() == 1 && n.outs[0].shape == have.shape && n.outs[0].dtype == have.dtype, where, line(),
                 ": expected its value's ", meta_str(have), ", found ", metas_str(n.outs));
    }
    if (n.kind != NodeKind::Op) {
      AXLE_CHECK(n.operands.empty() && n.outs.size() == 1, where, line(), ": expected no operands and one output");
    } else {
      // The op's schema (ops.def): operand and output counts, typed attributes.
      const ops::OpInfo& info = ops::op_info(n.op);
      const ops::Arity ar = info.inputs;
      const int count = int(n.operands.size());
      AXLE_CHECK(ar.accepts(n.operands.size()), where, line(), ": expected ", ar.lo,
                 ar.hi == ops::Arity::kAny ? " or more" : ar.hi == ar.lo ? "" : " to " + std::to_string(ar.hi),
                 " operands, found ", count);
      AXLE_CHECK(info.outputs.accepts(n.outs.size()), where, line(), ": expected ", info.outputs.lo,
                 info.outputs.hi == ops::Arity::kAny ? " or more" : info.outputs.hi == info.outputs.lo ? "" : " to " + std::to_string(info.outputs.hi),
                 " outputs, found ", n.outs.size());
      std::string why;
      AXLE_CHECK(ops::attrs_match(n.op, n.attrs, &why), where, line(), ": attributes do not match the schema: ", why);
      ops::Tensors in;
      in.reserve(n.operands.size());
      for (size_t j = 0; j < n.operands.size(); ++j) {
        const Ref& r = n.operands[j];
        auto what = [&] { return line() + " operand " + std::to_string(j); };
        if (r.node < 0) {
          AXLE_CHECK(int(j) >= ar.lo, where, what(), " is absent, but only operands after the first ", ar.lo,
                     " are optional");
          in.emplace_back();
          continue;
        }
        check_ref(r, i, what);
        in.push_back(metas[size_t(r.node)][size_t(r.index)]);
      }
      // The shape rule must accept the operands and give exactly the recorded outputs.
      std::vector<ops::Meta> want;
      try {
        want = ops::op_def(n.op).infer(in, n.attrs);
      } catch (const Error& e) {
        AXLE_FAIL(where, line(), ": the shape rule rejects its operands: ", e.what());
      }
      bool same = want.size() == n.outs.size();
      for (size_t j = 0; same && j < want.size(); ++j)
        same = want[j].shape == n.outs[j].shape && want[j].dtype == n.outs[j].dtype;
      AXLE_CHECK(same, where, line(), ": expected outputs ", metas_str(want), " (shape inference), found ",
                 metas_str(n.outs));
    }
    for (const ops::Meta& m : n.outs) metas[i].push_back(meta_tensor(m));
  }
  for (size_t k = 0; k < input_seen.size(); ++k)
    AXLE_CHECK(input_seen[k], where, "no node is input ", k, " of ", num_inputs);
  for (size_t j = 0; j < outputs.size(); ++j) {
    AXLE_CHECK(outputs[j].node >= 0, where, "output ", j, " is absent");
    check_ref(outputs[j], nodes.size(), [&] { return "output " + std::to_string(j); });
  }
}

bool verifying() {
  const char* v = std::getenv("AXLE_VERIFY");
  if (v && *v) return std::string(v) != "0";
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

PassPipeline& PassPipeline::add(std::unique_ptr<Pass> p) {
  passes_.push_back(std::move(p));
  return *this;
}

void PassPipeline::run(Program& p) const {
  const bool check = verifying();
  const char* dir = std::getenv("AXLE_SAVE_GRAPHS");
  const std::string base = dir && *dir ? std::string(dir) + "/" + (p.name.empty() ? "graph" : p.name) : "";
  if (!base.empty()) std::filesystem::create_directories(dir);
  auto save = [&](const std::string& suffix) {
    if (!base.empty()) std::ofstream(base + "." + suffix + ".txt") << p.text();
  };
  save("00.input");
  if (check) p.verify("before the first pass");
  for (size_t k = 0; k < passes_.size(); ++k) {
    const Pass& pass = *passes_[k];
    {
      metrics::ScopedTimer t(metrics::timer(std::string("PassTime::") + pass.name()));
      if (passes_[k]->run(p)) p.compact();
    }
    save((k + 1 < 10 ? "0" : "") + std::to_string(k + 1) + "." + pass.name());
    if (check) p.verify(std::string("after pass '") + pass.name() + "'");
  }
  save("final");
}

PassPipeline PassPipeline::standard() {
  PassPipeline pp;
  pp.add(make_constant_folding_pass())
      .add(make_algebraic_simplification_pass())
      .add(make_cse_pass())
      .add(make_dce_pass());
  return pp;
}

}  // namespace axle::compiler
