"""torch_xla.distributed.spmd's sharding API over axle's C++ SPMD (``axle/xs.h``).

One process drives every virtual device (``AXLE_CPU_DEVICES=N``). A ``Mesh`` names the devices'
axes, a partition spec maps each tensor dim to mesh axes, and ``mark_sharding`` puts the
sharding on the xla tensor's axle value: device data is split at once into one (padded) shard
per device; a pending value gets a sharding constraint in its graph. At the step boundary axle's
partitioner turns the step's graph into one local program per device, with the collectives the
shardings require. Nothing is partitioned in Python.

    import torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ('data', 'model'))
    xs.mark_sharding(images, mesh, ('data', None, None, None))
    torch_xla._XLAC._get_xla_sharding_spec(images)     # '{devices=[4,1,1,1]0,1,2,3}'

Differences from torch_xla:

- ``mark_sharding`` and ``enable_manual_sharding`` return the (xla) tensor itself, not an
  ``XLAShardedTensor`` (a DTensor subclass); ``wrap_as_sharded_tensor(t)`` gives the small
  ``XLAShardedTensor`` here (``sharding_spec``, ``sharding_type``, ``local_shards``,
  ``load_local_shards_``).
- Errors in meshes and specs are axle's (``axle._C.AxleError``, a ``RuntimeError``), each
  naming what is wrong, where torch_xla asserts; Python type errors are ``TypeError``.
- The annotation lives on the lazy value an xla tensor holds; tensors that share that value
  (``clone()`` / ``detach()`` of data not yet changed) share its annotation.
"""
import collections
import dataclasses
import enum
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
import torch

import axle

_spmd = axle._C._spmd

__all__ = ["Mesh", "get_1d_mesh", "set_global_mesh", "get_global_mesh", "mark_sharding",
           "mark_sharding_with_gradients", "clear_sharding", "ShardingSpec", "ShardingType",
           "enable_manual_sharding", "disable_manual_sharding", "XLAShard", "XLAShardedTensor",
           "wrap_as_sharded_tensor", "explain", "inferred_sharding", "shard_batch", "check_input_sharding",
           "PartitionSpec"]

PartitionSpec = Tuple[Union[None, str, int, Tuple[Union[str, int], ...]], ...]


class ShardingType(enum.IntEnum):
    """torch_xla's sharding types (``_get_xla_sharding_type`` returns these ints)."""
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def _require_spmd(op):
    if not _spmd.is_spmd():
        raise RuntimeError(f"[{op}] Please enable SPMD via torch_xla.runtime.use_spmd()")


def _require_xla(t, op):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"[{op}] expected a torch.Tensor on the xla device, got {type(t).__name__}")
    if t.device.type != "xla":
        raise ValueError(f"[{op}] expected a tensor on the xla device, got one on {t.device} "
                         f"(move it first: t.to(torch_xla.device()))")


def _spec_tuple(partition_spec, op):
    if isinstance(partition_spec, (str, bytes)) or not isinstance(partition_spec, Sequence):
        raise TypeError(f"[{op}] partition_spec must be a tuple with one entry per tensor dim (None, a mesh axis "
                        f"name or index, or a tuple of them), got {partition_spec!r}")

    def norm(e):
        if isinstance(e, (list, tuple)):
            return tuple(norm(a) for a in e)
        if isinstance(e, np.integer):  # np.int64 from np.arange: an axis index
            return int(e)
        return e

    return tuple(norm(e) for e in partition_spec)


class Mesh:
    """A logical mesh of devices: ``device_ids`` reshaped row-major to ``mesh_shape``, each axis
    named by ``axis_names``. As in torch_xla, a mesh uses every device: as many ids as
    ``global_runtime_device_count()``, unique, each below the mesh size."""

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        ids = np.asarray(device_ids)
        if ids.ndim != 1:
            raise ValueError(f"[Mesh] device_ids must be a flat sequence of device ids, got an array of shape "
                             f"{ids.shape} (pass ids.flatten() and the shape as mesh_shape)")
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"[Mesh] device_ids must be integers, got {ids.dtype}")
        self.device_ids = ids.astype(np.int64)
        self.mesh_shape = tuple(int(s) for s in mesh_shape)
        if axis_names is not None:
            axis_names = tuple(axis_names)
            for a in axis_names:
                if not isinstance(a, str):
                    raise TypeError(f"[Mesh] axis names must be strings, got {a!r} in {axis_names!r}")
        self.axis_names = axis_names
        _spmd.check_mesh(self._ids(), list(self.mesh_shape), None if axis_names is None else list(axis_names))

    def _ids(self):
        return [int(i) for i in self.device_ids]

    def _args(self):
        """The mesh as axle._C._spmd's calls take it."""
        return (self._ids(), list(self.mesh_shape), None if self.axis_names is None else list(self.axis_names))

    def size(self) -> int:
        return int(np.prod(self.mesh_shape))

    def shape(self):
        """An OrderedDict axis name (or index, for an unnamed mesh) -> size."""
        if self.axis_names is None:
            return collections.OrderedDict(enumerate(self.mesh_shape))
        return collections.OrderedDict(zip(self.axis_names, self.mesh_shape))

    def get_logical_mesh(self) -> np.ndarray:
        """The device ids as an array of shape ``mesh_shape``."""
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name: str) -> Optional[int]:
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def __str__(self):
        return _spmd.mesh_str(self._args())

    __repr__ = __str__

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self._ids() == other._ids() and self.mesh_shape == other.mesh_shape
                and self.axis_names == other.axis_names)

    def __hash__(self):
        return hash((tuple(self._ids()), self.mesh_shape, self.axis_names))

    @classmethod
    def from_str(cls, mesh_str: str) -> Optional["Mesh"]:
        """Reads ``str(mesh)`` back; None for text that is not a mesh."""
        import ast
        import re

        m = re.fullmatch(r"\s*Mesh\(device_ids=(\[.*?\]), mesh_shape=(\(.*?\)), axis_names=(None|\(.*\))\)\s*", mesh_str)
        if not m:
            return None
        try:
            ids, shape, names = (ast.literal_eval(g) for g in m.groups())
        except (ValueError, SyntaxError):
            return None
        return cls(ids, shape, names)


def get_1d_mesh(axis_name: Optional[str] = None) -> Mesh:
    """A mesh of every device along one axis: ``Mesh(range(n), (n,), (axis_name,))``."""
    n = int(_spmd.global_runtime_device_count())
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


_global_mesh: Optional[Mesh] = None


def set_global_mesh(mesh: Optional[Mesh]):
    """The mesh FSDPv2 and manual sharding use when none is given (also axle's C++ global mesh)."""
    global _global_mesh
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"[set_global_mesh] expected a Mesh, got {type(mesh).__name__}")
    _global_mesh = mesh
    _spmd.set_global_mesh(None if mesh is None else mesh._args())


def get_global_mesh() -> Optional[Mesh]:
    return _global_mesh


def _mesh_or_global(mesh, op) -> Mesh:
    if mesh is None:
        mesh = _global_mesh
        if mesh is None:
            raise RuntimeError(f"[{op}] no mesh given and no global mesh set (xs.set_global_mesh(mesh))")
    if not isinstance(mesh, Mesh):
        raise TypeError(f"[{op}] expected a torch_xla.distributed.spmd.Mesh, got {type(mesh).__name__}")
    return mesh


def _unwrap(t):
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec, use_dynamo_custom_op: bool = False):
    """Shards ``t`` (an xla tensor) over ``mesh`` by ``partition_spec``, in place, and returns it.

    ``partition_spec`` has one entry per dim of ``t``: None (replicated), a mesh axis name
    (str) or index (int), or a tuple of them (the dim split over all of them, major first).
    Each mesh axis is used at most once; unused axes replicate. Data on the device is split at
    once (one padded shard per device); a pending value gets a constraint in its graph.
    Re-marking with the same sharding is a no-op; a sharded tensor must be cleared
    (``clear_sharding``) before another sharding; a replicated one may be re-marked."""
    t = _unwrap(t)
    _require_xla(t, "mark_sharding")
    _require_spmd("mark_sharding")
    if not isinstance(mesh, Mesh):
        raise TypeError(f"[mark_sharding] expected a torch_xla.distributed.spmd.Mesh, got {type(mesh).__name__}")
    spec = _spec_tuple(partition_spec, "mark_sharding")
    _spmd.mark_sharding(t, mesh._args(), spec)
    return t


class _MarkShardingWithGradients(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, mesh_args, spec):
        ctx.mesh_args, ctx.spec = mesh_args, spec
        return _spmd.sharding_constraint(t, mesh_args, spec)

    @staticmethod
    def backward(ctx, grad):
        return _spmd.sharding_constraint(grad, ctx.mesh_args, ctx.spec), None, None


def mark_sharding_with_gradients(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec):
    """A new tensor equal to ``t`` constrained to the sharding, with the same constraint on its
    gradient in backward (torch_xla's MarkShardingFunction)."""
    t = _unwrap(t)
    _require_xla(t, "mark_sharding_with_gradients")
    _require_spmd("mark_sharding_with_gradients")
    mesh = _mesh_or_global(mesh, "mark_sharding_with_gradients")
    return _MarkShardingWithGradients.apply(t, mesh._args(), _spec_tuple(partition_spec, "mark_sharding_with_gradients"))


def clear_sharding(t: torch.Tensor):
    """Drops ``t``'s annotation (sharded data is gathered back into one buffer); returns ``t``.
    Afterwards ``_get_xla_sharding_spec(t)`` is ``''``."""
    t = _unwrap(t)
    _require_xla(t, "clear_sharding")
    _spmd.clear_sharding(t)
    return t


@dataclasses.dataclass
class ShardingSpec:
    """A sharding to apply to tensors later (``MpDeviceLoader(..., input_sharding=...)``).
    It applies to tensors whose rank equals ``len(partition_spec)``; the loader sends the
    others replicated. ``minibatch=True``: each host loads its own slice of the global batch
    (one host here, so the batch must only divide by the device count)."""
    mesh: Mesh
    partition_spec: PartitionSpec
    minibatch: Optional[bool] = False

    def __post_init__(self):
        if not isinstance(self.mesh, Mesh):
            raise TypeError(f"[ShardingSpec] expected a torch_xla.distributed.spmd.Mesh, got {type(self.mesh).__name__}")
        self.partition_spec = _spec_tuple(self.partition_spec, "ShardingSpec")
        # The spec's own checks (axes known, each used once), as a tensor of its rank would get them.
        self._sharding = _spmd.check_spec(len(self.partition_spec), self.mesh._args(), self.partition_spec)

    def can_apply(self, t: torch.Tensor) -> bool:
        return len(t.shape) == len(self.partition_spec)

    def xla_spec(self, t: torch.Tensor) -> Optional[str]:
        """The sharding string ``t`` would get, or None when the spec does not apply to it."""
        return self._sharding if self.can_apply(t) else None

    def apply(self, t: torch.Tensor):
        _require_xla(t, "ShardingSpec.apply")
        mark_sharding(t, self.mesh, self.partition_spec)


def enable_manual_sharding(t: torch.Tensor, partition_spec: PartitionSpec, *, mesh: Optional[Mesh] = None):
    """Marks ``t`` with ``partition_spec`` on ``mesh`` (default: the global mesh) and returns its
    local shard as a tensor of the local shape: ops on it run as written on every device's
    shard, unpartitioned (torch_xla's manual sharding / shard_map). End the region with
    ``disable_manual_sharding``."""
    t = _unwrap(t)
    _require_xla(t, "enable_manual_sharding")
    _require_spmd("enable_manual_sharding")
    mesh = _mesh_or_global(mesh, "enable_manual_sharding")
    return _spmd.enable_manual_sharding(t, _spec_tuple(partition_spec, "enable_manual_sharding"), mesh._args())


def disable_manual_sharding(t: torch.Tensor, partition_spec: PartitionSpec, full_shape, *,
                            mesh: Optional[Mesh] = None):
    """Brings a manual tensor (local shards) back to a global tensor of ``full_shape`` sharded
    by ``partition_spec``."""
    t = _unwrap(t)
    _require_xla(t, "disable_manual_sharding")
    _require_spmd("disable_manual_sharding")
    mesh = _mesh_or_global(mesh, "disable_manual_sharding")
    return _spmd.disable_manual_sharding(t, _spec_tuple(partition_spec, "disable_manual_sharding"),
                                         [int(s) for s in full_shape], mesh._args())


def explain(*tensors) -> str:
    """axle's table of the collectives the partitioner inserts to compute ``tensors`` (what
    ``AXLE_DEBUG=1`` prints per new graph); runs nothing for pending tensors."""
    _require_spmd("explain")
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    return _spmd.explain([_unwrap(t) for t in tensors])


def inferred_sharding(t: torch.Tensor) -> str:
    """The sharding the compiler will give ``t`` (pending or not), without running anything."""
    _require_spmd("inferred_sharding")
    return _spmd.inferred_sharding(_unwrap(t))


# ---- shards (XLAShardedTensor's inspection) ----

@dataclasses.dataclass
class XLAShard:
    """One device's piece of a sharded tensor: ``data`` (cpu, padded), ``indices`` (a tuple of
    slices into the global tensor, or ``Ellipsis`` for a replicated shard), ``shard_device``
    (``'CPU:2'``) and ``replica_id``."""
    data: torch.Tensor
    indices: Any
    shard_device: str
    replica_id: int

    @property
    def unpadded_data(self) -> torch.Tensor:
        if self.indices is Ellipsis:
            return self.data
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]


class XLAShardedTensor:
    """A view of a sharded xla tensor (``global_tensor``) with torch_xla's inspection
    properties. Not a ``torch.Tensor`` subclass here: ops go to ``global_tensor``."""

    def __init__(self, global_tensor: torch.Tensor):
        _require_xla(global_tensor, "XLAShardedTensor")
        self.global_tensor = global_tensor

    @property
    def sharding_spec(self) -> str:
        return _spmd.sharding_spec(self.global_tensor)

    @property
    def sharding_type(self) -> Optional[ShardingType]:
        k = _spmd.sharding_type(self.global_tensor)
        return None if k is None else ShardingType(k)

    @property
    def local_shards(self):
        _require_spmd("local_shards")
        out = []
        for data, idx, dev, rid in _spmd.local_shards(self.global_tensor):
            indices = Ellipsis if idx is None else tuple(slice(a, b) for a, b in idx)
            out.append(XLAShard(data, indices, dev, rid))
        return out

    def load_local_shards_(self, shards):
        """Replaces the data with ``shards`` (one per device, padded shapes as ``local_shards``
        gives); not allowed on replicated tensors."""
        _require_spmd("load_local_shards_")
        _spmd.load_local_shards_(self.global_tensor, [s.data if isinstance(s, XLAShard) else s for s in shards])

    def __repr__(self):
        return f"XLAShardedTensor({self.sharding_spec or 'unannotated'}, shape={tuple(self.global_tensor.shape)})"


def wrap_as_sharded_tensor(t) -> XLAShardedTensor:
    return t if isinstance(t, XLAShardedTensor) else XLAShardedTensor(t)


# ---- the loader's input_sharding ----

def check_input_sharding(input_sharding):
    """Checks an ``input_sharding`` when a loader is built: None, a ``ShardingSpec``, or a dict
    of them (one per batch key); SPMD must be on."""
    if input_sharding is None:
        return
    specs = input_sharding.values() if isinstance(input_sharding, dict) else [input_sharding]
    for s in specs:
        if not isinstance(s, ShardingSpec):
            raise TypeError(f"[MpDeviceLoader] input_sharding must be a ShardingSpec or a dict of them, got "
                            f"{type(s).__name__}")
    if not _spmd.is_spmd():
        raise RuntimeError("[MpDeviceLoader] input_sharding needs SPMD: call torch_xla.runtime.use_spmd() first")


def _send(data, spec: Optional[ShardingSpec]):
    """Every tensor in ``data`` (any nesting of list/tuple/namedtuple/dict) on the device, sharded by
    ``spec`` when its rank fits, else replicated on the spec's mesh."""
    tensors = []

    def collect(x):
        if isinstance(x, torch.Tensor):
            tensors.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                collect(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)

    collect(data)
    if not tensors:
        return data
    if spec is None and _spmd.is_spmd():
        # Under SPMD the batch arrives replicated ('{replicated}'), as torch_xla's loader sends it
        # (test_mp_input_sharding.py, test_input_sharding_none): a rank-0 spec fits no batch tensor.
        spec = ShardingSpec(get_1d_mesh(), ())
    mesh = None if spec is None else spec.mesh._args()
    pspec = () if spec is None else spec.partition_spec
    minibatch = bool(spec.minibatch) if spec is not None else False
    moved = [None] * len(tensors)
    cpu = [i for i, t in enumerate(tensors) if t.device.type == "cpu"]
    if cpu:
        for i, m in zip(cpu, _spmd.send_cpu_data_to_device([tensors[i] for i in cpu], mesh, pspec, minibatch)):
            moved[i] = m
    for i, t in enumerate(tensors):
        if moved[i] is not None:
            continue
        if t.device.type != "xla":
            raise ValueError(f"[shard_batch] expected cpu or xla tensors, got one on {t.device}")
        if spec is not None:
            mark_sharding(t, spec.mesh, spec.partition_spec if spec.can_apply(t) else (None,) * t.dim())
        moved[i] = t
    it = iter(moved)

    def rebuild(x):
        if isinstance(x, torch.Tensor):
            return next(it)
        if isinstance(x, dict):
            items = [(k, rebuild(v)) for k, v in x.items()]
            try:
                return type(x)(items)
            except TypeError:
                return dict(items)
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
            return type(x)(*(rebuild(v) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(rebuild(v) for v in x)
        return x

    return rebuild(data)


def shard_batch(data, input_sharding):
    """A batch (a tensor, or any nesting of lists, tuples, namedtuples and dicts of tensors) on
    the xla device with ``input_sharding`` applied, as torch_xla's ``MpDeviceLoader`` /
    ``xm.send_cpu_data_to_device`` do:

    - ``ShardingSpec``: each tensor whose rank equals the spec's length is sharded by it; the
      others (e.g. rank-1 labels under ``('data', None, None, None)``) arrive replicated on the
      spec's mesh (``'{replicated}'``). Each cpu tensor is moved and split at once: every
      device keeps only its padded shard.
    - a dict of ``ShardingSpec``: the batch must be a dict holding those keys; each value is
      sent with its key's spec (``KeyError`` naming missing keys, ``ValueError`` for a batch
      that is not a dict).
    - None: the tensors are moved; under SPMD they arrive replicated (``'{replicated}'``), as in
      torch_xla, so a loader under SPMD should call ``shard_batch(batch, None)`` too.

    cpu tensors are moved; xla tensors are annotated in place. Safe to call from a loader's
    background thread (the moves release the GIL)."""
    if isinstance(input_sharding, dict):
        if not isinstance(data, dict):
            raise ValueError(f"[MpDeviceLoader] input_sharding is a dict (keys {sorted(input_sharding)}), so each "
                             f"batch must be a dict too, got {type(data).__name__}")
        missing = [k for k in data if k not in input_sharding]
        if missing:
            raise KeyError(f"Keys: {missing} are missing from input_sharding.")
        out = {k: _send(v, input_sharding[k]) for k, v in data.items()}
        try:
            return type(data)(out)
        except TypeError:
            return out
    if input_sharding is not None and not isinstance(input_sharding, ShardingSpec):
        raise TypeError(f"[shard_batch] input_sharding must be a ShardingSpec, a dict of them or None, got "
                        f"{type(input_sharding).__name__}")
    return _send(data, input_sharding)
