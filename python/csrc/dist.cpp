// Distributed training from Python (issue 25, first half): torch_xla.launch over axle::launch,
// the `xla` process group of torch.distributed as a c10d::Backend whose collectives on xla
// tensors are axle's collective ops inside the lazy graph, and the xm-level collectives.
//
// How a torch.distributed collective reaches axle: ProcessGroup::allreduce (Python's
// dist.all_reduce, DDP's Reducer) calls the dispatcher op c10d::allreduce_. Every xla tensor is
// wrapped by functionalization, so the op first meets the Functionalize key: the kernels below
// (one boxed kernel for the Functionalize and XLA keys of each c10d collective) hand the
// tensors, still wrapped, to the group's xla backend (AxleBackend). It records the collective
// (ops::AllReduce, AllGather, ReduceScatter, Broadcast through axle::dist) on their lazy values
// and writes each result back through functionalization (replace_ + commit_update), so views
// of a written tensor (DDP's gradients are views of its flat bucket) see the result. Nothing
// runs then: the collective is part of the step's graph, like axle's C++ collectives. The
// returned Work is complete; its future holds the written tensors. Cpu tensors (dist.barrier's
// dummy tensor, a user's cpu metrics) take the same path and run at once on the host.
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>
#include <torch/library.h>

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/dist.h"
#include "axle/ops.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "bridge.h"

extern char** environ;

namespace axle_py {
namespace {

namespace F = at::functionalization::impl;
using axle::dist::ReduceOp;

// ---------------------------------------------------------------- values in and out

/// The axle value of an xla or cpu tensor (a cpu tensor stays on the cpu: its collectives run
/// at once on the host).
axle::Tensor value_of(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "[", op, "] expected a tensor, got an undefined one");
  if (is_xla(t)) return impl_of(t, op)->value;
  TORCH_CHECK(t.device().is_cpu(), "[", op, "] the xla process group takes xla or cpu tensors, got one on ",
              t.device());
  at::Tensor c = t;
  if (F::isFunctionalTensor(c)) {
    F::sync(c);
    c = F::from_functional_tensor(c);
  }
  c = c.contiguous();
  const axle::DType dt = to_axle_dtype(c.scalar_type(), op);
  return axle::from_blob(c.data_ptr(), axle::Shape(c.sizes().begin(), c.sizes().end()), dt, {.dtype = dt});
}

/// Writes `v` into `t` in place. An xla tensor under functionalization gets it as an update of
/// its storage, so every view of the same storage reads it; a bare one gets it as its value.
void put(const at::Tensor& t, axle::Tensor v, const char* op) {
  TORCH_CHECK(v.numel() == t.numel(), "[", op, "] internal: a result of ", v.numel(), " elements for a tensor of ",
              t.numel());
  if (v.shape() != vec(t.sizes())) v = v.reshape(vec(t.sizes()));
  if (is_xla(t)) {
    v = cast_to(v, t.scalar_type());
    if (F::isFunctionalTensor(t)) {
      at::Tensor bare = at::detail::make_tensor<AxleTensorImpl>(std::move(v));
      F::replace_(t, bare);
      F::commit_update(t);
      F::sync(t);
    } else {
      impl_of(t, op)->set_value(std::move(v));
    }
    return;
  }
  const_cast<at::Tensor&>(t).copy_(axle_to_cpu(v).view(t.sizes()));
}

/// A new tensor (xla: wrapped for functionalization when called from outside it) holding `v`.
at::Tensor out_like(const at::Tensor& like, const axle::Tensor& v) {
  if (is_xla(like)) return wrap(v);
  return axle_to_cpu(v);
}

ReduceOp reduce_of(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::Sum;
    case c10d::ReduceOp::AVG: return ReduceOp::Mean;
    case c10d::ReduceOp::MIN: return ReduceOp::Min;
    case c10d::ReduceOp::MAX: return ReduceOp::Max;
    default: break;
  }
  TORCH_CHECK(false, "[xla process group] reduce op ", int(op.op_),
              " is not supported on the xla device (axle): use SUM, AVG, MIN or MAX");
}

ReduceOp reduce_of(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "mean" || s == "avg") return ReduceOp::Mean;
  if (s == "min") return ReduceOp::Min;
  if (s == "max") return ReduceOp::Max;
  TORCH_CHECK(false, "[all_reduce] reduce type '", s, "' is not supported on the xla device (axle): use 'sum', "
              "'min', 'max' (xm.REDUCE_SUM, REDUCE_MIN, REDUCE_MAX) or 'mean'");
}

// ---------------------------------------------------------------- the collectives on values

/// All-reduces every tensor, one collective call per (dtype, device) (axle's variadic
/// AllReduce op on xla), then scales (a float result only). Results in input order.
std::vector<axle::Tensor> all_reduce_values(const std::vector<at::Tensor>& ts, ReduceOp op, double scale,
                                            const char* what) {
  std::vector<axle::Tensor> vals;
  vals.reserve(ts.size());
  for (const auto& t : ts) vals.push_back(value_of(t, what));
  std::map<std::pair<int, bool>, std::vector<size_t>> groups;
  for (size_t i = 0; i < vals.size(); ++i) groups[{int(vals[i].dtype()), is_xla(ts[i])}].push_back(i);
  std::vector<axle::Tensor> out(vals.size());
  for (auto& [key, idx] : groups) {
    std::vector<axle::Tensor> in;
    for (size_t i : idx) in.push_back(vals[i]);
    std::vector<axle::Tensor> r = axle::dist::all_reduce(in, op);
    for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = scale == 1.0 ? r[k] : r[k] * scale;
  }
  return out;
}

/// Every rank's `x`, flattened, concatenated in rank order: [world * numel].
axle::Tensor gather_flat(const axle::Tensor& x) { return axle::dist::all_gather(x.reshape({x.numel()})); }

/// The reduction over ranks of the flat `x` ([world * n]), this rank's slice [n].
axle::Tensor reduce_scatter_flat(const axle::Tensor& x, ReduceOp op) {
  return axle::dist::reduce_scatter(x.reshape({x.numel()}), op);
}

int world() { return axle::dist::default_group().size(); }

// ---------------------------------------------------------------- Work and the backend

/// A completed collective: on xla it is recorded in the graph, on cpu it ran already.
class AxleWork final : public c10d::Work {
 public:
  AxleWork(std::vector<at::Tensor> result, c10d::OpType t) : c10d::Work(-1, t), result_(std::move(result)) {}
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    f->markCompleted(c10::IValue(result_));
    return f;
  }

 private:
  std::vector<at::Tensor> result_;
};

c10::intrusive_ptr<c10d::Work> done(std::vector<at::Tensor> r, c10d::OpType t) {
  return c10::make_intrusive<AxleWork>(std::move(r), t);
}

/// torch.distributed's `xla` backend: axle's default process group (launch() children, or an
/// external launcher's ranks), its collectives recorded as lazy ops on xla tensors.
class AxleBackend final : public c10d::Backend {
 public:
  AxleBackend(int rank, int size) : c10d::Backend(rank, size) {
    axle::dist::ProcessGroup& g = axle::dist::default_group();  // the rendezvous, as init_process_group does
    TORCH_CHECK(g.size() == size && g.rank() == rank, "[xla process group] torch.distributed asks for rank ", rank,
                " of ", size, ", but axle's runtime is rank ", g.rank(), " of ", g.size(),
                ": the xla backend serves the default group of the whole job only (no subgroups); create it with "
                "dist.init_process_group(\"xla\", init_method=\"xla://\")");
  }
  const std::string getBackendName() const override { return "xla"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override {
    TORCH_CHECK(o.rootTensor == 0, "[broadcast] expected root_tensor 0 (one device per process), got ", o.rootTensor);
    for (const auto& t : ts) put(t, axle::dist::broadcast(value_of(t, "broadcast"), int(o.rootRank)), "broadcast");
    return done(ts, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override {
    TORCH_CHECK(!o.sparseIndices.has_value(), "[all_reduce] sparse tensors are not supported on the xla device");
    auto r = all_reduce_values(ts, reduce_of(o.reduceOp), 1.0, "all_reduce");
    for (size_t i = 0; i < ts.size(); ++i) put(ts[i], r[i], "all_reduce");
    return done(ts, c10d::OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    auto r = all_reduce_values(ts, reduce_of(o.reduceOp), 1.0, "all_reduce_coalesced");
    for (size_t i = 0; i < ts.size(); ++i) put(ts[i], r[i], "all_reduce_coalesced");
    return done(ts, c10d::OpType::ALLREDUCE_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(outs.size() == ins.size(), "[all_gather] expected one output list per input");
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < ins.size(); ++i) {
      TORCH_CHECK(int(outs[i].size()) == world(), "[all_gather] expected ", world(), " output tensors, got ",
                  outs[i].size());
      const axle::Tensor x = value_of(ins[i], "all_gather");
      const axle::Tensor g = gather_flat(x);
      for (int r = 0; r < world(); ++r) {
        put(outs[i][size_t(r)], g.narrow(0, r * x.numel(), x.numel()), "all_gather");
        flat.push_back(outs[i][size_t(r)]);
      }
    }
    return done(flat, c10d::OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(out.numel() == in.numel() * world(), "[all_gather_into_tensor] expected an output of ",
                in.numel() * world(), " elements (world size x input), got ", out.numel());
    put(out, gather_flat(value_of(in, "all_gather_into_tensor")), "all_gather_into_tensor");
    return done({out}, c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& o) override {
    TORCH_CHECK(outs.size() == ins.size(), "[all_gather_into_tensor_coalesced] expected one output per input");
    for (size_t i = 0; i < ins.size(); ++i) _allgather_base(outs[i], ins[i], o);
    return done(outs, c10d::OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK(outs.size() == ins.size(), "[reduce_scatter] expected one input list per output");
    for (size_t i = 0; i < outs.size(); ++i) {
      TORCH_CHECK(int(ins[i].size()) == world(), "[reduce_scatter] expected ", world(), " input tensors, got ",
                  ins[i].size());
      std::vector<axle::Tensor> parts;
      for (const auto& t : ins[i]) {
        TORCH_CHECK(t.numel() == outs[i].numel(), "[reduce_scatter] expected inputs of the output's size ",
                    outs[i].numel(), ", got ", t.numel());
        axle::Tensor v = value_of(t, "reduce_scatter");
        parts.push_back(v.reshape({v.numel()}));
      }
      put(outs[i], reduce_scatter_flat(axle::cat(parts, 0), reduce_of(o.reduceOp)), "reduce_scatter");
    }
    return done(outs, c10d::OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK(in.numel() == out.numel() * world(), "[reduce_scatter_tensor] expected an input of ",
                out.numel() * world(), " elements (world size x output), got ", in.numel());
    put(out, reduce_scatter_flat(value_of(in, "reduce_scatter_tensor"), reduce_of(o.reduceOp)),
        "reduce_scatter_tensor");
    return done({out}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK(outs.size() == ins.size(), "[reduce_scatter_tensor_coalesced] expected one input per output");
    for (size_t i = 0; i < outs.size(); ++i) _reduce_scatter_base(outs[i], ins[i], o);
    return done(outs, c10d::OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    axle::dist::barrier();
    return done({}, c10d::OpType::BARRIER);
  }
};

// ---------------------------------------------------------------- the c10d ops' kernels

bool any_xla(const c10::IValue& v) {
  if (v.isTensor()) return is_xla(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) if (is_xla(t)) return true;
    return false;
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) if (any_xla(e)) return true;
  }
  return false;
}

std::vector<at::Tensor> tensors(const c10::IValue& v) { return v.toTensorVector(); }
std::vector<std::vector<at::Tensor>> tensor_lists(const c10::IValue& v) {
  std::vector<std::vector<at::Tensor>> r;
  for (const c10::IValue& e : v.toListRef()) r.push_back(e.toTensorVector());
  return r;
}
c10::IValue ivalue(const std::vector<std::vector<at::Tensor>>& ls) {
  c10::List<c10::List<at::Tensor>> r;
  for (const auto& l : ls) r.push_back(c10::List<at::Tensor>(l));
  return r;
}
std::chrono::milliseconds ms(const c10::IValue& v) { return std::chrono::milliseconds(v.toInt()); }

/// Runs c10d op `name` on the group's xla backend; pops the arguments, pushes the results.
void run_on_backend(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op.schema().name();
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> a(stack->end() - long(n), stack->end());
  torch::jit::drop(*stack, n);
  // Every c10d collective's process group is its second or third argument.
  const size_t pg_at = name == "c10d::allgather_" || name == "c10d::_allgather_base_" ||
                               name == "c10d::allgather_into_tensor_coalesced_" || name == "c10d::reduce_scatter_" ||
                               name == "c10d::_reduce_scatter_base_" || name == "c10d::reduce_scatter_tensor_coalesced_"
                           ? 2
                           : 1;
  auto pg = a[pg_at].toCustomClass<c10d::ProcessGroup>();
  c10::intrusive_ptr<c10d::Backend> b = pg->getBackend(c10::DeviceType::XLA);
  auto push_work = [&](const c10::intrusive_ptr<c10d::Work>& w) { stack->emplace_back(w); };
  if (name == "c10d::allreduce_") {
    auto ts = tensors(a[0]);
    auto w = b->allreduce(ts, c10d::AllreduceOptions{*a[2].toCustomClass<c10d::ReduceOp>(), ms(a[5]), a[4].toBool()});
    stack->emplace_back(c10::List<at::Tensor>(ts));
    push_work(w);
  } else if (name == "c10d::allreduce_coalesced_") {
    auto ts = tensors(a[0]);
    c10d::AllreduceCoalescedOptions o;
    o.reduceOp = *a[2].toCustomClass<c10d::ReduceOp>();
    push_work(b->allreduce_coalesced(ts, o));
  } else if (name == "c10d::broadcast_") {
    auto ts = tensors(a[0]);
    auto w = b->broadcast(ts, c10d::BroadcastOptions{a[2].toInt(), a[3].toInt(), ms(a[5]), a[4].toBool()});
    stack->emplace_back(c10::List<at::Tensor>(ts));
    push_work(w);
  } else if (name == "c10d::allgather_") {
    auto outs = tensor_lists(a[0]);
    auto ins = tensors(a[1]);
    auto w = b->allgather(outs, ins, c10d::AllgatherOptions{ms(a[4]), a[3].toBool()});
    stack->emplace_back(ivalue(outs));
    push_work(w);
  } else if (name == "c10d::_allgather_base_") {
    at::Tensor out = a[0].toTensor(), in = a[1].toTensor();
    auto w = b->_allgather_base(out, in, c10d::AllgatherOptions{ms(a[4]), a[3].toBool()});
    stack->emplace_back(out);
    push_work(w);
  } else if (name == "c10d::allgather_into_tensor_coalesced_") {
    auto outs = tensors(a[0]);
    auto ins = tensors(a[1]);
    push_work(b->allgather_into_tensor_coalesced(outs, ins, c10d::AllgatherOptions{}));
  } else if (name == "c10d::reduce_scatter_") {
    auto outs = tensors(a[0]);
    auto ins = tensor_lists(a[1]);
    c10d::ReduceScatterOptions o{*a[3].toCustomClass<c10d::ReduceOp>(), ms(a[5]), a[4].toBool()};
    auto w = b->reduce_scatter(outs, ins, o);
    stack->emplace_back(c10::List<at::Tensor>(outs));
    push_work(w);
  } else if (name == "c10d::_reduce_scatter_base_") {
    at::Tensor out = a[0].toTensor(), in = a[1].toTensor();
    c10d::ReduceScatterOptions o{*a[3].toCustomClass<c10d::ReduceOp>(), ms(a[5]), a[4].toBool()};
    auto w = b->_reduce_scatter_base(out, in, o);
    stack->emplace_back(out);
    push_work(w);
  } else if (name == "c10d::reduce_scatter_tensor_coalesced_") {
    auto outs = tensors(a[0]);
    auto ins = tensors(a[1]);
    c10d::ReduceScatterOptions o{*a[3].toCustomClass<c10d::ReduceOp>(), ms(a[5]), a[4].toBool()};
    push_work(b->reduce_scatter_tensor_coalesced(outs, ins, o));
  } else if (name == "c10d::barrier") {
    push_work(b->barrier(c10d::BarrierOptions{}));
  } else {
    TORCH_CHECK(false, "[xla process group] ", name, " is not supported on the xla device (axle)");
  }
}

/// The XLA key: tensors below functionalization (or never wrapped).
void xla_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_backend(op, stack); }

/// The Functionalize key. xla tensors go to the backend still wrapped (it writes the results
/// back through functionalization). Anything else is what functionalization's own fallback
/// does: unwrap, run below, wrap the results.
void functionalize_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  bool xla = false;
  for (size_t i = stack->size() - n; i < stack->size(); ++i) xla = xla || any_xla((*stack)[i]);
  if (xla) {
    run_on_backend(op, stack);
    return;
  }
  auto unwrap = [](const at::Tensor& t) {
    if (!F::isFunctionalTensor(t)) return t;
    F::sync(t);
    return F::from_functional_tensor(t);
  };
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = unwrap(v.toTensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts;
      for (const at::Tensor& t : v.toTensorList()) ts.push_back(unwrap(t));
      v = c10::List<at::Tensor>(ts);
    } else if (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensorList()) {
      std::vector<std::vector<at::Tensor>> ls;
      for (const c10::IValue& e : v.toListRef()) {
        std::vector<at::Tensor> ts;
        for (const at::Tensor& t : e.toTensorList()) ts.push_back(unwrap(t));
        ls.push_back(ts);
      }
      v = ivalue(ls);
    }
  }
  {
    c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::Functionalize);
    op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Functionalize),
                       stack);
  }
}

const char* const kCollectives[] = {
    "allreduce_",      "allreduce_coalesced_",  "broadcast_",
    "allgather_",      "_allgather_base_",      "allgather_into_tensor_coalesced_",
    "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
    "barrier",
};

TORCH_LIBRARY_IMPL(c10d, XLA, m) {
  for (const char* name : kCollectives) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&xla_kernel>());
}
TORCH_LIBRARY_IMPL(c10d, Functionalize, m) {
  for (const char* name : kCollectives)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&functionalize_kernel>());
}

// ---------------------------------------------------------------- launch

/// libaxle.so is loaded with RTLD_DEEPBIND (axle/__init__.py), so its `environ` binds to libc's
/// own definition, not to the copy the python executable's copy relocation made (which libc
/// itself uses): libc's original stays NULL and axle::launch would spawn from it. Point it at the
/// live environment before each launch.
void share_environ_with_libaxle() {
  void* libc = ::dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) return;
  for (const char* name : {"environ", "__environ"}) {
    auto** p = static_cast<char***>(::dlsym(libc, name));
    if (p && *p != environ) *p = environ;
  }
  ::dlclose(libc);
}

/// A Python exception in a launched function, as a C++ one (launch() reports its text).
std::function<void(int)> python_fn(py::function fn) {
  auto held = std::make_shared<py::function>(std::move(fn));
  return [held](int index) {
    py::gil_scoped_acquire gil;
    try {
      (*held)(index);
    } catch (py::error_already_set& e) {
      // "ValueError: message": the traceback was printed by the launched function's wrapper.
      std::string msg = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
                        py::str(e.value()).cast<std::string>();
      e.restore();
      PyErr_Clear();
      throw std::runtime_error(msg);
    }
  };
}

}  // namespace
}  // namespace axle_py

namespace py = pybind11;

/// Adds the distributed bindings to axle._C (called from module.cpp's PYBIND11_MODULE).
void init_dist(py::module_& m) {
  using namespace axle_py;
  // The c10d types our backend derives from are registered by torch.distributed's import.
  py::module_::import("torch.distributed");

  m.def(
      "_launch",
      [](py::function fn, int nprocs, bool debug_single_process, double timeout_s, bool prefix_output) {
        auto f = python_fn(std::move(fn));
        share_environ_with_libaxle();
        py::gil_scoped_release nogil;
        axle::launch(f, {.nprocs = nprocs,
                         .debug_single_process = debug_single_process,
                         .timeout_s = timeout_s,
                         .prefix_output = prefix_output});
      },
      py::arg("fn"), py::arg("nprocs") = 0, py::arg("debug_single_process") = false, py::arg("timeout_s") = 300.0,
      py::arg("prefix_output") = true,
      "axle::launch: runs fn(index) on nprocs processes (0: AXLE_NUM_DEVICES / CPU_NUM_DEVICES, else 1), re-running "
      "this program in each; under an external launcher (torchrun, Slurm, Open MPI, MPICH: docs/distributed.md) runs "
      "fn(local rank) here");
  m.def("_share_environ", [] { share_environ_with_libaxle(); },
        "libaxle reads os.environ's current variables from now on (after os.environ changed)");
  m.def("_device_requested", [] { (void)axle::device(); },
        "notes that this process asked for the xla device (torch_xla.device()): launch() then refuses to start "
        "(anti-pattern 1) unless it happened inside a launched function");
  m.def("_world_size", [] { return axle::runtime::world_size(); });
  m.def("_global_ordinal", [] { return axle::runtime::global_ordinal(); });
  m.def("_local_ordinal", [] { return axle::runtime::local_ordinal(); });
  m.def("_init_default_group", [] {
    py::gil_scoped_release nogil;
    (void)axle::dist::default_group();
  }, "creates the job's process group now (a rendezvous of every rank)");

  py::class_<AxleBackend, c10d::Backend, c10::intrusive_ptr<AxleBackend>>(m, "_XlaBackend")
      .def(py::init([](int rank, int size) {
             py::gil_scoped_release nogil;
             return c10::make_intrusive<AxleBackend>(rank, size);
           }),
           py::arg("rank"), py::arg("size"));

  // xm-level collectives (torch_xla.core.xla_model) on lists of xla (or cpu) tensors.
  m.def(
      "_all_reduce",
      [](const std::vector<at::Tensor>& ts, const std::string& op, double scale) {
        std::vector<at::Tensor> r;
        auto vals = all_reduce_values(ts, reduce_of(op), scale, "all_reduce");
        for (size_t i = 0; i < ts.size(); ++i) r.push_back(out_like(ts[i], vals[i]));
        return r;
      },
      py::arg("tensors"), py::arg("reduce_type") = "sum", py::arg("scale") = 1.0,
      "new tensors: the reduction over ranks of each (one collective per dtype), times scale");
  m.def(
      "_all_reduce_",
      [](const std::vector<at::Tensor>& ts, const std::string& op, double scale) {
        auto vals = all_reduce_values(ts, reduce_of(op), scale, "all_reduce");
        for (size_t i = 0; i < ts.size(); ++i) put(ts[i], vals[i], "all_reduce");
      },
      py::arg("tensors"), py::arg("reduce_type") = "sum", py::arg("scale") = 1.0,
      "in place: each tensor <- the reduction over ranks, times scale (views of it see the result)");
  m.def(
      "_all_gather",
      [](const at::Tensor& t) {
        const axle::Tensor x = value_of(t, "all_gather");
        axle::Tensor g = axle::dist::all_gather(x.dim() == 0 ? x.reshape({1}) : x);
        return out_like(t, g);
      },
      "every rank's tensor concatenated along dim 0 in rank order (a 0-d tensor gathers to [world])");
  m.def(
      "_reduce_scatter",
      [](const at::Tensor& t, const std::string& op, double scale) {
        axle::Tensor r = axle::dist::reduce_scatter(value_of(t, "reduce_scatter"), reduce_of(op));
        return out_like(t, scale == 1.0 ? r : r * scale);
      },
      py::arg("tensor"), py::arg("reduce_type") = "sum", py::arg("scale") = 1.0,
      "the reduction over ranks, then this rank's slice of dim 0 (dim 0 divisible by the world size)");
  m.def(
      "_broadcast", [](const at::Tensor& t, int src) { return out_like(t, axle::dist::broadcast(value_of(t, "broadcast"), src)); },
      py::arg("tensor"), py::arg("src") = 0);
  m.def(
      "_optimization_barrier",
      [](const std::vector<at::Tensor>& ts) {
        std::vector<axle::Tensor> vals;
        for (const auto& t : ts) vals.push_back(value_of(t, "optimization_barrier"));
        vals = axle::optimization_barrier(std::move(vals));
        std::vector<at::Tensor> r;
        for (size_t i = 0; i < ts.size(); ++i) r.push_back(out_like(ts[i], vals[i]));
        return r;
      },
      py::arg("tensors"),
      "new tensors equal to `tensors`, behind one barrier the compiler does not look through "
      "(common-subexpression elimination never merges what is computed from them with what is "
      "computed from the originals)");
  m.def(
      "_replace_value_",
      [](const at::Tensor& t, const at::Tensor& src) {
        TORCH_CHECK(t.sizes() == src.sizes() && t.scalar_type() == src.scalar_type(), "[replace_value_] expected ",
                    t.sizes(), " ", t.scalar_type(), ", got ", src.sizes(), " ", src.scalar_type());
        put(t, value_of(src, "replace_value_"), "replace_value_");
      },
      py::arg("tensor"), py::arg("src"),
      "tensor's storage takes src's value (its views read it when next used) without an autograd "
      "in-place op: values autograd saved from it, and from its views, read the new value in backward "
      "(FSDP's re-gather of a parameter for the backward)");
  m.def("_barrier", [] {
    py::gil_scoped_release nogil;
    axle::dist::barrier();
  });
  m.def(
      "_rendezvous",
      [](const std::string& tag, const py::bytes& payload) {
        std::string p = payload;
        std::vector<std::string> all;
        {
          py::gil_scoped_release nogil;
          all = axle::xm::rendezvous(tag, p);
        }
        std::vector<py::bytes> r;
        for (auto& s : all) r.emplace_back(s);
        return r;
      },
      py::arg("tag"), py::arg("payload") = py::bytes(""),
      "waits for every rank at rendezvous(tag); every rank's payload in rank order");
}
