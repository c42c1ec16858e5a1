#!/usr/bin/python3
"""Writes tests/data/golden_nn_optim.json: golden values from PyTorch for
tests/nn/test_nn.cpp and tests/optim/test_optim.cpp (written with 1.13 first, 2.15 since
BatchNorm's num_batches_tracked is recorded; the other cases' values are unchanged).

Run with the PyTorch venv:
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_nn_optim.py

Every model's weights and inputs are written into the JSON, so the C++ tests load
them and never depend on matching PyTorch's random number generator.
Tensors are stored as {"shape": [...], "values": [flat row-major float list]}.
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_num_threads(1)


def T(t):
    t = t.detach().contiguous()
    if t.dtype.is_floating_point:
        vals = [float(v) for v in t.double().flatten().tolist()]
    else:
        vals = [int(v) for v in t.flatten().tolist()]
    return {"shape": list(t.shape), "values": vals}


def state_of(model):
    return [{"name": k, **T(v)} for k, v in model.state_dict().items()]


def loss_fn(kind, y, aux):
    if kind == "sum_coef":      # sum(y * coef): exercises every op's vjp without a loss op
        return (y * aux).sum()
    if kind == "mse_mean":      # mean((y - target)^2), built from basic ops
        return ((y - aux) ** 2).mean()
    if kind == "cross_entropy":
        return F.cross_entropy(y, aux)
    raise ValueError(kind)


# ---------------------------------------------------------------- nn cases
def nn_case(name, model, x, loss_kind, aux, train=True, eval_after=False):
    model.train(train)
    case = {"name": name, "state": state_of(model), "input": T(x), "train": train, "loss_kind": loss_kind,
            "aux": T(aux)}
    y = model(x)
    loss = loss_fn(loss_kind, y, aux)
    loss.backward()
    case["output"] = T(y)
    case["loss"] = float(loss)
    case["grads"] = [{"name": n, **T(p.grad)} for n, p in model.named_parameters()]
    # buffers after the forward (BatchNorm running statistics are updated in training mode)
    case["buffers_after"] = [{"name": n, **T(b)} for n, b in model.named_buffers()]
    if eval_after:
        model.eval()
        with torch.no_grad():
            case["eval_output"] = T(model(x))
    return case


nn_cases = []

mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 6), nn.ReLU(), nn.Linear(6, 3))
x = torch.randn(3, 1, 3, 4)
nn_cases.append(nn_case("mlp_sum", mlp, x, "sum_coef", torch.randn(3, 3)))
mlp.zero_grad()
nn_cases.append(nn_case("mlp_ce", mlp, x, "cross_entropy", torch.tensor([2, 0, 1])))

cnn = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2), nn.GELU(),
                    nn.AvgPool2d(2, stride=1), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(4, 3))
x = torch.randn(2, 2, 8, 8)
nn_cases.append(nn_case("cnn", cnn, x, "sum_coef", torch.randn(2, 3)))

cnn_nobias = nn.Sequential(nn.Conv2d(1, 3, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), bias=False),
                           nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4 * 3, 2, bias=False))
x = torch.randn(2, 1, 7, 5)
nn_cases.append(nn_case("conv_nobias", cnn_nobias, x, "sum_coef", torch.randn(2, 2)))

bn = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3, momentum=0.2), nn.ReLU(), nn.Flatten(),
                   nn.Linear(3 * 4 * 4, 2))
with torch.no_grad():  # non-trivial affine and running statistics
    bn[1].weight.copy_(torch.rand(3) + 0.5)
    bn[1].bias.copy_(torch.randn(3) * 0.1)
    bn[1].running_mean.copy_(torch.randn(3) * 0.1)
    bn[1].running_var.copy_(torch.rand(3) + 0.5)
x = torch.randn(4, 2, 4, 4)
# num_batches_tracked (0 in the state, 1 after the training forward) is recorded as PyTorch has it
nn_cases.append(nn_case("batchnorm", bn, x, "sum_coef", torch.randn(4, 2), train=True, eval_after=True))

ln = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 2))
with torch.no_grad():
    ln[1].weight.copy_(torch.rand(8) + 0.5)
    ln[1].bias.copy_(torch.randn(8) * 0.1)
x = torch.randn(3, 6)
nn_cases.append(nn_case("layernorm", ln, x, "mse_mean", torch.randn(3, 2)))

emb = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
x = torch.tensor([[1, 3, 3], [9, 0, 4]])
nn_cases.append(nn_case("embedding", emb, x, "sum_coef", torch.randn(2, 3, 2)))

# ---------------------------------------------------------------- optimizer cases
opt_model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
opt_init = state_of(opt_model)
opt_x = torch.randn(6, 4)
opt_t = torch.randn(6, 3)
STEPS = 5


def run_opt(name, make_opt, make_sched=None):
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    model.load_state_dict(opt_model.state_dict())
    opt = make_opt(model.parameters())
    sched = make_sched(opt) if make_sched else None
    losses, lrs, params = [], [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((model(opt_x) - opt_t) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if sched:
            sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        params.append([T(p) for p in model.parameters()])
    return {"name": name, "losses": losses, "lrs": lrs, "params_per_step": params}


optim_cases = [
    dict(run_opt("sgd_plain", lambda p: torch.optim.SGD(p, lr=0.1)),
         kind="sgd", lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    dict(run_opt("sgd_momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
         kind="sgd", lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False),
    dict(run_opt("sgd_nesterov", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
         kind="sgd", lr=0.05, momentum=0.8, dampening=0.0, weight_decay=0.0, nesterov=True),
    dict(run_opt("sgd_weight_decay", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5, weight_decay=0.05)),
         kind="sgd", lr=0.1, momentum=0.5, dampening=0.0, weight_decay=0.05, nesterov=False),
    dict(run_opt("sgd_dampening", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.3)),
         kind="sgd", lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.0, nesterov=False),
    dict(run_opt("sgd_plain_wd", lambda p: torch.optim.SGD(p, lr=0.2, weight_decay=0.1)),
         kind="sgd", lr=0.2, momentum=0.0, dampening=0.0, weight_decay=0.1, nesterov=False),
    dict(run_opt("adam", lambda p: torch.optim.Adam(p, lr=0.01)),
         kind="adam", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0),
    dict(run_opt("adam_wd", lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
         kind="adam", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1),
    dict(run_opt("adamw", lambda p: torch.optim.AdamW(p, lr=0.01)),
         kind="adamw", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01),
    dict(run_opt("adamw_wd", lambda p: torch.optim.AdamW(p, lr=0.02, betas=(0.85, 0.995), eps=1e-6,
                                                         weight_decay=0.3)),
         kind="adamw", lr=0.02, beta1=0.85, beta2=0.995, eps=1e-6, weight_decay=0.3),
    dict(run_opt("sgd_momentum_steplr", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                 lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
         kind="sgd", lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False,
         scheduler="step", step_size=2, gamma=0.5),
    dict(run_opt("adam_cosine", lambda p: torch.optim.Adam(p, lr=0.01),
                 lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=3, eta_min=0.001)),
         kind="adam", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
         scheduler="cosine", T_max=3, eta_min=0.001),
]


# ---------------------------------------------------------------- scheduler LR sequences
def lr_seq(make_sched, lr, epochs):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr)
    s = make_sched(opt)
    seq = [s.get_last_lr()[0]]
    for _ in range(epochs):
        opt.step()
        s.step()
        seq.append(s.get_last_lr()[0])
    return seq


sched_cases = [
    {"name": "step_3_0.1", "kind": "step", "lr": 0.1, "step_size": 3, "gamma": 0.1,
     "lrs": lr_seq(lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.1), 0.1, 10)},
    {"name": "step_1_0.5", "kind": "step", "lr": 1.0, "step_size": 1, "gamma": 0.5,
     "lrs": lr_seq(lambda o: torch.optim.lr_scheduler.StepLR(o, 1, 0.5), 1.0, 8)},
    {"name": "cosine_5_0.001", "kind": "cosine", "lr": 0.1, "T_max": 5, "eta_min": 0.001,
     "lrs": lr_seq(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 5, 0.001), 0.1, 23)},
    {"name": "cosine_10_0", "kind": "cosine", "lr": 0.05, "T_max": 10, "eta_min": 0.0,
     "lrs": lr_seq(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10), 0.05, 12)},
    {"name": "cosine_1_0.01", "kind": "cosine", "lr": 0.1, "T_max": 1, "eta_min": 0.01,
     "lrs": lr_seq(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 1, 0.01), 0.1, 6)},
]

# ---------------------------------------------------------------- reference model sizes
ref_mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
ref_cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
param_counts = {
    "mlp": {"total": sum(p.numel() for p in ref_mlp.parameters()),
            "names": [n for n, _ in ref_mlp.named_parameters()]},
    "cnn": {"total": sum(p.numel() for p in ref_cnn.parameters()),
            "names": [n for n, _ in ref_cnn.named_parameters()]},
}

out = {
    "torch_version": torch.__version__,
    "nn": nn_cases,
    "optim": {"init_state": opt_init, "x": T(opt_x), "target": T(opt_t), "steps": STEPS, "cases": optim_cases},
    "schedulers": sched_cases,
    "param_counts": param_counts,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden_nn_optim.json")
with open(path, "w") as f:
    json.dump(out, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")
