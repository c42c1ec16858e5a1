#!/usr/bin/env python3
"""Seed Pattern 3: PyTorch's DistributedDataParallel over the `xla` process group, one process per
device (torch_xla.launch). DDP broadcasts rank 0's weights at construction, and its gradient
all-reduce (one per bucket, gradient_as_bucket_view=True) is a collective op inside each step's
graph; `optimizer.step()` then updates every rank alike.

    AXLE_NUM_DEVICES=2 python examples/python/pattern3_ddp.py [--model cnn|mlp] [--max-steps N]
        [--json FILE] [--axle-order] [--save-init FILE]

Processes, reports and --axle-order as in pattern2_multiprocess.py; the matching C++ run is
`axle-train --pattern ddp --devices N`, and DDP gives Pattern 2's losses.
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.manual_seed(args.seed)
# As in pattern2_multiprocess.py: built on the cpu before launch, moved by the snippet.
model = fmnist.make_model(args.model, args.save_init)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
run = fmnist.Run("pattern3_ddp", args, recorder)
train_loader = fmnist.train_loader(args, recorder, on_end=lambda: run.finish(model))

# ---- the seed's Pattern 3, verbatim ----
import torch.distributed as dist
import torch_xla
import torch_xla.distributed.xla_backend
from torch.nn.parallel import DistributedDataParallel as DDP

def _mp_fn(rank):
    dist.init_process_group("xla", init_method='xla://')
    model.to('xla')
    ddp_model = DDP(model, gradient_as_bucket_view=True)

    for inputs, labels in train_loader:
        with torch_xla.step():
            inputs, labels = inputs.to('xla'), labels.to('xla')
            optimizer.zero_grad()
            outputs = ddp_model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()

if __name__ == '__main__':
    torch_xla.launch(_mp_fn, args=())
# ---- end of the seed's code ----
