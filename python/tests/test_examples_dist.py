"""Issue 25, item 6: the distributed examples (examples/python: the seed's Patterns 2, 3 and 5 with
input sharding, FSDP v1 and v2) against the C++ trainer. Each example runs as a program for 20
steps of the mlp on Fashion-MNIST, two devices, from the initial weights it writes (--save-init)
and in axle-train's data order (--axle-order: axle's own samplers through
axle._C._sampler_indices); axle-train then runs the matching pattern from those weights
(--init). Every step's loss agrees within 1e-5 relative: rank 0's (axle-train reports rank 0),
and every rank's between Pattern 2 (xm.optimizer_step), Pattern 3 (DDP) and FSDP v1.

One thread per process everywhere (OMP_NUM_THREADS=1, --threads 1), so the runs do not depend on
the machine's load. axle-train: $AXLE_BUILD_DIR/bin/axle-train (ctest sets it), else build/.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
EXAMPLES = os.path.join(REPO, "examples", "python")
BUILD = os.environ.get("AXLE_BUILD_DIR", os.path.join(REPO, "build"))
AXLE_TRAIN = os.path.join(BUILD, "bin", "axle-train")
FMNIST = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
STEPS = 20
DEVICES = 2
# The run both sides make: batch 64 per process (per step under SPMD), SGD with momentum.
COMMON = ["--model", "mlp", "--max-steps", str(STEPS), "--batch-size", "64", "--lr", "0.05", "--momentum", "0.9",
          "--seed", "3"]

needs_fmnist = pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")),
                                  reason=f"Fashion-MNIST not in {FMNIST} (Debian: dataset-fashion-mnist)")


def _env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AXLE_LAUNCH_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "AXLE_NUM_DEVICES", "CPU_NUM_DEVICES",
                                                              "AXLE_CPU_DEVICES", "XLA_FLAGS", "AXLE_DEBUG")}
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def run_example(tmp_path, name, env):
    """Runs examples/python/<name>; returns [rank 0's record, rank 1's, ...] and the init file."""
    stem = os.path.splitext(name)[0]
    out, init = tmp_path / f"{stem}.json", tmp_path / f"{stem}.init.safetensors"
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *COMMON, "--axle-order", "--save-init",
                        str(init), "--log-every", "100", "--json", str(out)],
                       env=_env(env), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, f"{name} failed:\n{p.stdout[-3000:]}\n{p.stderr[-4000:]}"
    records = [json.loads(out.read_text())]
    world = records[0]["world_size"]
    for r in range(1, world):
        records.append(json.loads((tmp_path / f"{stem}.rank{r}.json").read_text()))
    for r, rec in enumerate(records):
        assert rec["rank"] == r and len(rec["losses"]) == STEPS, rec
    return records, init


def run_axle_train(tmp_path, pattern, init):
    assert os.access(AXLE_TRAIN, os.X_OK), f"{AXLE_TRAIN} not built (make build; AXLE_BUILD_DIR names another build)"
    out = tmp_path / f"axle-train-{pattern}.json"
    p = subprocess.run([AXLE_TRAIN, "--pattern", pattern, "--devices", str(DEVICES), "--init", str(init), *COMMON,
                        "--threads", "1", "--data", FMNIST, "--json", str(out)],
                       env=_env({}), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"axle-train --pattern {pattern} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(out.read_text())


def assert_close(a, b, what, rtol=1e-5):
    assert len(a) == len(b) == STEPS, (what, len(a), len(b))
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if not abs(x - y) <= rtol * max(abs(x), abs(y))]
    assert not bad, f"{what}: steps (index, one, other) beyond {rtol} relative: {bad[:5]}\n{a}\n{b}"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("examples_dist")


@pytest.fixture(scope="module")
def pattern2(tmp):
    return run_example(tmp, "pattern2_multiprocess.py", {"AXLE_NUM_DEVICES": str(DEVICES)})


@pytest.fixture(scope="module")
def pattern3(tmp):
    return run_example(tmp, "pattern3_ddp.py", {"AXLE_NUM_DEVICES": str(DEVICES)})


def check_against_axle_train(tmp, records, init, pattern):
    cpp = run_axle_train(tmp, pattern, init)
    assert cpp["world_size"] == (DEVICES if pattern in ("multiprocess", "ddp", "fsdp") else 1), cpp["world_size"]
    assert_close(records[0]["losses"], cpp["losses"], f"python vs axle-train --pattern {pattern}, rank 0")
    assert records[0]["losses"][0] > 2.0 and records[0]["losses"][-1] < records[0]["losses"][0]  # it trained


def test_sampler_indices_are_axle_trains_order():
    import axle

    one = axle._C._sampler_indices(10, 5, 0, 1, 0)
    assert sorted(one) == list(range(10)) and one != list(range(10))
    assert axle._C._sampler_indices(10, 5, 1, 1, 0) != one  # reshuffled per epoch
    assert axle._C._sampler_indices(10, 5, 0, 1, 0) == one  # a pure function of (seed, epoch)
    # DistributedSampler: the same epoch's permutation, rank r at positions r, r + world, ...
    # padded by wrapping to a multiple of the world size.
    ranks = [axle._C._sampler_indices(10, 5, 0, 3, r) for r in range(3)]
    padded = one + one[:2]
    assert ranks == [padded[r::3] for r in range(3)]
    with pytest.raises(RuntimeError, match="expected a rank in"):
        axle._C._sampler_indices(10, 5, 0, 2, 2)


@needs_fmnist
def test_pattern2_multiprocess_matches_axle_train(tmp, pattern2):
    records, init = pattern2
    assert records[0]["losses"] != records[1]["losses"]  # each rank its own share of the data
    check_against_axle_train(tmp, records, init, "multiprocess")


@needs_fmnist
def test_pattern3_ddp_matches_axle_train(tmp, pattern3):
    records, init = pattern3
    check_against_axle_train(tmp, records, init, "ddp")


@needs_fmnist
def test_pattern3_ddp_matches_pattern2_optimizer_step(pattern2, pattern3):
    for r in range(DEVICES):
        assert_close(pattern2[0][r]["losses"], pattern3[0][r]["losses"], f"optimizer_step vs DDP, rank {r}")


@needs_fmnist
def test_pattern5_spmd_input_sharding_matches_axle_train(tmp):
    records, init = run_example(tmp, "pattern5_spmd_input_sharding.py", {"AXLE_CPU_DEVICES": str(DEVICES)})
    assert records[0]["world_size"] == 1 and records[0]["devices"] == DEVICES
    check_against_axle_train(tmp, records, init, "spmd")


@needs_fmnist
def test_fsdp_v2_matches_axle_train(tmp):
    records, init = run_example(tmp, "fsdp_v2.py", {"AXLE_CPU_DEVICES": str(DEVICES)})
    assert records[0]["devices"] == DEVICES
    check_against_axle_train(tmp, records, init, "fsdp-spmd")


@needs_fmnist
def test_fsdp_v1_matches_axle_train_and_pattern2(tmp, pattern2):
    records, init = run_example(tmp, "fsdp_v1.py", {"AXLE_NUM_DEVICES": str(DEVICES)})
    check_against_axle_train(tmp, records, init, "fsdp")
    # Sharding changes where the weights live, not the arithmetic: each rank's losses are
    # Pattern 2's (the same weights, seed and batches).
    for r in range(DEVICES):
        assert_close(records[r]["losses"], pattern2[0][r]["losses"], f"FSDP v1 vs optimizer_step, rank {r}")
