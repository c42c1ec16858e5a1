#!/usr/bin/env python3
"""A character-level GPT trained on the xla device (axle), in plain torch.nn: token and position
Embeddings, pre-LayerNorm blocks with causal F.scaled_dot_product_attention and a tanh-GELU MLP,
the output layer tied to the token embedding; AdamW (weight decay on the matrices only), warmup +
cosine learning rate, gradient clipping (clip_grad_norm_) inside the step graph. The model is
shared/reference/peers/gpt_pt2.py's (with GPT-2's N(0, 0.02) initialisation and optional dropout);
the data and loop are those of examples/09_gpt.cpp.

    python examples/python/gpt.py [--max-steps 200] [--data /usr/share/games/fortunes] [--json FILE]

The text: a UTF-8 file, or a directory whose regular files (not hidden, not *.dat, not symlinks
such as fortunes' *.u8) are concatenated in name order; 90% train, 10% validation. Each step
trains on --batch-size random windows of --block characters. Prints falling losses, a validation
loss and a sample; exits with 77 (skipped) when the text is missing.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if importlib.util.find_spec("torch_xla") is None:  # in-tree run: the package built in place in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--data", default="/usr/share/games/fortunes")
ap.add_argument("--device", default="xla", help="xla (axle) or cpu (PyTorch eager, for comparison)")
ap.add_argument("--max-steps", type=int, default=200)
ap.add_argument("--batch-size", type=int, default=16)
ap.add_argument("--block", type=int, default=64)
ap.add_argument("--n-layer", type=int, default=2)
ap.add_argument("--n-head", type=int, default=4)
ap.add_argument("--n-embd", type=int, default=64)
ap.add_argument("--dropout", type=float, default=0.0)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--log-every", type=int, default=50)
ap.add_argument("--val-batches", type=int, default=4)
ap.add_argument("--sample-chars", type=int, default=80)
ap.add_argument("--json", default=None, metavar="FILE", help="write losses, validation loss and counters here")
args = ap.parse_args()

if not os.path.exists(args.data):
    print(f"SKIP: {args.data} not found (apt-get install fortunes, or pass --data FILE)")
    sys.exit(77)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_xla  # noqa: E402


# ---- data ----
def read_text(path):
    if os.path.isfile(path):
        names = [path]
    else:
        names = sorted((os.path.join(path, n) for n in os.listdir(path)
                        if not n.startswith(".") and not n.endswith(".dat")),
                       key=lambda p: os.fsencode(os.path.basename(p)))
        names = [p for p in names if os.path.isfile(p) and not os.path.islink(p)]
    if not names:
        raise SystemExit(f"{path}: no text files")
    return "".join(open(p, "rb").read().decode("utf-8") for p in names)


text = read_text(args.data)
vocab = sorted(set(text))
stoi = {c: i for i, c in enumerate(vocab)}
ids = torch.tensor([stoi[c] for c in text], dtype=torch.int64)
n_train = int(len(ids) * 0.9)
train_ids, val_ids = ids[:n_train], ids[n_train:]
gen = torch.Generator().manual_seed(args.seed)


def batch(split):
    """`args.batch_size` random windows: x = tokens [i, i + block), y = the next token of each."""
    ix = torch.randint(len(split) - args.block - 1, (args.batch_size,), generator=gen)
    x = torch.stack([split[i:i + args.block] for i in ix.tolist()])
    y = torch.stack([split[i + 1:i + 1 + args.block] for i in ix.tolist()])
    return x, y


# ---- the model (gpt_pt2.py's, with dropout) ----
class Block(nn.Module):
    def __init__(self, d, h, dropout):
        super().__init__()
        self.h, self.dropout = h, dropout
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab_size, block, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        for m in self.modules():  # GPT-2's initialisation (PyTorch's N(0, 1) embedding starts at loss ~40)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def logits(self, idx):
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))

    def forward(self, idx, tgt):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


device = torch.device(args.device)
torch.manual_seed(args.seed)
model = GPT(len(vocab), args.block, args.n_layer, args.n_head, args.n_embd, args.dropout).to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=args.lr, betas=(0.9, 0.95))
warmup = max(1, args.max_steps // 10)


def warmup_cosine(step):  # factor of args.lr: linear warmup, then cosine down to 0.1
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, args.max_steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)

import axle  # noqa: E402

axle._C._metrics_reset()
print(f"gpt: {sum(p.numel() for p in model.parameters())} parameters, vocabulary {len(vocab)}, "
      f"{len(train_ids)} training characters, on {device}", flush=True)
t0 = time.perf_counter()
losses = []
for step in range(args.max_steps):
    x, y = batch(train_ids)
    with torch_xla.step():  # one graph per step: forward, backward, clipping, AdamW
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    scheduler.step()  # the next step's learning rate (host side: the graph stays the same)
    losses.append(loss.item())
    if (step + 1) % args.log_every == 0 or step == 0:
        print(f"step {step + 1:5d}  loss {losses[-1]:.4f}  grad norm {norm.item():.3f}", flush=True)
seconds = time.perf_counter() - t0
counters = dict(axle._C._counters())

model.eval()
with torch.no_grad():
    val = [model(*(t.to(device) for t in batch(val_ids))).item() for _ in range(args.val_batches)]
val_loss = sum(val) / len(val)

# A sample, generated on the cpu (one token at a time changes the input's shape each step).
model.to("cpu")
idx = torch.tensor([[stoi.get(c, 0) for c in "The "]], dtype=torch.int64)
sample_gen = torch.Generator().manual_seed(0)
with torch.no_grad():
    for _ in range(args.sample_chars):
        logits = model.logits(idx[:, -args.block:])[:, -1, :] / 0.8
        top, _ = torch.topk(logits, 10)
        logits[logits < top[:, -1:]] = -float("inf")
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=sample_gen)
        idx = torch.cat([idx, nxt], dim=1)
sample = "".join(vocab[i] for i in idx[0].tolist())

k = min(10, max(1, len(losses) // 4))
first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
fallbacks = {n: v for n, v in counters.items() if n.startswith("aten::")}
print(f"steps {len(losses)} in {seconds:.1f} s; mean loss of the first {k} steps {first:.4f}, of the last {k} "
      f"{last:.4f}; validation loss {val_loss:.4f}")
print("counters: " + " ".join(f"{n}={counters[n]}" for n in ("MarkStep", "UncachedCompile", "CachedCompile")
                              if n in counters) + f"; CPU fallbacks: {fallbacks or 'none'}")
print(f"sample: {sample!r}")
if args.json:
    with open(args.json, "w") as f:
        json.dump(dict(example="gpt", device=str(device), steps=len(losses), seconds=round(seconds, 3),
                       losses=losses, first_mean=first, last_mean=last, val_loss=val_loss, counters=counters,
                       fallbacks=fallbacks, sample=sample), f, indent=1)
