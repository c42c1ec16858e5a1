#!/usr/bin/python3
"""PyTorch interop fixtures for tests/serialize/test_serialize.cpp (run with /usr/bin/python3: torch 1.13 + numpy).

Builds the reference cnn of tools/axle-train/models.cpp with a fixed seed and writes
  tests/data/torch_cnn.safetensors     its state dict ("0.weight", "0.bias", "3.weight", ...)
  tests/data/torch_cnn_io.safetensors  a fixed input batch ("input") and PyTorch's forward output ("output")
The safetensors format is written by hand (no safetensors package): u64 little-endian header
length, JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded with spaces
to 8 bytes, then the raw little-endian data, tensors ordered as the reference writer does.
"""
import json
import os
import struct

import numpy as np
import torch

DTYPES = {np.dtype("float32"): "F32", np.dtype("int64"): "I64", np.dtype("int32"): "I32",
          np.dtype("bool"): "BOOL", np.dtype("uint8"): "U8"}


def write_safetensors(path, tensors, metadata=None):
    # np.array(order="C"), not np.ascontiguousarray: that one makes a 0-d tensor 1-d.
    arrays = {k: np.array(v.detach().cpu().numpy() if torch.is_tensor(v) else v, order="C") for k, v in tensors.items()}
    # The reference writer orders by descending alignment, then by name.
    names = sorted(arrays, key=lambda k: (-arrays[k].dtype.itemsize, k))
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for k in names:
        a = arrays[k]
        n = a.nbytes
        header[k] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for k in names:
            f.write(arrays[k].astype(arrays[k].dtype.newbyteorder("<"), copy=False).tobytes())


def cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    torch.manual_seed(1234)
    model = cnn().eval()
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        y = model(x)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    write_safetensors(os.path.join(out, "torch_cnn.safetensors"), model.state_dict(), {"format": "pt"})
    write_safetensors(os.path.join(out, "torch_cnn_io.safetensors"), {"input": x, "output": y}, {"format": "pt"})
    print("params", sum(p.numel() for p in model.parameters()), "output[0]", y[0].tolist())


if __name__ == "__main__":
    main()
