#!/usr/bin/env python3
"""Seed Pattern 5 with SPMD input sharding: one process drives every device (xr.use_spmd()).
The model is replicated; MpDeviceLoader splits each batch's dim 0 over the mesh's 'data' axis as
it moves the batch, and axle's partitioner runs each device's share of the step and inserts the
gradients' all-reduce (xm.optimizer_step has nothing left to all-reduce in one process).

    AXLE_CPU_DEVICES=2 python examples/python/pattern5_spmd_input_sharding.py [--model cnn|mlp]
        [--max-steps N] [--json FILE] [--axle-order] [--save-init FILE]

The devices: AXLE_CPU_DEVICES (or CPU_NUM_DEVICES, or XLA_FLAGS'
--xla_force_host_platform_device_count), as axle-train's --devices; the mesh is all of them on
one axis, 'data'. The matching C++ run is `axle-train --pattern spmd --devices N`.
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

xr.use_spmd()  # before any tensor is on the device
num_devices = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(num_devices), (num_devices,), ("data",))

torch.manual_seed(args.seed)
model = fmnist.make_model(args.model, args.save_init).to(torch_xla.device())
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args)  # read by the loader's thread: it prints no progress
run = fmnist.Run("pattern5_spmd_input_sharding", args, recorder)

# ---- the seed's Pattern 5 with SPMD input sharding, verbatim (its loader, then Pattern 5's loop) ----
import torch_xla.distributed.parallel_loader as pl

device = torch_xla.device()
mp_loader = pl.MpDeviceLoader(
    train_loader,
    device,
    input_sharding=xs.ShardingSpec(mesh, ('data', None, None, None))
)

for data, target in mp_loader:
    # data and target already on XLA device
    with torch_xla.step():
        optimizer.zero_grad()
        output = model(data)
        loss = loss_fn(output, target)
        loss.backward()
        xm.optimizer_step(optimizer)
# ---- end of the seed's code ----

run.finish(model, extra={"devices": num_devices})
