// axle-train: trains a model (mlp or cnn on Fashion-MNIST, gpt on text: docs/gpt.md) with one of the
// seed's training-loop patterns (docs: README.md, DESIGN.md "The CLI: axle-train").
//
// The pieces: config (flags, validation, the Pattern), strategy (one per pattern: wrapping,
// device loading, the step), trainer (the epoch loop, checkpoints, the result line and the
// report's common fields) and the tasks (task_fmnist.cpp, task_gpt.cpp).
//
// stdout: configuration, epoch summaries, the result. stderr: progress and errors.
// Exit status: 0 success, 2 bad flags / missing or corrupt data / unavailable option,
// 1 anything else (an internal error).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "axle/axle.h"
#include "config.h"
#include "tasks.h"
#include "trainer.h"

namespace {

using namespace axle_train;

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int fail(const std::string& msg, int status) {
  std::fflush(stdout);
  std::fprintf(stderr, "axle-train: error: %s\n", one_line(msg).c_str());
  return status;
}

/// The SPMD patterns' virtual devices in this process (read by the runtime at its first use).
void set_spmd_devices(const Config& cfg) {
  const std::string n = std::to_string(cfg.devices);
  const char* set = std::getenv("AXLE_CPU_DEVICES");
  if (set && n != set) throw UsageError(fmt::format("--devices {} disagrees with AXLE_CPU_DEVICES={}", cfg.devices, set));
  ::setenv("AXLE_CPU_DEVICES", n.c_str(), 1);
}

/// One process's run (each launched rank's under the multi-process patterns).
int run_task(Config cfg) {  // by value: a task may adjust it (gpt: --max-steps alone sets the epochs)
  const std::unique_ptr<Task> task = cfg.is_gpt() ? make_gpt_task(cfg) : make_fmnist_task(cfg);
  return train(cfg, *task);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string pattern;
  CLI::App app{"axle-train: train a model (mlp or cnn on Fashion-MNIST, gpt on text) with one of the PyTorch/XLA "
               "training-loop patterns",
               "axle-train"};
  add_flags(app, cfg, pattern);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    return fail(e.what(), 2);
  }
  try {
    finish_config(app, cfg, pattern);
    if (spmd_pattern(cfg.pattern)) set_spmd_devices(cfg);
    if (!multi_process(cfg.pattern)) return run_task(cfg);
    int status = 0;
    axle::launch([&](int) { status = run_task(cfg); }, {.nprocs = cfg.devices, .timeout_s = cfg.timeout});
    return status;
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what(), 1);
  }
}
