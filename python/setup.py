# The `axle` distribution: the C++ extension axle._C (built against the pinned PyTorch and
# linked to libaxle.so from the CMake build) and the Python packages `axle` and `torch_xla`
# (torch_xla's API names over axle). Built by `make python` (scripts/python-env.sh); the
# build directory of libaxle.so comes from AXLE_BUILD_DIR (default ../build).
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
build = os.path.abspath(os.environ.get("AXLE_BUILD_DIR", os.path.join(root, "build")))
libdir = os.path.join(build, "lib")

# Where the extension finds libaxle.so at import (axle/__init__.py preloads it, see there).
with open(os.path.join(here, "axle", "_build_info.py"), "w") as f:
    f.write("# Written by setup.py: the libaxle.so this extension was linked against.\n")
    f.write(f"LIBAXLE = {os.path.join(libdir, 'libaxle.so')!r}\n")

# setuptools rebuilds the extension only when a source or one of `depends` is newer than it (and
# then ninja recompiles only what its depfiles say changed): the headers it may include, axle's
# public and internal ones too, so a changed header is never left out of a rebuilt _C.
depends = sorted(glob.glob(os.path.join("csrc", "*.h")) +
                 [f for pattern in ("include/**/*.h", "src/**/*.h", "src/**/*.def", "src/**/*.inc")
                  for f in glob.glob(os.path.join(root, pattern), recursive=True)])

setup(
    name="axle",
    version="0.1.0",
    description="axle as PyTorch's xla device: torch_xla's training-loop API over axle's lazy runtime",
    packages=["axle", "torch_xla", "torch_xla.core", "torch_xla.debug", "torch_xla.distributed",
              "torch_xla.distributed.spmd", "torch_xla.experimental",
              "torch_xla.experimental.distributed_checkpoint", "torch_xla.utils"],
    ext_modules=[
        CppExtension(
            "axle._C",
            sorted(glob.glob(os.path.join("csrc", "*.cpp"))),
            depends=depends,
            include_dirs=[os.path.join(root, "include"), os.path.join(root, "src"), os.path.join(here, "csrc")],
            library_dirs=[libdir],
            libraries=["axle"],
            runtime_library_dirs=[libdir],
            extra_compile_args=["-std=c++20", "-O2", "-Wno-deprecated-declarations", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.11",
    install_requires=["torch==2.15.0"],
)
