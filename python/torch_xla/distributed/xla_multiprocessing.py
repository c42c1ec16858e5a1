"""``torch_xla.distributed.xla_multiprocessing`` (``xmp``): the older entry points, kept working.

- ``xmp.spawn(fn, args, nprocs)`` is ``torch_xla.launch(fn, args)`` with a process count.
- ``torch.multiprocessing.spawn(fn, args, nprocs)`` (``mp.spawn``), once ``torch_xla`` is
  imported, still starts and joins the processes as PyTorch does, and makes each child rank
  ``index`` of a job of ``nprocs`` on this host: the torchrun variables (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) are set in the child before
  ``fn`` runs, so its ``xla`` device, ``xm`` collectives and ``xla://`` process group are those
  of the job.

Both warn (DeprecationWarning) that ``torch_xla.launch`` replaces them.
"""
import functools
import os
import socket
import warnings

import torch.multiprocessing

from .._launch import launch

__all__ = ["spawn"]


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """Deprecated: use ``torch_xla.launch(fn, args)``. Runs ``fn(index, *args)`` on ``nprocs``
    processes (None: from the environment, as launch does) and waits for them."""
    warnings.warn("torch_xla.distributed.xla_multiprocessing.spawn is deprecated: use torch_xla.launch(fn, args=...)",
                  DeprecationWarning, stacklevel=2)
    if not join:
        raise ValueError("xmp.spawn(join=False) is not supported on axle: launch waits for every rank")
    launch(fn, args, start_method=start_method, nprocs=nprocs)


def _mp_spawn_child(index, fn, nprocs, port, args):
    """What each process of a patched ``torch.multiprocessing.spawn`` runs: rank ``index``."""
    os.environ.update(RANK=str(index), WORLD_SIZE=str(nprocs), LOCAL_RANK=str(index),
                      LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import axle

    axle._C._share_environ()  # libaxle reads the variables just set
    fn(index, *args)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _patch_torch_spawn():
    original = torch.multiprocessing.spawn
    if getattr(original, "_axle_patched", False):
        return

    @functools.wraps(original)
    def mp_spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            raise RuntimeError(f"torch.multiprocessing.spawn inside a job already started by a launcher (RANK="
                               f"{os.environ['RANK']}, WORLD_SIZE={os.environ['WORLD_SIZE']}): each process is "
                               "already one rank; call fn directly, or use torch_xla.launch(fn, args)")
        warnings.warn("torch.multiprocessing.spawn with torch_xla is deprecated: use torch_xla.launch(fn, args=...)",
                      DeprecationWarning, stacklevel=2)
        return original(_mp_spawn_child, args=(fn, int(nprocs), _free_port(), tuple(args)), nprocs=nprocs,
                        join=join, daemon=daemon, start_method=start_method)

    mp_spawn._axle_patched = True
    torch.multiprocessing.spawn = mp_spawn


_patch_torch_spawn()
