#!/usr/bin/env python3
"""FSDP v2: SpmdFullyShardedDataParallel, FSDP as sharding annotations on axle's SPMD partitioner.
One process drives every device (xr.use_spmd()); the mesh is every device on one axis, 'fsdp'.
Each Linear and Conv2d is its own unit (transformer_auto_wrap_policy), its parameters split over
'fsdp' and its output split on dim 0; the batch is split on dim 0 by the loader. The partitioner
then all-gathers each weight where it is used and reduce-scatters its gradient: the optimizer's
own step() updates the shards.

    AXLE_CPU_DEVICES=2 python examples/python/fsdp_v2.py [--model cnn|mlp] [--max-steps N] [--json FILE]
        [--axle-order] [--save-init FILE]

The matching C++ run is `axle-train --pattern fsdp-spmd --devices N` (the same wrap policy,
{"Linear", "Conv2d"}).
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import functools  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2  # noqa: E402
from torch_xla.experimental.spmd_fully_sharded_data_parallel import transformer_auto_wrap_policy  # noqa: E402

xr.use_spmd()
num_devices = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(num_devices), (num_devices,), ("fsdp",))

torch.manual_seed(args.seed)
model = fmnist.make_model(args.model, args.save_init).to(torch_xla.device())
policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear, nn.Conv2d})
model = FSDPv2(model, mesh=mesh, auto_wrap_policy=policy)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)  # after wrapping
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args)
run = fmnist.Run("fsdp_v2", args, recorder)

loader = pl.MpDeviceLoader(train_loader, torch_xla.device(),
                           input_sharding=xs.ShardingSpec(mesh, ("fsdp", None, None, None)))
for data, target in loader:
    with torch_xla.step():
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()

run.finish(model, extra={"devices": num_devices})
