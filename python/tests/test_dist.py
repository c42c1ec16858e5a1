"""Issue 25, first half: torch_xla.launch over axle::launch, the `xla` process group with PyTorch's
DDP, and xm.optimizer_step across processes. Each case runs a program (tests/dist/*.py) in a fresh
interpreter: launch re-runs the program in every rank, as torch_xla's 'spawn' does.

- Pattern 2 (xm.optimizer_step) and Pattern 3 (DDP, gradient_as_bucket_view=True) with 2 processes
  give the losses of one process on the whole batch, and of each other, within 1e-5 relative.
- DDP's gradient all-reduce is an op of the step's graph (AXLE_SAVE_GRAPHS), not a host round trip.
- A child killed by a signal ends the job, naming the rank and the signal; no process is left.
- torch_xla.device() or an xla tensor before launch raises the anti-pattern's error.
"""
import glob
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
PROGS = os.path.join(HERE, "dist")


def run(args, timeout=240, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    for k in [k for k in e if k.startswith("AXLE_LAUNCH_") or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")]:
        del e[k]
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=timeout, env=e)
    return p, time.monotonic() - t0


def train(mode, nprocs, out, env=None):
    p, _ = run([os.path.join(PROGS, "train_mlp.py"), mode, str(nprocs), str(out)], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = []
    for r in range(nprocs):
        with open(os.path.join(out, f"{mode}-{nprocs}-{r}.json")) as f:
            ranks.append(json.load(f))
    return ranks, p


def mean_losses(ranks):
    n = len(ranks[0]["losses"])
    return [sum(r["losses"][i] for r in ranks) / len(ranks) for i in range(n)]


def close(a, b, rtol=1e-5):
    return all(abs(x - y) <= rtol * max(abs(x), abs(y)) for x, y in zip(a, b)) and len(a) == len(b)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    graphs = tmp_path_factory.mktemp("graphs")
    one, _ = train("xm", 1, out)
    xm2, p_xm = train("xm", 2, out)
    ddp2, p_ddp = train("ddp", 2, out, env={"SAVE_GRAPHS_UNDER": str(graphs)})
    return {"one": one, "xm2": xm2, "ddp2": ddp2, "graphs": graphs, "out_xm": p_xm.stdout, "out_ddp": p_ddp.stdout}


# The variables each launcher gives rank r of 2 on one host (the master: this host).
_LAUNCHERS = {
    "torchrun": lambda r: dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1"),
    # srun: the master is the first host of the node list (an address here: a fresh root has no
    # /etc/hosts to resolve a name with; node-list parsing is tests/dist/test_launch_env.cpp's).
    "slurm": lambda r: dict(SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID=str(r),
                            SLURM_NODELIST="127.0.0.1"),
}


@pytest.mark.parametrize("launcher", sorted(_LAUNCHERS))
def test_launcher_variables_make_each_process_one_rank(runs, tmp_path, launcher):
    # Two processes started by hand as torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
    # MASTER_ADDR:MASTER_PORT) or Slurm's srun would: launch spawns nothing, xla:// takes the
    # ranks from them (the C++ resolver, docs/distributed.md), and the TCP store and Gloo's TCP
    # path give the losses of launch's children.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "OMPI_", "PMI_", "MPI_LOCALRANKID"))
         and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    procs = []
    for r in (0, 1):
        env = dict(e, MASTER_PORT=str(port), **_LAUNCHERS[launcher](r))
        procs.append(subprocess.Popen([sys.executable, os.path.join(PROGS, "train_mlp.py"), "ddp", "0", str(tmp_path)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    for r in (0, 1):
        with open(tmp_path / f"ddp-2-{r}.json") as f:
            assert json.load(f)["losses"] == runs["ddp2"][r]["losses"]
        assert not re.search(r"^\[rank \d+\] ", outs[r], re.M)  # nothing was spawned: no relayed lines


def test_launch_prefixes_each_rank_output(runs):
    for r in (0, 1):
        assert f"[rank {r}] rank {r} of 2: losses" in runs["out_xm"], runs["out_xm"]


def test_optimizer_step_two_processes_match_one_process(runs):
    one = runs["one"][0]["losses"]
    two = mean_losses(runs["xm2"])
    assert close(one, two), (one, two)
    assert runs["xm2"][0]["losses"] != runs["xm2"][1]["losses"]  # each rank saw its own half


def test_ddp_two_processes_match_one_process_and_optimizer_step(runs):
    one = runs["one"][0]["losses"]
    ddp = mean_losses(runs["ddp2"])
    assert close(one, ddp), (one, ddp)
    assert close(mean_losses(runs["xm2"]), ddp)
    # rank 1 started from other weights: DDP's broadcast of rank 0's made them equal
    for r in (0, 1):
        assert close(runs["ddp2"][r]["losses"], runs["xm2"][r]["losses"])


def test_ddp_all_reduce_is_in_the_step_graph(runs):
    for rank in (0, 1):
        dots = glob.glob(os.path.join(runs["graphs"], f"rank{rank}", "*.dot"))
        assert dots, f"no graphs saved for rank {rank}"
        step_graphs = []
        for path in dots:
            with open(path) as f:
                text = f.read()
            n = len(re.findall(r"\ball_reduce\b", text))
            if n:
                step_graphs.append((path, n, text))
        assert step_graphs, "no saved graph holds an all_reduce: " + ", ".join(dots)
        # One bucket (the mlp's 0.8 MB of gradients): one all-reduce, in the graph that also
        # holds the backward matmuls and the optimizer's update.
        for path, n, text in step_graphs:
            assert n == 1, (path, n)
            assert "matmul" in text or "linear" in text or "mm" in text, path
        # no c10d op fell back to the cpu (a host round trip per tensor); one all-reduce ran per step
        counters = runs["ddp2"][rank]["counters"]
        assert not [k for k in counters if k.startswith("c10d::")], counters
        assert counters.get("CollectiveAllReduce") == len(runs["ddp2"][rank]["losses"]), counters


def _leftovers(token):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(d))
        except OSError:
            pass
    return found


def fault(case, timeout=120):
    token = "axle-test-" + uuid.uuid4().hex
    p, took = run([os.path.join(PROGS, "faults.py"), case, token], timeout=timeout)
    deadline = time.monotonic() + 5
    while _leftovers(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftovers(token), f"processes left behind: {_leftovers(token)}"
    return p, took


def test_launch_runs_every_rank_with_its_ordinal():
    p, _ = fault("works")
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert f"[rank {r}] sum [3.0, 3.0, 3.0] world 2 rank {r}" in p.stdout, p.stdout


def test_killed_child_ends_the_job_naming_rank_and_signal():
    p, took = fault("killed")
    assert p.returncode != 0
    assert "rank 1 was killed by signal 9" in p.stderr, p.stderr
    assert took < 60, f"the job took {took:.1f} s to end after rank 1 died"


def test_exception_in_child_names_the_rank_and_the_error():
    p, took = fault("raises")
    assert p.returncode != 0
    assert "rank 1 failed" in p.stderr and "boom in rank one" in p.stderr, p.stderr
    assert "[rank 1] Traceback" in p.stderr, p.stderr  # the child's traceback, relayed
    assert took < 60


def test_ctrl_c_stops_every_rank():
    import signal

    token = "axle-test-" + uuid.uuid4().hex
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, os.path.join(PROGS, "faults.py"), "sleeps", token], env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(_leftovers(token)) < 3 and time.monotonic() < deadline:  # the parent and its 2 ranks
        time.sleep(0.2)
    assert len(_leftovers(token)) == 3
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err, err
    deadline = time.monotonic() + 5
    while _leftovers(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _leftovers(token)


@pytest.mark.parametrize("case", ["device_before_launch", "tensor_before_launch"])
def test_device_before_launch_is_refused(case):
    p, _ = fault(case)
    assert p.returncode != 0
    assert "Don't call device() before launch()" in p.stderr, p.stderr
    assert "[rank" not in p.stdout  # nothing was started


def test_xmp_spawn_works_and_is_deprecated():
    p, _ = fault("xmp_spawn")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[rank 1] sum [3.0, 3.0, 3.0] world 2 rank 1" in p.stdout
    assert "DeprecationWarning: torch_xla.distributed.xla_multiprocessing.spawn is deprecated" in p.stdout, p.stdout


def test_torch_multiprocessing_spawn_makes_xla_ranks_and_is_deprecated():
    p, _ = fault("mp_spawn")
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert f"sum [3.0, 3.0, 3.0] world 2 rank {r}" in p.stdout, p.stdout
    assert "DeprecationWarning: torch.multiprocessing.spawn with torch_xla is deprecated" in p.stdout, p.stdout


def test_xm_and_torch_distributed_collectives_give_the_right_values():
    p, _ = fault("xm_collectives")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("xm collectives ok") == 2, p.stdout


# ---------------------------------------------------------------- FSDP v1 (XlaFullyShardedDataParallel)

@pytest.fixture(scope="module")
def fsdp_runs(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    graphs = tmp_path_factory.mktemp("fsdp-graphs")
    r = {"one": runs["one"]}
    for mode in ("fsdp-ckpt", "fsdp-keep", "fsdp-noflat", "fsdp-dim0-nowrap"):
        env = {"SAVE_GRAPHS_UNDER": str(graphs / mode)} if mode in ("fsdp-ckpt", "fsdp-keep") else None
        r[mode], _ = train(mode, 2, out, env=env)
    r["fsdp-1"], _ = train("fsdp", 1, out)
    r["graphs"] = graphs
    return r


@pytest.mark.parametrize("mode", ["fsdp-ckpt", "fsdp-keep", "fsdp-noflat", "fsdp-dim0-nowrap"])
def test_fsdp_two_processes_match_one_process(fsdp_runs, mode):
    # Rank 1 started from other weights: FSDP's broadcast of rank 0's made them equal. Every
    # option (flat or per-parameter shards, resharded or kept, dim-0 shards, one unit or one per
    # Linear) gives the one-process losses.
    one = fsdp_runs["one"][0]["losses"]
    assert close(one, mean_losses(fsdp_runs[mode])), (mode, one, mean_losses(fsdp_runs[mode]))
    assert close(one, fsdp_runs["fsdp-1"][0]["losses"])
    fallbacks = [k for r in fsdp_runs[mode] for k in r["counters"] if k.startswith(("aten::", "c10d::"))]
    assert not fallbacks, fallbacks


def _graph_ops(graphs, rank, op):
    """The largest count of `op` in one saved graph of `rank` (the training step's)."""
    counts = []
    for path in glob.glob(os.path.join(graphs, f"rank{rank}", "*.dot")):
        with open(path) as f:
            counts.append(len(re.findall(rf"\b{op}\b", f.read())))
    assert counts, f"no graphs saved under {graphs}"
    return max(counts)


def test_fsdp_collectives_are_in_the_step_graph_and_reshard_regathers(fsdp_runs):
    # Two units (one per Linear, flat); the root holds no parameter. Kept: each unit
    # all-gathers once, in forward. Resharded: the second Linear all-gathers again in backward
    # (the barrier keeps CSE from merging the two); the first Linear's weight is not needed in
    # backward (its input needs no gradient), so its re-gather is dead code the compiler drops.
    # One reduce-scatter per unit either way.
    g = fsdp_runs["graphs"]
    for rank in (0, 1):
        assert _graph_ops(g / "fsdp-ckpt", rank, "all_gather") == 3
        assert _graph_ops(g / "fsdp-keep", rank, "all_gather") == 2
        assert _graph_ops(g / "fsdp-ckpt", rank, "reduce_scatter") == 2
        assert _graph_ops(g / "fsdp-keep", rank, "reduce_scatter") == 2


def test_fsdp_checkpoint_consolidates_into_the_unwrapped_model(fsdp_runs):
    r0 = fsdp_runs["fsdp-ckpt"][0]
    assert r0["ckpt_keys"] == ["1.bias", "1.weight", "3.bias", "3.weight"], r0["ckpt_keys"]
    assert abs(r0["ckpt_loss_sharded"] - r0["ckpt_loss_consolidated"]) <= 1e-5 * abs(r0["ckpt_loss_sharded"])
    assert os.path.exists(r0["ckpt_path"])


def test_fsdp_optimizer_step_is_refused_on_shards(fsdp_runs):
    for r in fsdp_runs["fsdp-ckpt"]:
        assert "FSDP parameters: call optimizer.step()" in r.get("optimizer_step_error", ""), r
