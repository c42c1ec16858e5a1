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
#include <cstdint>
#include <exception>
#include <filesystem>
#include <thread>
#include <vector>

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

/// torch_xla's CheckpointManager: step checkpoints in `path`/<step>/ (each a directory as
/// save() writes it), every `save_interval` steps, keeping the newest `max_to_keep` (0: all).
///
///   dc::CheckpointManager ckpt("ckpts", /*save_interval=*/100, /*max_to_keep=*/3);
///   ckpt.save_async(step, model->state_dict());     // returns once the shards are on the host
///   ...
///   if (auto steps = ckpt.all_steps(); !steps.empty()) ckpt.restore(steps.back(), model->state_dict());
class CheckpointManager {
 public:
  CheckpointManager(std::filesystem::path path, int64_t save_interval, int64_t max_to_keep = 0);
  /// Waits for a background save (its error, if any, is printed: call join() to get it).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  /// Saves as step `step` when step % save_interval == 0 or `force`; returns whether it did.
  bool save(int64_t step, const nn::StateDict& state_dict, bool force = false);
  /// The same, written by a background thread: the state is synced and copied to the host
  /// first, so training may change it as soon as this returns. One save at a time (the next
  /// save waits for this one); a failure is thrown by the next save, join() or restore().
  bool save_async(int64_t step, const nn::StateDict& state_dict, bool force = false);
  /// Waits for the background save and throws its error, if any.
  void join();
  /// The steps with a complete checkpoint, ascending.
  std::vector<int64_t> all_steps() const;
  /// Loads step `step` into `state_dict` in place (as load()).
  void restore(int64_t step, const nn::StateDict& state_dict);

 private:
  bool should_save(int64_t step, bool force) const;
  void finish_save();  ///< drops the oldest checkpoints beyond max_to_keep
  std::filesystem::path path_;
  int64_t save_interval_, max_to_keep_;
  std::thread worker_;
  std::exception_ptr error_;
};

}  // namespace axle::experimental::distributed_checkpoint
