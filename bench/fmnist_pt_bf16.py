#!/usr/bin/env python3
"""PyTorch 2.15 eager on Fashion-MNIST under torch.autocast('cpu', dtype=torch.bfloat16): the
bf16 peer of axle-train --precision bf16 (issue 27), for bench/steps.py's pt-eager-bf16 row.

The models, data, batches, optimizer and timing are those of shared/reference/peers/pt2_fmnist.py
(eager mode), whose helpers (fmnist_common.py) this script imports from --peers; the only change
is that the forward and the loss run under autocast, as PyTorch's AMP recipe has it (the backward
and SGD outside the region; parameters and momentum stay float32).

usage: $ANCHORS_DIR/pt215/bin/python bench/fmnist_pt_bf16.py --peers shared/reference/peers \
           --model mlp|cnn --threads N [--steps 200 --warm 20]
Prints one JSON line on stdout (the fields of pt2_fmnist.py's), progress on stderr.
"""
import os
import sys
import time

PEERS = next((sys.argv[i + 1] for i, v in enumerate(sys.argv[:-1]) if v == "--peers"), None)
if not PEERS or not os.path.isfile(os.path.join(PEERS, "fmnist_common.py")):
    sys.exit(f"fmnist_pt_bf16: expected --peers DIR holding fmnist_common.py, got {PEERS!r}")
sys.path.insert(0, os.path.abspath(PEERS))
import fmnist_common as C  # noqa: E402


def extra(ap):
    ap.add_argument("--peers", required=True, help="shared/reference/peers (fmnist_common.py)")


a = C.parse_args("pt2-autocast-bf16", ["eager"], "eager", extra)
notes = C.setup_threads(a.threads, pin=(a.pin == "yes"))

import torch  # noqa: E402  (after the thread environment is set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)

LAYERS = {
    "mlp": lambda: [nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)],
    "cnn": lambda: [nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)],
}


def main():
    X, Y, _, _ = (torch.from_numpy(v) for v in C.load(a.data))
    torch.manual_seed(0)
    model = nn.Sequential(*LAYERS[a.model]())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(X.shape[0], generator=g)
    n = a.warm + a.steps
    data = [(X[perm[i:i + a.bs]].contiguous(), Y[perm[i:i + a.bs]].contiguous())
            for i in range(0, min(X.shape[0], n * a.bs), a.bs)][:n]
    C.log(f"torch {torch.__version__} threads={torch.get_num_threads()} autocast bf16 model={a.model}")

    def step(x, y):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    ts = []
    for i, (x, y) in enumerate(data):
        if i == a.warm:
            meter = C.CpuMeter().__enter__()
        s = time.perf_counter()
        step(x, y)
        ts.append(time.perf_counter() - s)
    meter.__exit__()
    rec = dict(peer="pytorch", version=torch.__version__, mode="eager-autocast-bf16", model=a.model,
               threads=a.threads, **C.summarize(ts, a.warm), **meter.fields())
    rec["backend"] = dict(cpu_capability=torch.backends.cpu.get_cpu_capability(),
                          torch_threads=torch.get_num_threads())
    notes.append(f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} + torch.set_num_threads({a.threads})")
    rec["notes"] = "; ".join(notes)
    C.emit(rec)


if __name__ == "__main__":
    main()
