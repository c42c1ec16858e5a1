"""What loading axle changes in torch itself, so that plain PyTorch code does the right thing on
the ``xla`` device:

- ``torch.manual_seed`` (and ``torch.random.manual_seed``, ``torch.seed``) also seed axle's
  generator, which ``torch.rand(..., device="xla")``, dropout and ``nn.init`` on xla tensors draw
  from. PyTorch seeds its own devices (cpu, cuda, privateuse1) but not XLA.
- Pickling an xla tensor (``torch.save`` of a tensor, a ``state_dict`` or any object holding one)
  raises an error that says what to do: move it to the cpu first (``.cpu()``), or save with
  ``torch_xla.core.xla_model.save``, which moves every xla tensor to the cpu in one sync. PyTorch
  would otherwise read each tensor to the host one at a time, behind the user's back (the seed's
  anti-pattern "Don't use torch.save() on XLA tensors").

Applied once, when ``axle`` is imported (``import torch_xla`` imports it).
"""
import functools

import torch

_U64 = 1 << 64


def _axle_seed(seed):
    from . import _C

    # torch accepts [-2**63, 2**64); negative seeds wrap as in torch's own generator.
    _C._manual_seed(int(seed) % _U64)


def _patch_manual_seed():
    original = torch.random.manual_seed
    if getattr(original, "_axle_patched", False):
        return

    @functools.wraps(original)
    def manual_seed(seed):
        generator = original(seed)  # validates the seed as torch does
        _axle_seed(seed)
        return generator

    manual_seed._axle_patched = True
    torch.random.manual_seed = manual_seed
    torch.manual_seed = manual_seed

    original_seed = torch.random.seed

    @functools.wraps(original_seed)
    def seed():
        s = original_seed()
        _axle_seed(s)
        return s

    seed._axle_patched = True
    torch.random.seed = seed
    torch.seed = seed


def _xla_pickle_error(t):
    return RuntimeError(
        f"torch.save() (pickling) of an xla tensor (shape {list(t.shape)}, {t.dtype}): an xla tensor has no "
        "host storage. Move it to the CPU first with .cpu() (e.g. {k: v.cpu() for k, v in "
        "model.state_dict().items()}), or save with torch_xla.core.xla_model.save(data, path), which moves "
        "every xla tensor in `data` to the cpu in one sync and then calls torch.save.")


def _patch_reduce_ex():
    original = torch.Tensor.__reduce_ex__
    if getattr(original, "_axle_patched", False):
        return

    @functools.wraps(original)
    def __reduce_ex__(self, proto):
        if self.device.type == "xla":
            raise _xla_pickle_error(self)
        return original(self, proto)

    __reduce_ex__._axle_patched = True
    torch.Tensor.__reduce_ex__ = __reduce_ex__


def apply():
    _patch_manual_seed()
    _patch_reduce_ex()
