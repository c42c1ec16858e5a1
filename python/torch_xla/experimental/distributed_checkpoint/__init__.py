"""torch_xla.experimental.distributed_checkpoint over axle's distributed checkpoint
(``axle/distributed_checkpoint.h``): sharded state saved shard by shard, without gathering,
and loaded in place into whatever sharding the targets have now.

    import torch_xla.experimental.distributed_checkpoint as xc
    xc.save(model.state_dict(), "ckpt/step-100")        # sharded parameters, not gathered
    xc.load(model.state_dict(), "ckpt/step-100")        # in place: another mesh, another spec,
                                                        # unannotated or cpu tensors
    mgr = xc.CheckpointManager("ckpts", save_interval=100, max_to_keep=3)
    mgr.save_async(step, model.state_dict())            # returns once the shards are on the host
    mgr.restore(mgr.all_steps()[-1], model.state_dict())

The directory is axle's format (``metadata.json`` and ``shard-0.safetensors``; see
docs/spmd.md, "Distributed checkpoints"). Differences from torch_xla:

- torch_xla saves through ``torch.distributed.checkpoint`` (``dist_cp.save(state_dict,
  storage_writer=FileSystemWriter(dir), planner=SPMDSavePlanner())``); here ``save`` / ``load``
  take the directory directly, and ``SPMDSavePlanner`` / ``SPMDLoadPlanner`` are not provided.
- Only tensors are saved: a nested state dict (an optimizer's) is flattened to dotted names
  (``state.0.momentum_buffer``); other values (ints, floats, param_groups) are neither saved
  nor loaded.
- No checkpoint on preemption, no fsspec backends, no ``prime_optimizer`` (create the optimizer
  state with one step before loading it).
"""
import os

import torch

import axle

_spmd = axle._C._spmd

__all__ = ["save", "load", "CheckpointManager", "flatten_state_dict"]


def flatten_state_dict(state_dict, prefix=""):
    """(names, tensors): every tensor in a nested dict/list state dict, named by its dotted path."""
    names, tensors = [], []

    def walk(x, path):
        if isinstance(x, torch.Tensor):
            names.append(path)
            tensors.append(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}.{i}" if path else str(i))

    walk(state_dict, prefix)
    return names, tensors


def _dir(path):
    return os.fspath(path)


def save(state_dict, checkpoint_dir):
    """Writes every tensor of ``state_dict`` (xla tensors, sharded or not, and cpu tensors) to the
    directory ``checkpoint_dir``: each replica-0 shard once, without padding. Syncs pending work
    first; the directory appears whole or not at all."""
    names, tensors = flatten_state_dict(state_dict)
    _spmd.dc_save(names, tensors, _dir(checkpoint_dir))


def load(state_dict, checkpoint_dir):
    """Loads every tensor of ``state_dict`` from ``checkpoint_dir`` in place, into its current
    device and sharding. Names missing from the checkpoint, or another shape or dtype, are an
    error naming them (checked before any tensor changes); extra checkpoint tensors are ignored."""
    names, tensors = flatten_state_dict(state_dict)
    _spmd.dc_load(names, tensors, _dir(checkpoint_dir))


class CheckpointManager:
    """Step checkpoints in ``path/<step>/``, every ``save_interval`` steps, keeping the newest
    ``max_to_keep`` (0: all)."""

    def __init__(self, path, save_interval, max_to_keep=0, **kwargs):
        if kwargs.get("chkpt_on_preemption"):
            raise NotImplementedError("[CheckpointManager] chkpt_on_preemption is not implemented by axle")
        self._m = _spmd.CheckpointManager(_dir(path), int(save_interval), int(max_to_keep or 0))

    def save(self, step, state_dict, force=False):
        """Saves as step ``step`` when ``step % save_interval == 0`` or ``force``; returns whether it did."""
        names, tensors = flatten_state_dict(state_dict)
        return self._m.save(int(step), names, tensors, bool(force))

    def save_async(self, step, state_dict, force=False):
        """As ``save``, written by a background thread once the state is on the host: training may
        change the tensors as soon as this returns. A failure is raised by the next save, ``join``
        or ``restore``."""
        names, tensors = flatten_state_dict(state_dict)
        return self._m.save_async(int(step), names, tensors, bool(force))

    def join(self):
        self._m.join()

    def all_steps(self):
        """The steps with a complete checkpoint, ascending."""
        return list(self._m.all_steps())

    def restore(self, step, state_dict):
        """Loads step ``step`` into ``state_dict`` in place (as ``load``)."""
        names, tensors = flatten_state_dict(state_dict)
        self._m.restore(int(step), names, tensors)
