"""Programs for the launch tests: python faults.py CASE TOKEN (TOKEN only marks the processes)."""
import os
import signal
import sys
import time
import warnings

import torch

import axle
import torch_xla  # noqa: F401
from torch_xla._launch import launch
from torch_xla.core import _xm_dist as xm


def say(*parts):
    """One line in one write: the ranks share the parent's stdout, and a print of several parts
    (under PYTHONUNBUFFERED, one write per part) interleaved word by word with the other rank's."""
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def killed(index, token):
    x = torch.ones(4, device="xla")
    if index == 1:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    # rank 0 waits in a collective for the rank that died
    say("sum", xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist())
    time.sleep(120)


def raises(index, token):
    if index == 1:
        raise ValueError("boom in rank one")
    time.sleep(120)


def sleeps(index, token):
    say("ready")
    time.sleep(120)


def xm_collectives(index, token):
    r, w = xm.global_ordinal(), xm.world_size()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r
    xx = x.to("xla")
    checks = {
        "all_reduce": (xm.all_reduce(xm.REDUCE_SUM, xx, scale=0.5).cpu(), (x - 10 * r) * 2 * 0.5 + 5),
        "all_reduce_max": (xm.all_reduce(xm.REDUCE_MAX, xx).cpu(), x - 10 * r + 10),
        "all_gather0": (xm.all_gather(xx).cpu(), torch.cat([x - 10 * r, x - 10 * r + 10], 0)),
        "all_gather1": (xm.all_gather(xx, dim=1).cpu(), torch.cat([x - 10 * r, x - 10 * r + 10], 1)),
        "reduce_scatter": (xm.reduce_scatter(xm.REDUCE_SUM, xx, 1.0, 0, w).cpu(), ((x - 10 * r) * 2 + 10)[r:r + 1]),
        "broadcast": (xm.broadcast(xx, 1).cpu(), x - 10 * r + 10),
        "cpu_all_reduce": (xm.all_reduce(xm.REDUCE_SUM, x), (x - 10 * r) * 2 + 10),
    }
    inplace = [xx.clone(), torch.ones(2, dtype=torch.int64, device="xla")]
    xm.all_reduce(xm.REDUCE_SUM, inplace)
    checks["in_place"] = (inplace[0].cpu(), (x - 10 * r) * 2 + 10)
    checks["in_place_int"] = (inplace[1].cpu(), torch.full((2,), 2, dtype=torch.int64))
    for name, (got, want) in checks.items():
        assert torch.equal(got, want), (name, got, want)
    assert xm.rendezvous("tag", f"from {r}".encode()) == [b"from 0", b"from 1"]
    assert xm.mesh_reduce("loss", float(r + 1), sum) == 3.0
    # torch.distributed on the xla group: list and tensor forms
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401

    dist.init_process_group("xla", init_method="xla://")
    t = xx.clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    outs = [torch.zeros(2, 3, device="xla") for _ in range(w)]
    dist.all_gather(outs, xx)
    rs = torch.zeros(1, 3, device="xla")
    dist.reduce_scatter_tensor(rs, xx)
    rl = torch.zeros(2, 3, device="xla")
    dist.reduce_scatter(rl, [xx, xx + 1])
    b = xx.clone()
    dist.broadcast(b, src=0)
    v = xx.clone()
    dist.all_reduce(v[1])  # through a view: its base sees it
    dist.barrier()
    base = x - 10 * r
    assert torch.equal(t.cpu(), base + 5)
    assert torch.equal(outs[1].cpu(), base + 10)
    assert torch.equal(rs.cpu(), (base * 2 + 10)[r:r + 1])
    assert torch.equal(rl.cpu(), base * 2 + 10 + w * r)  # input r + r on each rank
    assert torch.equal(b.cpu(), base)
    assert torch.equal(v.cpu(), torch.stack([x[0], base[1] * 2 + 10]))
    say("xm collectives ok")


def works(index, token):
    x = torch.full((3,), float(index + 1), device="xla")
    s = xm.all_reduce(xm.REDUCE_SUM, x)
    say("sum", s.cpu().tolist(), "world", xm.world_size(), "rank", xm.global_ordinal())


if __name__ == "__main__":
    case, token = sys.argv[1], sys.argv[2]
    if case == "device_before_launch":
        axle._C._device_requested()  # what torch_xla.device() does
        launch(works, args=(token,), nprocs=2)
    elif case == "tensor_before_launch":
        t = torch.zeros(2, device="xla")
        launch(works, args=(token,), nprocs=2)
    elif case == "xmp_spawn":
        import torch_xla.distributed.xla_multiprocessing as xmp

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            xmp.spawn(works, args=(token,), nprocs=2)
        print("warned:", [str(x.category.__name__) + ": " + str(x.message) for x in w], flush=True)
    elif case == "mp_spawn":
        import torch.multiprocessing as mp

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            mp.spawn(works, args=(token,), nprocs=2)
        print("warned:", [str(x.category.__name__) + ": " + str(x.message) for x in w], flush=True)
    else:
        launch(globals()[case], args=(token,), nprocs=2, timeout_s=60)
