"""axle under PyTorch: the ``xla`` device.

Importing this package (or ``torch_xla``, its torch_xla-compatible face) checks that the
installed torch is the exact version the extension was built against and that the real
torch_xla is not installed beside it, then loads the extension, which claims PyTorch's
``XLA`` dispatch key for axle's lazy device.
"""
import importlib.metadata as _md

TORCH_VERSION = "2.15.0"  # the pinned PyTorch this extension is built against (setup.py)


def _check_environment():
    import torch

    found = torch.__version__.split("+")[0]
    if found != TORCH_VERSION:
        raise ImportError(
            f"axle was built against torch {TORCH_VERSION}, but torch {torch.__version__} is installed: "
            f"its C++ ABI differs, so the extension cannot load. Install torch=={TORCH_VERSION} "
            f"(make python does) or rebuild axle against torch {found}.")
    for dist in ("torch_xla", "torch-xla"):
        try:
            real = _md.distribution(dist)
        except _md.PackageNotFoundError:
            continue
        raise ImportError(
            f"the real torch_xla {real.version} is installed in this environment ({real.locate_file('')}); "
            "only one library can hold PyTorch's XLA device in a process, and axle provides the torch_xla "
            "module names itself. Uninstall torch_xla (pip uninstall torch_xla) or use another environment.")


_check_environment()


def _preload_libaxle():
    # libtorch_cpu.so exports its own copies of gloo's symbols and of libstdc++'s exception_ptr
    # functions. Loaded after torch, libaxle.so and its oneDNN and Gloo would bind to those
    # (oneDNN then fails every primitive; Gloo would run torch's ABI). Loading libaxle first with
    # RTLD_DEEPBIND makes it and its dependencies resolve their symbols among themselves.
    import ctypes
    import os

    from ._build_info import LIBAXLE

    ctypes.CDLL(LIBAXLE, mode=os.RTLD_NOW | os.RTLD_DEEPBIND)


_preload_libaxle()

from . import _C  # noqa: E402  (after the checks: a mismatched torch fails them, not the loader)
from . import _torch_patches  # noqa: E402

_torch_patches.apply()  # torch.manual_seed seeds axle too; pickling an xla tensor says what to do

from . import _module_to  # noqa: E402

_module_to.apply()  # model.to('xla') keeps tied parameters tied

__all__ = ["_C", "TORCH_VERSION"]
