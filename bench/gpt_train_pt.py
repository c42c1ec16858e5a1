#!/usr/bin/env python3
"""PyTorch 2.15 twin of `axle-train --model gpt` for the bf16 training curve (bench/bf16_curve.sh).

The model of shared/reference/peers/gpt_pt2.py (pre-LayerNorm blocks, causal SDPA, tanh-GELU MLP,
head tied to the token embedding) with axle-train's gpt defaults: 4 layers, 4 heads, 128 wide,
context 128, batch 32, dropout 0, AdamW lr 1e-3 betas (0.9, 0.95), weight decay 0.1 on the
matrices, linear warmup 100 steps then cosine to 1e-4 at the last step (optim::warmup_cosine),
gradient clipping 1.0, on the same text and split (UTF-8 files of --data in name order, the
first 90% of the characters for training). Training windows are drawn by torch's generator, not
axle's sampler (the data order differs; the validation figure averages --eval-iters batches of
a fixed set of windows, so both sides measure nearly the whole validation split).

  python bench/gpt_train_pt.py --save-init FILE            # writes the initial weights, exits
  python bench/gpt_train_pt.py --init FILE --max-steps 1000 --precision bf16 --json out.json

--precision bf16: the forward and the loss under torch.autocast('cpu', dtype=torch.bfloat16), the
backward and AdamW outside it (fp32 parameters and state). The JSON: losses, val_steps,
val_losses (step 0 included), median step ms.
"""
import argparse
import json
import math
import os
import statistics
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--data", default="/usr/share/games/fortunes")
ap.add_argument("--max-steps", type=int, default=1000)
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
ap.add_argument("--init", default=None, help="start from these weights (safetensors)")
ap.add_argument("--save-init", default=None, help="write the initial weights here and exit")
ap.add_argument("--eval-every", type=int, default=100)
ap.add_argument("--eval-iters", type=int, default=50)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--json", default=None)
ap.add_argument("--bench", action="store_true",
                help="bench/gpt.py's timing: --warm + --steps steps on random tokens (vocab 96, gpt_pt2.py's data), "
                     "one JSON line of step times")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warm", type=int, default=5)
a = ap.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)
N_LAYER, N_HEAD, N_EMBD, BLOCK, BATCH = 4, 4, 128, 128, 32
LR, MIN_LR, WARMUP, WD, CLIP = 1e-3, 1e-4, 100, 0.1, 1.0


def read_text(path):
    if os.path.isfile(path):
        names = [path]
    else:
        names = sorted((os.path.join(path, n) for n in os.listdir(path)
                        if not n.startswith(".") and not n.endswith(".dat")),
                       key=lambda p: os.fsencode(os.path.basename(p)))
        names = [p for p in names if os.path.isfile(p) and not os.path.islink(p)]
    return "".join(open(p, "rb").read().decode("utf-8") for p in names)


text = read_text(a.data) if not a.bench else "".join(chr(32 + i) for i in range(96))
vocab = sorted(set(text))
stoi = {c: i for i, c in enumerate(vocab)}
ids = torch.tensor([stoi[c] for c in text], dtype=torch.int64)
n_train = int(len(ids) * 0.9)
train_ids, val_ids = ids[:n_train], ids[n_train:]


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc, self.out = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, N_EMBD), nn.Embedding(BLOCK, N_EMBD)
        self.blocks = nn.ModuleList(Block(N_EMBD, N_HEAD) for _ in range(N_LAYER))
        self.ln = nn.LayerNorm(N_EMBD)
        self.head = nn.Linear(N_EMBD, vocab_size, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():  # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, tgt):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = bytes(t.detach().contiguous().clone().untyped_storage())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (name, h["dtype"])
        b, e = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(h["shape"])
    return out


torch.manual_seed(a.seed)
model = GPT(len(vocab))
if a.save_init:  # axle's GPT has no head.weight: the head reads tok.weight
    save_safetensors(a.save_init, {k: v for k, v in model.state_dict().items() if k != "head.weight"})
    print(f"wrote {a.save_init}: vocabulary {len(vocab)}")
    raise SystemExit(0)
if a.init:
    sd = load_safetensors(a.init)
    sd["head.weight"] = sd["tok.weight"]
    model.load_state_dict(sd, strict=True)

decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=(0.9, 0.95))
warmup = min(WARMUP, a.max_steps)


def factor(step):  # optim::warmup_cosine(lr, warmup, max_steps, min_lr)
    floor = MIN_LR / LR
    if step < warmup:
        return (step + 1) / warmup
    if step >= a.max_steps:
        return floor
    p = (step - warmup) / (a.max_steps - warmup)
    return floor + 0.5 * (1 + math.cos(math.pi * p)) * (1 - floor)


sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
gen = torch.Generator().manual_seed(a.seed)
val_gen = torch.Generator().manual_seed(a.seed + 1)
val_ix = None if a.bench else torch.randint(len(val_ids) - BLOCK - 1, (a.eval_iters, BATCH), generator=val_gen)


def windows(split, ix):
    return (torch.stack([split[i:i + BLOCK] for i in ix.tolist()]),
            torch.stack([split[i + 1:i + 1 + BLOCK] for i in ix.tolist()]))


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")


def val_loss():
    model.eval()
    with torch.no_grad(), autocast():
        v = [model(*windows(val_ids, val_ix[i])).float().item() for i in range(a.eval_iters)]
    model.train()
    return sum(v) / len(v)


def autocast_step(x, y):
    opt.zero_grad(set_to_none=True)
    with autocast():
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    return loss


if a.bench:  # the step of gpt_pt2.py (random tokens, no schedule), timed as it times it
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, len(vocab), (BATCH, BLOCK), generator=g),
             torch.randint(0, len(vocab), (BATCH, BLOCK), generator=g)) for _ in range(a.warm + a.steps)]
    ts = []
    for x, y in data:
        t0 = time.perf_counter()
        autocast_step(x, y).item()
        ts.append(time.perf_counter() - t0)
    first, ts = ts[0], sorted(ts[a.warm:])
    med = statistics.median(ts)
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "mode": "eager", "precision": a.precision,
                      "model": "gpt", "threads": a.threads, "median_step_ms": round(med * 1e3, 3),
                      "p10_step_ms": round(ts[len(ts) // 10] * 1e3, 3), "p90_step_ms": round(ts[9 * len(ts) // 10] * 1e3, 3),
                      "tokens_per_s": round(BATCH * BLOCK / med), "first_step_s": round(first, 2)}))
    raise SystemExit(0)

losses, val_steps, val_losses, step_ms = [], [0], [val_loss()], []
print(f"step 0: val loss {val_losses[0]:.4f}", flush=True)
for step in range(a.max_steps):
    x, y = windows(train_ids, torch.randint(len(train_ids) - BLOCK - 1, (BATCH,), generator=gen))
    t0 = time.perf_counter()
    loss = autocast_step(x, y)
    sched.step()
    step_ms.append(1e3 * (time.perf_counter() - t0))
    losses.append(loss.item())
    if (step + 1) % a.eval_every == 0 or step + 1 == a.max_steps:
        val_steps.append(step + 1)
        val_losses.append(val_loss())
        print(f"step {step + 1}: loss {losses[-1]:.4f}, val loss {val_losses[-1]:.4f}", flush=True)
if a.json:
    with open(a.json, "w") as f:
        json.dump(dict(system="pytorch", version=torch.__version__, precision=a.precision, threads=a.threads,
                       losses=losses, val_steps=val_steps, val_losses=val_losses,
                       median_step_ms=statistics.median(step_ms) if step_ms else 0), f)
