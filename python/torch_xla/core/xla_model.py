"""torch_xla.core.xla_model (xm) for one process with one device.

The names the seed's migration table retires still work and warn (DeprecationWarning) naming
their replacement: ``xla_device`` -> ``torch_xla.device()``, ``mark_step`` -> ``torch_xla.sync()``
or ``torch_xla.step()``, ``xrt_world_size`` / ``get_ordinal`` -> ``torch_xla.runtime``.

With world size 1 there is nothing to all-reduce: ``optimizer_step(optimizer)`` is
``optimizer.step()`` (plus a sync with ``barrier=True``), as torch_xla's is on one device.
"""
import collections.abc
import sys
import warnings

import torch

from axle import _C

from .. import runtime
from ..torch_xla import device as _device
from ..torch_xla import sync as _sync
from ._xm_dist import (REDUCE_MAX, REDUCE_MEAN, REDUCE_MIN, REDUCE_SUM, all_gather, all_reduce, broadcast,  # noqa: F401
                       get_local_ordinal, get_ordinal, is_master_ordinal, mesh_reduce, optimization_barrier_, optimizer_step,
                       reduce_gradients, reduce_scatter, rendezvous, xrt_world_size)

__all__ = ["xla_device", "mark_step", "optimizer_step", "get_memory_info", "save", "is_master_ordinal",
           "master_print", "xrt_world_size", "get_ordinal", "get_local_ordinal", "wait_device_ops",
           "is_xla_tensor", "get_xla_supported_devices", "xla_device_hw", "set_rng_state"]


def _deprecated(old, new):
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def xla_device(n=None, devkind=None):
    """Old name of ``torch_xla.device()`` (DeprecationWarning)."""
    _deprecated("torch_xla.core.xla_model.xla_device()", "torch_xla.device()")
    return _device(n)


def get_xla_supported_devices(devkind=None, max_devices=None):
    """The xla devices of this process: ``['xla:0']``."""
    return ["xla:0"]


def xla_device_hw(device):
    """The hardware behind an xla device: 'CPU'."""
    return runtime.device_type()


def is_xla_tensor(tensor):
    return tensor.device.type == "xla"










def master_print(*args, fd=None, local=False, flush=False):
    """``print`` (to ``fd``, default sys.stdout) on the master process only (this one)."""
    if is_master_ordinal(local=local):
        print(*args, file=sys.stdout if fd is None else fd, flush=flush)


def mark_step(wait=False, reset_scope=True):
    """Old step boundary (DeprecationWarning: use ``torch_xla.sync()`` or ``torch_xla.step()``).

    Inside a ``torch_xla.step()`` block it raises: the step already marks the boundary, and mixing
    the two cuts each step twice (the seed's anti-pattern).
    """
    _deprecated("torch_xla.core.xla_model.mark_step()", "torch_xla.sync() or the torch_xla.step() context manager")
    try:
        _C._mark_step()
    except _C.AxleError as e:
        if "[mark_step]" not in str(e):
            raise
        raise _C.AxleError(f"{e}. From Python: xm.mark_step() was called inside a `with torch_xla.step():` block, "
                           "which syncs on exit already; remove the mark_step() (or use torch_xla.sync() "
                           "outside any step() block)") from None
    if wait:
        _C._wait_device_ops()


def wait_device_ops(devices=[]):
    """Waits for every graph handed to the device to finish (asynchronous execution)."""
    _C._wait_device_ops()



def get_memory_info(device=None):
    """The device's memory, with torch_xla's keys: ``bytes_used`` (live buffers now),
    ``bytes_limit`` (what the device can hold: the machine's RAM for axle's CPU device) and
    ``peak_bytes_used``."""
    return dict(_C._memory_info())


def set_rng_state(seed, device=None):
    """Seeds the xla device's generator."""
    _C._manual_seed(int(seed) % (1 << 64))


def _to_cpu(data, memo):
    """``data`` with every xla tensor replaced by a cpu copy (containers rebuilt, shared tensors
    copied once)."""
    if isinstance(data, torch.Tensor):
        if data.device.type != "xla":
            return data
        key = id(data)
        if key not in memo:
            cpu = data.detach().cpu()
            if isinstance(data, torch.nn.Parameter):
                cpu = torch.nn.Parameter(cpu, requires_grad=data.requires_grad)
            elif data.requires_grad:
                cpu.requires_grad_(True)
            memo[key] = (data, cpu)  # keep `data` alive so its id stays unique
        return memo[key][1]
    if isinstance(data, dict):
        items = [(k, _to_cpu(v, memo)) for k, v in data.items()]
        try:
            out = type(data)(items)
        except TypeError:  # a dict subclass whose constructor differs (defaultdict ...)
            out = dict(items)
        return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_to_cpu(v, memo) for v in data))
    if isinstance(data, (list, tuple, set, frozenset)):
        return type(data)(_to_cpu(v, memo) for v in data)
    if isinstance(data, collections.abc.Mapping):
        return {k: _to_cpu(v, memo) for k, v in data.items()}
    return data


def save(data, file_or_path, master_only=True, global_master=False):
    """Saves ``data`` (any nesting of lists, tuples, dicts ... holding tensors) with ``torch.save``
    after moving every xla tensor to the cpu: one sync runs what is pending, then each tensor is
    copied to the host, so a later ``torch.load`` gives cpu tensors. ``master_only``: only the
    master process writes (with one process, this one)."""
    should_write = not master_only or is_master_ordinal(local=not global_master)
    if not should_write:
        return
    _sync()
    torch.save(_to_cpu(data, {}), file_or_path)
