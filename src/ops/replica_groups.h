// Replica groups as a collective's `group` attribute. The SPMD partitioner (src/spmd) says
// which devices a collective spans, as groups of device ids (a partition of 0..n-1 into
// equal-size groups, each in rank order), and creates no communicator: it puts a handle to
// the groups in the op's `group` attribute. The backend maps the handle to its
// communicator when it lowers the program (the cpu: an in-process group of
// dist::local_group_id). Handles are negative, so they never name a process group (0 is
// the world; DDP's and FSDP's groups are >= 0).
#pragma once
#include <cstdint>
#include <vector>

namespace axle::ops {

/// The handle naming `groups` (equal groups, the same handle); checks they partition
/// 0..n-1 into groups of one size.
int64_t replica_groups_attr(const std::vector<std::vector<int>>& groups);

/// The groups that `group` (a collective's attribute) names, or null when it names a
/// process group instead. The reference stays valid until the process ends.
const std::vector<std::vector<int>>* replica_groups_of(int64_t group);

}  // namespace axle::ops
