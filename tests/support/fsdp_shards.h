// FSDP v1 test helper: the full parameters of an FSDP tree, gathered from every rank's
// shards and unflattened by hand from get_shard_metadata() (independent of fsdp's own
// consolidation, which the tests check against it).
#pragma once

#include <map>
#include <string>

#include "axle/fsdp.h"
#include "axle/tensor.h"

namespace axle::test {

/// Unwrapped parameter name -> its full value (cpu, contiguous, its own shape). A
/// collective: call it on every rank. A shard missing from the model fails the test.
std::map<std::string, Tensor> gather_full_params(const fsdp::FSDP& model);

}  // namespace axle::test
