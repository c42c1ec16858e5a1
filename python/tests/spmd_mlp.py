"""Trains the seed's mlp a few steps on Fashion-MNIST and prints the losses as JSON (run by
test_spmd.py in a fresh process: the device count is read once per process).

    python spmd_mlp.py MODE STEPS LOSS
    MODE: 'one'   one device, no SPMD (the reference)
          'spmd'  SPMD over AXLE_CPU_DEVICES devices, the batch sharded ('data', None, None, None)
                  by xs.shard_batch (what MpDeviceLoader(input_sharding=...) calls)
          'cpu'   PyTorch eager on the cpu
    LOSS: 'ce' (F.cross_entropy) or 'mse' (MSE of the logits against one-hot targets)
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fmnist_data import fmnist


def main():
    mode, steps, loss_kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    batch = int(os.environ.get("BATCH", "128"))
    x, y = fmnist("train", steps * batch)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

    def loss_fn(out, target):
        if loss_kind == "ce":
            return F.cross_entropy(out, target)
        return ((out - F.one_hot(target, 10).to(out.dtype)) ** 2).mean()

    info = {}
    if mode == "cpu":
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    else:
        import torch_xla
        import torch_xla.distributed.spmd as xs
        from torch_xla import _XLAC

        try:
            import torch_xla.runtime as xr
            xr.use_spmd  # re-exported from torch_xla._spmd_runtime by the API work
        except (ImportError, AttributeError):
            import torch_xla._spmd_runtime as xr
        if mode == "spmd":
            xr.use_spmd()
            n = xr.global_runtime_device_count()
            mesh = xs.Mesh(np.arange(n), (n, 1, 1, 1), ("data", "a", "b", "c"))
            spec = xs.ShardingSpec(mesh, ("data", None, None, None))
            info["devices"] = n
        device = torch_xla.device()
        sync = torch_xla.sync
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        if mode == "spmd":
            xb, yb = xs.shard_batch((xb, yb), spec)
            if s == 0:
                info["data_sharding"] = _XLAC._get_xla_sharding_spec(xb)
                info["target_sharding"] = _XLAC._get_xla_sharding_spec(yb)
        else:
            xb, yb = xb.to(device), yb.to(device)
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        sync()
        losses.append(loss.item())
    info["losses"] = losses
    if mode != "cpu":
        import axle
        info["counters"] = {k: v for k, v in axle._C._counters().items()
                            if k.startswith(("aten::", "Spmd", "UncachedCompile", "XlaMarkSharding"))}
    print(json.dumps(info))


if __name__ == "__main__":
    main()
