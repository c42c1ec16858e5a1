"""The multi-process half of ``torch_xla.core.xla_model`` and ``torch_xla.runtime``.

``optimizer_step`` across processes, the xm collectives, ``rendezvous``, and the runtime's
world size and ordinals, over axle's process group (python/csrc/dist.cpp). On xla tensors the
collectives are ops of the lazy graph (they run when the step's graph runs); on cpu tensors
they run at once. Every rank must call the same collectives in the same order with the same
shapes. With a world size of 1 they are identities (optimizer_step is optimizer.step()).
"""
import pickle
import warnings

import torch

import axle

__all__ = [
    "REDUCE_SUM", "REDUCE_MIN", "REDUCE_MAX", "REDUCE_MEAN",
    "world_size", "global_ordinal", "local_ordinal", "is_master_ordinal",
    "xrt_world_size", "get_ordinal", "get_local_ordinal",
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "rendezvous", "mesh_reduce",
    "reduce_gradients", "optimizer_step", "optimization_barrier_",
]

REDUCE_SUM = "sum"
REDUCE_MIN = "min"
REDUCE_MAX = "max"
REDUCE_MEAN = "mean"  # axle's (torch_xla has none): the sum over ranks divided by the world size
_UNSUPPORTED = {"mul": "REDUCE_MUL", "and": "REDUCE_AND", "or": "REDUCE_OR"}


# ---------------------------------------------------------------- runtime

def world_size():
    """Processes in this job (``torch_xla.runtime.world_size()``); 1 outside a launched job."""
    return axle._C._world_size()


def global_ordinal():
    """This process's rank in the job (``torch_xla.runtime.global_ordinal()``)."""
    return axle._C._global_ordinal()


def local_ordinal():
    """This process's rank on its host (``torch_xla.runtime.local_ordinal()``)."""
    return axle._C._local_ordinal()


def is_master_ordinal(local=True):
    return (local_ordinal() if local else global_ordinal()) == 0


def xrt_world_size(defval=None):
    warnings.warn("xm.xrt_world_size() is deprecated: use torch_xla.runtime.world_size()", DeprecationWarning,
                  stacklevel=2)
    return world_size()


def get_ordinal(defval=None):
    warnings.warn("xm.get_ordinal() is deprecated: use torch_xla.runtime.global_ordinal()", DeprecationWarning,
                  stacklevel=2)
    return global_ordinal()


def get_local_ordinal(defval=None):
    warnings.warn("xm.get_local_ordinal() is deprecated: use torch_xla.runtime.local_ordinal()", DeprecationWarning,
                  stacklevel=2)
    return local_ordinal()


# ---------------------------------------------------------------- collectives

def _check_groups(groups, what):
    if not groups:
        return
    everyone = list(range(world_size()))
    if len(groups) == 1 and sorted(groups[0]) == everyone:
        return
    raise ValueError(f"[{what}] groups={groups!r}: axle runs collectives over the whole job only "
                     f"(groups=None or [{everyone}])")


def _reduce_type(reduce_type, what):
    if reduce_type in _UNSUPPORTED:
        raise ValueError(f"[{what}] xm.{_UNSUPPORTED[reduce_type]} is not supported on axle: use REDUCE_SUM, "
                         "REDUCE_MIN or REDUCE_MAX")
    return reduce_type


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """Reduces over every process (``xm.REDUCE_SUM``, ``REDUCE_MIN``, ``REDUCE_MAX``), then
    multiplies by ``scale``. A tensor: returns a new tensor. A list of tensors: reduces each in
    place (one collective per dtype) and returns the list."""
    _check_groups(groups, "all_reduce")
    reduce_type = _reduce_type(reduce_type, "all_reduce")
    if isinstance(inputs, torch.Tensor):
        return axle._C._all_reduce([inputs], reduce_type, float(scale))[0]
    inputs = list(inputs)
    if inputs:
        axle._C._all_reduce_(inputs, reduce_type, float(scale))
    return inputs


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Every process's ``value`` concatenated along ``dim`` in rank order."""
    _check_groups(groups, "all_gather")
    if value.dim() == 0:
        return _into(output, axle._C._all_gather(value))
    return _into(output, _along_dim0(value, dim, axle._C._all_gather))


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None, pin_layout=True):
    """Reduces ``input`` over every process, times ``scale``, and keeps this rank's
    ``1/shard_count`` slice along ``scatter_dim`` (``shard_count`` is the world size).
    A list of tensors is reduced each, and a list is returned."""
    _check_groups(groups, "reduce_scatter")
    reduce_type = _reduce_type(reduce_type, "reduce_scatter")
    if shard_count != world_size():
        raise ValueError(f"[reduce_scatter] shard_count={shard_count}: axle scatters over the whole job, "
                         f"shard_count must be the world size {world_size()}")
    if not isinstance(input, torch.Tensor):
        outs = [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count) for t in input]
        if output is not None:
            for o, r in zip(output, outs):
                o.copy_(r)
            return output
        return outs
    return _into(output, _along_dim0(input, scatter_dim,
                                     lambda x: axle._C._reduce_scatter(x, reduce_type, float(scale))))


def _along_dim0(x, dim, collective):
    """``collective`` (which works along dim 0) applied along ``dim`` of ``x``."""
    d = dim % x.dim()
    if d == 0:
        return collective(x)
    return collective(x.movedim(d, 0)).movedim(0, d)


def _into(output, out):
    """``out``, or ``output`` holding it when the caller gave one (torch_xla's ``output=``)."""
    if output is None:
        return out
    output.copy_(out)
    return output


def broadcast(value, src=0):
    """Every process gets process ``src``'s ``value`` (a new tensor)."""
    return axle._C._broadcast(value, int(src))


def rendezvous(tag, payload=b"", replicas=[]):
    """Waits until every process reached ``rendezvous(tag)``; returns every process's
    ``payload`` (bytes) in rank order. Ranks that arrive with different tags fail."""
    if replicas:
        _check_groups([replicas], "rendezvous")
    if isinstance(payload, str):
        payload = payload.encode()
    return axle._C._rendezvous(str(tag), bytes(payload))


def mesh_reduce(tag, data, reduce_fn):
    """``reduce_fn`` applied to the list of every process's ``data`` (any picklable value;
    xla tensors are read to the cpu first)."""
    if isinstance(data, torch.Tensor) and data.device.type == "xla":
        data = data.cpu()
    blobs = rendezvous(tag, pickle.dumps(data))
    return reduce_fn([pickle.loads(b) for b in blobs])


def optimization_barrier_(tensors):
    """torch_xla's ``xm.optimization_barrier_``: each tensor of the list is replaced, in place,
    by its value behind one barrier the compiler does not look through, so what is computed
    from them is never merged (CSE) with what is computed from the values before it."""
    tensors = list(tensors)
    if tensors:
        for t, v in zip(tensors, axle._C._optimization_barrier(tensors)):
            with torch.no_grad():
                t.copy_(v)
    return tensors


# ---------------------------------------------------------------- the optimizer step

def _gradients(optimizer):
    seen = set()
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None or id(p) in seen:
                continue
            seen.add(id(p))
            grads.append(p.grad)
    return grads


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Averages every gradient the optimizer holds over the processes, in place: the sum over
    ranks times 1/world size, one collective per dtype (axle::xm::optimizer_step's rule)."""
    _check_groups(groups, "reduce_gradients")
    if world_size() <= 1:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if getattr(p, "_axle_fsdp_shard", False):
                raise RuntimeError(
                    "[optimizer_step] FSDP parameters: call optimizer.step(); xm.optimizer_step would all-reduce "
                    "already reduce-scattered gradients")
    grads = _gradients(optimizer)
    if grads:
        axle._C._all_reduce_(grads, REDUCE_MEAN, 1.0)


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None, pin_layout=True):
    """``xm.optimizer_step``: averages the gradients over the processes (world size > 1), then
    ``optimizer.step(**optimizer_args)``; returns what step returns. ``barrier=True`` then runs
    the pending graph and waits for every process. Inside ``torch_xla.step()`` the collectives
    and the update are ops of the step's one graph."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        axle._C._sync()
        if world_size() > 1:
            axle._C._barrier()
    return loss
