"""torch_xla.experimental.xla_sharding: the old home (torch_xla 2.1) of torch_xla.distributed.spmd's
sharding API; the same names, with a DeprecationWarning."""
import warnings

from ..distributed.spmd import *  # noqa: F401,F403
from ..distributed.spmd import __all__  # noqa: F401

warnings.warn("torch_xla.experimental.xla_sharding is deprecated: import torch_xla.distributed.spmd as xs",
              DeprecationWarning, stacklevel=2)
