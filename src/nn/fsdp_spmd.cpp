// FSDP v2 (fsdp.h): SpmdFullyShardedDataParallel is only sharding annotations. Each
// parameter is marked with its largest dim over the mesh axis "fsdp" and each unit's output
// with dim 0 over "fsdp"; the SPMD partitioner (src/spmd) then derives FSDP's collectives:
// a weight all-gather before each use (the dot's output is pinned batch-sharded, so the
// weight is the operand resharded) and a reduce-scatter of each weight gradient (a dot
// contracting the sharded batch is Partial, resharded to the weight's tiled sharding).
#include <algorithm>
#include <string>
#include <vector>

#include "axle/device.h"
#include "axle/error.h"
#include "axle/fsdp.h"
#include "axle/runtime.h"
#include "axle/xs.h"

namespace axle::fsdp {

namespace {

constexpr const char* kWho = "[SpmdFullyShardedDataParallel]";

std::string axes_text(const xs::Mesh& m) {
  std::string s = "(";
  for (size_t i = 0; i < m.axis_names().size(); ++i) s += (i ? ", '" : "'") + m.axis_names()[i] + "'";
  return s + (m.axis_names().size() == 1 ? ",)" : ")");
}

// The entry of a sharded dim: "fsdp", or (extra_data_axis, "fsdp").
xs::Dim fsdp_dim(const std::optional<std::string>& extra) {
  return extra ? xs::axes(*extra, "fsdp") : xs::Dim("fsdp");
}

// Parameters of `m` not inside an FSDP v2 unit below it, in elements.
int64_t unwrapped_params(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters(/*recurse=*/false)) n += p.numel();
  for (const auto& c : m.children())
    if (!dynamic_cast<const SpmdFullyShardedDataParallel*>(c.get())) n += unwrapped_params(*c);
  return n;
}

// torch_xla's recursive_wrap: children first; `m` itself is wrapped (returned) when the
// policy asks, except the root (only_children), which the constructor wraps.
nn::ModulePtr recursive_wrap(const nn::ModulePtr& m, const SpmdFullyShardedDataParallelOptions& o, bool only_children) {
  if (dynamic_cast<SpmdFullyShardedDataParallel*>(m.get())) return nullptr;  // already a unit
  if (!o.auto_wrap_policy(*m, /*recurse=*/true, unwrapped_params(*m))) return nullptr;
  for (const auto& [name, child] : m->named_children())
    if (nn::ModulePtr w = recursive_wrap(child, o, /*only_children=*/false)) m->wrap_child(name, w);
  if (only_children || !o.auto_wrap_policy(*m, /*recurse=*/false, unwrapped_params(*m))) return nullptr;
  return std::make_shared<SpmdFullyShardedDataParallel>(m, o);
}

}  // namespace

SpmdFullyShardedDataParallel::SpmdFullyShardedDataParallel(nn::ModulePtr module, SpmdFullyShardedDataParallelOptions o)
    : module_(std::move(module)), opts_(std::move(o)), mesh_([&] {
        AXLE_CHECK(module_ != nullptr, kWho, " expected a module, got a null pointer");
        AXLE_CHECK(runtime::is_spmd(), kWho, " requires SPMD: call axle::runtime::use_spmd() first");
        std::optional<xs::Mesh> m = opts_.mesh ? opts_.mesh : xs::get_global_mesh();
        AXLE_CHECK(m.has_value(), kWho, " no mesh: pass options.mesh or call xs::set_global_mesh");
        return *m;
      }()) {
  AXLE_CHECK(!dynamic_cast<SpmdFullyShardedDataParallel*>(module_.get()), kWho,
             " the module is already wrapped in SpmdFullyShardedDataParallel");
  AXLE_CHECK(mesh_.get_axis_name_idx("fsdp").has_value(), kWho, " the mesh must have an axis named 'fsdp', got axes ",
             axes_text(mesh_));
  if (opts_.extra_data_axis) {
    AXLE_CHECK(*opts_.extra_data_axis != "fsdp" && mesh_.get_axis_name_idx(*opts_.extra_data_axis).has_value(), kWho,
               " extra_data_axis '", *opts_.extra_data_axis, "' must be another axis of the mesh, got axes ",
               axes_text(mesh_));
  }
  opts_.mesh = mesh_;  // units made by auto-wrapping share this one
  // Parameters still on the host go to the device first (replicated, then sharded below).
  const Device dev = device();
  bool on_host = false;
  for (const Tensor& p : module_->parameters()) on_host |= p.device() != dev;
  for (const Tensor& b : module_->buffers()) on_host |= b.device() != dev;
  if (on_host) module_->to(dev);
  if (opts_.auto_wrap_policy) recursive_wrap(module_, opts_, /*only_children=*/true);
  register_module("_orig_module", module_);
  // The largest dim over "fsdp" (ties: the first), unless already sharded (an inner unit
  // or the user). Scalars stay replicated.
  for (Tensor p : module_->parameters()) {
    if (p.dim() == 0 || !xs::get_sharding_spec(p).empty()) continue;
    const Shape& s = p.shape();
    const size_t d = size_t(std::max_element(s.begin(), s.end()) - s.begin());
    xs::PartitionSpec spec(s.size());
    spec[d] = fsdp_dim(opts_.extra_data_axis);
    xs::mark_sharding(p, mesh_, spec);
  }
}

Tensor SpmdFullyShardedDataParallel::forward(const Tensor& x) {
  Tensor y = module_->forward(x);
  if (opts_.shard_output) {
    opts_.shard_output(y, mesh_);
    return y;
  }
  AXLE_CHECK(y.dim() >= 1, kWho, " the default shard_output shards the output's dim 0, got a 0-d output: "
             "pass options.shard_output");
  xs::PartitionSpec spec(size_t(y.dim()));
  spec[0] = fsdp_dim(opts_.extra_data_axis);
  xs::mark_sharding(y, mesh_, spec);
  return y;
}

}  // namespace axle::fsdp
