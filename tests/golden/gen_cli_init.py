#!/usr/bin/env python3
"""Golden losses for `axle-train --init` (tests/tools/test_cli.cpp, Cli.InitFromPyTorchWeights...).

Run with the PyTorch venv: /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_cli_init.py

Writes
  tests/data/tiny_fmnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
      a small Fashion-MNIST-shaped data set (64 training, 16 test images), deterministic
  tests/data/cli_init_golden.json
      the cross-entropy losses PyTorch computes for the cnn with the weights of
      tests/data/torch_cnn.safetensors (written by gen_torch_safetensors.py) on the whole
      training set as one batch: before any step, and after one SGD step (lr 0.01,
      momentum 0.9: axle-train's defaults).
axle-train with --batch-size 64 reads the whole set as one batch per epoch (shuffled, which
changes only the order of the 64 terms of the mean), so its first two losses are these.
"""
import gzip
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
N_TRAIN, N_TEST = 64, 16
MEAN, STD = 0.2860, 0.3530  # include/axle/data/fashion_mnist.h


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).copy())
    return out


def images(rng, n):
    # Smooth blobs: 7x7 random grey levels, each a 4x4 block, so the files stay small.
    low = rng.randint(0, 256, size=(n, 7, 7)).astype(np.uint8)
    return np.kron(low, np.ones((4, 4), dtype=np.uint8))


def write_idx_gz(path, array):
    header = struct.pack(">I", 0x0800 | array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(header + array.astype(np.uint8).tobytes())


def cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    rng = np.random.RandomState(17)  # the legacy generator: its stream is frozen
    train_x, test_x = images(rng, N_TRAIN), images(rng, N_TEST)
    train_y, test_y = rng.randint(0, 10, N_TRAIN), rng.randint(0, 10, N_TEST)
    out = os.path.join(DATA, "tiny_fmnist")
    os.makedirs(out, exist_ok=True)
    write_idx_gz(os.path.join(out, "train-images-idx3-ubyte.gz"), train_x)
    write_idx_gz(os.path.join(out, "train-labels-idx1-ubyte.gz"), train_y)
    write_idx_gz(os.path.join(out, "t10k-images-idx3-ubyte.gz"), test_x)
    write_idx_gz(os.path.join(out, "t10k-labels-idx1-ubyte.gz"), test_y)

    model = cnn()
    model.load_state_dict(read_safetensors(os.path.join(DATA, "torch_cnn.safetensors")))
    model.train()
    # float32 throughout, as axle's loader: (v / 255 - mean) / std
    x = (torch.from_numpy(train_x.astype(np.float32)).unsqueeze(1) / np.float32(255) - np.float32(MEAN)) / np.float32(STD)
    y = torch.from_numpy(train_y.astype(np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    golden = {"generator": "tests/golden/gen_cli_init.py", "torch": torch.__version__,
              "data": "tests/data/tiny_fmnist", "weights": "tests/data/torch_cnn.safetensors",
              "batch_size": N_TRAIN, "lr": 0.01, "momentum": 0.9, "losses": losses}
    with open(os.path.join(DATA, "cli_init_golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(json.dumps(golden))


if __name__ == "__main__":
    main()
