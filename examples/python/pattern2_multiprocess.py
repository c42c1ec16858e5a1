#!/usr/bin/env python3
"""Seed Pattern 2: one process per device with torch_xla.launch. Each rank is a fresh copy of
this program (what comes before launch runs again in it, on the cpu), sees its own device as
xla:0 and trains on its share of every batch; `xm.optimizer_step(optimizer)` all-reduces
(averages) the gradients across the ranks, steps and syncs.

    AXLE_NUM_DEVICES=2 python examples/python/pattern2_multiprocess.py [--model cnn|mlp] [--max-steps N]
        [--json FILE] [--axle-order] [--save-init FILE]

The process count is AXLE_NUM_DEVICES (or CPU_NUM_DEVICES), else 1; under torchrun (RANK,
WORLD_SIZE, ...) this process is one rank. Each rank reports its own losses (--json FILE: rank 0
writes FILE, rank r FILE with '.rank<r>' before the extension). With --axle-order every rank
reads axle-train's share (DistributedSampler), so `axle-train --pattern multiprocess --devices N`
from the same --save-init weights gives rank 0's losses.
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.manual_seed(args.seed)
# The snippet takes these as given, built on the cpu in every process before launch (no xla
# device yet: that is the launched function's); the snippet's model.to('xla') moves the model
# and the optimizer keeps its Parameter objects.
model = fmnist.make_model(args.model, args.save_init)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
run = fmnist.Run("pattern2_multiprocess", args, recorder)
# Each rank reports when its loop has taken the last batch (a launched process ends with _mp_fn).
train_loader = fmnist.train_loader(args, recorder, on_end=lambda: run.finish(model))

# ---- the seed's Pattern 2, verbatim ----
import torch_xla
import torch_xla.core.xla_model as xm

def _mp_fn(index):
    device = torch_xla.device()
    model.to('xla')

    for inputs, labels in train_loader:
        with torch_xla.step():
            inputs, labels = inputs.to('xla'), labels.to('xla')
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            xm.optimizer_step(optimizer)  # all_reduce + step + sync

if __name__ == '__main__':
    torch_xla.launch(_mp_fn, args=())
# ---- end of the seed's code ----
