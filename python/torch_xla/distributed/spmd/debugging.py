"""torch_xla.distributed.spmd.debugging: which device holds which tile, as a text table.

``visualize_tensor_sharding(t)`` and ``visualize_sharding('{devices=[2,2]0,1,2,3}')`` print a box
table (axle's, ``xs::debugging``; cells read ``CPU 3``, or ``CPU [0, 1]`` for a replicated group)
and return it as a string. torch_xla draws it with ``rich`` and returns the rich table; axle
needs no ``rich``, draws any rank (dims beyond 2 folded into rows, so no device is missing), and
1-D shardings too.
"""
import axle

_spmd = axle._C._spmd

__all__ = ["visualize_tensor_sharding", "visualize_sharding"]


def visualize_sharding(sharding: str, use_color: bool = True, scale: float = 1.0, min_width: int = 9,
                       max_width: int = 80, print_table: bool = True) -> str:
    """The table of a sharding string (``torch_xla._XLAC._get_xla_sharding_spec``'s text)."""
    text = _spmd.visualize_sharding(sharding, bool(use_color), int(min_width * scale), int(max_width * scale))
    if print_table:
        print(text)
    return text


def visualize_tensor_sharding(t, use_color: bool = True, scale: float = 1.0, min_width: int = 9,
                              max_width: int = 80, print_table: bool = True) -> str:
    """The table of an xla tensor's sharding (``{replicated}`` when unannotated)."""
    from .xla_sharding import _unwrap

    text = _spmd.visualize_tensor_sharding(_unwrap(t), bool(use_color), int(min_width * scale),
                                           int(max_width * scale))
    if print_table:
        print(text)
    return text
