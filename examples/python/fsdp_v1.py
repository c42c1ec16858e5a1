#!/usr/bin/env python3
"""FSDP v1: XlaFullyShardedDataParallel, one process per device (torch_xla.launch). Each Linear
and Conv2d is its own FSDP unit (transformer_auto_wrap_policy), and the whole model one more:
every rank holds 1/world of each unit's parameters, all-gathers a unit's full weights for its
forward and backward, and reduce-scatters the gradients into its shard. The optimizer is built
on the wrapped model (it steps the shards) and called as `optimizer.step()`: the gradients are
already reduced, and xm.optimizer_step, which would all-reduce them again, refuses.

    AXLE_NUM_DEVICES=2 python examples/python/fsdp_v1.py [--model cnn|mlp] [--max-steps N]
        [--json FILE] [--axle-order] [--save-init FILE]

Processes, reports and --axle-order as in pattern2_multiprocess.py; the matching C++ run is
`axle-train --pattern fsdp --devices N` (the same wrap policy, {"Linear", "Conv2d"}).
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import functools  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP  # noqa: E402
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: E402

torch.manual_seed(args.seed)
cpu_model = fmnist.make_model(args.model, args.save_init)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
run = fmnist.Run("fsdp_v1", args, recorder)
train_loader = fmnist.train_loader(args, recorder)


def _mp_fn(index):
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear, nn.Conv2d})
    model = FSDP(cpu_model.to(torch_xla.device()), auto_wrap_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for inputs, labels in train_loader:
        with torch_xla.step():
            inputs, labels = inputs.to("xla"), labels.to("xla")
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
    run.finish(model)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=())
