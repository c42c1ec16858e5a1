// AXLE_DEBUG / AXLE_SAVE_GRAPHS: explains (and saves) each uncached compile.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "dist/spmd_mode.h"
#include "lazy/lazy_internal.h"

namespace axle::lazy {
namespace detail {
namespace {
std::string meta_str(const ops::Meta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }
}  // namespace
Summary summarize(const Graph& g) {
  Summary s;
  for (int i : g.inputs) {
    const Node* n = g.nodes[size_t(i)];
    s.inputs.push_back(meta_str(n->outs[0]));
    s.labels.push_back(!n->label.empty() ? n->label : n->has_owner ? "device data computed earlier" : "");
    if (dist::detail::spmd_mode()) [[unlikely]]
      s.shardings.push_back(n->sharding ? n->sharding->str() : "{replicated}");
  }
  for (const Node* n : g.nodes) {
    if (n->kind != NodeKind::Op) continue;
    std::string d = ops::op_name(n->op);
    for (const auto& m : n->outs) d += " " + meta_str(m);
    s.nodes.push_back(d);
  }
  return s;
}
namespace {
constexpr size_t kExplainLines = 8;  // changed inputs listed before "... and N more"
std::string join_capped(const std::vector<std::string>& lines, const char* what) {
  if (lines.size() == 1) return lines[0];
  std::string out = std::to_string(lines.size()) + " " + what + " changed:";
  for (size_t i = 0; i < lines.size() && i < kExplainLines; ++i) out += "\n  " + lines[i];
  if (lines.size() > kExplainLines) out += "\n  ... and " + std::to_string(lines.size() - kExplainLines) + " more";
  return out;
}
}  // namespace
// Every changed input, named by what it is; failing that, the first op that differs.
std::string explain_difference(const Summary& prev, const Summary& cur) {
  std::vector<std::string> changed;
  for (size_t i = 0; i < std::min(prev.inputs.size(), cur.inputs.size()); ++i)
    if (prev.inputs[i] != cur.inputs[i]) {
      const std::string& label = cur.labels[i].empty() ? prev.labels[i] : cur.labels[i];
      changed.push_back("input " + std::to_string(i) + (label.empty() ? "" : " (" + label + ")") + " changed from " +
                        prev.inputs[i] + " to " + cur.inputs[i]);
    }
  if (prev.inputs.size() != cur.inputs.size())
    changed.push_back("number of inputs changed from " + std::to_string(prev.inputs.size()) + " to " +
                      std::to_string(cur.inputs.size()));
  if (!changed.empty()) return join_capped(changed, "inputs");
  // SPMD: the same inputs, sharded differently.
  for (size_t i = 0; i < std::min(prev.shardings.size(), cur.shardings.size()); ++i)
    if (prev.shardings[i] != cur.shardings[i]) {
      const std::string& label = cur.labels[i].empty() ? prev.labels[i] : cur.labels[i];
      changed.push_back("sharding of input " + std::to_string(i) + (label.empty() ? "" : " (" + label + ")") +
                        " changed from " + prev.shardings[i] + " to " + cur.shardings[i]);
    }
  if (!changed.empty()) return join_capped(changed, "input shardings");
  for (size_t i = 0; i < std::min(prev.nodes.size(), cur.nodes.size()); ++i)
    if (prev.nodes[i] != cur.nodes[i]) return "op " + std::to_string(i) + " changed from " + prev.nodes[i] + " to " + cur.nodes[i];
  if (prev.nodes.size() != cur.nodes.size())
    return "number of ops changed from " + std::to_string(prev.nodes.size()) + " to " + std::to_string(cur.nodes.size());
  return "same structure, different attributes or constants";
}
namespace {
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}
}  // namespace
std::mutex& debug_mu() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::map<std::string, Summary>& last_summary() {
  static auto* m = new std::map<std::string, Summary>();
  return *m;
}
std::string& last_explanation_text() {  // guarded by debug_mu()
  static auto* s = new std::string();
  return *s;
}
void on_uncached_compile(const Graph& g, const std::string& name, const char* cause) {
  std::lock_guard<std::mutex> lock(debug_mu());
  auto& last = last_summary();
  Summary cur = summarize(g);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(g.hash));
  std::string why = "first graph of this name";
  if (auto it = last.find(name); it != last.end()) why = explain_difference(it->second, cur);
  last_explanation_text() = why;
  if (env_flag("AXLE_DEBUG")) {
    std::fprintf(stderr, "[axle] compile graph '%s' %s (cause: %s; %zu ops, %zu inputs): %s\n", name.c_str(), hash,
                 cause, cur.nodes.size(), cur.inputs.size(), why.c_str());
  }
  if (const char* dir = std::getenv("AXLE_SAVE_GRAPHS"); dir && *dir) {
    std::filesystem::create_directories(dir);
    // The program's text before and after each pass is saved by compiler::PassPipeline::run.
    std::ofstream(std::string(dir) + "/" + name + "-" + hash + ".dot") << g.dot(name);
  }
  last[name] = std::move(cur);
}
}  // namespace detail
using namespace detail;

std::string last_explanation() {
  std::lock_guard<std::mutex> lock(debug_mu());
  return last_explanation_text();
}

}  // namespace axle::lazy
