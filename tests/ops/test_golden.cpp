// The golden-value program: every family's rows (tests/golden/<family>.cpp, harness
// tests/support/golden_ops.h) and the one test that holds them against the op table: every ops.def
// entry is reached by some golden row (traced on `xla`, forward and backward), except the
// entries listed below with the reason PyTorch has nothing to compare them with.
#include <set>
#include <string>

#include "compiler/program.h"
#include "golden_ops.h"
#include "lazy/graph.h"
#include "ops/op.h"
#include "core/tensor_impl.h"

namespace {

using namespace axle;

/// The op kinds of row r's traced program on xla: its outputs and, where the file has
/// gradients, the backward of sum_j <out_j, cot_j> (the same program check_row runs).
std::set<ops::OpKind> ops_of_row(const SafeTensors& f, const golden::Row& r) {
  std::vector<bool> has_grad;
  golden::In in = golden::row_inputs(f, r, "xla", &has_grad);
  golden::Out out = r.fn(in);
  std::vector<Tensor> roots = out;
  Tensor loss;
  for (size_t j = 0; j < out.size(); ++j) {
    const std::string ck = r.name + ".cot" + std::to_string(j);
    if (!f.contains(ck) || !out[j].requires_grad()) continue;
    Tensor term = sum(mul(out[j], f.at(ck).to(Device("xla"))));
    loss = loss.defined() ? add(loss, term) : term;
  }
  if (loss.defined()) {
    loss.backward();
    for (const Tensor& x : in)
      if (x.requires_grad() && x.grad().defined()) roots.push_back(x.grad());
  }
  std::vector<lazy::Value> vals;
  for (const Tensor& t : roots)
    if (const lazy::LazyTensor* lt = lazy::lazy_of(t); lt && lt->ir) vals.push_back(lt->ir);
  std::set<ops::OpKind> seen;
  if (vals.empty()) return seen;
  const compiler::Program p = lazy::to_program(lazy::build_graph(vals));
  for (const compiler::PNode& n : p.nodes)
    if (!n.dead && n.kind == compiler::NodeKind::Op) seen.insert(n.op);
  return seen;
}

TEST(GoldenOps, EveryOpOfTheTableHasARow) {
  // Entries without a PyTorch counterpart to compare with, and where they are tested:
  const std::set<ops::OpKind> no_peer = {
      // collectives (one process here): tests/dist/test_dist.cpp, tests/spmd/test_spmd_comm.cpp
      ops::OpKind::AllReduce, ops::OpKind::AllGather, ops::OpKind::ReduceScatter, ops::OpKind::Broadcast,
      ops::OpKind::AllToAll, ops::OpKind::CollectivePermute,
      // made by the compiler's passes, never traced: tests/compiler/test_compiler.cpp, tests/spmd/test_spmd_partition.cpp
      ops::OpKind::FusedElementwise, ops::OpKind::FusedSum, ops::OpKind::ShardSlice, ops::OpKind::MaskPadding,
      // an SPMD annotation (the identity on values): tests/spmd/test_spmd_sharding.cpp
      ops::OpKind::ShardingConstraint};
  ASSERT_FALSE(golden::families().empty());
  std::set<ops::OpKind> seen;
  for (const golden::Family& fam : golden::families()) {
    const SafeTensors& f = golden::file(fam.file);
    for (const golden::Row& r : *fam.rows) {
      if (!f.metadata.count(r.name)) continue;  // the family's coverage test names it
      for (ops::OpKind k : ops_of_row(f, r)) seen.insert(k);
    }
  }
  for (size_t i = 0; i < size_t(ops::OpKind::kNumOps); ++i) {
    const auto k = ops::OpKind(i);
    if (no_peer.count(k))
      EXPECT_FALSE(seen.count(k)) << ops::op_name(k) << " is reached by a golden row: take it off the no-peer list";
    else
      EXPECT_TRUE(seen.count(k)) << "ops.def entry '" << ops::op_name(k) << "' is reached by no golden row";
  }
}

}  // namespace
