// The xs API on tensors (include/axle/xs.h): annotations on the lazy device's tensors,
// their shards, inspection, and runtime::use_spmd / is_spmd.
#include <cstdio>
#include <cstdlib>

#include "axle/autograd.h"
#include "axle/ops.h"
#include "axle/xs.h"
#include "dist/local_devices.h"
#include "dist/spmd_mode.h"
#include "lazy/lazy_internal.h"
#include "ops/spmd.h"

namespace axle::runtime {

void use_spmd(bool auto_sharding) {
  AXLE_CHECK(!auto_sharding, "[use_spmd] auto sharding not implemented");
  if (const char* v = std::getenv("XLA_USE_SPMD"); v && *v) {
    static bool warned = false;
    if (!warned) std::fprintf(stderr, "[axle] warning: XLA_USE_SPMD is deprecated; call axle::runtime::use_spmd() or set AXLE_USE_SPMD=1\n");
    warned = true;
  }
  if (!dist::detail::spmd_mode() && lazy::detail::g_live_lazy.load() > 0)
    std::fprintf(stderr, "[use_spmd] warning: replicating %lld tensor(s) already on the device over every device to "
                         "force SPMD mode; call use_spmd() before creating tensors to avoid this one-time cost\n",
                 static_cast<long long>(lazy::detail::g_live_lazy.load()));
  // Tensors already on the device are unannotated data: every device reads them, i.e. they
  // are replicated, from their first use on.
  dist::detail::set_spmd_mode(true);
}

bool is_spmd() { return dist::detail::spmd_mode(); }

}  // namespace axle::runtime

namespace axle::xs {
namespace {
using lazy::LazyTensor;
using lazy::lazy_of;
using lazy::shared_lazy_of;
using lazy::detail::spmd_devices;

LazyTensor& lazy_of(const Tensor& t, const char* op) {
  AXLE_CHECK(t.defined(), "[", op, "] expected a defined tensor");
  AXLE_CHECK(t.device().is_xla(), "[", op, "] expected a tensor on the xla device, got one on ", t.device());
  return *lazy_of(t);
}

void check_spmd(const char* op) {
  AXLE_CHECK(runtime::is_spmd(), "[", op, "] Please enable SPMD via axle::runtime::use_spmd()");
}

// Runs t's pending graph, if any (its shards then exist).
void materialize(const Tensor& t) {
  auto lt = shared_lazy_of(t);
  if (lt->ir) {
    lazy::TraceContext* ctx = lazy::current_context();
    lazy::detail::execute({lt}, "sharding", ctx ? ctx->name : "step");
  }
}

// The global value of data `lt` on the host.
Tensor host_value(LazyTensor& lt, const Tensor& t) {
  if (!lt.shards.empty()) return lazy::detail::spmd_to_host(lt, t.shape());
  return backend::backend_for(t.device()).to_host(lazy::ready_buffer(lt));
}

// Puts host shards on their devices (each charged to its own device's memory). Several
// hosts: only this host's devices get theirs (the others' entries stay empty).
std::vector<Tensor> upload(const std::vector<Tensor>& host) {
  backend::Backend& be = backend::backend_for(DeviceType::XLA);
  const int n = int(host.size()), first = dist::first_local_device(n), local = n / dist::host_count();
  std::vector<Tensor> out(host.size());
  for (int d = first; d < first + local; ++d) out[size_t(d)] = be.to_device(host[size_t(d)], Device{DeviceType::XLA, d});
  return out;
}

void set_data_shards(LazyTensor& lt, std::vector<Tensor> shards, std::shared_ptr<const spmd::Sharding> s) {
  lt.shards = std::move(shards);
  lt.sharding = std::move(s);
  lt.buffer = Tensor();
  lt.pending.reset();
  lt.data_node.reset();  // graphs traced from now on read the shards
  lt.producer.reset();
}

std::string dims_str(const Shape& s) { return shape_str(s); }

}  // namespace

Tensor& mark_sharding(Tensor& t, const Mesh& mesh, const PartitionSpec& spec) {
  check_spmd("mark_sharding");
  LazyTensor& lt = lazy_of(t, "mark_sharding");
  auto s = std::make_shared<const spmd::Sharding>(spmd::Sharding::from_spec(mesh, spec, t.dim(), "mark_sharding"));
  static metrics::Counter& marks = metrics::counter("XlaMarkSharding");
  marks.add();
  if (lt.sharding) {
    if (*lt.sharding == *s) return t;  // the same annotation again
    AXLE_CHECK(lt.sharding->is_replicated(), "[mark_sharding] existing annotation ", lt.sharding->to_hlo_v1(),
               " must be cleared first (xs::clear_sharding)");
  }
  if (lt.ir) {
    // Pending: a constraint in its graph, which propagation and partitioning keep.
    std::vector<int64_t> enc;
    spmd::encode(*s, enc);
    Tensor c;
    {
      NoGradGuard ng;
      c = ops::sharding_constraint(t, enc, /*on_grad=*/false);
    }
    lt.ir = lazy_of(c)->ir;
    lt.sharding = s;
    return t;
  }
  // Data: sharded at once, one buffer per device.
  std::vector<Tensor> shards = upload(spmd::shard_host(host_value(lt, t), *s));
  set_data_shards(lt, std::move(shards), std::move(s));
  return t;
}

Tensor mark_sharding_with_gradients(const Tensor& t, const Mesh& mesh, const PartitionSpec& spec) {
  check_spmd("mark_sharding_with_gradients");
  lazy_of(t, "mark_sharding_with_gradients");
  spmd::Sharding s = spmd::Sharding::from_spec(mesh, spec, t.dim(), "mark_sharding_with_gradients");
  static metrics::Counter& marks = metrics::counter("XlaMarkSharding");
  marks.add();
  std::vector<int64_t> enc;
  spmd::encode(s, enc);
  Tensor out = ops::sharding_constraint(t, enc, /*on_grad=*/true);
  lazy_of(out)->sharding = std::make_shared<const spmd::Sharding>(std::move(s));
  return out;
}

Tensor& clear_sharding(Tensor& t) {
  LazyTensor& lt = lazy_of(t, "clear_sharding");
  if (!lt.sharding) return t;
  if (!lt.ir && !lt.shards.empty() && !lt.sharding->is_replicated()) {
    // Gathered back into one buffer.
    Tensor full = host_value(lt, t);
    lt.buffer = backend::backend_for(t.device()).to_device(full, t.device());
    lt.shards.clear();
    lt.data_node.reset();
  }
  lt.sharding.reset();
  return t;
}

std::string get_sharding_spec(const Tensor& t) {
  if (!t.defined() || !t.device().is_xla()) return "";
  const LazyTensor& lt = *lazy_of(t);
  return lt.sharding ? lt.sharding->to_hlo_v1() : "";
}

std::optional<ShardingType> get_sharding_type(const Tensor& t) {
  if (!t.defined() || !t.device().is_xla()) return std::nullopt;
  const LazyTensor& lt = *lazy_of(t);
  if (!lt.sharding) return std::nullopt;
  switch (lt.sharding->kind) {
    case spmd::Sharding::Kind::Replicated: return ShardingType::REPLICATED;
    case spmd::Sharding::Kind::Tiled: return ShardingType::TILED;
    case spmd::Sharding::Kind::Manual: return ShardingType::MANUAL;
  }
  return ShardingType::UNKNOWN;
}

std::string inferred_sharding(const Tensor& t) {
  check_spmd("inferred_sharding");
  lazy_of(t, "inferred_sharding");
  const std::shared_ptr<LazyTensor> lt = shared_lazy_of(t);
  if (!lt->ir) return lt->sharding ? lt->sharding->to_hlo_v1() : "{replicated}";
  return lazy::detail::infer_sharding(lt).to_hlo_v1();
}

Tensor XLAShard::unpadded_data() const {
  if (!indices) return data;
  Tensor out = data;
  for (size_t d = 0; d < indices->size(); ++d) {
    const int64_t len = (*indices)[d].stop - (*indices)[d].start;
    if (len != out.shape()[d]) out = narrow(out, int64_t(d), 0, len);
  }
  return out.contiguous();
}

std::vector<XLAShard> local_shards(const Tensor& t) {
  check_spmd("local_shards");
  LazyTensor& lt = lazy_of(t, "local_shards");
  materialize(t);
  const int n = spmd_devices();
  backend::Backend& be = backend::backend_for(t.device());
  const spmd::Sharding s = lt.sharding ? *lt.sharding : spmd::Sharding::replicated();
  std::vector<XLAShard> out;
  out.reserve(size_t(n));
  const int first = dist::first_local_device(n), local = n / dist::host_count();
  for (int d = first; d < first + local; ++d) {  // this host's (every device on one host)
    XLAShard sh;
    if (!lt.shards.empty()) {
      AXLE_CHECK(int(lt.shards.size()) == n, "[local_shards] the tensor holds ", lt.shards.size(),
                 " shards but this process has ", n, " devices");
      sh.data = be.to_host(lt.shards[size_t(d)]);
    } else {
      sh.data = be.to_host(lazy::ready_buffer(lt));
    }
    if (!s.is_replicated()) {
      std::vector<Slice> idx;
      for (int k = 0; k < t.dim(); ++k) idx.push_back(s.range(k, d, t.shape()[size_t(k)]));
      sh.indices = std::move(idx);
    }
    sh.shard_device = "CPU:" + std::to_string(d);
    sh.replica_id = s.replica_id(d);
    out.push_back(std::move(sh));
  }
  return out;
}

void load_local_shards_(Tensor& t, const std::vector<XLAShard>& shards) {
  check_spmd("load_local_shards_");
  LazyTensor& lt = lazy_of(t, "load_local_shards_");
  AXLE_CHECK(lt.sharding && !lt.sharding->is_replicated(),
             "[load_local_shards_] not allowed on a replicated or unannotated tensor (sharding ",
             lt.sharding ? lt.sharding->to_hlo_v1() : std::string("none"), ")");
  // One shard per addressable device (every device on one host), as local_shards gives them.
  const int n = spmd_devices(), first = dist::first_local_device(n), local = n / dist::host_count();
  AXLE_CHECK(int(shards.size()) == local, "[load_local_shards_] expected a shard for each of the ", local,
             " addressable devices, got ", shards.size());
  const Shape want = lt.sharding->shard_shape(t.shape());
  std::vector<Tensor> host(static_cast<size_t>(n));
  for (int d = first; d < first + local; ++d) {
    const Tensor& x = shards[size_t(d - first)].data;
    AXLE_CHECK(x.defined() && x.shape() == want && x.dtype() == t.dtype(), "[load_local_shards_] shard ", d,
               " expected ", t.dtype(), " ", dims_str(want), ", got ",
               x.defined() ? std::string(dtype_name(x.dtype())) + " " + dims_str(x.shape()) : std::string("undefined"));
    host[size_t(d)] = x.device().is_cpu() ? x : x.cpu();
  }
  if (lt.ir) lt.ir = {};  // replaced, pending value or not
  std::shared_ptr<const spmd::Sharding> s = lt.sharding;
  set_data_shards(lt, upload(host), std::move(s));
}

std::string debug_info(const Tensor& t) {
  LazyTensor& lt = lazy_of(t, "debug_info");
  std::string out = "XLATensor {\n";
  out += "TensorID: " + std::to_string(reinterpret_cast<uintptr_t>(&lt)) + "\n";
  out += "Device: xla:0\n";
  out += "XLA Shape: " + std::string(dtype_name(t.dtype())) + dims_str(t.shape()) + "\n";
  out += std::string("IR: ") + (lt.ir ? "pending" : "None") + "\n";
  if (!lt.shards.empty()) {
    out += "XLAShardedData: \n  Data Device: SPMD:0\n";
    out += "  OpSharding: " + (lt.sharding ? lt.sharding->to_hlo_v1() : std::string("{replicated}")) + "\n";
    out += "  NumShards: " + std::to_string(lt.shards.size()) + "\n";
  } else if (!lt.ir) {
    out += "XLAData: \n  Data Device: SPMD:0\n  Data Shape: " + std::string(dtype_name(t.dtype())) + dims_str(t.shape()) + "\n";
    out += "  ShardingSpec: " + (lt.sharding ? lt.sharding->to_hlo_v1() : std::string("None")) + "\n";
  } else {
    out += "XLAData: None\n";
    out += "ShardingSpec: " + (lt.sharding ? lt.sharding->to_hlo_v1() : std::string("None")) + "\n";
  }
  out += "}\n";
  return out;
}

std::string explain(const std::vector<Tensor>& outputs) {
  check_spmd("explain");
  std::vector<std::shared_ptr<LazyTensor>> pending;
  std::shared_ptr<const lazy::SpmdProgram> producer;
  for (const Tensor& t : outputs) {
    lazy_of(t, "explain");
    const auto lt = shared_lazy_of(t);
    if (lt->ir) pending.push_back(lt);
    else if (lt->producer && !producer) producer = lt->producer;
  }
  lazy::TraceContext* ctx = lazy::current_context();
  if (!pending.empty()) return lazy::detail::compile_spmd(pending, ctx ? ctx->name : "step")->table;
  if (producer) return producer->table;
  return "[spmd] no SPMD graph computed these tensors (they are data put on the device)\n";
}

namespace {
Mesh mesh_or_global(const Mesh* mesh, const char* op) {
  if (mesh) return *mesh;
  std::optional<Mesh> g = get_global_mesh();
  AXLE_CHECK(g.has_value(), "[", op, "] no mesh given and no global mesh set (xs::set_global_mesh)");
  return *g;
}
// A new xla tensor of `shape` over `lt_shards` with sharding `s`.
Tensor over_shards(const std::vector<Tensor>& shards, std::shared_ptr<const spmd::Sharding> s, const Shape& shape,
                   const Tensor& like) {
  auto out = std::make_shared<LazyTensor>();
  out->shards = shards;
  out->sharding = std::move(s);
  out->label = "a manual-sharding view";
  out->label_rank = lazy::kLabelOrigin;
  lazy::detail::stats().create.add();
  return lazy::detail::make_xla(shape, like.dtype(), like.device(), std::move(out));
}
}  // namespace

Tensor enable_manual_sharding(const Tensor& t, const PartitionSpec& spec, const Mesh* mesh) {
  check_spmd("enable_manual_sharding");
  lazy_of(t, "enable_manual_sharding");
  const Mesh m = mesh_or_global(mesh, "enable_manual_sharding");
  Tensor marked = t;  // shares t's state: t itself is marked, as torch_xla
  mark_sharding(marked, m, spec);
  materialize(t);
  LazyTensor& lt = *lazy_of(t);
  AXLE_CHECK(!lt.shards.empty(), "[enable_manual_sharding] internal: the marked tensor has no shards");
  spmd::Sharding s;
  s.kind = spmd::Sharding::Kind::Manual;
  s.mesh = spmd::mesh_by_id(spmd::mesh_id(m));
  const Shape local = lt.sharding->shard_shape(t.shape());
  return over_shards(lt.shards, std::make_shared<const spmd::Sharding>(std::move(s)), local, t);
}

Tensor disable_manual_sharding(const Tensor& t, const PartitionSpec& spec, const Shape& full_shape, const Mesh* mesh) {
  check_spmd("disable_manual_sharding");
  LazyTensor& lt = lazy_of(t, "disable_manual_sharding");
  const Mesh m = mesh_or_global(mesh, "disable_manual_sharding");
  materialize(t);
  AXLE_CHECK(lt.sharding && lt.sharding->kind == spmd::Sharding::Kind::Manual && !lt.shards.empty(),
             "[disable_manual_sharding] expected a manual tensor (from enable_manual_sharding, sharding {manual}), got ",
             lt.sharding ? lt.sharding->to_hlo_v1() : std::string("an unannotated one"));
  auto s = std::make_shared<const spmd::Sharding>(
      spmd::Sharding::from_spec(m, spec, int64_t(full_shape.size()), "disable_manual_sharding"));
  const Shape want = s->shard_shape(full_shape);
  AXLE_CHECK(want == t.shape(), "[disable_manual_sharding] the local shape ", dims_str(t.shape()),
             " is not the shard shape ", dims_str(want), " of ", dims_str(full_shape), " under ", s->to_hlo_v1());
  return over_shards(lt.shards, std::move(s), full_shape, t);
}

namespace debugging {
std::string visualize_tensor_sharding(const Tensor& t, VisualizeOptions o) {
  lazy_of(t, "visualize_tensor_sharding");
  const LazyTensor& lt = *lazy_of(t);
  return visualize_sharding(lt.sharding ? lt.sharding->to_hlo_v1() : std::string("{replicated}"), o);
}
}  // namespace debugging

}  // namespace axle::xs
