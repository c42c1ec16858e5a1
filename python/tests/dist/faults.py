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


def killed(index, token):
    x = torch.ones(4, device="xla")
    if index == 1:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    # rank 0 waits in a collective for the rank that died
    print("sum", xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist(), flush=True)
    time.sleep(120)


def raises(index, token):
    if index == 1:
        raise ValueError("boom in rank one")
    time.sleep(120)


def works(index, token):
    x = torch.full((3,), float(index + 1), device="xla")
    s = xm.all_reduce(xm.REDUCE_SUM, x)
    print("sum", s.cpu().tolist(), "world", xm.world_size(), "rank", xm.global_ordinal(), flush=True)


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
    else:
        launch(globals()[case], args=(token,), nprocs=2, timeout_s=60)
