"""Issue 24, item 6: the same Python model trained on `xla` (axle) and on `cpu` (PyTorch eager) from the
same weights and batches. Losses within 1e-4 relative for 20 steps (mlp, cnn with BatchNorm, gpt with
dropout 0); one epoch's test accuracy within 0.005; at most 3 UncachedCompile for an epoch; and no CPU
fallback inside the steps (no counter named aten::<op>)."""
import contextlib
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.debug.metrics as met

from fmnist_data import fallbacks, fmnist


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn_bn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.0), nn.Linear(128, 10))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).contiguous().view(B, T, C)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab=96, block=32, d=64, layers=2, heads=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for m in self.modules():  # GPT-2's initialisation, as shared/reference/peers/gpt_pt2.py
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_optimizer(name, model):
    if name == "adamw":
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                 lr=1e-3)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train(model, device, batches, opt_name, clip=False):
    model = model.to(device)
    optimizer = make_optimizer(opt_name, model)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for inputs, labels in batches:
        # the seed's Pattern 1 on xla; the same body eagerly on cpu
        with torch_xla.step() if device == "xla" else contextlib.nullcontext():
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out.view(-1, out.shape[-1]), labels.view(-1))
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        losses.append(loss.item())
    return losses


CASES = {
    "mlp": (mlp, "sgd", False),
    "cnn_bn": (cnn_bn, "sgd", False),
    "gpt": (GPT, "adamw", True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_losses_match_pytorch_for_20_steps(name):
    make, opt_name, clip = CASES[name]
    torch.manual_seed(0)
    model = make()
    g = torch.Generator().manual_seed(1)
    if name == "gpt":
        batches = [(torch.randint(0, 96, (4, 32), generator=g), torch.randint(0, 96, (4, 32), generator=g))
                   for _ in range(20)]
    else:
        x, y = fmnist("train")
        perm = torch.randperm(x.shape[0], generator=g)[: 20 * 128]
        batches = [(x[perm[i: i + 128]], y[perm[i: i + 128]]) for i in range(0, 20 * 128, 128)]
    met.clear_all()
    on_xla = train(copy.deepcopy(model), "xla", batches, opt_name, clip)
    on_cpu = train(copy.deepcopy(model), "cpu", batches, opt_name, clip)
    print(name, "xla", on_xla[:3], on_xla[-1], "cpu", on_cpu[:3], on_cpu[-1])
    for i, (a, b) in enumerate(zip(on_xla, on_cpu)):
        assert abs(a - b) <= 1e-4 * abs(b), f"{name} step {i}: xla loss {a} vs cpu loss {b}"
    assert on_xla[-1] < on_xla[0]
    assert fallbacks() == {}, f"{name}: CPU fallbacks inside the steps: {fallbacks()}"


def test_one_epoch_accuracy_and_compiles():
    """The mlp, one epoch of Fashion-MNIST (469 steps, last batch of 96), on xla and cpu from the same
    weights and shuffle: test accuracy within 0.005, at most 3 UncachedCompile, no fallback."""
    torch.manual_seed(0)
    model = mlp()
    x, y = fmnist("train")
    xt, yt = fmnist("t10k")
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))
    batches = [(x[perm[i: i + 128]], y[perm[i: i + 128]]) for i in range(0, x.shape[0], 128)]
    met.clear_all()
    m_xla, m_cpu = copy.deepcopy(model), copy.deepcopy(model)
    train(m_xla, "xla", batches, "sgd")
    compiles = met.counter_value("UncachedCompile")
    assert fallbacks() == {}, fallbacks()
    train(m_cpu, "cpu", batches, "sgd")
    with torch.no_grad():
        acc_xla = (m_xla.to("cpu")(xt).argmax(1) == yt).float().mean().item()
        acc_cpu = (m_cpu(xt).argmax(1) == yt).float().mean().item()
    print("accuracy xla", acc_xla, "cpu", acc_cpu, "UncachedCompile", compiles)
    assert abs(acc_xla - acc_cpu) <= 0.005
    assert acc_xla > 0.8
    assert compiles <= 3, f"{compiles} uncached compiles for one epoch"


def test_to_xla_keeps_tied_weights_tied():
    """nn.Module._apply would give each module its own new Parameter on a cpu -> xla move, untying a
    GPT's embedding and head (the gradient of one then misses the other's half)."""
    model = GPT()
    head_hook = model.head.weight
    model.to("xla")
    assert model.tok.weight is model.head.weight is head_hook
    assert model.tok.weight.device.type == "xla"
    model.to("cpu")
    assert model.tok.weight is model.head.weight and model.tok.weight.device.type == "cpu"
