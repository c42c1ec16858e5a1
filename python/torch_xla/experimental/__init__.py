"""torch_xla.experimental: eager mode (``eager_mode(True)``, ``is_eager_mode()``,
``eager_mode_context(enable)``)."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]
