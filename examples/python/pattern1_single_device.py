#!/usr/bin/env python3
"""Seed Pattern 1: single device. The model lives on the lazy `xla` device (axle); each
`with torch_xla.step():` block is traced into one graph, compiled once, cached, and run when
the block ends.

    python examples/python/pattern1_single_device.py [--model cnn|mlp] [--max-steps N] [--json FILE]

Trains on Fashion-MNIST (one epoch by default), prints falling losses and the test accuracy.
"""
import fmnist  # noqa: I001  (finds the in-tree torch_xla when it is not installed)

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402,F401

torch.manual_seed(args.seed)
# The snippet takes these as given. The model is still on the cpu: the snippet's model.to('xla')
# moves it, and the optimizer built here keeps working (axle moves each tensor into its existing
# Parameter object, so the optimizer's references stay valid).
model = fmnist.make_model(args.model)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args, recorder)
run = fmnist.Run("pattern1_single_device", args, recorder)

# ---- the seed's Pattern 1, verbatim ----
import torch_xla

model.to('xla')
for inputs, labels in train_loader:
    with torch_xla.step():
        inputs, labels = inputs.to('xla'), labels.to('xla')
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
torch_xla.sync()
# ---- end of the seed's code ----

run.finish(model)
