"""The SPMD part of ``torch_xla.runtime`` (xr), over axle's C++ runtime (``axle/xs.h``).

``torch_xla/runtime.py`` re-exports these names::

    from ._spmd_runtime import (use_spmd, is_spmd, global_runtime_device_count,
                                addressable_runtime_device_count)

Devices: ``AXLE_CPU_DEVICES=N`` gives this process N virtual CPU devices; ``CPU_NUM_DEVICES=N``
and ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` are read too (two that disagree are an
error naming both; each must be an integer 1..4096). The count is read once, at its first use.
Under SPMD there is still one logical device, ``xla:0``; ``world_size()`` stays 1, so
``xm.optimizer_step`` does not all-reduce (the partitioner inserts the collectives).
"""
import axle

_spmd = axle._C._spmd

__all__ = ["use_spmd", "is_spmd", "global_runtime_device_count", "addressable_runtime_device_count"]


def use_spmd(auto: bool = False):
    """Turns SPMD on: one process, one logical device ``xla:0`` backed by every virtual device
    (``global_runtime_device_count()`` of them). Call it before putting tensors on the device:
    tensors already there become replicated (with a warning). ``auto=True`` (XLA's
    auto-sharding) is not implemented by axle."""
    if auto:
        raise NotImplementedError("use_spmd(auto=True): axle does not implement auto-sharding; annotate tensors "
                                  "with torch_xla.distributed.spmd.mark_sharding instead")
    _spmd.use_spmd(False)


def is_spmd() -> bool:
    """True after ``use_spmd()``, or when ``AXLE_USE_SPMD=1`` (``XLA_USE_SPMD=1`` accepted)."""
    return bool(_spmd.is_spmd())


def global_runtime_device_count() -> int:
    """The virtual devices of this process (``AXLE_CPU_DEVICES`` / ``CPU_NUM_DEVICES`` /
    ``XLA_FLAGS=--xla_force_host_platform_device_count``; 1 when none is set). One host: the
    global count is the addressable one."""
    return int(_spmd.global_runtime_device_count())


def addressable_runtime_device_count() -> int:
    """The virtual devices this process addresses: every one (axle's SPMD is single-host)."""
    return int(_spmd.addressable_runtime_device_count())
