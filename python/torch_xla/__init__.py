"""torch_xla's API over axle (placeholder: filled in by the API work)."""
import axle  # noqa: F401  (checks the environment, loads the device)
import torch


def device():
    return torch.device("xla:0")


def sync():
    axle._C._sync()
