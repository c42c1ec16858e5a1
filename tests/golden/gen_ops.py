#!/usr/bin/env python3
"""PyTorch goldens for the golden-value op tests (the program test_golden: tests/support/golden_ops.h,
tests/golden/<family>.cpp, tests/ops/test_golden.cpp).

Run with the PyTorch 2.x venv (setup: /work/shared/reference/peers/setup.sh):
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_ops.py            # every family
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_ops.py reduce     # ops_reduce.py only
or with the venv `make python` makes (torch 2.15.0 too; golden_ops_bf16 was written by it):
    ~/.cache/axle/venv-torch-2.15.0/bin/python tests/golden/gen_ops.py bf16

Every tests/golden/ops_<family>.py defines `rows()`, yielding Row(name, fn, inputs, ...): fn is
the PyTorch call (the same call the C++ row makes with axle), inputs are float32 (or integer,
bool) tensors. This script runs each row in float32 as PyTorch does, draws a cotangent for every
floating output, differentiates sum_j <out_j, cot_j> with respect to the row's grad inputs, and
writes tests/data/golden_ops_<family>.safetensors:
    <row>.in<i>, <row>.out<j>, <row>.cot<j>, <row>.grad<i>   and metadata <row> = "rtol atol".
Random values come from a generator seeded by the row's name, so a row's values do not change
when rows are added around it.
"""
import importlib
import json
import os
import struct
import sys
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
torch.set_num_threads(1)


class Row:
    """One golden row.

    name   unique within its family; the C++ row has the same name.
    fn     fn(*inputs) -> a tensor or a tuple of tensors (views made inside fn).
    inputs list of tensors (or a function gen -> list, gen a torch.Generator seeded by name).
    grad   indices of inputs to differentiate; None: every floating input.
    rtol, atol  the tolerance; a looser one than 1e-5 / 1e-6 must say why (`why`).
    """

    def __init__(self, name, fn, inputs, grad=None, rtol=1e-5, atol=1e-6, why=""):
        assert (rtol, atol) == (1e-5, 1e-6) or why, f"{name}: a looser tolerance needs a reason"
        self.name, self.fn, self.inputs, self.grad = name, fn, inputs, grad
        self.rtol, self.atol, self.why = rtol, atol, why


def generator(name):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return g


ST_DTYPE = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL",
            torch.uint8: "U8", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors, metadata):
    """u64 header length, JSON header padded with spaces to 8 bytes, raw little-endian data."""
    names = list(tensors)
    header, off, blobs = {"__metadata__": metadata}, 0, []
    for k in names:
        t = tensors[k].detach().contiguous()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t  # numpy has no bfloat16: its bits
        blob = raw.numpy().tobytes() if t.numel() else b""
        header[k] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def run_row(row, out, meta):
    g = generator(row.name)
    inputs = row.inputs(g) if callable(row.inputs) else row.inputs
    inputs = [t.detach().clone() for t in inputs]
    grad_idx = row.grad if row.grad is not None else [i for i, t in enumerate(inputs) if t.is_floating_point()]
    leaves = [t.requires_grad_(i in grad_idx) for i, t in enumerate(inputs)]
    res = row.fn(*leaves)
    outs = list(res) if isinstance(res, (tuple, list)) else [res]
    for i, t in enumerate(inputs):
        out[f"{row.name}.in{i}"] = t.detach()
    loss = None
    for j, o in enumerate(outs):
        out[f"{row.name}.out{j}"] = o.detach()
        if o.is_floating_point() and o.requires_grad:
            cot = torch.randn(o.shape, generator=g)
            out[f"{row.name}.cot{j}"] = cot
            term = (o * cot).sum()
            loss = term if loss is None else loss + term
    if grad_idx:
        assert loss is not None, f"{row.name}: grad inputs but no differentiable output"
        grads = torch.autograd.grad(loss, [leaves[i] for i in grad_idx], allow_unused=True)
        for i, gr in zip(grad_idx, grads):
            assert gr is not None, f"{row.name}: input {i} does not reach the outputs"
            out[f"{row.name}.grad{i}"] = gr
    meta[row.name] = f"{row.rtol!r} {row.atol!r}"


def generate(family):
    mod = importlib.import_module(f"ops_{family}")
    out, meta, seen = {}, {"format": "pt", "generator": f"tests/golden/gen_ops.py (torch {torch.__version__})"}, set()
    for row in mod.rows():
        assert row.name not in seen, f"row {row.name} twice"
        assert "." not in row.name, f"row name {row.name} has a dot"
        seen.add(row.name)
        run_row(row, out, meta)
    path = os.path.join(DATA, f"golden_ops_{family}.safetensors")
    write_safetensors(path, out, meta)
    print(f"{path}: {len(seen)} rows")


def main():
    sys.path.insert(0, HERE)
    fams = sys.argv[1:] or sorted(f[4:-3] for f in os.listdir(HERE) if f.startswith("ops_") and f.endswith(".py"))
    for fam in fams:
        generate(fam)


if __name__ == "__main__":
    main()
