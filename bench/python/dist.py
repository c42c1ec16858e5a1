#!/usr/bin/env python3
"""Distributed training throughput from Python (issue 25, item 8), one configuration per run:

  --system axle-ddp   --procs N     the seed's Pattern 3 on axle: torch_xla.launch, the `xla` process
                                    group, DDP(gradient_as_bucket_view=True), `with torch_xla.step()`
  --system torch-ddp  --procs N     the anchor: PyTorch's own DDP on the gloo backend, CPU tensors,
                                    torch.multiprocessing, the same model, batch and optimizer
  --system axle-spmd  --devices N   one process, xr.use_spmd(), N devices on a 'data' mesh axis,
                                    each batch split on dim 0 (the seed's Pattern 5 with input sharding)

Every process (or SPMD device) takes --batch-size samples per step (weak scaling: N of them train
on N times the samples), synthetic Fashion-MNIST-shaped batches, SGD lr 0.01 momentum 0.9, one
thread per process (OMP_NUM_THREADS=1; SPMD: one process, --threads threads). Prints one JSON line
(rank 0): samples/s over --steps timed steps after --warm untimed ones, the step time's median.
bench/python/dist.sh alternates the systems over rounds and tabulates ratios.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--system", choices=["axle-ddp", "torch-ddp", "axle-spmd"], required=True)
ap.add_argument("--procs", type=int, default=1)
ap.add_argument("--devices", type=int, default=1)
ap.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
ap.add_argument("--batch-size", type=int, default=64, help="samples per process (SPMD: per device) per step")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warm", type=int, default=3)
ap.add_argument("--threads", type=int, default=1)
a = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(a.threads)
if a.system == "axle-spmd":
    os.environ["AXLE_CPU_DEVICES"] = str(a.devices)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(a.threads)


def make_model():
    if a.model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def batches(rank, per_step):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(per_step, 1, 28, 28, generator=g), torch.randint(0, 10, (per_step,), generator=g))
            for _ in range(4)]


def report(world, per_step_samples, step_s, extra):
    total = sum(step_s[a.warm:])
    rec = dict(system=a.system, model=a.model, world=world, batch_per_worker=a.batch_size, steps=a.steps,
               threads=a.threads, samples_per_s=per_step_samples * a.steps / total,
               median_step_ms=1e3 * statistics.median(step_s[a.warm:]))
    rec.update(extra)
    print(json.dumps(rec), flush=True)


# ---- axle: Pattern 3 under torch_xla.launch ----
def axle_ddp(index):
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend  # noqa: F401
    import torch_xla.runtime as xr
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("xla", init_method="xla://")
    rank, world = xr.global_ordinal(), xr.world_size()
    torch.manual_seed(0)
    model = make_model().to("xla")
    ddp_model = DDP(model, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = batches(rank, a.batch_size)
    step_s = []
    for i in range(a.warm + a.steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        with torch_xla.step():
            x, y = x.to("xla"), y.to("xla")
            opt.zero_grad()
            loss = F.cross_entropy(ddp_model(x), y)
            loss.backward()
            opt.step()
        xm.wait_device_ops()
        step_s.append(time.perf_counter() - t0)
    if rank == 0:
        report(world, world * a.batch_size, step_s, {"final_loss": loss.item()})


# ---- the anchor: PyTorch DDP on gloo ----
def torch_ddp(rank, world, port):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = make_model()
    ddp_model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = batches(rank, a.batch_size)
    step_s = []
    for i in range(a.warm + a.steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp_model(x), y)
        loss.backward()
        opt.step()
        step_s.append(time.perf_counter() - t0)
    if rank == 0:
        report(world, world * a.batch_size, step_s, {"final_loss": loss.item()})
    dist.destroy_process_group()


# ---- axle: SPMD, one process, the batch split over a 'data' axis ----
def axle_spmd():
    import numpy as np
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    assert n == a.devices, (n, a.devices)
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    torch.manual_seed(0)
    model = make_model().to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = batches(0, n * a.batch_size)
    step_s = []
    for i in range(a.warm + a.steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        with torch_xla.step():
            x, y = x.to("xla"), y.to("xla")
            xs.mark_sharding(x, mesh, ("data", None, None, None))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            xm.optimizer_step(opt)
        xm.wait_device_ops()
        step_s.append(time.perf_counter() - t0)
    report(1, n * a.batch_size, step_s, {"devices": n, "final_loss": loss.item()})


if __name__ == "__main__":
    if a.system == "axle-ddp":
        import torch_xla

        torch_xla.launch(axle_ddp, args=(), nprocs=a.procs)
    elif a.system == "torch-ddp":
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(torch_ddp, args=(a.procs, port), nprocs=a.procs, join=True)
    else:
        axle_spmd()
    sys.exit(0)
