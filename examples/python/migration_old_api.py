#!/usr/bin/env python3
"""The seed's API migration table, single-process rows, written with the OLD names: they still
work, and each warns (DeprecationWarning) naming its replacement.

| Old                                  | New                                     |
|--------------------------------------|-----------------------------------------|
| xm.xla_device()                      | torch_xla.device()                      |
| ParallelLoader(loader, [device])     | pl.MpDeviceLoader(loader, device)       |
| xm.mark_step()                       | torch_xla.sync() or torch_xla.step()    |
| manual optimizer.step() + sync       | xm.optimizer_step(optimizer)            |

    python examples/python/migration_old_api.py [--model cnn|mlp] [--max-steps N] [--json FILE]

The deprecation warnings are printed at the end (and listed under "deprecations" in --json).
"""
import warnings

import fmnist  # noqa: I001

args = fmnist.parse_args(__doc__)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402,F401
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402

torch.manual_seed(args.seed)
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args)
run = fmnist.Run("migration_old_api", args, recorder)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", DeprecationWarning)

    # ---- the old API ----
    device = xm.xla_device()
    model = fmnist.make_model(args.model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()

    para_loader = pl.ParallelLoader(train_loader, [device])
    for data, target in para_loader.per_device_loader(device):
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        xm.mark_step()
    # ---- end of the old API ----

deprecations = sorted({str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)})
for message in deprecations:
    print(f"DeprecationWarning: {message}")
run.finish(model, extra=dict(deprecations=deprecations))
