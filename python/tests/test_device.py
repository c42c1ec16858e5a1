"""The `xla` device at its simplest, and the pinned torch: what `make python` must give."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import axle


def test_torch_is_the_pinned_one_from_the_venv(V):
    assert torch.__version__.split("+")[0] == axle.TORCH_VERSION == "2.15.0"
    assert V != pathlib.Path(sys.base_prefix), "not running in a venv"
    assert pathlib.Path(torch.__file__).resolve().is_relative_to(V.resolve())


def test_empty_on_xla_is_an_axle_tensor():
    t = torch.empty(3, device="xla")
    assert t.device.type == "xla"
    assert t.shape == (3,) and t.dtype == torch.float32
    assert axle._C._is_axle_tensor(t)
    assert not axle._C._is_axle_tensor(torch.empty(3))


def test_arithmetic_on_xla_equals_cpu():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    y = (x.to("xla") * 2 + 1).sum()
    assert y.device.type == "xla"
    assert y.shape == ()
    torch.testing.assert_close(y.cpu(), (x * 2 + 1).sum())


def test_mixing_xla_and_cpu_raises_pytorch_device_error():
    a, b = torch.ones(3, device="xla"), torch.ones(3)
    for f in (lambda: a + b, lambda: b * a, lambda: torch.mm(a.view(1, 3), b.view(3, 1))):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            f().cpu()
    # A 0-d cpu tensor is a scalar, as PyTorch allows on any device.
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


def test_another_torch_version_is_refused_naming_both(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.9.0+cpu")
    with pytest.raises(ImportError, match=r"built against torch 2\.15\.0, but torch 2\.9\.0\+cpu is installed"):
        axle._check_environment()


def _import_in_a_new_process(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_import_refuses_another_torch_before_loading_the_extension():
    r = _import_in_a_new_process("import torch; torch.__version__ = '2.9.0'; import axle")
    assert r.returncode != 0
    assert "ImportError: axle was built against torch 2.15.0, but torch 2.9.0 is installed" in r.stderr
    assert "undefined symbol" not in r.stderr


def test_import_refuses_the_real_torch_xla_beside_it(tmp_path):
    # An installed torch_xla, as importlib.metadata sees one: its dist-info on the path.
    info = tmp_path / "torch_xla-2.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_xla\nVersion: 2.9.0\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    r = _import_in_a_new_process("import torch_xla", PYTHONPATH=path)
    assert r.returncode != 0
    assert "the real torch_xla 2.9.0 is installed" in r.stderr
