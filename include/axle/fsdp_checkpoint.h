// FSDP v1 checkpoints: each rank writes its own shards, and a consolidation step (or the
// axle-fsdp-consolidate tool) stitches the ranks' files into the unwrapped model's state.
//
//   axle::fsdp::save_sharded_checkpoint("ckpt/step100_", *fsdp_model, &opt);   // on every rank
//   // -> ckpt/step100_rank-0-of-2.safetensors, ckpt/step100_rank-1-of-2.safetensors
//   axle::fsdp::load_sharded_checkpoint("ckpt/step100_", *fsdp_model, &opt);   // resume, bit-identical
//   nn::StateDict full = axle::fsdp::consolidate_sharded_model_checkpoints("ckpt/step100_");
//
// A rank file is an axle checkpoint (axle/serialize.h: model shards, optimizer state,
// counters) whose metadata carries the rank's ShardMetadata as JSON under "shard_metadata"
// and, under "shard_layout", the unwrapped model's state_dict order and each buffer's key
// in the file, so consolidation needs no model. Every rank writes its own file; writes are
// atomic (a temporary file renamed into place). The tool axle-fsdp-consolidate
// (--ckpt-prefix P [--ckpt-suffix S] --output FILE.safetensors) writes the consolidation.
#pragma once
#include <string>

#include "axle/fsdp.h"
#include "axle/serialize.h"

namespace axle::fsdp {

/// The file rank `rank` of `world` writes: prefix + "rank-<rank>-of-<world>" + suffix.
std::string shard_file(const std::string& prefix, int rank, int world, const std::string& suffix = ".safetensors");

/// Writes this rank's file (shards of `model`, `c`'s optimizer/scheduler/generator/counters
/// when set; c.model is ignored: `model` is saved).
void save_sharded_checkpoint(const std::string& prefix, const XlaFullyShardedDataParallel& model,
                             const Checkpoint& c = {}, const std::string& suffix = ".safetensors");
/// Reads this rank's file back into `model` (and what `into` points at). Errors: a file
/// written by another world size or rank, or for other shard shapes, named with both values.
Checkpoint load_sharded_checkpoint(const std::string& prefix, XlaFullyShardedDataParallel& model,
                                   Checkpoint into = {}, const std::string& suffix = ".safetensors");

/// Reads every rank's file (ranks found by the pattern prefix + "rank-*-of-*" + suffix; all
/// of 0..world-1 must be there, with one world size) and returns the full parameters and
/// buffers under the unwrapped model's state_dict keys, in its order, on the cpu.
nn::StateDict consolidate_sharded_model_checkpoints(const std::string& prefix,
                                                    const std::string& suffix = ".safetensors");

}  // namespace axle::fsdp
