// axle-train's checkpoints, one layout per kind of pattern. Each is written so that a run
// killed at any moment leaves a checkpoint that resumes bit-identically:
// - plain (one device per process, every rank the same parameters): DIR/checkpoint.safetensors
//   (axle::save_checkpoint, written by rank 0);
// - fsdp (FSDP v1): every rank's shards in DIR/step-<N>_rank-<r>-of-<w>.safetensors
//   (axle/fsdp_checkpoint.h), then DIR/checkpoint.json naming the prefix of the complete set
//   (written by rank 0 once every rank's file is there; older sets are then removed);
// - distributed (spmd, fsdp-spmd): the model's and the optimizer's tensors, each device's
//   shards as they are, in DIR/state-<N>/ (axle/distributed_checkpoint.h), then
//   DIR/checkpoint.safetensors with the rest (optimizer groups and scalars, scheduler,
//   generator, position, metadata) naming that directory; older ones are then removed.
#pragma once

#include <string>

#include "axle/fsdp.h"
#include "axle/serialize.h"

namespace axle_train {

/// The file that says where a checkpoint in `dir` stands (what "resumed from" names).
std::string plain_checkpoint_file(const std::string& dir);
std::string fsdp_checkpoint_file(const std::string& dir);

void save_plain(const std::string& dir, const axle::Checkpoint& c);
axle::Checkpoint load_plain(const std::string& dir, axle::Checkpoint into);

/// Every rank calls both; `c.model` is ignored (the shards of `model` are saved).
void save_fsdp(const std::string& dir, const axle::fsdp::XlaFullyShardedDataParallel& model, const axle::Checkpoint& c);
axle::Checkpoint load_fsdp(const std::string& dir, axle::fsdp::XlaFullyShardedDataParallel& model,
                           axle::Checkpoint into);

/// One process drives every device; the tensors keep (and load into) their shardings.
void save_distributed(const std::string& dir, const axle::Checkpoint& c);
axle::Checkpoint load_distributed(const std::string& dir, axle::Checkpoint into);

}  // namespace axle_train
