#!/usr/bin/env python3
"""Seed Pattern 5: MpDeviceLoader on one device. A background thread reads the DataLoader and
moves each batch to the xla device while the current step runs; taking a batch marks the step
boundary, as torch_xla's loader does. `xm.optimizer_step(optimizer)` on one device is
`optimizer.step()` (nothing to all-reduce with world size 1).

    python examples/python/pattern5_mp_device_loader.py [--model cnn|mlp] [--max-steps N] [--json FILE]
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402

torch.manual_seed(args.seed)
model = fmnist.make_model(args.model).to(torch_xla.device())
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args)
run = fmnist.Run("pattern5_mp_device_loader", args, recorder)

# ---- the seed's Pattern 5, verbatim ----
import torch_xla.distributed.parallel_loader as pl

device = torch_xla.device()
mp_loader = pl.MpDeviceLoader(train_loader, device)

for data, target in mp_loader:
    # data and target already on XLA device
    with torch_xla.step():
        optimizer.zero_grad()
        output = model(data)
        loss = loss_fn(output, target)
        loss.backward()
        xm.optimizer_step(optimizer)
# ---- end of the seed's code ----

run.finish(model)
