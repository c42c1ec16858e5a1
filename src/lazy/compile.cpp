// axle::compile: a traced region with its own graph name, full_graph checks and a
// limit on distinct graphs.
#include "axle/compile.h"

#include <unordered_set>

#include "axle/metrics.h"
#include "lazy/ir.h"

namespace axle::detail {

struct CompiledState {
  CompileOptions opts;
  lazy::TraceContext ctx;
  std::unordered_set<uint64_t> graphs;
};

std::shared_ptr<CompiledState> make_compiled_state(CompileOptions o) {
  AXLE_CHECK(o.max_different_graphs >= 0, "[compile] expected max_different_graphs >= 0, got ", o.max_different_graphs);
  AXLE_CHECK(!o.name.empty(), "[compile] expected a non-empty name");
  auto s = std::make_shared<CompiledState>();
  s->opts = std::move(o);
  s->ctx.name = s->opts.name;
  s->ctx.full_graph = s->opts.full_graph;
  CompiledState* raw = s.get();
  s->ctx.on_graph = [raw](uint64_t hash, const std::function<std::string()>& explain) {
    if (raw->graphs.count(hash)) return;
    const int limit = raw->opts.max_different_graphs;
    AXLE_CHECK(limit == 0 || int(raw->graphs.size()) < limit, "[compile] function '", raw->opts.name,
               "' would produce ", raw->graphs.size() + 1, " different graphs, more than max_different_graphs = ",
               limit, "; this one differs from the previous: ", explain());
    raw->graphs.insert(hash);
  };
  return s;
}

void label_argument(CompiledState& s, int k, const Tensor& t) {
  lazy::set_label(t, "tensor argument " + std::to_string(k) + " of compiled function '" + s.opts.name + "'",
                  lazy::kLabelArgument);
}

CompiledCall::CompiledCall(CompiledState& s) : s_(s), saved_(lazy::current_context()) {
  lazy::sync_all("before compile()");  // the function's graph holds only its own work
  lazy::set_current_context(&s_.ctx);
}

CompiledCall::~CompiledCall() { lazy::set_current_context(static_cast<lazy::TraceContext*>(saved_)); }

void CompiledCall::finish() {
  static metrics::Counter& mark_step = metrics::counter("MarkStep");
  mark_step.add();
  lazy::sync_all("compile()");
}

}  // namespace axle::detail
