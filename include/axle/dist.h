// Multi-process training: launch(), the runtime queries, and collectives on a
// ProcessGroup (Gloo over TCP).
//
//   int main() {
//     axle::launch([](int index) {                   // one process per device
//       auto dev = axle::device();
//       ...
//       axle::xm::optimizer_step(opt);               // all-reduce gradients, then step
//     });
//   }
//
// launch() re-executes this program once per rank (the children re-run main and
// recognise themselves when they reach launch()), so everything before launch()
// must be cheap and deterministic and must not touch the xla device. Children's
// output lines come back prefixed with "[rank N] ". A failing child (exception,
// non-zero exit, signal) stops the others and launch() throws naming the rank.
//
// Collectives take a tensor and return a new one (inputs are never modified). On
// cpu tensors they run at once; on xla tensors they are ops of the step graph and
// run, in graph order, when the graph runs. Every rank must call the same
// collectives in the same order with the same shapes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "axle/tensor.h"

namespace axle {

struct LaunchOptions {
  /// Processes to start, one per device (torch_xla's `nprocs`). 0: AXLE_NUM_DEVICES
  /// (alias CPU_NUM_DEVICES), else 1, with a note on stderr when the machine has more
  /// cores. There is no `start_method`: every rank is a freshly started copy of this
  /// program (torch_xla's default, 'spawn').
  int nprocs = 0;
  /// The older name of `nprocs` (set one of them).
  int world_size = 0;
  /// torch_xla's `debug_single_process`: run fn(0) in this process, spawning nothing.
  bool debug_single_process = false;
  /// Rendezvous and collective timeout, in seconds.
  double timeout_s = 300;
  /// Prefix each line a child prints with "[rank N] ".
  bool prefix_output = true;
};

/// Runs fn(index) on `nprocs` processes and waits for all of them; throws
/// axle::Error "[launch] rank N failed: ..." if one fails (the others are killed).
///   axle::launch(fn, {.nprocs = 4});          // torch_xla.launch(fn) with 4 devices
///   axle::launch(fn, {.debug_single_process = true});
/// Under an external launcher (torchrun's or axle-run's RANK / WORLD_SIZE / LOCAL_RANK,
/// Slurm's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, Open MPI's OMPI_COMM_WORLD_*,
/// MPICH's PMI_*: docs/distributed.md has the precedence and the master address rules)
/// it spawns nothing and runs fn(local rank) here. Throws (seed anti-pattern 1,
/// "Don't call device() before launch()") if this process called axle::device() or
/// used the xla device outside a launched function: call it only inside fn.
/// Under SPMD (runtime::use_spmd) one process drives every device: nprocs > 1 is an
/// error, otherwise fn(0) runs here.
void launch(const std::function<void(int)>& fn, const LaunchOptions& opts = {});

namespace xmp {
/// Old torch_xla xmp.spawn(fn, nprocs).
[[deprecated("use axle::launch")]] void spawn(const std::function<void(int)>& fn, int nprocs = 0);
}  // namespace xmp

namespace runtime {
/// Number of processes in this job (1 outside launch()).
int world_size();
/// This process's rank in the job, 0..world_size()-1.
int global_ordinal();
/// This process's rank on its host.
int local_ordinal();
}  // namespace runtime

namespace dist {

enum class ReduceOp : int64_t { Sum = 0, Mean = 1, Min = 2, Max = 3 };

/// A group of processes that run collectives together (Gloo, TCP transport), or of the
/// virtual devices of one process (SPMD, src/dist/local_devices.h: shared memory).
/// Collectives on cpu buffers; the tensor-level functions below dispatch to it.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The id xla graphs use to find this group (an attribute of collective ops).
  virtual int64_t id() const = 0;
  /// Timeout of every later collective, seconds.
  virtual void set_timeout(double seconds) = 0;
  virtual double timeout() const = 0;

  // Raw collectives on dense cpu buffers (dtype float32, int64, int32 or uint8).
  /// In place: buf <- reduce over ranks (Mean: Sum then / size, floating only).
  virtual void all_reduce(void* buf, int64_t numel, DType t, ReduceOp op) = 0;
  /// out (size * in_numel elements) <- concatenation of every rank's `in`, rank order.
  virtual void all_gather(const void* in, void* out, int64_t in_numel, DType t) = 0;
  /// In place on the root's data: every rank's buf <- root's buf.
  virtual void broadcast(void* buf, int64_t numel, DType t, int root) = 0;
  virtual void barrier() = 0;
  /// `in` holds size() chunks of chunk_numel elements; chunk r of `out` <- chunk rank() of
  /// rank r's `in` (rank order). `in` and `out` must not overlap.
  virtual void all_to_all(const void* in, void* out, int64_t chunk_numel, DType t) = 0;
  /// out (numel elements) <- `in` of rank source_of[rank()], zeros where that is -1.
  /// source_of has size() entries, each -1 or a rank, and is the same on every rank.
  virtual void permute(const void* in, void* out, int64_t numel, DType t, const std::vector<int>& source_of) = 0;
};

/// The job's group (created, with a rendezvous, on first use). In a process that
/// launch() did not start and no external launcher set up, a group of one.
ProcessGroup& default_group();
/// torch.distributed-style initialisation; backend "xla" or "gloo", init_method
/// "xla://" or "env://". Creates the default group (a rendezvous of every rank). Under SPMD
/// (runtime::use_spmd) backend "xla" is an error: the partitioner inserts the collectives.
void init_process_group(const std::string& backend = "xla", const std::string& init_method = "xla://");
/// Sets the timeout (seconds) of the default group's rendezvous and collectives.
void set_timeout(double seconds);

/// Reduces `x` over ranks; same shape and dtype.
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::Sum);
/// Reduces several tensors (one dtype and device) with one collective call.
std::vector<Tensor> all_reduce(const std::vector<Tensor>& xs, ReduceOp op = ReduceOp::Sum);
/// Concatenates every rank's `x` along dim 0, in rank order: [world * n0, ...].
Tensor all_gather(const Tensor& x);
/// Reduces over ranks, then rank r keeps the r-th of world_size equal slices of dim 0.
Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::Sum);
/// Every rank gets rank `src`'s `x`.
Tensor broadcast(const Tensor& x, int src = 0);
/// Waits until every rank reached it (cpu; runs at once).
void barrier();

}  // namespace dist
}  // namespace axle
