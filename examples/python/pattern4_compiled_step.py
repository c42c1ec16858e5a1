#!/usr/bin/env python3
"""Seed Pattern 4: a compiled step function. `torch_xla.compile(step_fn, full_graph=True,
name="train_step")` traces the whole step (zero_grad, forward, loss, backward, optimizer step)
into one graph, compiled once per input signature and cached; with full_graph=True a value read
inside the step would raise, naming the function.

    python examples/python/pattern4_compiled_step.py [--model cnn|mlp] [--max-steps N] [--json FILE]

`loader` is an MpDeviceLoader over the Fashion-MNIST DataLoader, so the batches arrive on the
device (the step function takes device tensors). With AXLE_DEBUG=1 each compile of 'train_step'
says why (the last, smaller batch: "tensor argument 0 of compiled function 'train_step' changed
from float32[128,1,28,28] to float32[96,1,28,28]").
"""
import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402

torch.manual_seed(args.seed)


def MyModel():
    return fmnist.make_model(args.model)


recorder = fmnist.LossRecorder()
loader = pl.MpDeviceLoader(fmnist.train_loader(args), torch_xla.device())
run = fmnist.Run("pattern4_compiled_step", args, recorder)

# ---- the seed's Pattern 4, verbatim ----
import torch_xla

device = torch_xla.device()
model = MyModel().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()

def step_fn(data, target):
    optimizer.zero_grad()
    output = model(data)
    loss = loss_fn(output, target)
    loss.backward()
    optimizer.step()
    return loss

compiled_step = torch_xla.compile(step_fn, full_graph=True, name="train_step")

for data, target in loader:
    loss = compiled_step(data, target)
# ---- end of the seed's code ----

run.finish(model)
