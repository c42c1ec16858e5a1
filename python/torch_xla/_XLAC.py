"""torch_xla._XLAC: the few private calls of torch_xla's C extension that user code and tests
use, over axle (``axle._C``). Only the SPMD inspection calls are here:

- ``_get_xla_sharding_spec(t)``: ``''`` for an unannotated tensor, else the HLO sharding text,
  the same strings as torch_xla's (``{devices=[4,1,1,1]0,1,2,3}``, ``{replicated}``,
  ``{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}``, ``{manual}``);
- ``_get_xla_sharding_specs(tensors)``, ``_get_xla_sharding_type(t)`` (``None`` or the
  ``ShardingType`` int), ``_get_xla_tensor_debug_info(t)``.

A cpu tensor reports ``''`` and ``None``.
"""
import axle

_spmd = axle._C._spmd

__all__ = ["_get_xla_sharding_spec", "_get_xla_sharding_specs", "_get_xla_sharding_type",
           "_get_xla_tensor_debug_info"]


def _get_xla_sharding_spec(t) -> str:
    return _spmd.sharding_spec(t)


def _get_xla_sharding_specs(tensors):
    return [_spmd.sharding_spec(t) for t in tensors]


def _get_xla_sharding_type(t):
    return _spmd.sharding_type(t)


def _get_xla_tensor_debug_info(t) -> str:
    return _spmd.debug_info(t)
