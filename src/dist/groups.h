// What the collective ops and their kernels need of dist's process groups: the group a
// collective's `group id` attribute names. (The rest of dist's shared state,
// dist_internal.h, is private to the dist layer.)
#pragma once
#include <cstdint>

#include "axle/dist.h"

namespace axle::dist::detail {

/// The group a collective op's `group id` attribute names (a process group, or an
/// in-process device group of local_devices.h); throws if unknown.
ProcessGroup& group_by_id(int64_t id);

/// "sum", "mean", "min", "max".
const char* reduce_op_name(ReduceOp op);

}  // namespace axle::dist::detail
