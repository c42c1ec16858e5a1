// save_checkpoint / load_checkpoint in two halves, for writers that choose their own file
// per rank (FSDP v1: src/serialize/fsdp_checkpoint.cpp) instead of the master-only write.
#pragma once
#include "axle/serialize.h"

namespace axle::st {

/// What save_checkpoint writes for `c`: the tensors (possibly on the xla device) and the
/// metadata (c.metadata plus "axle.checkpoint").
void checkpoint_contents(const Checkpoint& c, nn::StateDict& tensors, Metadata& meta);
/// load_checkpoint on a file already read (messages name file.path).
Checkpoint load_checkpoint(const SafeTensors& file, Checkpoint into);

}  // namespace axle::st
