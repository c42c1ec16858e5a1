#!/usr/bin/env python3
"""One training-step benchmark, the same script for every system it compares (issue 24, item 7):

  axle's xla device     $AXLE_VENV/bin/python step.py --device xla   (torch_xla here is axle's package)
  PyTorch eager CPU     $AXLE_VENV/bin/python step.py --device cpu
  torch_xla 2.9 (CPU)   $ANCHORS_DIR/ptxla/bin/python step.py --device xla   (PJRT_DEVICE=CPU)

Models: mlp and cnn on Fashion-MNIST batches (batch 128, SGD lr 0.01 momentum 0.9, as the peers in
shared/reference/peers), gpt: the char GPT of gpt_pt2.py (4 layers x 128, 4 heads, block 128, batch 32,
AdamW, clipping at 1.0, dropout 0) on random tokens. The loop is the seed's Pattern 1 (`with
torch_xla.step():`); on xla each step also waits for the device (xm.wait_device_ops()), so a step's
time is its whole cost. Prints one JSON line: median/p10/p90 step ms, and on xla the Python-side
tracing time per step (the step's body until its closing sync) and the axle tensors made per step.
"""
import argparse
import json
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--device", choices=["xla", "cpu"], default="xla")
ap.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="cnn")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--warm", type=int, default=5)
a = ap.parse_args()
for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[k] = str(a.threads)
os.environ.setdefault("PJRT_DEVICE", "CPU")
if a.threads == 1:  # XLA's CPU client (real torch_xla) sizes its pool from the affinity
    os.sched_setaffinity(0, {0})
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
system = "pytorch-eager"
if a.device == "xla":
    import torch_xla  # noqa: E402
    import torch_xla.core.xla_model as xm  # noqa: E402
    import torch_xla.debug.metrics as met  # noqa: E402
    system = "axle" if hasattr(torch_xla, "_axle") or "axle" in sys.modules else f"torch_xla-{torch_xla.__version__}"
dev = torch.device(a.device)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=96, block=128, d=128, layers=4, heads=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


if a.model == "gpt":
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    batches = [(torch.randint(0, 96, (32, 128)), torch.randint(0, 96, (32, 128))) for _ in range(4)]
else:
    model = mlp() if a.model == "mlp" else cnn()
    batches = [(torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))) for _ in range(4)]
model.to(dev)
if a.model == "gpt":
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": other, "weight_decay": 0.0}], lr=3e-4)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()


def body(inputs, labels):
    inputs, labels = inputs.to(dev), labels.to(dev)
    optimizer.zero_grad()
    out = model(inputs)
    loss = loss_fn(out.view(-1, out.shape[-1]), labels.view(-1))
    loss.backward()
    if a.model == "gpt":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


ts, traces, made = [], [], []
for i in range(a.warm + a.steps):
    inputs, labels = batches[i % len(batches)]
    t0 = time.perf_counter()
    if a.device == "xla":
        before = met.counter_value("CreateXlaTensor") or 0
        with torch_xla.step():
            body(inputs, labels)
            t1 = time.perf_counter()
        xm.wait_device_ops()
        made.append((met.counter_value("CreateXlaTensor") or 0) - before)
        traces.append(t1 - t0)
    else:
        body(inputs, labels)
    ts.append(time.perf_counter() - t0)

w = sorted(ts[a.warm:])
rec = dict(system=system, device=a.device, model=a.model, threads=a.threads, steps=a.steps,
           median_step_ms=round(statistics.median(w) * 1e3, 3), p10_step_ms=round(w[len(w) // 10] * 1e3, 3),
           p90_step_ms=round(w[9 * len(w) // 10] * 1e3, 3), first_step_s=round(ts[0], 3))
if a.device == "xla":
    tr = statistics.median(traces[a.warm:])
    n = statistics.median(made[a.warm:])
    rec.update(trace_ms=round(tr * 1e3, 3), tensors_per_step=n, trace_us_per_tensor=round(tr * 1e6 / max(n, 1), 2),
               uncached_compiles=met.counter_value("UncachedCompile"),
               fallbacks={k: met.counter_value(k) for k in met.counter_names() if k.startswith("aten::")})
print(json.dumps(rec), flush=True)
