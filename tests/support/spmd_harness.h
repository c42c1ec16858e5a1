// Shared by the SPMD compiler's tests: meshes over n virtual devices, a builder of global
// Programs (each op's outputs from its shape rule), and runners that execute a Program on
// one device and its partitioned local program on n device threads (dist::run_on_devices,
// the cpu backend), assembling the outputs, so a test compares the two numerically.
// Header-only: each test is its own executable.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "axle/generator.h"
#include "axle/ops.h"
#include "axle/tensor.h"
#include "axle/xs.h"
#include "backend/backend.h"
#include "compiler/program.h"
#include "core/tensor_impl.h"
#include "dist/local_devices.h"
#include "ops/op.h"
#include "spmd/device_count.h"
#include "spmd/partition.h"
#include "spmd/sharding.h"

namespace axle::spmd_test {

/// A training batch of the data-parallel parity tests (test_spmd, test_fsdp_spmd).
struct Batch {
  Tensor x, y;
};
/// Deterministic Fashion-MNIST-shaped batches of 128 (labels depend on the images).
inline const std::vector<Batch>& batches(int n) {
  static std::vector<Batch> b;
  if (int(b.size()) < n) {
    manual_seed(1234);
    b.clear();
    for (int i = 0; i < n; ++i) {
      Tensor x = randn({128, 1, 28, 28});
      Tensor y = argmax(x.reshape({128, 784}).narrow(1, 0, 10), 1);
      b.push_back({x, y});
    }
  }
  return b;
}

using compiler::meta_tensor;
using compiler::NodeKind;
using compiler::PNode;
using compiler::Program;
using compiler::Ref;
using ops::OpKind;
using spmd::Partitioned;
using spmd::Sharding;

/// A mesh over n devices (the device count set to n for it: AXLE_CPU_DEVICES).
inline std::shared_ptr<const xs::Mesh> make_mesh(int64_t n, std::vector<int64_t> shape, std::vector<std::string> names) {
  setenv("AXLE_CPU_DEVICES", std::to_string(n).c_str(), 1);
  spmd::reset_device_count();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  return std::make_shared<const xs::Mesh>(ids, shape, names);
}
/// A 1-D mesh "data" over n devices.
inline std::shared_ptr<const xs::Mesh> mesh1d(int64_t n) { return make_mesh(n, {n}, {"data"}); }

inline Sharding spec(const std::shared_ptr<const xs::Mesh>& m, const xs::PartitionSpec& s) {
  return Sharding::from_spec(*m, s, int64_t(s.size()), "test");
}
inline Sharding repl(const std::shared_ptr<const xs::Mesh>& m) { return Sharding::replicated(m); }

/// Builds a global Program; each op's outputs come from its shape rule.
struct Builder {
  Program p;
  std::vector<Sharding> shardings;
  std::vector<std::string> labels;
  Ref input(const Shape& s, const Sharding& sh, DType dt = kFloat32, const std::string& label = "") {
    PNode n;
    n.kind = NodeKind::Data;
    n.input = p.num_inputs++;
    n.outs = {{s, dt}};
    p.nodes.push_back(n);
    shardings.push_back(sh);
    labels.push_back(label);
    return {int(p.nodes.size()) - 1, 0};
  }
  Ref op(OpKind k, std::vector<Ref> in, ops::Attrs a = {}) {
    PNode n;
    n.kind = NodeKind::Op;
    n.op = k;
    n.attrs = a;
    n.operands = in;
    ops::Tensors t;
    for (const Ref& r : in) t.push_back(r.node < 0 ? Tensor() : meta_tensor(p.nodes[size_t(r.node)].outs[size_t(r.index)]));
    n.outs = ops::op_def(k).infer(t, a);
    p.nodes.push_back(n);
    return {int(p.nodes.size()) - 1, 0};
  }
  /// Output j of the node of r.
  static Ref at(Ref r, int j) { return {r.node, j}; }
  Ref constrain(Ref x, const Sharding& s) {
    std::vector<int64_t> enc;
    encode(s, enc);
    return op(OpKind::ShardingConstraint, {x}, ops::attr::ShardingConstraint{.on_grad = false, .sharding = enc}.pack());
  }
  void out(Ref r) { p.outputs.push_back(r); }
  Partitioned partition(std::vector<std::optional<Sharding>> pins = {}) {
    p.name = "test";
    p.verify("built by the test");
    spmd::PartitionOptions o;
    o.output_pins = pins;
    o.input_labels = labels;
    return spmd::partition(p, shardings, o);
  }
};

/// Collectives the partitioner recorded, by kind ("all-reduce": 2, ...).
inline std::map<std::string, int> kinds(const Partitioned& p) {
  std::map<std::string, int> k;
  for (const spmd::CollectiveNote& c : p.collectives) ++k[c.kind];
  return k;
}
/// Live ops of kind k in the local program.
inline int count_local(const Partitioned& p, OpKind k) {
  int c = 0;
  for (const PNode& n : p.local.nodes) c += !n.dead && n.kind == NodeKind::Op && n.op == k;
  return c;
}
/// Collective ops in the local program.
inline int collective_ops(const Partitioned& p) {
  return count_local(p, OpKind::AllReduce) + count_local(p, OpKind::AllGather) + count_local(p, OpKind::ReduceScatter) +
         count_local(p, OpKind::AllToAll) + count_local(p, OpKind::CollectivePermute);
}

/// Runs `p` on one cpu device (the single-device reference).
inline std::vector<Tensor> run_global(const Program& p, const std::vector<Tensor>& inputs) {
  backend::Backend& be = backend::backend_for(kCPU);
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.contiguous());
  return be.run(*be.lower(p, kCPU), in);
}

/// Runs the partitioned program of `global` on pp.devices device threads, each on its
/// shard of every input (spmd::shard_host), and assembles each output (spmd::assemble_host).
inline std::vector<Tensor> run_partitioned(const Partitioned& pp, const Program& global,
                                           const std::vector<Tensor>& inputs) {
  const int n = int(pp.devices);
  std::vector<std::vector<Tensor>> shards;
  for (size_t i = 0; i < inputs.size(); ++i) shards.push_back(spmd::shard_host(inputs[i].contiguous(), pp.inputs[i]));
  backend::Backend& be = backend::backend_for(kCPU);
  const backend::ExecutablePtr ex = be.lower(pp.local, kCPU);
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(n));
  dist::run_on_devices(
      n,
      [&](int d) {
        std::vector<Tensor> in;
        for (const auto& s : shards) in.push_back(s[size_t(d)]);
        outs[size_t(d)] = be.run(*ex, in);
      },
      1);
  std::vector<Tensor> r;
  for (size_t j = 0; j < global.outputs.size(); ++j) {
    std::vector<Tensor> per;
    for (int d = 0; d < n; ++d) per.push_back(outs[size_t(d)][j]);
    const Ref o = global.outputs[j];
    r.push_back(spmd::assemble_host(per, pp.outputs[j], global.nodes[size_t(o.node)].outs[size_t(o.index)].shape));
  }
  return r;
}

/// max |a - b| / (1 + |b|) over all elements (float32 or int tensors, same shape).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const std::vector<float> x = a.to(kFloat32).contiguous().to_vector<float>(),
                           y = b.to(kFloat32).contiguous().to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(double(x[i]) - double(y[i])) / (1 + std::abs(double(y[i])));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

}  // namespace axle::spmd_test
