#!/usr/bin/env python3
"""Writes tests/data/golden_losses.json: PyTorch golden values for the loss modules
(nn::CrossEntropyLoss, nn::NLLLoss, nn::MSELoss) read by tests/lazy/test_port.cpp.

Run with the PyTorch 2.x venv built by ../shared/reference/peers/setup.sh:
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_losses.py

Inputs are drawn as float32 (so axle reads exactly the same numbers), then every loss
and gradient is computed in float64: the reference is the exact result of the
float32 inputs. For reduction "none" the gradient is that of sum(loss * grad_output).
Tensors are stored as {"shape": [...], "values": [flat row-major list]}.
"""
import json
import os

import torch
import torch.nn as nn

torch.manual_seed(2026)


def T(t):
    t = t.detach().contiguous()
    if t.dtype.is_floating_point:
        vals = [float(v) for v in t.double().flatten().tolist()]
    else:
        vals = [int(v) for v in t.flatten().tolist()]
    return {"shape": list(t.shape), "values": vals}


def f32(*shape):
    return torch.randn(*shape, dtype=torch.float32)


def classes(n_classes, *shape, ignore=None, n_ignored=0):
    t = torch.randint(0, n_classes, shape, dtype=torch.int64)
    if ignore is not None and n_ignored:
        flat = t.view(-1)
        flat[torch.randperm(flat.numel())[:n_ignored]] = ignore
    return t


def probs(*shape):
    return torch.softmax(f32(*shape), dim=1)


CASES = []


def case(name, loss, options, inp, target, log_softmax_input=False, grad_target=False):
    """options: keyword arguments of the torch.nn loss (weight as a float32 tensor)."""
    kw = dict(options)
    rec = {"name": name, "loss": loss, "options": {k: v for k, v in options.items() if k != "weight"}}
    if "weight" in options:
        rec["options"]["weight"] = T(options["weight"])
        kw["weight"] = options["weight"].double()
    if log_softmax_input:  # NLLLoss takes log-probabilities: store them as float32
        inp = torch.log_softmax(inp.double(), dim=1).float()
    module = getattr(nn, loss)(**kw)
    x = inp.double().requires_grad_(True)
    t = target.double().requires_grad_(grad_target) if target.dtype.is_floating_point else target
    out = module(x, t)
    rec["input"] = T(inp)
    rec["target"] = T(target)
    if out.dim() == 0:
        out.backward()
    else:
        gout = f32(*out.shape)
        rec["grad_output"] = T(gout)
        out.backward(gout.double())
    rec["output"] = T(out)
    rec["grad_input"] = T(x.grad)
    if grad_target:
        rec["grad_target"] = T(t.grad)
    CASES.append(rec)


N, C = 6, 5
W = torch.rand(C, dtype=torch.float32) + 0.5

# ---- CrossEntropyLoss
case("ce_default", "CrossEntropyLoss", {}, f32(N, C), classes(C, N))
case("ce_sum_ignore", "CrossEntropyLoss", {"reduction": "sum", "ignore_index": 2}, f32(N, C),
     torch.tensor([2, 0, 2, 4, 1, 3]))
case("ce_none_smoothing", "CrossEntropyLoss", {"reduction": "none", "label_smoothing": 0.1}, f32(N, C),
     classes(C, N, ignore=-100, n_ignored=2))
case("ce_mean_smoothing_ignore", "CrossEntropyLoss", {"ignore_index": 3, "label_smoothing": 0.25}, f32(N, C),
     torch.tensor([3, 1, 0, 3, 4, 2]))
case("ce_weight_mean", "CrossEntropyLoss", {"weight": W}, f32(N, C), classes(C, N))
case("ce_weight_none_ignore", "CrossEntropyLoss", {"weight": W, "reduction": "none", "ignore_index": 1},
     f32(N, C), torch.tensor([1, 0, 2, 1, 4, 3]))
case("ce_weight_sum_smoothing", "CrossEntropyLoss", {"weight": W, "reduction": "sum", "label_smoothing": 0.2},
     f32(N, C), classes(C, N))
case("ce_weight_mean_smoothing_ignore", "CrossEntropyLoss",
     {"weight": W, "ignore_index": 0, "label_smoothing": 0.3}, f32(N, C), torch.tensor([0, 2, 4, 0, 1, 3]))
case("ce_probabilities_smoothing", "CrossEntropyLoss", {"label_smoothing": 0.15}, f32(N, C), probs(N, C))
case("ce_probabilities_weight", "CrossEntropyLoss", {"weight": W}, f32(N, C), probs(N, C))
case("ce_spatial_weight_ignore", "CrossEntropyLoss", {"weight": W, "ignore_index": 4}, f32(3, C, 2, 2),
     classes(C, 3, 2, 2))
case("ce_unbatched", "CrossEntropyLoss", {}, f32(C), torch.tensor(3))
case("ce_unbatched_weight_none", "CrossEntropyLoss", {"weight": W, "reduction": "none"}, f32(C), torch.tensor(2))

# ---- NLLLoss
case("nll_default", "NLLLoss", {}, f32(N, C), classes(C, N), log_softmax_input=True)
case("nll_sum_ignore", "NLLLoss", {"reduction": "sum", "ignore_index": 0}, f32(N, C),
     torch.tensor([0, 1, 2, 0, 3, 4]), log_softmax_input=True)
case("nll_none", "NLLLoss", {"reduction": "none"}, f32(N, C), classes(C, N, ignore=-100, n_ignored=1),
     log_softmax_input=True)
case("nll_weight_mean_ignore", "NLLLoss", {"weight": W, "ignore_index": 2}, f32(N, C),
     torch.tensor([2, 1, 0, 4, 2, 3]), log_softmax_input=True)
case("nll_weight_none", "NLLLoss", {"weight": W, "reduction": "none"}, f32(N, C), classes(C, N),
     log_softmax_input=True)
case("nll_spatial", "NLLLoss", {}, f32(2, C, 3), classes(C, 2, 3), log_softmax_input=True)

# ---- MSELoss (gradients for input and target)
case("mse_default", "MSELoss", {}, f32(N, C), f32(N, C), grad_target=True)
case("mse_sum", "MSELoss", {"reduction": "sum"}, f32(3, 4, 2), f32(3, 4, 2), grad_target=True)
case("mse_none", "MSELoss", {"reduction": "none"}, f32(N, C), f32(N, C), grad_target=True)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden_losses.json")
with open(out, "w") as f:
    json.dump({"torch_version": torch.__version__, "cases": CASES}, f, indent=None, separators=(",", ":"))
    f.write("\n")
print(f"wrote {len(CASES)} cases to {os.path.normpath(out)} (torch {torch.__version__})")
