// N virtual devices in one process (SPMD): a pool of device threads and in-process
// collective groups over them, on raw cpu buffers in shared memory.
//
// A device thread runs with dist::this_device() set to its index; collective ops whose
// `group` attribute names a local group (local_group_id) run on that group with the
// calling device's rank. Reductions add peers in group order, so every device gets the
// same bits and two runs are bitwise identical. Waiting is blocking (condition variables),
// never spinning, so more devices than cores still make progress.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace axle::dist {

/// Hosts of the SPMD job: one process per host, each driving its own local devices. Under
/// SPMD with an external launcher (torchrun, Slurm, MPI: launch_env.h) the launcher's world
/// size; 1 otherwise. The global devices 0..n-1 are numbered host by host: host h owns
/// h*L .. h*L+L-1 (L = n / host_count(), every host the same AXLE_CPU_DEVICES).
int host_count();
/// This process's host, 0..host_count()-1 (its rank).
int host_index();
/// The first global device of this host, of n global devices.
int first_local_device(int n);
/// Every host's `mine`, in host order (a collective: every host calls it; sizes may
/// differ). One host: {mine}. Runs over the default Gloo group.
std::vector<std::vector<char>> gather_hosts(const std::vector<char>& mine);

/// The device index of the calling thread while run_on_devices runs it; -1 on any other thread.
int this_device();

/// Runs fn(d) for this host's devices d of the n global ones (all of 0..n-1 on one host),
/// each on its own persistent device thread (the threads are
/// reused across calls) with `threads_per_device` OpenMP threads, and returns when all have
/// finished. If any fn throws, the local groups are aborted (peers waiting in a collective
/// throw at once instead of waiting for the timeout) and the error of the device that caused
/// it is rethrown as axle::Error "[spmd] device k failed: ...": the lowest device whose own
/// code threw, else the lowest whose collective failed (timeout, mismatch, a peer that
/// finished without reaching it), never one that was only aborted. Not reentrant (one run
/// at a time; calls from other threads wait).
void run_on_devices(int n, const std::function<void(int)>& fn, int threads_per_device);

/// The id of the in-process group over devices `groups` (a partition of 0..n-1 into equal-
/// size groups; a device's rank is its position in its group). Equal groups give the same
/// id. The id is what collective ops carry (dist::detail::group_by_id finds it); the
/// group's rank() and size() are those of the calling device thread.
int64_t local_group_id(const std::vector<std::vector<int>>& groups);

/// Timeout of local collectives, seconds (default 60; AXLE_SPMD_TIMEOUT overrides). A
/// collective not reached by every member in time throws an axle::Error naming the
/// collective and the devices that did not arrive.
void set_local_timeout(double seconds);
double local_timeout();

}  // namespace axle::dist
