#!/usr/bin/env python3
"""Seed Pattern 6: eager mode. With `torch_xla.experimental.eager_mode(True)` each op on an xla
tensor runs at once (a one-op graph, compiled once per op signature and cached), so values can be
printed and inspected anywhere, as on cpu. The hot path is then compiled selectively: eager
globally, `torch_xla.compile(fn)` for the training step.

    python examples/python/pattern6_eager_mode.py [--model cnn|mlp] [--eager-steps N] [--max-steps N] [--json FILE]

The first --eager-steps steps (default 20) run op by op, printing what they inspect; the rest run
as one compiled graph per step.
"""
import fmnist  # noqa: I001


def extra(ap):
    ap.add_argument("--eager-steps", type=int, default=20, help="steps run op by op before compiling the step")


args = fmnist.parse_args(__doc__, extra)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch_xla  # noqa: E402

torch.manual_seed(args.seed)
model = fmnist.make_model(args.model).to('xla')
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
loss_fn = nn.CrossEntropyLoss()
recorder = fmnist.LossRecorder()
train_loader = fmnist.train_loader(args, recorder)
run = fmnist.Run("pattern6_eager_mode", args, recorder)

# ---- the seed's Pattern 6, verbatim ----
import torch_xla

torch_xla.experimental.eager_mode(True)

# All XLA ops now execute eagerly — like CPU/CUDA
# Useful for: debugging, inspecting intermediate values, print statements
# Combine with compile for selective compilation:
#   torch_xla.experimental.eager_mode(True)  # global eager
#   compiled_fn = torch_xla.compile(fn)       # selective compile
# ---- end of the seed's code ----

assert torch_xla.experimental.is_eager_mode()


def step_fn(inputs, labels):
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss


compiled_step = torch_xla.compile(step_fn, name="train_step")  # selective compile of the hot path

for i, (inputs, labels) in enumerate(train_loader):
    inputs, labels = inputs.to('xla'), labels.to('xla')
    if i < args.eager_steps:
        # Eager: every op has run when it returns, so intermediate values can be read at once.
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = loss_fn(outputs, labels)
        if i == 0:
            print(f"eager step 1: logits mean {outputs.mean().item():+.4f}, std {outputs.std().item():.4f}; "
                  f"loss {loss.item():.4f}")
        loss.backward()
        if i == 0:
            grad_norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
            print(f"eager step 1: gradient norm {grad_norm.item():.4f}")
        optimizer.step()
    else:
        loss = compiled_step(inputs, labels)
torch_xla.sync()

run.finish(model, extra=dict(eager_steps=args.eager_steps))
