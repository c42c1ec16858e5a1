#!/usr/bin/env python3
"""PyTorch-written state dicts and models for tests/nn/test_torch_compat.cpp.

Run with the PyTorch venv (outside the repository; the test itself needs no Python):
    /root/.cache/axle-peers/pt215/bin/python tests/golden/gen_torch_compat.py

Writes (safetensors, by the hand-written writer of gen_torch_safetensors.py):
  tests/data/torch_compat_modules.safetensors
      one case per supported module type: "<case>/sd/<key>" its state dict exactly as
      PyTorch's state_dict() gives it (randomised parameters and running statistics),
      "<case>/in" an input, "<case>/out_eval" the eval-mode output, and for modules that
      differ in training "<case>/out_train" and "<case>/after/<key>" the state after one
      training forward. The metadata "cases" (JSON) lists per case its state dict keys in
      PyTorch's order, their dtypes, repr(module) and the modes run.
  tests/data/torch_compat_resnet.safetensors
      a ResNet-style model (BatchNorm, residual blocks, downsampling, adaptive avg pool,
      linear head) initialised by PyTorch: "sd/<key>", an input "in", "out_eval", "out_train"
      and "after/<key>" (the buffers after the training forward). Metadata "keys": the order.
  tests/data/torch_cnn_bn.safetensors, tests/data/cli_init_bn_golden.json
      axle-train's "cnn-bn" model as PyTorch initialises it, and the losses of its first two
      SGD steps on tests/data/tiny_fmnist (test_torch_compat's axle-train --init test).
  tests/data/torch_compat_unet.safetensors
      a small U-Net (conv_transpose2d, interpolate, pad, concatenated skips, GroupNorm and
      BatchNorm): "sd/<key>" the initial weights, "x/<i>", "y/<i>" the batches, and the
      metadata "losses": the MSE losses of STEPS steps of SGD (momentum) and of Adam from
      those weights, in train mode.
Every value the test compares is in these files: it never depends on PyTorch's generator.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
sys.path.insert(0, HERE)
from gen_torch_safetensors import write_safetensors  # noqa: E402

torch.set_num_threads(1)
DTYPE_NAMES = {torch.float32: "float32", torch.int64: "int64"}


def randomise(module, g):
    """Non-trivial values for every parameter and buffer (BatchNorm's running statistics
    too), so a key loaded into the wrong place shows."""
    with torch.no_grad():
        for name, t in module.named_parameters():
            t.copy_(torch.randn(t.shape, generator=g) * 0.5)
        for name, t in module.named_buffers():
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                t.copy_(torch.randn(t.shape, generator=g) * 0.3)
            elif name.endswith("num_batches_tracked"):
                t.fill_(3)


# ---------------------------------------------------------------- module cases
class Containers(nn.Module):
    """ModuleList and ModuleDict children: their keys in the state dict."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)])
        self.heads = nn.ModuleDict({"mean": nn.Linear(3, 2), "scale": nn.Linear(3, 2, bias=False)})

    def forward(self, x):
        for m in self.layers:
            x = m(x)
        return self.heads["mean"](x) * torch.sigmoid(self.heads["scale"](x))


class Stack(nn.Module):
    """A ModuleList run in order (its repr folds equal neighbours: "(0-1): 2 x Linear")."""

    def __init__(self, mods):
        super().__init__()
        self.blocks = nn.ModuleList(mods)

    def forward(self, x):
        for m in self.blocks:
            x = m(x)
        return x


def module_cases():
    # (name, module, input shape, train mode differs). The C++ side builds the same modules.
    return [
        ("linear", nn.Linear(5, 3), (4, 5), False),
        ("linear_nobias", nn.Linear(5, 3, bias=False), (2, 3, 5), False),
        ("conv2d", nn.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 7, 6), False),
        ("conv2d_groups", nn.Conv2d(4, 6, (3, 2), padding=(1, 0), dilation=(1, 2), groups=2, bias=False),
         (2, 4, 6, 7), False),
        ("conv_transpose2d", nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 4),
         False),
        ("conv_transpose2d_groups", nn.ConvTranspose2d(4, 6, (2, 3), stride=(2, 1), groups=2, bias=False),
         (2, 4, 3, 5), False),
        ("batchnorm1d", nn.BatchNorm1d(4), (6, 4), True),
        ("batchnorm1d_3d", nn.BatchNorm1d(3, momentum=0.3), (4, 3, 5), True),
        ("batchnorm1d_cma", nn.BatchNorm1d(4, momentum=None), (5, 4), True),
        ("batchnorm2d", nn.BatchNorm2d(3), (4, 3, 5, 6), True),
        ("batchnorm2d_cma", nn.BatchNorm2d(3, eps=1e-3, momentum=None), (2, 3, 4, 4), True),
        ("batchnorm2d_noaffine", nn.BatchNorm2d(3, affine=False), (2, 3, 4, 5), True),
        ("batchnorm2d_nobias", nn.BatchNorm2d(2, bias=False), (3, 2, 3, 3), True),
        ("batchnorm2d_notrack", nn.BatchNorm2d(3, track_running_stats=False), (3, 3, 4, 4), True),
        ("groupnorm", nn.GroupNorm(2, 6), (3, 6, 4, 5), False),
        ("groupnorm_noaffine", nn.GroupNorm(3, 3, eps=1e-3, affine=False), (2, 3, 7), False),
        ("groupnorm_nobias", nn.GroupNorm(1, 4, bias=False), (2, 4, 3), False),
        ("layernorm", nn.LayerNorm((4, 5)), (3, 4, 5), False),
        ("layernorm_nobias", nn.LayerNorm(6, eps=1e-6, bias=False), (2, 6), False),
        ("embedding", nn.Embedding(10, 4), (2, 3), False),
        ("upsample_nearest", nn.Upsample(scale_factor=2), (2, 3, 4, 5), False),
        ("upsample_bilinear", nn.Upsample(size=(7, 9), mode="bilinear"), (2, 3, 4, 5), False),
        ("upsample_bilinear_ac", nn.Upsample(scale_factor=(2.0, 1.5), mode="bilinear", align_corners=True),
         (1, 2, 4, 6), False),
        ("relu", nn.ReLU(), (3, 7), False),
        ("gelu", nn.GELU(), (3, 7), False),
        ("silu", nn.SiLU(), (3, 7), False),
        ("tanh", nn.Tanh(), (3, 7), False),
        ("sigmoid", nn.Sigmoid(), (3, 7), False),
        ("leaky_relu", nn.LeakyReLU(0.2), (3, 7), False),
        ("hardtanh", nn.Hardtanh(-0.5, 2.0), (3, 7), False),
        ("softplus", nn.Softplus(beta=2.0, threshold=5.0), (3, 7), False),
        ("identity", nn.Identity(), (3, 7), False),
        ("flatten", nn.Flatten(), (2, 3, 4), False),
        ("dropout", nn.Dropout(0.3), (3, 7), False),
        ("maxpool2d", nn.MaxPool2d(3, stride=2, padding=1), (2, 2, 7, 8), False),
        ("maxpool2d_ceil", nn.MaxPool2d(2, ceil_mode=True), (2, 2, 5, 7), False),
        ("avgpool2d", nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 2, 7, 8), False),
        ("adaptive_avgpool2d", nn.AdaptiveAvgPool2d((2, 3)), (2, 2, 7, 8), False),
        ("sequential", nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                                     nn.Flatten(), nn.Linear(3 * 4 * 4, 2)), (4, 2, 4, 4), True),
        ("containers", Containers(), (3, 4), False),
        ("modulelist_repeat", Stack([nn.Linear(3, 3), nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.Tanh()]),
         (2, 3), False),
    ]


def tensor_state(prefix, sd, out):
    for k, v in sd.items():
        out[prefix + k] = v.detach().clone()


def write_modules():
    g = torch.Generator().manual_seed(1616)
    tensors, cases = {}, []
    for name, m, in_shape, trains in module_cases():
        randomise(m, g)
        if name == "embedding":
            x = torch.randint(0, 10, in_shape, generator=g)
        else:
            x = torch.randn(in_shape, generator=g)
        if name == "relu" or name == "leaky_relu" or name == "hardtanh":
            x.view(-1)[:3] = torch.tensor([0.0, -0.5, 2.0])  # the kinks themselves
        sd = m.state_dict()
        info = {"name": name, "keys": list(sd.keys()), "dtypes": [DTYPE_NAMES[v.dtype] for v in sd.values()],
                "repr": repr(m), "train": trains}
        tensor_state(name + "/sd/", sd, tensors)
        tensors[name + "/in"] = x
        with torch.no_grad():
            m.eval()
            tensors[name + "/out_eval"] = m(x)
            if trains:
                m.train()
                tensors[name + "/out_train"] = m(x)
                tensor_state(name + "/after/", m.state_dict(), tensors)
        cases.append(info)
    write_safetensors(os.path.join(DATA, "torch_compat_modules.safetensors"), tensors,
                      {"format": "pt", "cases": json.dumps(cases)})
    print("modules:", len(cases), "cases")


# ---------------------------------------------------------------- ResNet-style
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idt = x if self.downsample is None else self.downsample(x)
        return F.relu(out + idt)


class ResNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 8, 1))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16, 1))
        self.layer3 = nn.Sequential(BasicBlock(16, 32, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def write_resnet():
    torch.manual_seed(16)
    m = ResNet()
    # PyTorch's own initialisation, then running statistics as a trained model has them
    # (the eval forward would otherwise equal a fresh model's batch statistics' scale).
    with torch.no_grad():
        for name, t in m.named_buffers():
            if name.endswith("running_mean"):
                t.copy_(torch.randn(t.shape) * 0.1)
            elif name.endswith("running_var"):
                t.copy_(torch.rand(t.shape) + 0.5)
            elif name.endswith("num_batches_tracked"):
                t.fill_(100)
    sd = m.state_dict()
    tensors = {}
    tensor_state("sd/", sd, tensors)
    x = torch.randn(4, 3, 16, 16)
    tensors["in"] = x
    with torch.no_grad():
        m.eval()
        tensors["out_eval"] = m(x)
        m.train()
        tensors["out_train"] = m(x)
        tensor_state("after/", m.state_dict(), tensors)
    write_safetensors(os.path.join(DATA, "torch_compat_resnet.safetensors"), tensors,
                      {"format": "pt", "keys": json.dumps(list(sd.keys()))})
    print("resnet:", sum(p.numel() for p in m.parameters()), "parameters,", len(sd), "state dict entries")


# ---------------------------------------------------------------- U-Net-style
def conv_block(cin, cout, norm):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), norm(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), norm(cout), nn.ReLU())


class UNet(nn.Module):
    """Two levels down (max-pool), one up by conv_transpose2d, one by bilinear interpolate;
    the upsampled maps are padded to the skip's (odd) size and concatenated with it."""

    def __init__(self):
        super().__init__()
        gn = lambda c: nn.GroupNorm(2, c)  # noqa: E731
        self.enc1 = conv_block(2, 4, gn)
        self.enc2 = conv_block(4, 8, nn.BatchNorm2d)
        self.bottom = conv_block(8, 8, gn)
        self.up2 = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.dec2 = conv_block(16, 8, nn.BatchNorm2d)
        self.dec1 = conv_block(8 + 4, 4, gn)
        self.head = nn.Conv2d(4, 1, 1)

    @staticmethod
    def pad_to(x, ref):
        dh, dw = ref.shape[2] - x.shape[2], ref.shape[3] - x.shape[3]
        return F.pad(x, [dw // 2, dw - dw // 2, dh // 2, dh - dh // 2])

    def forward(self, x):
        e1 = self.enc1(x)                       # [N, 4, 11, 13]
        e2 = self.enc2(F.max_pool2d(e1, 2))     # [N, 8, 5, 6]
        b = self.bottom(F.max_pool2d(e2, 2))    # [N, 8, 2, 3]
        u2 = self.pad_to(self.up2(b), e2)       # [N, 8, 4, 6] -> [N, 8, 5, 6]
        d2 = self.dec2(torch.cat([u2, e2], 1))
        u1 = F.interpolate(d2, scale_factor=2, mode="bilinear")  # [N, 8, 10, 12]
        u1 = self.pad_to(u1, e1)                # -> [N, 8, 11, 13]
        d1 = self.dec1(torch.cat([u1, e1], 1))
        return self.head(d1)


UNET_STEPS = 4


def write_unet():
    torch.manual_seed(17)
    init = UNet()
    sd = {k: v.detach().clone() for k, v in init.state_dict().items()}
    xs = [torch.randn(3, 2, 11, 13) for _ in range(UNET_STEPS)]
    ys = [torch.randn(3, 1, 11, 13) for _ in range(UNET_STEPS)]
    losses = {}
    for opt_name in ("sgd", "adam"):
        m = UNet()
        m.load_state_dict(sd)
        m.train()
        if opt_name == "sgd":
            opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        else:
            opt = torch.optim.Adam(m.parameters(), lr=0.01)
        out = []
        for x, y in zip(xs, ys):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            out.append(loss.item())
        losses[opt_name] = out
    tensors = {}
    tensor_state("sd/", sd, tensors)
    for i, (x, y) in enumerate(zip(xs, ys)):
        tensors["x/%d" % i] = x
        tensors["y/%d" % i] = y
    write_safetensors(os.path.join(DATA, "torch_compat_unet.safetensors"), tensors,
                      {"format": "pt", "keys": json.dumps(list(sd.keys())), "losses": json.dumps(losses)})
    print("unet:", sum(p.numel() for p in init.parameters()), "parameters; losses", losses)


# ---------------------------------------------------------------- axle-train --init
def cnn_bn():
    """axle-train's "cnn-bn" model (tools/axle-train/models.cpp)."""
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def write_cli_cnn_bn():
    """tests/data/torch_cnn_bn.safetensors: PyTorch's initial cnn-bn (running statistics and
    num_batches_tracked as after some training), and cli_init_bn_golden.json: the losses of
    the first two SGD steps (lr 0.01, momentum 0.9: axle-train's defaults) on the whole
    tiny_fmnist training set as one batch (gen_cli_init.py's data, regenerated here)."""
    import numpy as np
    import gen_cli_init as cli
    rng = np.random.RandomState(17)  # gen_cli_init.main's stream: train images, test images, labels
    train_x = cli.images(rng, cli.N_TRAIN)
    cli.images(rng, cli.N_TEST)
    train_y = rng.randint(0, 10, cli.N_TRAIN)
    torch.manual_seed(1617)
    model = cnn_bn()
    with torch.no_grad():
        for name, t in model.named_buffers():
            if name.endswith("running_mean"):
                t.copy_(torch.randn(t.shape) * 0.1)
            elif name.endswith("running_var"):
                t.copy_(torch.rand(t.shape) + 0.5)
            elif name.endswith("num_batches_tracked"):
                t.fill_(5)
    write_safetensors(os.path.join(DATA, "torch_cnn_bn.safetensors"), model.state_dict(), {"format": "pt"})
    x = (torch.from_numpy(train_x.astype(np.float32)).unsqueeze(1) / np.float32(255) - np.float32(cli.MEAN)) / \
        np.float32(cli.STD)
    y = torch.from_numpy(train_y.astype(np.int64))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    golden = {"generator": "tests/golden/gen_torch_compat.py", "torch": torch.__version__,
              "data": "tests/data/tiny_fmnist", "weights": "tests/data/torch_cnn_bn.safetensors",
              "batch_size": cli.N_TRAIN, "lr": 0.01, "momentum": 0.9, "losses": losses,
              "num_batches_tracked_after": int(model[1].num_batches_tracked)}
    with open(os.path.join(DATA, "cli_init_bn_golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print("cnn-bn:", losses)


if __name__ == "__main__":
    write_modules()
    write_resnet()
    write_unet()
    write_cli_cnn_bn()
