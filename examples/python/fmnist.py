"""Fashion-MNIST for the Python examples: the IDX .gz files read into torch tensors, a DataLoader,
axle-train's mlp and cnn in torch.nn, a test-accuracy pass, and what every example reports
(losses, test accuracy, counters; --json FILE writes them).

The examples keep the seed's code verbatim; this module supplies what the snippets take as given
(`model`, `optimizer`, `loss_fn`, `train_loader`) and records the losses without touching the
snippet: a global forward hook keeps the output of every loss module (nn.CrossEntropyLoss ...),
detached, and reads the values only after training.

Data: /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist), or --data / FMNIST_DIR.
Pixels x -> (x/255 - 0.2860)/0.3530, shape (N, 1, 28, 28) float32; labels int64, as
shared/reference/pytorch_fmnist.py and axle-train.
"""
import argparse
import gzip
import importlib.util
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if importlib.util.find_spec("torch_xla") is None:  # in-tree run: the package built in place in python/
    sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


# ---- data ----
def read_idx(path):
    """An IDX file (gzip'd or not) as a uint8 tensor of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def load(split, data_dir=DATA):
    """(images float32 [N, 1, 28, 28] normalized, labels int64 [N]) of split 'train' or 't10k'."""
    def path(kind):
        p = os.path.join(data_dir, f"{split}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz")
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p} not found: install Debian's dataset-fashion-mnist or pass --data DIR")
        return p

    x = read_idx(path("images")).to(torch.float32).div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    y = read_idx(path("labels")).to(torch.int64)
    return x, y


class _Limited:
    """`epochs` passes over a DataLoader, at most `max_steps` batches in all; len() works. Between
    batches, in the main thread, it prints the losses of the steps that have finished."""

    def __init__(self, loader, epochs, max_steps, recorder, log_every, on_end=None):
        self.loader, self.epochs, self.max_steps = loader, epochs, max_steps
        self.recorder, self.log_every = recorder, log_every
        self.on_end = on_end  # called once the main thread has taken every batch (see train_loader)

    def __len__(self):
        n = self.epochs * len(self.loader)
        return n if self.max_steps is None else min(n, self.max_steps)

    def __iter__(self):
        main = threading.current_thread() is threading.main_thread()
        yield from self._batches(main)
        # The loop asked for a batch after its last step had finished.
        if main and self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end()

    def _batches(self, main):
        n = 0
        for _ in range(self.epochs):
            for batch in self.loader:
                if self.max_steps is not None and n >= self.max_steps:
                    return
                # The step that recorded the last loss has finished when the main thread asks
                # for the next batch (the seed's loops end each step before that).
                if main and self.recorder is not None:
                    self.recorder.print_progress(self.log_every)
                n += 1
                yield batch


class AxleOrder:
    """The training batches in the order axle's DataLoader gives them to axle-train (--axle-order):
    each epoch's indices come from axle's own samplers (axle._C._sampler_indices: RandomSampler(n,
    seed) in one process, this rank's share of DistributedSampler(n, world, rank, shuffle, seed) in
    each of `world` processes), batch_size of them per batch, the last smaller batch kept. The world
    and rank are read when an epoch starts (inside a launched function they are the launch's), and
    the data set is read then too (a launch's parent never reads it)."""

    def __init__(self, args):
        self.args, self.epoch, self._data = args, 0, None

    def _world_rank(self):
        import torch_xla.runtime as xr

        return xr.world_size(), xr.global_ordinal()

    def _load(self):
        if self._data is None:
            self._data = load("train", self.args.data)
        return self._data

    def __len__(self):
        world, _ = self._world_rank()
        n = self._load()[0].shape[0]
        per_rank = n if world == 1 else (n + world - 1) // world
        return (per_rank + self.args.batch_size - 1) // self.args.batch_size

    def __iter__(self):
        import axle

        x, y = self._load()
        world, rank = self._world_rank()
        order = torch.tensor(axle._C._sampler_indices(x.shape[0], self.args.seed, self.epoch, world, rank))
        self.epoch += 1
        for i in range(0, order.shape[0], self.args.batch_size):
            b = order[i:i + self.args.batch_size]
            yield x[b], y[b]


def train_loader(args, recorder=None, on_end=None):
    """The training DataLoader (batch args.batch_size, shuffled with seed args.seed + 1, the last
    smaller batch kept), over args.epochs epochs, cut at args.max_steps batches. With
    --axle-order the batches are axle-train's instead (AxleOrder). `on_end()` runs once a loop
    in the main thread has taken the last batch: a launched function's report (its process
    exits when the function returns, so nothing after the seed's code would run there)."""
    if getattr(args, "axle_order", False):
        loader = AxleOrder(args)
    else:
        x, y = load("train", args.data)
        dataset = torch.utils.data.TensorDataset(x, y)
        g = torch.Generator().manual_seed(args.seed + 1)
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, generator=g)
    return _Limited(loader, args.epochs, args.max_steps, recorder, args.log_every, on_end)


# ---- models (axle-train's, as in shared/reference/peers/pt2_fmnist.py) ----
def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def make_model(name, save_init=None):
    """A fresh model (the caller seeds torch first); `save_init`: also write its initial weights
    there as safetensors, under PyTorch's state_dict names, for axle-train --init."""
    model = {"mlp": mlp, "cnn": cnn}[name]()
    if save_init:
        save_safetensors(save_init, model.state_dict())
    return model


_SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def save_safetensors(path, tensors):
    """Writes {name: cpu tensor} as a safetensors file (8-byte little-endian header length, the
    JSON header, the tensors' bytes back to back), atomically: every rank of a job may write the
    same file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in _SAFETENSORS_DTYPES:
            raise TypeError(f"save_safetensors: tensor {name!r} has dtype {t.dtype}, which safetensors here does not "
                            f"take (expected one of {', '.join(str(d) for d in _SAFETENSORS_DTYPES)})")
        data = bytes(t.clone().untyped_storage())  # exactly the tensor's bytes, in host (little-endian) order
        header[name] = {"dtype": _SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-aligned
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---- arguments ----
def parse_args(description, extra=None):
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many training steps")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    ap.add_argument("--data", default=DATA, help="directory of the Fashion-MNIST IDX .gz files")
    ap.add_argument("--json", default=None, metavar="FILE",
                    help="write losses, test accuracy and counters here (rank r > 0 of a launched job: FILE with "
                         "'.rank<r>' before its extension)")
    ap.add_argument("--axle-order", action="store_true",
                    help="visit the data in axle-train's order (axle's samplers, seed --seed) instead of torch's")
    ap.add_argument("--save-init", default=None, metavar="FILE",
                    help="write the model's initial weights here (safetensors, for axle-train --init)")
    if extra:
        extra(ap)
    return ap.parse_args()


# ---- recording and reporting ----
class LossRecorder:
    """Keeps the output of every loss module called (detached: no value is read while training)."""

    def __init__(self):
        self.losses = []  # tensors (xla), one per step
        self._values = []  # floats, read after their step finished
        self._printed = 0
        self._handle = nn.modules.module.register_module_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        if isinstance(module, nn.modules.loss._Loss) and isinstance(output, torch.Tensor):
            self.losses.append(output.detach())

    def stop(self):
        self._handle.remove()

    def values(self):
        while len(self._values) < len(self.losses):
            self._values.append(float(self.losses[len(self._values)].item()))
        return list(self._values)

    def print_progress(self, every):
        n = len(self.losses)
        if n == 0 or n - self._printed < every:
            return
        v = self.values()
        print(f"step {n:5d}  loss {sum(v[-every:]) / every:.4f} (mean of the last {every})", flush=True)
        self._printed = n


def test_accuracy(model, device, data_dir=DATA, batch_size=1000):
    """Accuracy of `model` on the 10 000 test images, computed on `device` (one sync per batch)."""
    import torch_xla

    x, y = load("t10k", data_dir)
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=device)
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            correct = correct + (model(xb).argmax(1) == yb).sum()
            torch_xla.sync()
    model.train(was_training)
    return correct.item() / x.shape[0]


class Run:
    """What an example reports: call finish(model) after the seed's code."""

    def __init__(self, name, args, recorder):
        import axle

        self.name, self.args, self.recorder = name, args, recorder
        axle._C._metrics_reset()
        self.t0 = time.perf_counter()

    def finish(self, model, device="xla", extra=None):
        import axle

        seconds = time.perf_counter() - self.t0
        self.recorder.stop()
        counters = dict(axle._C._counters())  # the training's, before the accuracy pass
        losses = self.recorder.values()
        acc = test_accuracy(model, device, self.args.data)
        k = min(10, max(1, len(losses) // 4))
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        every = max(1, self.args.log_every)
        print(f"{self.name}: {len(losses)} steps in {seconds:.1f} s")
        for i in list(range(0, len(losses), every)) + ([len(losses) - 1] if (len(losses) - 1) % every else []):
            print(f"  step {i + 1:5d}  loss {losses[i]:.4f}")
        print(f"mean loss of the first {k} steps {first:.4f}, of the last {k} {last:.4f}")
        print(f"test accuracy {acc:.4f}")
        fallbacks = {n: v for n, v in counters.items() if n.startswith("aten::")}
        print("counters: " + " ".join(f"{n}={counters[n]}" for n in ("MarkStep", "UncachedCompile", "CachedCompile")
                                      if n in counters) + f"; CPU fallbacks: {fallbacks or 'none'}")
        record = dict(example=self.name, model=self.args.model, steps=len(losses), seconds=round(seconds, 3),
                      losses=losses, first_mean=first, last_mean=last, test_accuracy=acc, counters=counters,
                      fallbacks=fallbacks)
        if extra:
            record.update(extra)
        import torch_xla.runtime as xr

        world, rank = xr.world_size(), xr.global_ordinal()
        record.update(world_size=world, rank=rank)
        if self.args.json:
            path = self.args.json
            if rank > 0:
                root, ext = os.path.splitext(path)
                path = f"{root}.rank{rank}{ext}"
            with open(path, "w") as f:
                json.dump(record, f, indent=1)
        return record
