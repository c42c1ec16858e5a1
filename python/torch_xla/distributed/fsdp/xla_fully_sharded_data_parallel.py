"""``XlaFullyShardedDataParallel``: FSDP v1, one process per device (``torch_xla.launch``), as
torch_xla's, over axle's collectives.

    def _mp_fn(index):
        model = Net().to('xla')
        model = FSDP(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                               transformer_layer_cls={nn.Linear}))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)   # the shards: built after wrapping
        for x, y in loader:
            with torch_xla.step():
                optimizer.zero_grad()
                loss_fn(model(x.to('xla')), y.to('xla')).backward()  # reduce-scatters the gradients
                optimizer.step()                                      # NOT xm.optimizer_step

How it works. Each parameter of the wrapped module (not already in an inner unit) is broadcast
from rank 0, flattened, padded to a multiple of ``world_size * shard_size_multiple`` and split;
rank r keeps slice r as a new ``nn.Parameter`` of the FSDP module, the only parameters it lists
(``_fsdp_shard_<name with . as _>``, or ``_fsdp_flat_param`` and ``_fsdp_flat_param_frozen``
with ``flatten_parameters``; ``shard_param_on_dim_0`` splits dim 0 and keeps the other dims).
The wrapped module loses those parameters (it is the child ``_fsdp_wrapped_module``).

``forward`` all-gathers the shards (one autograd function per unit: its backward reduce-scatters
each full gradient, averaged over the ranks as DDP does, into the shard's gradient), binds the
full parameters to the modules that own them for the duration of the call, and unbinds them.
With ``reshard_after_forward``, when backward reaches the unit's output the unit all-gathers
again (behind an optimization barrier, so the compiler cannot merge it with the forward's) and
the values autograd saved read the re-gathered parameters: the forward's copy dies at its last
forward use. On the xla device all of this is ops of the step's one graph.

``compute_dtype`` (float32 or bfloat16): the shards are all-gathered and the unit computes in it (its
floating inputs cast), while the shards, their gradients (cast back before the reduce-scatter) and
the optimizer state stay float32; ``buffer_dtype`` (default: ``compute_dtype``) casts the unit's
floating buffers. Differences from torch_xla: ``sharding_groups`` (hybrid sharding) refused; ``flatten_parameters``
defaults to torch_xla's ``True`` while axle's C++ FSDP defaults to ``False``; the state_dict's
keys and ``get_shard_metadata()``'s layout are axle's own, read by
``consolidate_sharded_model_checkpoints``.
"""
import contextlib
import math

import torch
import torch.nn as nn

import axle

from ...core import _xm_dist as xm
from .wrap import recursive_wrap

__all__ = ["XlaFullyShardedDataParallel"]

_ME = "[XlaFullyShardedDataParallel]"


def _is_unit(m):
    return isinstance(m, XlaFullyShardedDataParallel)


def _walk_unowned(module, prefix=""):
    """(module, prefix) for ``module`` and every descendant not behind an FSDP unit."""
    yield module, prefix
    for name, child in module._modules.items():
        if child is None or _is_unit(child):
            continue
        yield from _walk_unowned(child, prefix + name + ".")


class _Group:
    """Parameters gathered together: one (or, with flatten_parameters, all of a unit's with the
    same requires_grad) as one padded tensor, of which this rank keeps its slice."""

    def __init__(self, shard_name, names, owners, shapes, trainable, dim0, padded):
        self.shard_name = shard_name  # the shard's name on the FSDP module
        self.names = names  # full parameters it holds, names in the wrapped module
        self.owners = owners  # per parameter: [(module, attribute)], more than one when tied
        self.shapes = shapes
        self.numels = [math.prod(s) for s in shapes]
        self.trainable = trainable
        self.dim0 = dim0  # sharded on dim 0 (one parameter), not flattened
        self.padded = padded  # flattened: elements after padding; dim0: rows after padding


class _Call:
    """One forward call of a unit: the gathered full tensors (what the parameters are views of),
    re-gathered once for the backward."""

    def __init__(self, unit):
        self.unit = unit
        self.bases = []
        self.regathered = False

    def regather(self):
        if self.regathered:
            return
        self.regathered = True
        u = self.unit
        shards = [getattr(u, g.shard_name).detach() for g in u._groups]
        if u._opts["optimization_barrier_in_backward"]:
            shards = axle._C._optimization_barrier(shards)
        for base, shard in zip(self.bases, shards):
            axle._C._replace_value_(base, u._all_gather(shard))


class _GatherParams(torch.autograd.Function):
    """Forward: every group's shard all-gathered; the outputs are the full parameters (views of
    the gathered tensors). Backward: each group's full gradients padded and reduce-scattered,
    averaged over the ranks, into its shard's gradient."""

    @staticmethod
    def forward(ctx, call, *shards):
        ctx.call = call
        outs = call.unit._gather(shards, call)
        frozen = [o for o, g in call.unit._params_of_groups(outs) if not g.trainable]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        call.bases = []  # the backward is done with them
        return (None,) + tuple(call.unit._reduce_grads(grads))


class XlaFullyShardedDataParallel(nn.Module):
    """Shards ``module``'s parameters over the processes of the job (``torch_xla.launch``).

    Options (torch_xla's names): ``reshard_after_forward`` (free the full parameters after forward
    and all-gather them again for backward; False keeps them: more memory, one all-gather
    fewer), ``flatten_parameters`` (one flat parameter per unit: one all-gather and one
    reduce-scatter per unit), ``shard_param_on_dim_0``, ``optimization_barrier_in_forward`` /
    ``_in_backward``, ``disable_reshard_on_root`` (the outermost unit keeps its parameters from
    forward to backward: backward starts there), ``execute_sharding_on_init`` (run the broadcast
    and split at once), ``shard_size_multiple`` (pads each shard to a multiple of it),
    ``auto_wrap_policy`` (see ``torch_xla.distributed.fsdp.wrap``), ``auto_wrapper_callable``
    (``callable(module, *args, **kwargs)`` that wraps a picked child; default FSDP with these
    options), ``pin_layout_in_collective_ops`` and ``fp32_reduce_scatter`` (accepted: axle's
    layouts are fixed and it reduces in float32).
    """

    def __init__(self, module, *args, reshard_after_forward=True, flatten_parameters=True,
                 execute_sharding_on_init=True, optimization_barrier_in_forward=True,
                 optimization_barrier_in_backward=True, mark_step_on_finalization=False,
                 disable_reshard_on_root=True, compute_dtype=None, buffer_dtype=None, fp32_reduce_scatter=False,
                 sharding_groups=None, sharding_rank=None, sharding_world_size=None, shard_size_multiple=1,
                 shard_param_on_dim_0=False, pin_layout_in_collective_ops=True, auto_wrap_policy=None,
                 auto_wrapper_callable=None, param_init_fn=None, inject_grad_norm_hook=False, **kwargs):
        super().__init__()
        if args:
            raise TypeError(f"{_ME} takes the module, then keyword options only; got {len(args)} more positional "
                            "argument(s)")
        if kwargs:
            raise TypeError(f"{_ME} unknown option(s): {', '.join(sorted(kwargs))}")
        if not isinstance(module, nn.Module):
            raise TypeError(f"{_ME} expected an nn.Module, got {type(module).__name__}")
        if _is_unit(module):
            raise ValueError(f"{_ME} cannot wrap a module that is already wrapped with FSDP: wrap each module once")
        for m, prefix in _walk_unowned(module):
            if getattr(m, "_axle_fsdp_taken", False):
                raise ValueError(f"{_ME} cannot wrap this {type(module).__name__}: its module "
                                 f"'{prefix[:-1] or '(itself)'}' ({type(m).__name__}) is already wrapped with FSDP "
                                 "(its parameters belong to another unit); wrap each module once")
        for what, d in (("compute_dtype", compute_dtype), ("buffer_dtype", buffer_dtype)):
            if d not in (None, torch.float32, torch.bfloat16):
                raise ValueError(f"{_ME} expected {what} torch.float32 or torch.bfloat16, got {d}")
        if sharding_groups is not None or sharding_rank is not None or sharding_world_size is not None:
            raise ValueError(f"{_ME} sharding_groups / sharding_rank / sharding_world_size are not supported on axle: "
                             "it shards over the whole job")
        if mark_step_on_finalization:
            raise ValueError(f"{_ME} mark_step_on_finalization=True is not supported on axle: the step's graph ends "
                             "at torch_xla.step() / torch_xla.sync()")
        if param_init_fn is not None or inject_grad_norm_hook:
            raise ValueError(f"{_ME} param_init_fn and inject_grad_norm_hook are not supported on axle")
        if not isinstance(shard_size_multiple, int) or shard_size_multiple < 1:
            raise ValueError(f"{_ME} expected shard_size_multiple >= 1, got {shard_size_multiple!r}")
        if flatten_parameters and shard_param_on_dim_0:
            raise ValueError(f"{_ME} flatten_parameters and shard_param_on_dim_0 exclude each other (dim-0 sharding "
                             "keeps each parameter's shape): pass flatten_parameters=False")
        self._opts = dict(reshard_after_forward=reshard_after_forward, flatten_parameters=flatten_parameters,
                          execute_sharding_on_init=execute_sharding_on_init,
                          optimization_barrier_in_forward=optimization_barrier_in_forward,
                          optimization_barrier_in_backward=optimization_barrier_in_backward,
                          disable_reshard_on_root=disable_reshard_on_root, shard_size_multiple=shard_size_multiple,
                          shard_param_on_dim_0=shard_param_on_dim_0,
                          pin_layout_in_collective_ops=pin_layout_in_collective_ops,
                          fp32_reduce_scatter=fp32_reduce_scatter, compute_dtype=compute_dtype,
                          buffer_dtype=buffer_dtype)
        self._compute_dtype = compute_dtype
        self.world_size = xm.world_size()
        self.rank = xm.global_ordinal()
        self._no_sync = False
        self._pending = None  # full gradients kept under no_sync(), per group

        import torch_xla

        device = torch_xla.device()
        module.to(device)
        # Auto-wrap: children first, each picked child replaced in its parent by its own unit.
        if auto_wrap_policy is not None:
            inner = dict(self._opts)
            inner.pop("execute_sharding_on_init")

            def wrap(child):
                if auto_wrapper_callable is not None:
                    return auto_wrapper_callable(child, execute_sharding_on_init=False, **inner)
                return XlaFullyShardedDataParallel(child, execute_sharding_on_init=False, **inner)

            recursive_wrap(module, auto_wrap_policy, wrap, _is_unit)
        self._fsdp_wrapped_module = module
        for m in module.modules():
            if _is_unit(m):
                m._axle_inner_unit = True  # not the root: its reshard_after_forward always applies
        self._shard(device)
        buffer_dtype = buffer_dtype or compute_dtype  # torch_xla: buffers default to compute_dtype
        if buffer_dtype is not None:  # this unit's floating buffers (inner units cast their own)
            for m, _ in _walk_unowned(module):
                for name, b in m._buffers.items():
                    if b is not None and b.is_floating_point() and b.dtype != buffer_dtype:
                        m._buffers[name] = b.to(buffer_dtype)
        if execute_sharding_on_init:
            axle._C._sync()

    # ------------------------------------------------------------ construction

    def _shard(self, device):
        """Takes this unit's parameters (each tied one once) from the wrapped module and keeps
        this rank's slice of each group as a parameter of this module."""
        taken, index = [], {}
        modules = list(_walk_unowned(self._fsdp_wrapped_module))
        for m, prefix in modules:
            for name, p in list(m._parameters.items()):
                if p is None:
                    continue
                if p.device.type != "xla":
                    raise ValueError(f"{_ME} parameter '{prefix + name}' is on {p.device}, expected the xla device")
                if p.dtype != torch.float32:
                    raise ValueError(f"{_ME} only float32 parameters are supported, got {p.dtype} for "
                                     f"'{prefix + name}'")
                if id(p) not in index:
                    index[id(p)] = len(taken)
                    taken.append([p, prefix + name, []])
                taken[index[id(p)]][2].append((m, name))
        for m, _ in modules:  # checked: now take them
            m._axle_fsdp_taken = True
        for p, _, owners in taken:
            for m, name in owners:
                del m._parameters[name]
        if self.world_size > 1 and taken:  # every rank starts from rank 0's values
            values = [axle._C._broadcast(p.detach(), 0) for p, _, _ in taken]
        else:
            values = [p.detach() for p, _, _ in taken]

        self._groups = []
        opts = self._opts
        multiple = self.world_size * opts["shard_size_multiple"]
        if opts["flatten_parameters"]:
            for trainable, suffix in ((True, ""), (False, "_frozen")):
                sel = [i for i, (p, _, _) in enumerate(taken) if p.requires_grad == trainable]
                if not sel:
                    continue
                flat = torch.cat([values[i].reshape(-1) for i in sel])
                g = _Group("_fsdp_flat_param" + suffix, [taken[i][1] for i in sel], [taken[i][2] for i in sel],
                           [tuple(taken[i][0].shape) for i in sel], trainable, False,
                           -(-flat.numel() // multiple) * multiple)
                self._add_shard(g, flat)
        else:
            for (p, name, owners), v in zip(taken, values):
                dim0 = opts["shard_param_on_dim_0"] and p.dim() > 0
                n = p.shape[0] if dim0 else p.numel()
                g = _Group("_fsdp_shard_" + name.replace(".", "_"), [name], [owners], [tuple(p.shape)],
                           p.requires_grad, dim0, -(-n // multiple) * multiple)
                self._add_shard(g, v if dim0 else v.reshape(-1))

    def _add_shard(self, g, full):
        """Pads ``full`` (flattened, or dim 0) to g.padded and keeps this rank's slice."""
        rows = full.shape[0]
        if g.padded > rows:
            full = torch.cat([full, full.new_zeros((g.padded - rows,) + tuple(full.shape[1:]))])
        per = g.padded // self.world_size
        shard = nn.Parameter(full[self.rank * per:(self.rank + 1) * per].clone(), requires_grad=g.trainable)
        shard._axle_fsdp_shard = True  # xm.optimizer_step refuses it
        shard._is_sharded = True  # torch_xla's mark
        self.register_parameter(g.shard_name, shard)
        self._groups.append(g)

    # ------------------------------------------------------------ the collectives

    def _all_gather(self, shard):
        if self._compute_dtype is not None and shard.dtype != self._compute_dtype:
            shard = shard.to(self._compute_dtype)  # gathered (and computed) in the compute dtype
        # One process: the shard is the whole (padded) tensor; a copy, never the parameter itself.
        return shard.clone() if self.world_size == 1 else axle._C._all_gather(shard)

    def _gather(self, shards, call):
        """Full parameters (views of the gathered tensors, which ``call`` keeps)."""
        bases = [self._all_gather(s) for s in shards]
        if self._opts["optimization_barrier_in_forward"] and bases:
            bases = axle._C._optimization_barrier(bases)
        call.bases = bases
        outs = []
        for g, base in zip(self._groups, bases):
            if g.dim0:
                outs.append(base.narrow(0, 0, g.shapes[0][0]))
                continue
            off = 0
            for shape, n in zip(g.shapes, g.numels):
                outs.append(base.narrow(0, off, n).view(shape))
                off += n
        return outs

    def _params_of_groups(self, flat_list):
        """(item, group) for a list with one item per full parameter, in group order."""
        i = 0
        for g in self._groups:
            for _ in g.names:
                yield flat_list[i], g
                i += 1

    def _reduce_grads(self, grads):
        """Each group's full gradients -> its shard's gradient (mean over ranks)."""
        out, i = [], 0
        for gi, g in enumerate(self._groups):
            mine = grads[i:i + len(g.names)]
            i += len(g.names)
            if not g.trainable or all(x is None for x in mine):
                out.append(None)
                continue
            shard = getattr(self, g.shard_name)
            # compute_dtype: the gradients back in the shard's dtype (float32) before they are summed
            mine = [x.to(shard.dtype) if x is not None else None for x in mine]
            if g.dim0:
                full = mine[0]
                if g.padded > full.shape[0]:
                    full = torch.cat([full, full.new_zeros((g.padded - full.shape[0],) + tuple(full.shape[1:]))])
            else:
                parts = [x.reshape(-1) if x is not None else torch.zeros(n, dtype=shard.dtype, device=shard.device)
                         for x, n in zip(mine, g.numels)]
                total = sum(g.numels)
                if g.padded > total:
                    parts.append(torch.zeros(g.padded - total, dtype=shard.dtype, device=shard.device))
                full = torch.cat(parts) if len(parts) > 1 else parts[0]
            if self._no_sync:
                pend = self._pending.setdefault(gi, None)
                self._pending[gi] = full if pend is None else pend + full
                out.append(None)
                continue
            if self._pending and self._pending.get(gi) is not None:
                full = full + self._pending.pop(gi)
            if self.world_size == 1:
                out.append(full)
            else:
                out.append(axle._C._reduce_scatter(full, "sum", 1.0 / self.world_size))
        return out

    # ------------------------------------------------------------ forward

    def _bind(self, outs):
        for full, owners in zip(outs, [o for g in self._groups for o in g.owners]):
            for m, name in owners:
                setattr(m, name, full)

    def _unbind(self):
        for g in self._groups:
            for owners in g.owners:
                for m, name in owners:
                    m.__dict__.pop(name, None)

    def _is_root(self):
        return not getattr(self, "_axle_inner_unit", False)

    def forward(self, *args, **kwargs):
        if self._compute_dtype is not None:  # floating inputs in the compute dtype, as torch_xla
            def cast(t):
                return t.to(self._compute_dtype) if torch.is_tensor(t) and t.is_floating_point() else t
            args = tuple(cast(a) for a in args)
            kwargs = {k: cast(v) for k, v in kwargs.items()}
        shards = [getattr(self, g.shard_name) for g in self._groups]
        call = _Call(self)
        if torch.is_grad_enabled() and any(s.requires_grad for s in shards):
            outs = _GatherParams.apply(call, *shards)
        else:
            outs = self._gather([s.detach() for s in shards], call)
        self._bind(outs)
        try:
            output = self._fsdp_wrapped_module(*args, **kwargs)
        finally:
            self._unbind()
        reshard = self._opts["reshard_after_forward"] and not (self._is_root() and self._opts["disable_reshard_on_root"])
        if reshard and torch.is_grad_enabled() and call.bases:
            def regather(grad):
                call.regather()
                return grad
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(regather)
        elif not torch.is_grad_enabled():
            call.bases = []
        return output

    # ------------------------------------------------------------ the user's API

    def __getattr__(self, name):
        """Attributes the wrapper does not have come from the wrapped module (as torch_xla's)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_fsdp_wrapped_module":
                raise
            return getattr(self._fsdp_wrapped_module, name)

    @property
    def module(self):
        """The wrapped module (its sharded parameters are bound only during forward)."""
        return self._fsdp_wrapped_module

    def _units(self):
        """This unit and every unit below it."""
        return [m for m in self.modules() if _is_unit(m)]

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside keep full gradients locally (more memory) instead of
        reduce-scattering; the first backward after it reduce-scatters them with its own."""
        units = self._units()
        for u in units:
            u._no_sync = True
            if u._pending is None:
                u._pending = {}
        try:
            yield
        finally:
            for u in units:
                u._no_sync = False

    def clip_grad_norm_(self, max_norm, norm_type=2.0, groups=None):
        """Scales every shard gradient of this tree so that the gradient norm over all ranks is at
        most ``max_norm``; returns that norm before clipping (a tensor; nothing is read to the host).
        Call on the root."""
        if groups is not None:
            raise ValueError(f"{_ME}.clip_grad_norm_ groups={groups!r}: axle reduces over the whole job")
        max_norm, norm_type = float(max_norm), float(norm_type)
        if max_norm < 0:
            raise ValueError(f"{_ME}.clip_grad_norm_ expected max_norm >= 0, got {max_norm}")
        if norm_type <= 0:
            raise ValueError(f"{_ME}.clip_grad_norm_ expected norm_type > 0 (or inf), got {norm_type}")
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        if math.isinf(norm_type):
            local = torch.stack([g.abs().max() for g in grads]).max()
            total = local if self.world_size == 1 else axle._C._all_reduce([local], "max", 1.0)[0]
        else:
            local = torch.stack([g.pow(norm_type).sum() for g in grads]).sum()
            total = local if self.world_size == 1 else axle._C._all_reduce([local], "sum", 1.0)[0]
            total = total.pow(1.0 / norm_type)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
        return total

    def get_shard_metadata(self):
        """How this rank's shards map to the unwrapped model's parameters: what
        ``consolidate_sharded_model_checkpoints`` reads. Call on the root."""
        params, buffers = [], {}
        for path, m in self.named_modules():
            prefix = path + "." if path else ""
            if _is_unit(m):
                unwrapped = _unwrap_name(prefix)
                for g in m._groups:
                    params.append(dict(key=prefix + g.shard_name, names=[unwrapped + n for n in g.names],
                                       shapes=[list(s) for s in g.shapes], dim0=g.dim0, padded=g.padded))
        for key, _ in self.named_buffers():
            buffers[key] = _unwrap_name(key)
        return dict(format="axle-fsdp-v1", world_size=self.world_size, rank=self.rank, params=params,
                    buffers=buffers)

    def extra_repr(self):
        n = sum(g.padded for g in self._groups)
        return f"world_size={self.world_size}, rank={self.rank}, sharded elements={n}"


def _unwrap_name(key):
    """A state_dict key (or prefix) of the wrapped tree as the unwrapped model names it."""
    return ".".join(part for part in key.split(".") if part != "_fsdp_wrapped_module")


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
