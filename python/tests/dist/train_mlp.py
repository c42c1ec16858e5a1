"""Trains the fmnist mlp for a few steps on synthetic batches, as Pattern 2 (xm.optimizer_step),
Pattern 3 (DDP on the xla process group) or FSDP v1, with `nprocs` processes each taking its
1/nprocs of every batch. Writes each rank's losses to OUT/<mode>-<nprocs>-<rank>.json.

    python train_mlp.py MODE NPROCS OUT
    MODE: xm, ddp, or fsdp[-OPTION...] with OPTION one of
          noflat (flatten_parameters=False), keep (reshard_after_forward=False),
          dim0 (shard_param_on_dim_0, implies noflat), nowrap (no auto_wrap_policy),
          ckpt (save per-rank checkpoints and consolidate them on rank 0)
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import axle
import torch_xla  # noqa: F401
from torch_xla._launch import launch
from torch_xla.core import _xm_dist as xm

STEPS = 8
BATCH = 64  # the whole batch of a step; each rank takes BATCH / nprocs rows


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 1, 28, 28, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(STEPS)]


def _mp_fn(index, mode, out):
    rank, world = xm.global_ordinal(), xm.world_size()
    assert index == xm.local_ordinal()
    if os.environ.get("SAVE_GRAPHS_UNDER"):
        os.environ["AXLE_SAVE_GRAPHS"] = os.path.join(os.environ["SAVE_GRAPHS_UNDER"], f"rank{rank}")
    torch.manual_seed(0)
    model = mlp()
    if (mode == "ddp" or mode.startswith("fsdp")) and rank > 0:
        # DDP and FSDP broadcast rank 0's weights: start the others elsewhere to see it.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    model.to("xla")
    net = model
    if mode == "ddp":
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend  # noqa: F401
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("xla", init_method="xla://")
        assert dist.get_rank() == rank and dist.get_world_size() == world
        net = DDP(model, gradient_as_bucket_view=True)
    extra = {}
    if mode.startswith("fsdp"):
        net = fsdp_wrap(model, mode)
        model = net  # the optimizer takes the shards
        try:
            xm.optimizer_step(torch.optim.SGD(net.parameters(), lr=0.1))
        except RuntimeError as e:
            extra["optimizer_step_error"] = str(e)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per = BATCH // world
    losses = []
    for x, y in batches():
        x, y = x[rank * per:(rank + 1) * per].to("xla"), y[rank * per:(rank + 1) * per].to("xla")
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        if mode == "xm":
            xm.optimizer_step(opt)
        else:
            opt.step()
        axle._C._sync()  # the step boundary (torch_xla.step() / torch_xla.sync())
        losses.append(loss.item())
    # c10d::<op> would be a collective that fell back to the cpu; CollectiveAllReduce counts
    # the all-reduces that ran (in graphs).
    counters = {k: v for k, v in axle._C._counters().items()
                if k.startswith("c10d::") or k.startswith("aten::") or k.startswith("Collective")}
    if "ckpt" in mode.split("-"):
        extra.update(fsdp_checkpoint(net, out, rank, world))
    with open(os.path.join(out, f"{mode}-{world}-{rank}.json"), "w") as f:
        json.dump({"losses": losses, "counters": counters, **extra}, f)
    print(f"rank {rank} of {world}: losses {losses[0]:.6f} .. {losses[-1]:.6f}")


def fsdp_wrap(model, mode):
    import functools

    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy

    opts = set(mode.split("-")[1:])
    kw = dict(flatten_parameters="noflat" not in opts and "dim0" not in opts,
              reshard_after_forward="keep" not in opts, shard_param_on_dim_0="dim0" in opts)
    if "nowrap" not in opts:
        kw["auto_wrap_policy"] = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    return FSDP(model, **kw)


def fsdp_checkpoint(net, out, rank, world):
    """Each rank saves its shards; rank 0 consolidates them into the unwrapped model's state dict,
    loads it into a plain mlp and compares its loss on the first batch with the FSDP model's."""
    import torch_xla.core.xla_model as xla_model
    from torch_xla.distributed.fsdp import consolidate_sharded_model_checkpoints

    prefix = os.path.join(out, "fsdp-ckpt")
    ckpt = {"model": net.state_dict(), "shard_metadata": net.get_shard_metadata()}
    xla_model.save(ckpt, f"{prefix}_rank-{rank:08d}-of-{world:08d}.pth", master_only=False)
    x, y = batches()[0]
    with torch.no_grad():
        sharded = F.cross_entropy(net(x.to("xla")), y.to("xla")).item()
    xm.rendezvous("saved")
    if rank != 0:
        return {}
    full, path = consolidate_sharded_model_checkpoints(prefix, "_rank-*-of-*.pth")
    plain = mlp()
    missing = plain.load_state_dict(full, strict=True)
    with torch.no_grad():
        consolidated = F.cross_entropy(plain(x), y).item()
    return {"ckpt_loss_sharded": sharded, "ckpt_loss_consolidated": consolidated, "ckpt_keys": sorted(full),
            "ckpt_missing": str(missing), "ckpt_path": path}


if __name__ == "__main__":
    mode, nprocs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    launch(_mp_fn, args=(mode, out), nprocs=nprocs)
