"""Eager mode (seed Pattern 6): each op on an xla tensor runs at once as a one-op graph, compiled
once per op signature and cached, so values can be inspected anywhere (debugging). Functions
given to ``torch_xla.compile`` still trace whole graphs under it (eager globally, compile the hot
path)."""
import contextlib

from axle import _C

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]


def eager_mode(enable: bool):
    """Turns eager mode on (True) or off (False) for this process."""
    _C._set_eager_mode(bool(enable))


def is_eager_mode() -> bool:
    """Whether eager mode is on."""
    return bool(_C._is_eager_mode())


@contextlib.contextmanager
def eager_mode_context(enable: bool):
    """Eager mode on (or off) inside the block; the previous setting comes back after it."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield
    finally:
        eager_mode(saved)
