"""torch_xla's API over axle: the seed's torch_xla programs run unchanged on axle's lazy device.

Single-process API (one process, one device ``xla:0``):

- ``torch_xla.device()``, ``devices()``, ``device_count()``, ``sync()``, ``step()``,
  ``compile(fn, full_graph=, name=, max_different_graphs=)``, ``manual_seed()``;
- ``torch_xla.experimental.eager_mode(bool)`` / ``is_eager_mode()``;
- ``torch_xla.core.xla_model`` (xm), ``torch_xla.distributed.parallel_loader`` (pl),
  ``torch_xla.debug.metrics`` (met), ``torch_xla.runtime`` (xr).

Importing it loads ``axle`` (version checks, the ``xla`` device, and the torch patches:
``torch.manual_seed`` seeds the device; pickling an xla tensor says to use ``.cpu()`` or
``xm.save``).
"""
import axle  # noqa: F401  (checks the environment, loads the device)

from .torch_xla import compile, device, device_count, devices, manual_seed, step, sync  # noqa: F401
from . import experimental  # noqa: F401,E402  (torch_xla.experimental.eager_mode without an import)
from . import runtime  # noqa: F401,E402
from . import _XLAC  # noqa: F401,E402  (torch_xla._XLAC._get_xla_sharding_spec after `import torch_xla`)
from ._launch import launch  # noqa: F401,E402
from .distributed import xla_multiprocessing as _xmp  # noqa: F401,E402  (mp.spawn makes xla ranks, deprecated)

__all__ = ["device", "devices", "device_count", "sync", "step", "compile", "manual_seed", "experimental",
           "runtime", "launch"]
