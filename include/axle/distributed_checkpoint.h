// Distributed checkpoints of sharded state (torch_xla.experimental.distributed_checkpoint
// with SPMDSavePlanner / SPMDLoadPlanner): each device's shard is written as it is, without
// gathering the tensor, and loading reshards into whatever sharding the targets have now.
//
//   namespace dc = axle::experimental::distributed_checkpoint;
//   dc::save(model->state_dict(), "ckpt/step-100");   // parameters sharded on a (2, 2) mesh
//   ...
//   dc::load(model->state_dict(), "ckpt/step-100");   // in place: another mesh, another
//                                                     // spec, unsharded, or cpu tensors
//
// The directory holds metadata.json (per tensor: global shape, dtype, the sharding it was
// saved with, and its chunks: offsets, sizes, file and key) and one safetensors file per
// host (shard-<host>.safetensors; one process drives every device, so host 0 here). Only
// the shards with replica_id 0 are written, without their padding: a replicated tensor is
// one chunk, a tensor split in k tiles is k chunks. The directory appears whole or not at
// all: it is written under a temporary name, then renamed over `dir` (an existing
// checkpoint there is replaced atomically). Loading checks every chunk against the
// metadata and the target's shape and dtype before changing any tensor.
#pragma once
#include <filesystem>

#include "axle/nn/module.h"

namespace axle::experimental::distributed_checkpoint {

/// Writes `state_dict` (xla tensors, sharded or not, and cpu tensors) to the directory `dir`.
/// Syncs pending work first. Written by the master process only.
void save(const nn::StateDict& state_dict, const std::filesystem::path& dir);
/// Loads every tensor of `state_dict` from `dir` in place, into its current device and
/// sharding (each device receives only the pieces of the chunks its shard overlaps). Names
/// missing from the checkpoint, or a different shape or dtype, are an error naming them;
/// checkpoint tensors `state_dict` does not ask for are ignored.
void load(const nn::StateDict& state_dict, const std::filesystem::path& dir);

}  // namespace axle::experimental::distributed_checkpoint
