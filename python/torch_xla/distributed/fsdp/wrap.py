"""``torch_xla.distributed.fsdp.wrap``: auto-wrap policies, and the recursion that applies them.

A policy is ``policy(module, recurse, unwrapped_params, **kwargs) -> bool``. For every module below
the root, children first, FSDP asks it twice: ``recurse=True`` ("look inside this one?") and, once
its children are done, ``recurse=False`` ("wrap this one in its own unit?");
``unwrapped_params`` counts the module's parameters not yet in a unit. Bind the extra arguments
with ``functools.partial``, as with torch_xla:

    auto_wrap_policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
"""
import torch.nn as nn

__all__ = ["always_wrap_policy", "lambda_auto_wrap_policy", "transformer_auto_wrap_policy",
           "size_based_auto_wrap_policy"]


def always_wrap_policy(*args, **kwargs):
    """Wraps every module that has parameters of its own."""
    return True


def lambda_auto_wrap_policy(module, recurse, unwrapped_params, lambda_fn):
    """Wraps each module for which ``lambda_fn(module)`` is true."""
    if recurse:
        return True
    return bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, unwrapped_params, transformer_layer_cls):
    """Wraps each module that is an instance of one of ``transformer_layer_cls`` (a set of classes)."""
    if recurse:
        return True
    return isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse, unwrapped_params, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wraps a module whose not-yet-wrapped parameters number at least ``min_num_params``; never
    looks inside ``force_leaf_modules`` (default: ``nn.MultiheadAttention``) and never wraps
    ``exclude_wrap_modules`` (default: ``nn.ModuleList``, ``nn.ModuleDict``)."""
    force_leaf = tuple(force_leaf_modules if force_leaf_modules is not None else {nn.MultiheadAttention})
    exclude = tuple(exclude_wrap_modules if exclude_wrap_modules is not None else {nn.ModuleList, nn.ModuleDict})
    big = unwrapped_params >= min_num_params
    if recurse:
        return big and not isinstance(module, force_leaf)
    return big and not isinstance(module, exclude)


def _unwrapped_numel(module, is_unit):
    """Parameters of ``module`` (each tied one once) not behind an FSDP unit."""
    seen, n = set(), 0
    stack = [module]
    while stack:
        m = stack.pop()
        if is_unit(m) and m is not module:
            continue
        for p in m._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        stack.extend(m._modules.values())
    return n


def recursive_wrap(module, policy, wrap, is_unit):
    """Replaces, in place, each descendant of ``module`` that ``policy`` picks by ``wrap(child)``,
    children first. The root itself is not asked."""
    for name, child in list(module._modules.items()):
        if child is None or is_unit(child):
            continue
        if policy(module=child, recurse=True, unwrapped_params=_unwrapped_numel(child, is_unit)):
            recursive_wrap(child, policy, wrap, is_unit)
        n = _unwrapped_numel(child, is_unit)
        if n and policy(module=child, recurse=False, unwrapped_params=n):
            wrapped = wrap(child)
            if not isinstance(wrapped, nn.Module):
                raise TypeError(f"[XlaFullyShardedDataParallel] auto_wrapper_callable returned {type(wrapped).__name__} "
                                f"for '{name}', expected an nn.Module")
            module._modules[name] = wrapped
