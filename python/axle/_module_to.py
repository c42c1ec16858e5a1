"""``model.to('xla')`` (and back) keeps tied parameters tied.

``nn.Module._apply`` replaces a parameter by a new ``Parameter`` object when the converted tensor's
type cannot be shallow-copied into the old one, which is the case for every cpu -> xla move: each
module then gets its own new object, and a weight shared by two modules (a GPT's embedding and
output head) silently becomes two independent weights on the device (torch_xla users must re-tie
after the move). Moving to ``xla`` with PyTorch's ``swap_module_params_on_conversion`` on swaps
the converted tensor into the existing ``Parameter`` object instead, so identity, tying, hooks and
references held elsewhere survive. Only moves to and from the xla device are affected.
"""
import functools

import torch


def _crosses_xla(module, args, kwargs):
    """True for a move to the xla device, or of a module holding xla tensors to another device."""
    try:
        device, _, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    except Exception:  # let Module.to raise its own error
        return False
    if device is None:
        return False
    if device.type == "xla":
        return True
    return any(t.device.type == "xla" for t in module.parameters()) or any(
        t.device.type == "xla" for t in module.buffers())


def apply():
    original = torch.nn.Module.to
    if getattr(original, "_axle_patched", False):
        return

    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if not _crosses_xla(self, args, kwargs) or torch.__future__.get_swap_module_params_on_conversion():
            return original(self, *args, **kwargs)
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(False)

    to._axle_patched = True
    torch.nn.Module.to = to
