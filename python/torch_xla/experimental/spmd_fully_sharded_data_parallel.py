"""torch_xla.experimental.spmd_fully_sharded_data_parallel: FSDPv2, FSDP as annotations on
axle's SPMD partitioner (the Python face of ``axle::fsdp::SpmdFullyShardedDataParallel``).

    xr.use_spmd()
    mesh = xs.Mesh(np.arange(n), (n, 1), ('fsdp', 'model'))
    model = FSDPv2(model, mesh=mesh)                   # parameters split over 'fsdp'
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # each step: x sharded ('fsdp', None, ...), then as on one device

Every parameter not annotated yet gets its largest dim (the first on a tie) split over
``fsdp``; the output of the module (and of each unit ``auto_wrap_policy`` picks) gets dim 0
split over ``fsdp`` (``(extra_data_axis, 'fsdp')`` with ``extra_data_axis``), or whatever
``shard_output(output, mesh)`` does. With the batch and outputs split on ``fsdp`` and the weights
split, axle's partitioner derives FSDP: each weight is all-gathered where a dot reads it and
each weight gradient is reduce-scattered into the weight's tiling (``xs.explain`` lists them).

Differences from torch_xla: no backward optimization barriers
(``apply_backward_optimization_barrier`` is not implemented by axle); ``auto_wrap_policy`` is
any callable ``policy(module, recurse, nonwrapped_numel) -> bool`` (torch's
``transformer_auto_wrap_policy`` / ``size_based_auto_wrap_policy`` through functools.partial, or
``transformer_auto_wrap_policy`` here).
"""
import functools
import warnings
from typing import Any, Callable, Optional

import torch
import torch.nn as nn

import torch_xla.distributed.spmd as spmd

__all__ = ["SpmdFullyShardedDataParallel", "transformer_auto_wrap_policy", "_prepare_spmd_partition_spec"]


def _prepare_spmd_partition_spec(param, extra_data_axis=None, shard_maximal=False):
    """The partition spec FSDPv2 gives a tensor: dim 0 (or, with ``shard_maximal``, the largest
    dim, the first on a tie) over 'fsdp', or over (extra_data_axis, 'fsdp'); scalars replicated."""
    shape = tuple(param.shape)
    spec = [None] * len(shape)
    if not spec:
        return ()
    index = shape.index(max(shape)) if shard_maximal else 0
    spec[index] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
    return tuple(spec)


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel=0, transformer_layer_cls=()):
    """Wraps each module that is an instance of one of ``transformer_layer_cls`` (use with
    functools.partial, as torch_xla's and torch's policy of the same name)."""
    if recurse:
        return True
    return isinstance(module, tuple(transformer_layer_cls))


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def _recursive_wrap(module, policy, wrap):
    """Wraps module's descendants that ``policy`` picks (children first); returns the wrapped
    parameter count."""
    wrapped = 0
    for name, child in list(module.named_children()):
        if isinstance(child, SpmdFullyShardedDataParallel):
            continue
        if policy(module=child, recurse=True, nonwrapped_numel=_numel(child)):
            wrapped += _recursive_wrap(child, policy, wrap)
            remaining = _numel(child) - wrapped
            if policy(module=child, recurse=False, nonwrapped_numel=remaining):
                setattr(module, name, wrap(child))
    return wrapped


class SpmdFullyShardedDataParallel(nn.Module):
    """FSDP through SPMD annotations (see the module doc). ``mesh`` (default: the global mesh)
    must have an axis named 'fsdp'."""

    def __init__(self, module: nn.Module, *, mesh: Optional[spmd.Mesh] = None,
                 shard_output: Optional[Callable] = None, auto_wrap_policy: Optional[Callable] = None,
                 auto_wrapper_callable: Optional[Callable] = None, extra_data_axis: Optional[str] = None):
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, first wrap "
                               "the inner child modules before wrapping the outer parent module.")
        forward = getattr(type(module), "forward", None)
        if forward is None or forward is nn.Module.forward:
            raise RuntimeError("The module wrapped by FSDP must define a `forward` method and call it during the "
                               "module's forward pass: do not wrap nn.ModuleList or nn.ModuleDict.")
        if mesh is None:
            mesh = spmd.get_global_mesh()
            if mesh is None:
                raise ValueError("No mesh is provided and no global mesh is set. Please provide a mesh "
                                 "(mesh=... or xs.set_global_mesh(mesh)).")
        names = tuple(mesh.axis_names or ())
        if "fsdp" not in names:
            raise ValueError(f"The mesh must have an axis named 'fsdp'; its axes are {names or 'unnamed'}.")
        if extra_data_axis and extra_data_axis not in names:
            raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh (axes {names}).")
        super().__init__()

        if auto_wrap_policy is not None:
            cls = auto_wrapper_callable or SpmdFullyShardedDataParallel
            wrap = functools.partial(cls, mesh=mesh, shard_output=shard_output, extra_data_axis=extra_data_axis)
            _recursive_wrap(module, auto_wrap_policy, wrap)

        self._orig_module = module.to("xla")
        self._mesh = mesh
        from torch_xla import _XLAC

        for param in module.parameters():
            if _XLAC._get_xla_sharding_spec(param) != "":
                continue  # a unit's parameters, or annotated by the user
            spmd.mark_sharding(param, mesh, _prepare_spmd_partition_spec(param, shard_maximal=True))

        if shard_output is None:
            def shard_output(output, mesh):
                real = None
                if isinstance(output, torch.Tensor):
                    real = output
                elif isinstance(output, tuple):
                    real = output[0] if output and isinstance(output[0], torch.Tensor) else None
                    warnings.warn("The output is a tuple, but only the first element is sharded. If this is not "
                                  "intended, please provide your own shard_output callable.")
                if real is None:
                    raise RuntimeError(f"The output type is not supported: {type(output)}. Please provide your own "
                                       "shard_output callable.")
                spmd.mark_sharding(real, mesh, _prepare_spmd_partition_spec(real, extra_data_axis))
        self._shard_output = shard_output

    @property
    def module(self) -> nn.Module:
        """The wrapped module (as DDP's ``.module``)."""
        return self._orig_module

    def forward(self, *args: Any, **kwargs: Any):
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key):
        return self.module.__getitem__(key)
