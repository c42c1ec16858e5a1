"""``torch_xla.distributed.fsdp``: FSDP v1 (one process per device) on axle.

``XlaFullyShardedDataParallel`` (also ``FullyShardedDataParallel``), the auto-wrap policies of
``.wrap``, and consolidation of the per-rank checkpoints into one state dict. FSDP v2 (SPMD) is
``torch_xla.experimental.spmd_fully_sharded_data_parallel``.
"""
from .state_dict_utils import consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts
from .wrap import (always_wrap_policy, lambda_auto_wrap_policy, size_based_auto_wrap_policy,  # noqa: F401
                   transformer_auto_wrap_policy)
from .xla_fully_sharded_data_parallel import XlaFullyShardedDataParallel

FullyShardedDataParallel = XlaFullyShardedDataParallel

__all__ = ["XlaFullyShardedDataParallel", "FullyShardedDataParallel", "consolidate_sharded_model_checkpoints",
           "consolidate_sharded_state_dicts"]
