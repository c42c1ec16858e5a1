"""The ``xla`` backend of ``torch.distributed``.

Importing this module registers it::

    import torch.distributed as dist
    import torch_xla.distributed.xla_backend
    dist.init_process_group("xla", init_method="xla://")

``xla://`` takes the rank and world size from the runtime (``torch_xla.launch``'s children,
or an external launcher's variables: torchrun's or axle-run's ``RANK`` / ``WORLD_SIZE``,
Slurm's, Open MPI's or MPICH's, resolved by the C++ as docs/distributed.md says). The backend (``axle._C._XlaBackend``, a
``c10d::Backend`` in python/csrc/dist.cpp) runs on axle's process group: its ``all_reduce``,
``all_gather`` (and ``all_gather_into_tensor``), ``reduce_scatter`` (and
``reduce_scatter_tensor``) and ``broadcast`` on xla tensors are collective ops in the lazy
graph, run with the step's graph; on cpu tensors they run at once; ``barrier`` waits for every
rank. ``DistributedDataParallel(model, gradient_as_bucket_view=True)`` works unchanged: its
gradient all-reduces are part of the step's graph. It serves the job's default group only
(no ``new_group`` subgroups) and the reduce ops SUM, AVG, MIN and MAX.
"""
import torch.distributed as dist

import axle

from ..core import _xm_dist

__all__ = ["ProcessGroupXla"]

#: The backend's class (created by ``dist.init_process_group("xla")``).
ProcessGroupXla = axle._C._XlaBackend


def _create_xla_process_group(store, rank, size, timeout):
    return axle._C._XlaBackend(rank, size)


def _xla_rendezvous_handler(url, timeout=None, **kwargs):
    # The ranks meet in axle's own rendezvous when the backend is created; torch.distributed
    # only needs a store object of this process.
    yield (dist.HashStore(), _xm_dist.global_ordinal(), _xm_dist.world_size())
    raise RuntimeError("the xla:// rendezvous cannot be repeated in a process (torch.distributed asked for another)")


def _register():
    if "xla" not in dist.Backend.backend_list:
        # cpu too: dist.barrier() and DDP's bookkeeping send cpu tensors, and a user's cpu
        # metrics should not need a second group.
        dist.Backend.register_backend("xla", _create_xla_process_group, devices=["xla", "cpu"])
    import importlib

    _rdzv = importlib.import_module("torch.distributed.rendezvous")

    if "xla" not in _rdzv._rendezvous_handlers:
        dist.register_rendezvous_handler("xla", _xla_rendezvous_handler)


_register()
