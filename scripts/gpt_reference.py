#!/usr/bin/env python3
"""PyTorch reference for issue 15's "Done when": trains axle-train's default `--model gpt`
configuration on the same character-level corpus and reports the validation loss, so that
`axle-train --model gpt --max-steps 1000 --init FILE` can be compared with it (within 2%).

Run with the PyTorch 2.x venv (a tool only; axle never needs Python):
    nice /root/.cache/axle-peers/pt215/bin/python scripts/gpt_reference.py \
        --max-steps 1000 --eval-every 100 --save-init /tmp/gpt_init.safetensors
    axle-train --model gpt --max-steps 1000 --init /tmp/gpt_init.safetensors ...

The model is axle::models::GPT (src/models/gpt.cpp) in PyTorch: token + position embeddings,
n_layer pre-LayerNorm blocks (causal multi-head attention through
scaled_dot_product_attention, GELU-tanh MLP of 4x), final LayerNorm, head tied to tok.weight;
dropout on the embeddings, the attention weights and both residual branches; GPT-2's
initialisation. Parameter names are axle's (tok, pos, blocks.<i>.{ln1,qkv,proj,ln2,fc,out}, ln).

Data: the reading rule of include/axle/data/text.h: a file, or a directory whose regular files
(not symlinks, not hidden, not *.dat) are read in name order and concatenated; the text is
UTF-8, the vocabulary the sorted distinct code points; the first 90% of the tokens train, the
rest validate. Training batches: `batch` windows of block_size + 1 tokens at uniformly random
starts (torch.Generator seeded with --seed). Validation: the mean loss over --eval-batches
batches of windows at evenly spaced starts over the validation split (the same windows at every
evaluation), in eval mode (no dropout).

Optimisation: AdamW(lr, betas (0.9, 0.95)), weight decay 0.1 on the >= 2-D parameters and 0 on
the rest; LambdaLR with linear warmup ((step + 1) / warmup) then cosine to min_lr at max_steps
(axle::optim::warmup_cosine); clip_grad_norm_(1.0).

Output: one JSON line per evaluation ({"step", "val_loss", "train_loss", "lr", "grad_norm",
"elapsed_s"}; step k = after k optimizer steps, step 0 the initial weights), then a summary line
({"final_val_loss", ...}).
"""
import argparse
import json
import math
import os
import struct
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--data", default="/usr/share/games/fortunes", help="UTF-8 text file or directory")
ap.add_argument("--val-fraction", type=float, default=0.1)
ap.add_argument("--n-layer", type=int, default=4)
ap.add_argument("--n-head", type=int, default=4)
ap.add_argument("--n-embd", type=int, default=128)
ap.add_argument("--block-size", type=int, default=128)
ap.add_argument("--dropout", type=float, default=0.1)
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--min-lr", type=float, default=1e-4)
ap.add_argument("--warmup-steps", type=int, default=100)
ap.add_argument("--max-steps", type=int, default=1000)
ap.add_argument("--weight-decay", type=float, default=0.1)
ap.add_argument("--clip", type=float, default=1.0)
ap.add_argument("--eval-every", type=int, default=100)
ap.add_argument("--eval-batches", type=int, default=20)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--save-init", default="", help="write the initial weights here (safetensors, axle's names)")
ap.add_argument("--init", default="", help="start from these weights (safetensors, axle's names)")
args = ap.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)


# ---------------------------------------------------------------- data
def read_text(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith(".") and not n.endswith(".dat"))
        parts = []
        for n in names:
            p = os.path.join(path, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                parts.append(f.read())
        raw = b"".join(parts)
    else:
        with open(path, "rb") as f:
            raw = f.read()
    if not raw:
        sys.exit(f"error: {path}: empty text")
    return raw.decode("utf-8")


text = read_text(args.data)
vocab = sorted(set(text))
index = {c: i for i, c in enumerate(vocab)}
tokens = torch.tensor([index[c] for c in text], dtype=torch.int64)
n_train = int(len(tokens) * (1 - args.val_fraction))
train_tok, val_tok = tokens[:n_train], tokens[n_train:]
T = args.block_size
assert len(val_tok) > T + 1 and len(train_tok) > T + 1, "corpus too short for one window"


def windows(split, starts):
    idx = starts[:, None] + torch.arange(T + 1)[None, :]
    w = split[idx]
    return w[:, :-1], w[:, 1:]


# ---------------------------------------------------------------- model
class Block(nn.Module):
    def __init__(s, d, h, p):
        super().__init__()
        s.h, s.p = h, p
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc = nn.Linear(d, 4 * d); s.out = nn.Linear(4 * d, d)

    def forward(s, x):
        B, L, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, L, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=s.p if s.training else 0.0)
        x = x + F.dropout(s.proj(y.transpose(1, 2).reshape(B, L, C)), s.p, s.training)
        return x + F.dropout(s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh")), s.p, s.training)


class GPT(nn.Module):
    def __init__(s, V):
        super().__init__()
        C = args.n_embd
        s.tok = nn.Embedding(V, C); s.pos = nn.Embedding(T, C)
        s.blocks = nn.ModuleList(Block(C, args.n_head, args.dropout) for _ in range(args.n_layer))
        s.ln = nn.LayerNorm(C)
        s.head = nn.Linear(C, V, bias=False)
        s.head.weight = s.tok.weight
        resid = 0.02 / math.sqrt(2 * args.n_layer)  # GPT-2's initialisation, as axle's
        for n, p in s.named_parameters():
            if n.endswith(("proj.weight", "out.weight")): nn.init.normal_(p, 0.0, resid)
            elif p.dim() >= 2: nn.init.normal_(p, 0.0, 0.02)
            elif n.endswith("weight"): nn.init.ones_(p)  # LayerNorm
            else: nn.init.zeros_(p)

    def forward(s, idx, tgt):
        x = F.dropout(s.tok(idx) + s.pos(torch.arange(idx.shape[1])), args.dropout, s.training)
        for b in s.blocks: x = b(x)
        logits = s.head(s.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))


# ---------------------------------------------------------------- safetensors (by hand)
def save_safetensors(path, tensors):
    arrays = {k: np.ascontiguousarray(v.detach().cpu().float().numpy()) for k, v in tensors.items()}
    names = sorted(arrays)
    header, off = {}, 0
    for k in names:
        header[k] = {"dtype": "F32", "shape": list(arrays[k].shape), "data_offsets": [off, off + arrays[k].nbytes]}
        off += arrays[k].nbytes
    text_h = json.dumps(header, separators=(",", ":")).encode()
    text_h += b" " * ((8 - (8 + len(text_h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text_h))); f.write(text_h)
        for k in names: f.write(arrays[k].astype("<f4").tobytes())


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, info in header.items():
        if k == "__metadata__": continue
        assert info["dtype"] == "F32", (k, info["dtype"])
        b, e = info["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).copy())
    return out


# ---------------------------------------------------------------- training
torch.manual_seed(args.seed)
model = GPT(len(vocab))
if args.init:
    sd = load_safetensors(args.init)
    sd["head.weight"] = sd["tok.weight"]
    model.load_state_dict(sd, strict=True)
if args.save_init:
    save_safetensors(args.save_init, {k: v for k, v in model.state_dict().items() if k != "head.weight"})

decay = [p for p in model.parameters() if p.dim() >= 2]
rest = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                        lr=args.lr, betas=(0.9, 0.95))


def lr_factor(step):  # axle::optim::warmup_cosine
    floor = args.min_lr / args.lr
    if step < args.warmup_steps: return (step + 1) / args.warmup_steps
    if step >= args.max_steps: return floor
    progress = (step - args.warmup_steps) / (args.max_steps - args.warmup_steps)
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - floor)


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
gen = torch.Generator().manual_seed(args.seed)
n_val = args.eval_batches * args.batch_size
val_starts = torch.linspace(0, len(val_tok) - T - 1, n_val).round().to(torch.int64)


@torch.no_grad()
def evaluate():
    model.eval()
    total = 0.0
    for b in range(args.eval_batches):
        x, y = windows(val_tok, val_starts[b * args.batch_size:(b + 1) * args.batch_size])
        total += model(x, y).item()
    model.train()
    return total / args.eval_batches


def report(step, train_loss, lr, grad_norm, t0):
    line = {"step": step, "val_loss": round(evaluate(), 6), "train_loss": train_loss, "lr": lr, "grad_norm": grad_norm,
            "elapsed_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(line), flush=True)
    return line["val_loss"]


t0 = time.perf_counter()
print(json.dumps({"reference": "pytorch", "version": torch.__version__, "data": args.data, "chars": len(tokens),
                  "vocab_size": len(vocab), "train_tokens": len(train_tok), "val_tokens": len(val_tok),
                  "params": sum(p.numel() for p in model.parameters()), "config": vars(args)}), flush=True)
model.train()
val = report(0, None, None, None, t0)
for step in range(args.max_steps):
    lr = opt.param_groups[0]["lr"]
    starts = torch.randint(0, len(train_tok) - T, (args.batch_size,), generator=gen)
    x, y = windows(train_tok, starts)
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip))
    opt.step()
    sched.step()
    if (step + 1) % args.eval_every == 0 or step + 1 == args.max_steps:
        val = report(step + 1, round(loss.item(), 6), lr, round(gn, 6), t0)
print(json.dumps({"final_val_loss": val, "steps": args.max_steps, "elapsed_s": round(time.perf_counter() - t0, 1)}),
      flush=True)
