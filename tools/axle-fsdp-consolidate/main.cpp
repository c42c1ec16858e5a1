// axle-fsdp-consolidate: stitches the per-rank files of an FSDP v1 checkpoint
// (axle::fsdp::save_sharded_checkpoint) into the unwrapped model's full state dict and
// writes it as one safetensors file (torch_xla's consolidate_sharded_ckpts).
//
//   axle-fsdp-consolidate --ckpt-prefix ckpt/step100_ --output model.safetensors
//   # reads ckpt/step100_rank-0-of-2.safetensors, ckpt/step100_rank-1-of-2.safetensors
//
// stdout: what was written. stderr: errors. Exit status: 0 success, 2 bad flags or
// missing / inconsistent / corrupt rank files, 1 anything else (an internal error).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "axle/fsdp_checkpoint.h"
#include "axle/serialize.h"

namespace {

int fail(const std::string& msg, int status) {
  std::fflush(stdout);
  std::string line = msg;
  for (char& c : line)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "axle-fsdp-consolidate: error: %s\n", line.c_str());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string prefix, suffix = ".safetensors", output;
  CLI::App app{"axle-fsdp-consolidate: stitch the per-rank files of an FSDP v1 checkpoint "
               "(PREFIX + rank-<r>-of-<world> + SUFFIX) into the full model, written as safetensors",
               "axle-fsdp-consolidate"};
  app.add_option("--ckpt-prefix", prefix, "the prefix given to save_sharded_checkpoint (e.g. ckpt/step100_)")
      ->required();
  app.add_option("--ckpt-suffix", suffix, "the suffix of the rank files")->capture_default_str();
  app.add_option("--output", output, "the safetensors file to write (full parameters and buffers)")->required();
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
    const axle::nn::StateDict full = axle::fsdp::consolidate_sharded_model_checkpoints(prefix, suffix);
    axle::save(full, output);
    int64_t elements = 0;
    for (const auto& [name, t] : full) elements += t.numel();
    fmt::print("wrote {} tensors ({} elements) to {}\n", full.size(), elements, output);
    return 0;
  } catch (const axle::Error& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what(), 1);
  }
}
