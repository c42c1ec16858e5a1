"""torch_xla.runtime (xr): the runtime's shape. Each process of a torch_xla.launch job has one
device, xla:0; world_size / global_ordinal / local_ordinal come from the launch (1 / 0 / 0
alone); under SPMD (use_spmd) one process drives global_runtime_device_count() devices."""

__all__ = ["device_type", "world_size", "global_ordinal", "local_ordinal", "addressable_device_count",
           "global_device_count", "local_device_count", "global_runtime_device_count",
           "addressable_runtime_device_count", "local_process_count", "process_index", "process_count",
           "host_index", "is_spmd", "use_spmd", "using_pjrt", "xla_device"]

from ._spmd_runtime import (addressable_runtime_device_count, global_runtime_device_count, is_spmd,  # noqa: E402
                            use_spmd)
from .core._xm_dist import global_ordinal, local_ordinal, world_size  # noqa: E402


def device_type():
    """The hardware behind the ``xla`` device: axle runs its graphs on the CPU."""
    return "CPU"








def addressable_device_count():
    """Devices this process addresses: 1 (xla:0)."""
    return 1


def global_device_count():
    return 1


def local_device_count():
    return 1






def local_process_count():
    return 1


def process_index():
    return 0


def process_count():
    return 1


def host_index():
    return 0




def using_pjrt():
    return True


def xla_device(n=None, devkind=None):
    """The xla device (``xla:0``)."""
    from .torch_xla import device

    return device(n)


