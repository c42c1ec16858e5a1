"""Shared by the Python tests that train on Fashion-MNIST (test_training.py, test_autocast.py,
spmd_mlp.py): the IDX files read as torch tensors, normalised as shared/reference's script does,
and the CPU fallbacks the device counted."""
import gzip
import os

import torch

DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_idx(path):
    """An IDX file (gzip) as a uint8 tensor of the shape its header gives."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def fmnist(split, count=None):
    """(images [N, 1, 28, 28] float32, (x/255 - 0.2860)/0.3530; labels [N] int64) of split "train" or
    "t10k", the first `count` samples only when given."""
    x = load_idx(f"{DATA}/{split}-images-idx3-ubyte.gz")[:count]
    y = load_idx(f"{DATA}/{split}-labels-idx1-ubyte.gz")[:count]
    return x.float().div(255).sub(0.2860).div(0.3530).unsqueeze(1), y.long()


def fallbacks():
    """The CPU fallbacks counted so far (torch_xla's metrics, counters named aten::<op>)."""
    import torch_xla.debug.metrics as met
    return {k: met.counter_value(k) for k in met.counter_names() if k.startswith("aten::")}
