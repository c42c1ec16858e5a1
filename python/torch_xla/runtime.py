"""torch_xla.runtime (xr): the runtime's shape. axle runs one process with one device: the
process is the master, its ordinal is 0 and the world has one member. Multi-process runs
(torch_xla.launch) come with the distributed work."""

__all__ = ["device_type", "world_size", "global_ordinal", "local_ordinal", "addressable_device_count",
           "global_device_count", "local_device_count", "global_runtime_device_count",
           "addressable_runtime_device_count", "local_process_count", "process_index", "process_count",
           "host_index", "is_spmd", "using_pjrt", "xla_device"]


def device_type():
    """The hardware behind the ``xla`` device: axle runs its graphs on the CPU."""
    return "CPU"


def world_size():
    """Processes taking part in the replication: 1."""
    return 1


def global_ordinal():
    """This process's rank among all processes: 0."""
    return 0


def local_ordinal():
    """This process's rank on its host: 0."""
    return 0


def addressable_device_count():
    """Devices this process addresses: 1 (xla:0)."""
    return 1


def global_device_count():
    return 1


def local_device_count():
    return 1


def global_runtime_device_count():
    return 1


def addressable_runtime_device_count():
    return 1


def local_process_count():
    return 1


def process_index():
    return 0


def process_count():
    return 1


def host_index():
    return 0


def is_spmd():
    """SPMD is not on in this single-process API."""
    return False


def using_pjrt():
    return True


def xla_device(n=None, devkind=None):
    """The xla device (``xla:0``)."""
    from .torch_xla import device

    return device(n)


