// Saving and loading tensors, state dicts and whole training checkpoints in the
// safetensors format (https://github.com/huggingface/safetensors), readable by
// PyTorch's `safetensors.torch.load_file` and writable by anything that writes it.
//
//   axle::save(model->state_dict(), "model.safetensors");        // cpu tensors only
//   model->load_state_dict(axle::load("model.safetensors").tensors);
//
//   axle::xm::save(model->state_dict(), "model.safetensors");    // xla tensors: syncs, moves to cpu
//
//   // a whole training state, resumable bit for bit:
//   axle::save_checkpoint("ckpt.safetensors", {.model = model.get(), .optimizer = &opt,
//                                              .scheduler = &sched, .generator = &axle::default_generator(),
//                                              .epoch = epoch, .batch = batch_idx + 1, .step = step});
//   auto ck = axle::load_checkpoint("ckpt.safetensors", {.model = model.get(), .optimizer = &opt,
//                                                        .scheduler = &sched,
//                                                        .generator = &axle::default_generator()});
//   loader.set_epoch(ck.epoch);  // then skip ck.batch batches of that epoch; ck.step steps are done
//
// Writes are atomic: the bytes go to a temporary file in the same directory, are
// flushed to disk (fsync), then renamed over `path`; a crash mid-write leaves the
// previous file intact. Reads validate every size and offset before allocating, so a
// truncated, oversized or lying file is an axle::Error, never a crash or a huge allocation.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "axle/nn/module.h"
#include "axle/tensor.h"

namespace axle {

class Generator;
namespace optim {
class Optimizer;
class LRScheduler;
}  // namespace optim

/// The safetensors "__metadata__" map (string to string).
using Metadata = std::map<std::string, std::string>;

/// The contents of a safetensors file: cpu tensors in the file's data order, and its metadata.
struct SafeTensors {
  nn::StateDict tensors;
  Metadata metadata;
  std::string path;  ///< the file it came from (for messages)

  bool contains(const std::string& name) const;
  /// The tensor called `name`; throws axle::Error naming the file and the names it holds.
  const Tensor& at(const std::string& name) const;
};

/// Writes cpu tensors (contiguous or not; dtypes float32, int64, int32, bool, uint8, bfloat16,
/// float16) under their names, in order. Throws on an xla tensor (move it with .cpu() first, or
/// use axle::xm::save), an undefined tensor, a repeated or reserved ("__metadata__") name.
void save(const nn::StateDict& tensors, const std::string& path, const Metadata& metadata = {});
/// One tensor, stored under the name "tensor" (load it back with load_tensor).
void save(const Tensor& tensor, const std::string& path, const Metadata& metadata = {});

/// Reads a whole file (tensors land on the cpu).
SafeTensors load(const std::string& path);
/// The only tensor of a file (whatever its name); throws if the file holds another count.
Tensor load_tensor(const std::string& path);

/// Everything a training run needs to continue where it stopped. Pointers left null are
/// neither saved nor restored. `epoch`/`batch` are the data-loader position of the next
/// batch to train on (epoch number, batch index within it); `step` counts optimizer steps.
struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  Generator* generator = nullptr;
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t step = 0;
  Metadata metadata = {};  ///< extra user strings, saved and returned as they are
};

/// Writes model state dict ("model.<name>"), optimizer state tensors
/// ("optimizer.<i>.<key>"), and the rest (optimizer groups and scalars, scheduler, generator,
/// position) as JSON in the metadata key "axle.checkpoint", in one file. xla tensors are synced
/// and copied to the cpu; in a multi-process run only the master ordinal writes (as xm::save).
void save_checkpoint(const std::string& path, const Checkpoint& c);
/// Restores into the objects `into` points at (each must be present in the file) and returns
/// `into` with epoch, batch, step and metadata read from the file. Nothing is changed if the
/// file does not match (missing keys, shapes, group layout): all checks run before the first write.
Checkpoint load_checkpoint(const std::string& path, Checkpoint into);

namespace xm {
/// xm.save: syncs pending work, copies tensors to the cpu and writes `path` from the
/// master ordinal only (every process is ordinal 0 until the multi-process runtime lands).
void save(const nn::StateDict& tensors, const std::string& path, const Metadata& metadata = {});
void save(const Tensor& tensor, const std::string& path, const Metadata& metadata = {});
}  // namespace xm

}  // namespace axle
