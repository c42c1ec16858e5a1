"""torch_xla.distributed.spmd (``import torch_xla.distributed.spmd as xs``): SPMD sharding over
axle's C++ partitioner. See xla_sharding.py for the API and its differences from torch_xla."""
from .xla_sharding import (  # noqa: F401
    Mesh, PartitionSpec, ShardingSpec, ShardingType, XLAShard, XLAShardedTensor, check_input_sharding,
    clear_sharding, disable_manual_sharding, enable_manual_sharding, explain, get_1d_mesh, get_global_mesh,
    inferred_sharding, mark_sharding, mark_sharding_with_gradients, set_global_mesh, shard_batch,
    wrap_as_sharded_tensor)
from .debugging import visualize_sharding, visualize_tensor_sharding  # noqa: F401
from . import debugging  # noqa: F401

__all__ = ["Mesh", "PartitionSpec", "ShardingSpec", "ShardingType", "XLAShard", "XLAShardedTensor", "check_input_sharding",
           "clear_sharding", "disable_manual_sharding", "enable_manual_sharding", "explain", "get_1d_mesh",
           "get_global_mesh", "inferred_sharding", "mark_sharding", "mark_sharding_with_gradients", "set_global_mesh",
           "shard_batch", "wrap_as_sharded_tensor", "visualize_sharding", "visualize_tensor_sharding", "debugging"]
