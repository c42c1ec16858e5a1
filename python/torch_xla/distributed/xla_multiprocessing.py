"""``torch_xla.distributed.xla_multiprocessing`` (``xmp``): the older entry point, kept working.

``xmp.spawn(fn, args, nprocs)`` is ``torch_xla.launch(fn, args)`` with a process count; it
warns that it is deprecated.
"""
import warnings

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
