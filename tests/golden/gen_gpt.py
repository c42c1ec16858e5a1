#!/usr/bin/env python3
"""PyTorch goldens for tests/models/test_gpt.cpp (axle::models::GPT trained as PyTorch trains it).

Run with the PyTorch 2.x venv (setup: /work/shared/reference/peers/setup.sh):
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_gpt.py

The model below is axle::models::GPT (include/axle/models/gpt.h, src/models/gpt.cpp) written in
PyTorch: the same parameter names (tok, pos, blocks.<i>.{ln1,qkv,proj,ln2,fc,out}, ln), the head
tied to tok.weight, pre-LayerNorm blocks, causal scaled_dot_product_attention, GELU (tanh) MLP;
as shared/reference/peers/gpt_pt2.py. Dropout 0, so the runs are deterministic.

Writes (under tests/data, where the tests read their data: AXLE_TEST_DATA)
  gpt_init.safetensors     the initial weights, unique names only (no head.weight: it is tok.weight)
  gpt_batches.safetensors  "x", "y": int64 [30, 8, 16], the 30 training batches
  gpt_golden.json
    config, optimizer and schedule settings;
    train: per step i (0..29): lr (the learning rate the step used), loss (before the step),
           grad_norm (total 2-norm before clipping, clip_grad_norm_'s return);
           AdamW in two groups (>= 2-D params: weight_decay 0.1; the rest: 0), betas (0.9, 0.95),
           lr 1e-3 with LambdaLR(warmup 5, cosine to 1e-4 at step 30: axle::optim::warmup_cosine),
           clip_grad_norm_(1.5) (the norms run from 1.8 to 1.1: steps clipped and not), one
           scheduler step per optimizer step;
    accum: 3 steps from the same initial weights, lr 1e-3 constant, same groups and clipping:
           batch 32 = golden batches 4s..4s+3 concatenated (losses, grad norms), and the same as 4
           micro-batches of 8 with loss / 4 each (losses = the sum of the 4 quarter losses);
    clip: clip_grad_norm_ on fixed gradients (3 tensors), norm types 2, 1, inf and 3, clipping
          (max_norm 0.5) and not (max_norm 1000): the returned norm and the gradients after.
Tensors in the JSON are {"shape": [...], "values": [flat row-major]}.
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

VOCAB, BLOCK, N_LAYER, N_HEAD, N_EMBD, BATCH, STEPS = 48, 16, 2, 2, 32, 8, 30
LR, MIN_LR, WARMUP, MAX_STEPS, WD, BETAS, CLIP = 1e-3, 1e-4, 5, 30, 0.1, (0.9, 0.95), 1.5
ACCUM_STEPS, ACCUM = 3, 4

torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        d = N_EMBD
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc = nn.Linear(d, 4 * d); s.out = nn.Linear(4 * d, d)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(y)
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok = nn.Embedding(VOCAB, N_EMBD); s.pos = nn.Embedding(BLOCK, N_EMBD)
        s.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        s.ln = nn.LayerNorm(N_EMBD)
        s.head = nn.Linear(N_EMBD, VOCAB, bias=False)
        s.head.weight = s.tok.weight
        # Larger than GPT-2's initialisation (the values come from the file anyway), so that the
        # pre-activations are O(1) and the test tells apart what small weights would hide (GELU's
        # tanh approximation, the causal mask, the softmax scale); LayerNorms and biases random.
        for n, p in s.named_parameters():
            if n.endswith(("proj.weight", "out.weight")): nn.init.normal_(p, 0, 0.1)
            elif n.endswith(("qkv.weight", "fc.weight")): nn.init.normal_(p, 0, 0.3)
            elif p.dim() >= 2: nn.init.normal_(p, 0, 0.1)  # embeddings
            elif ".ln" in n or n.startswith("ln."): nn.init.normal_(p, 1.0 if n.endswith("weight") else 0.0, 0.1)
            else: nn.init.normal_(p, 0, 0.1)  # Linear biases

    def forward(s, idx, tgt):
        x = s.tok(idx) + s.pos(torch.arange(idx.shape[1]))
        for b in s.blocks: x = b(x)
        return F.cross_entropy(s.head(s.ln(x)).view(-1, VOCAB), tgt.view(-1))


def lr_lambda(step):  # axle::optim::warmup_cosine(LR, WARMUP, MAX_STEPS, MIN_LR)
    floor = MIN_LR / LR
    if step < WARMUP: return (step + 1) / WARMUP
    if step >= MAX_STEPS: return floor
    progress = (step - WARMUP) / (MAX_STEPS - WARMUP)
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - floor)


def optimizer(m):
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}],
                             lr=LR, betas=BETAS)


def write_safetensors(path, tensors):
    # u64 header length, JSON header padded with spaces to 8 bytes, raw little-endian data.
    dt = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}
    arrays = {k: np.ascontiguousarray(v.detach().numpy()) for k, v in tensors.items()}
    names = sorted(arrays, key=lambda k: (-arrays[k].dtype.itemsize, k))
    header, off = {}, 0
    for k in names:
        header[k] = {"dtype": dt[arrays[k].dtype], "shape": list(arrays[k].shape), "data_offsets": [off, off + arrays[k].nbytes]}
        off += arrays[k].nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text))); f.write(text)
        for k in names: f.write(arrays[k].tobytes())


def T(t):
    t = t.detach().contiguous()
    return {"shape": list(t.shape), "values": [float(v) for v in t.double().flatten().tolist()]}


def main():
    torch.manual_seed(15)
    model = GPT()
    init = {k: v.clone() for k, v in model.state_dict().items() if k != "head.weight"}
    g = torch.Generator().manual_seed(15)
    xs = torch.randint(0, VOCAB, (STEPS, BATCH, BLOCK), generator=g)
    # Targets a causal model learns fast: y[t] = x[t] + 1 mod V (a bigram rule), so the loss
    # falls over the 30 steps.
    ys = (xs + 1) % VOCAB

    out = {"config": {"vocab_size": VOCAB, "block_size": BLOCK, "n_layer": N_LAYER, "n_head": N_HEAD,
                      "n_embd": N_EMBD, "dropout": 0.0, "batch": BATCH, "steps": STEPS},
           "optim": {"lr": LR, "min_lr": MIN_LR, "warmup": WARMUP, "max_steps": MAX_STEPS, "weight_decay": WD,
                     "betas": list(BETAS), "clip": CLIP}}

    # ---- 30 steps of AdamW + warmup/cosine + clipping
    opt = optimizer(model)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    lrs, losses, norms = [], [], []
    for i in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad(set_to_none=True)
        loss = model(xs[i], ys[i]); loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)))
        opt.step(); sched.step()
        losses.append(loss.item())
    out["train"] = {"lr": lrs, "loss": losses, "grad_norm": norms}

    # ---- gradient accumulation: one batch of 32 against 4 micro-batches of 8
    def run(accum):
        m = GPT(); m.load_state_dict(init, strict=False)
        o = optimizer(m)
        ls, ns = [], []
        for s in range(ACCUM_STEPS):
            x = xs[ACCUM * s:ACCUM * (s + 1)].reshape(-1, BLOCK)
            y = ys[ACCUM * s:ACCUM * (s + 1)].reshape(-1, BLOCK)
            o.zero_grad(set_to_none=True)
            total = 0.0
            for xm, ym in zip(x.chunk(accum), y.chunk(accum)):
                loss = m(xm, ym) / accum; loss.backward(); total += loss.item()
            ns.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)))
            o.step()
            ls.append(total)
        return ls, ns
    l32, n32 = run(1)
    l8, n8 = run(ACCUM)
    out["accum"] = {"steps": ACCUM_STEPS, "micro": ACCUM, "lr": LR, "loss_32": l32, "grad_norm_32": n32,
                    "loss_4x8": l8, "grad_norm_4x8": n8}

    # ---- clip_grad_norm_ on fixed gradients
    gc = torch.Generator().manual_seed(3)
    grads = [torch.randn(4, 3, generator=gc), torch.randn(5, generator=gc) * 0.3, torch.randn(2, 3, 2, generator=gc) * 2]
    cases = []
    for norm_type in [2.0, 1.0, math.inf, 3.0]:
        for max_norm in [0.5, 1000.0]:
            ps = [torch.zeros_like(gr, requires_grad=True) for gr in grads]
            for p, gr in zip(ps, grads): p.grad = gr.clone()
            total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
            cases.append({"norm_type": "inf" if math.isinf(norm_type) else norm_type, "max_norm": max_norm,
                          "total": float(total), "clipped": [T(p.grad) for p in ps]})
    out["clip"] = {"grads": [T(gr) for gr in grads], "cases": cases}

    os.makedirs(DATA, exist_ok=True)
    write_safetensors(os.path.join(DATA, "gpt_init.safetensors"), init)
    write_safetensors(os.path.join(DATA, "gpt_batches.safetensors"), {"x": xs, "y": ys})
    with open(os.path.join(DATA, "gpt_golden.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
    print("losses", [round(v, 4) for v in losses])
    print("grad norms", [round(v, 4) for v in norms])
    print("accum", l32, l8)


if __name__ == "__main__":
    main()
