// The Python module axle._C: the runtime calls torch_xla's Python API needs (sync, step,
// compile regions, eager mode, metrics, the generator), and the boxed CPU fallback of every
// aten op that no lowering file registers.
#include <ATen/native/CPUFallback.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "axle/compile.h"
#include "axle/data/sampler.h"
#include "axle/error.h"
#include "axle/generator.h"
#include "axle/metrics.h"
#include "axle/runtime.h"
#include "axle/xm.h"
#include "bridge.h"

namespace axle_py {
namespace {

// ---- the CPU fallback: counted per op (aten::<name>, torch_xla's counter names) ----
void xla_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  note_fallback(op.schema().name());
  try {
    at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
  } catch (const axle::Error& e) {
    // Reading the operands fails where values may not be read (a full_graph compile()): say
    // that the read is the fallback's, not the user's.
    throw axle::Error("[" + op.schema().name() + "] has no xla lowering and falls back to the CPU, which reads " +
                      "its xla operands: " + e.what());
  }
}

/// torch_xla.step(): a step scope (axle::StepGuard), syncing on entry and on exit.
struct StepScope {
  std::optional<axle::StepGuard> guard;
  void enter() { guard.emplace(); }
  /// `unwinding`: the with-block raised; the step is still cut and no second error is thrown.
  void exit(bool unwinding) {
    if (!unwinding) {
      guard.reset();
      return;
    }
    // StepGuard tells an unwinding exit by std::uncaught_exceptions(): reset it during one.
    struct Reset {
      std::optional<axle::StepGuard>& g;
      ~Reset() { g.reset(); }
    };
    try {
      Reset r{guard};
      throw 0;
    } catch (int) {
    }
  }
};

/// A torch_xla.compile()d function's state: its name, options and graphs seen.
struct CompiledFn {
  std::shared_ptr<axle::detail::CompiledState> state;
};

/// One call of a torch_xla.compile()d function (axle::detail::CompiledCall).
struct CompiledCallScope {
  std::shared_ptr<axle::detail::CompiledState> state;
  std::optional<axle::detail::CompiledCall> call;
  explicit CompiledCallScope(const CompiledFn& f) : state(f.state) {}
  void enter() { call.emplace(*state); }
  void label(int k, const at::Tensor& t) {
    if (is_xla(t)) axle::detail::label_argument(*state, k, impl_of(t, "compile")->value);
  }
  void finish() { call->finish(); }
  void exit() { call.reset(); }
};

}  // namespace

TORCH_LIBRARY_IMPL(_, XLA, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&xla_fallback>()); }

}  // namespace axle_py

namespace py = pybind11;
using namespace axle_py;

namespace axle_py {
void init_spmd(py::module_& m);  // spmd.cpp
std::vector<std::tuple<std::string, std::string, std::string>> autocast_ops();  // autocast.cpp
}
void init_dist(py::module_& m);  // dist.cpp

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

PYBIND11_MODULE(_C, m) {
  m.doc() = "axle under PyTorch: the xla device's runtime";
  py::register_exception<axle::Error>(m, "AxleError", PyExc_RuntimeError);

  // The calls that compile and run graphs release the GIL, so Python threads (the
  // MpDeviceLoader's, which moves the next batches to the device) run meanwhile.
  using nogil = py::call_guard<py::gil_scoped_release>;
  m.def("_sync", [] { axle::sync(); }, nogil(), "torch_xla.sync(): cut, compile (or reuse) and run the pending graph");
  m.def("_mark_step", [] { axle::xm::mark_step(); }, nogil(),
        "xm.mark_step(): a sync that refuses to run inside step()");
  m.def("_wait_device_ops", [] { axle::wait_device_ops(); }, nogil());
  py::class_<StepScope>(m, "_StepScope")
      .def(py::init<>())
      .def("enter", &StepScope::enter, nogil())
      .def("exit", &StepScope::exit, py::arg("unwinding"), nogil());

  py::class_<CompiledFn>(m, "_CompiledFn");
  m.def("_compiled_fn", [](const std::string& name, bool full_graph, int max_different_graphs) {
    return CompiledFn{axle::detail::make_compiled_state(
        {.full_graph = full_graph, .name = name, .max_different_graphs = max_different_graphs})};
  });
  py::class_<CompiledCallScope>(m, "_CompiledCall")
      .def(py::init<const CompiledFn&>())
      .def("enter", &CompiledCallScope::enter, nogil())
      .def("label", &CompiledCallScope::label)
      .def("finish", &CompiledCallScope::finish, nogil())
      .def("exit", &CompiledCallScope::exit);

  m.def("_set_eager_mode", [](bool on) { axle::experimental::eager_mode(on); });
  m.def("_is_eager_mode", [] { return axle::experimental::is_eager_mode(); });
  m.def("_manual_seed", [](uint64_t seed) { axle::manual_seed(seed); });

  m.def("_counters", [] { return axle::metrics::counters(); });
  m.def("_counter_value", [](const std::string& n) { return axle::metrics::counter_value(n); });
  m.def("_timers", [] {
    std::map<std::string, std::pair<double, int64_t>> r;
    for (const auto& [name, ms] : axle::metrics::timers_ms()) r[name] = {ms, axle::metrics::timer_count(name)};
    return r;
  }, "timed metrics: name -> (total ms, samples)");
  m.def("_metrics_report", [] { return axle::metrics::report(); });
  m.def("_short_metrics_report", [] { return axle::metrics::short_report(); });
  m.def("_metrics_reset", [] { axle::metrics::reset(); });
  // torch_xla's met.clear_counters() / met.clear_metrics(): zero one kind, keep the other.
  m.def("_clear_counters", [] {
    for (const auto& [name, v] : axle::metrics::counters()) axle::metrics::counter(name).value.store(0);
  });
  m.def("_clear_timers", [] {
    for (const auto& [name, ms] : axle::metrics::timers_ms()) {
      axle::metrics::Timer& t = axle::metrics::timer(name);
      t.total_ns.store(0);
      t.count.store(0);
    }
  });

  m.def("_memory_info", [] {
    auto mi = axle::xm::get_memory_info(axle::device());
    return std::map<std::string, int64_t>{
        {"bytes_used", mi.bytes_used}, {"bytes_limit", mi.bytes_limit}, {"peak_bytes_used", mi.peak_bytes_used}};
  });
  m.def("_is_axle_tensor", [](const at::Tensor& t) { return is_xla(t); });
  // The order in which axle's DataLoader visits a data set, so that a Python loop sees the
  // batches axle-train sees: axle-train shuffles with RandomSampler(n, seed) on one process and
  // with DistributedSampler(n, world, rank, shuffle, seed) on each of `world` processes.
  m.def(
      "_sampler_indices",
      [](int64_t n, uint64_t seed, int64_t epoch, int world, int rank) {
        AXLE_CHECK(world >= 1, "[_sampler_indices] expected world >= 1, got ", world);
        std::unique_ptr<axle::data::Sampler> s;
        if (world == 1) {
          AXLE_CHECK(rank == 0, "[_sampler_indices] expected rank 0 with world 1, got rank ", rank);
          s = std::make_unique<axle::data::RandomSampler>(n, seed);
        } else {
          s = std::make_unique<axle::data::DistributedSampler>(n, world, rank, /*shuffle=*/true, seed);
        }
        s->set_epoch(epoch);
        return s->indices();
      },
      py::arg("n"), py::arg("seed"), py::arg("epoch") = 0, py::arg("world") = 1, py::arg("rank") = 0,
      "epoch `epoch`'s indices of a data set of n samples as axle's shuffling samplers give them: RandomSampler(n, "
      "seed) for world 1, else rank `rank`'s share of DistributedSampler(n, world, rank, shuffle=True, seed)");
  m.def("_autocast_ops", &autocast_ops,
        "torch.autocast('xla')'s list (autocast.cpp): (aten operator, the ops.def entry whose AC_ rule it takes or '' "
        "for a composite, the rule: lower, fp32 or promote)");
  init_spmd(m);  // axle._C._spmd (spmd.cpp)
  init_dist(m);  // dist.cpp: launch, the xla process group, xm collectives
}

#pragma GCC diagnostic pop
