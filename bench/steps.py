#!/usr/bin/env python3
"""Step times of axle against its peers, one training step of the same model and method
(Fashion-MNIST, batch 128, SGD lr 0.01 momentum 0.9), run by bench/run.

Every (model, threads) pair runs each system once per round, REPS rounds in turn (A B C A B C),
so a slow phase of this shared machine hits every system alike. Reported per system: the
median of its runs' median step times, their range, and the ratio to axle's lazy `xla` device
taken round by round (system ms / axle-xla ms of the same round; > 1: axle-xla is faster),
median and range over the rounds. Printed as a table and written as JSON.

The peers are the scripts of shared/reference/peers (PyTorch 2.15 eager and torch.compile,
jax 0.12, torch_xla 2.9) in the virtual environments its setup.sh builds; a missing peer is
skipped with a printed line. Standard library only (runs on /usr/bin/python3).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# name -> (venv, script, mode, label). axle-* run build/bin/axle-train.
PEERS = {
    "pt-eager": ("pt215", "pt2_fmnist.py", "eager", "PyTorch 2.15 eager"),
    # compile_func: the whole step (forward, backward, SGD) as one torch.compile(fullgraph=True)
    # graph, the best torch.compile mode here (peers/README.md); pt-compile-step compiles the
    # usual step function, which Dynamo breaks into three graphs.
    "pt-compile": ("pt215", "pt2_fmnist.py", "compile_func", "PyTorch 2.15 torch.compile (whole step)"),
    "pt-compile-step": ("pt215", "pt2_fmnist.py", "compile", "PyTorch 2.15 torch.compile(step)"),
    # bf16 (issue 27): PyTorch eager with the forward and loss under torch.autocast('cpu',
    # torch.bfloat16), the peer of axle-xla-bf16; this script is axle's (bench/), the rest its.
    "pt-eager-bf16": ("pt215", "bench:fmnist_pt_bf16.py", "eager", "PyTorch 2.15 eager, autocast bf16"),
    "jax": ("jax", "jax_fmnist.py", "jit", "jax 0.12 jit (whole step)"),
    "ptxla": ("ptxla", "ptxla_fmnist.py", "step", "torch_xla 2.9 Pattern 1 (PJRT CPU)"),
}
AXLE = {
    "axle-xla": (["--device", "xla", "--pattern", "single"], "axle xla (lazy, Pattern 1)"),
    "axle-cpu": (["--device", "cpu", "--pattern", "single"], "axle cpu (eager)"),
    "axle-compiled": (["--device", "xla", "--pattern", "compiled"], "axle xla, axle::compile'd step"),
    "axle-eager": (["--device", "xla", "--pattern", "eager"], "axle xla eager mode"),
    "axle-xla-async": (["--device", "xla", "--pattern", "single"], "axle xla, async execution (AXLE_ASYNC=1)"),
    "axle-xla-bf16": (["--device", "xla", "--pattern", "single", "--precision", "bf16"],
                      "axle xla, bf16 autocast (axle-train --precision bf16)"),
    # Before/after a change, in one run: axle-train of another build (AXLE_BEFORE=path/to/axle-train).
    "axle-xla-before": (["--device", "xla", "--pattern", "single"], "axle xla of the AXLE_BEFORE build"),
}
AXLE_ENV = {"axle-xla-async": {"AXLE_ASYNC": "1"}}  # extra environment per axle system
BASE = "axle-xla"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def peer_ready(venvs, venv):
    """(python path, None) or (None, why not)."""
    d = os.path.join(venvs, venv)
    py = os.path.join(d, "bin", "python")
    if not os.access(py, os.X_OK):
        return None, f"no virtual environment {d}"
    if not os.path.exists(os.path.join(d, ".anchors-stamp")):
        return None, f"{d} is incomplete (setup.sh still building it, or it failed)"
    return py, None


def run_axle(a, name, model, threads, tmp):
    out = os.path.join(tmp, f"{name}-{model}-{threads}.json")
    binary = a.axle_train
    if name == "axle-xla-before":
        binary = os.environ.get("AXLE_BEFORE", "")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"axle-xla-before needs AXLE_BEFORE=path/to/axle-train, got {binary!r}")
    cmd = [binary, *AXLE[name][0], "--model", model, "--threads", str(threads),
           "--max-steps", str(a.warm + a.steps), "--json", out]
    env = {**os.environ, **AXLE_ENV.get(name, {})}
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=a.timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
    j = json.load(open(out))
    steps = j["step_ms"][a.warm:] or j["step_ms"]
    rec = dict(median_ms=statistics.median(steps), first_step_s=j["step_ms"][0] / 1e3)
    # Wall clock per step after warm-up, the loss read and the loader included: with async
    # execution a step returns before its graph ran, so only this compares with axle-xla's.
    timed = max(1, len(j["step_ms"]) - a.warm)
    rec["wall_ms"] = (1e3 * j["train_seconds"] - sum(j["step_ms"][:a.warm])) / timed
    if name in AXLE_ENV:
        rec["median_ms"] = rec["wall_ms"]
    if j["device"] == "xla":  # per step: tracing ops + cutting, hashing, looking up the graph
        m = j["metrics"]
        rec["overhead_ms"] = (m.get("TraceTime", 0.0) + m.get("GraphCutTime", 0.0)) / max(1, j["steps"])
    return rec


def run_peer(a, name, py, model, threads):
    venv, script, mode, _ = PEERS[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), script[6:]) if script.startswith("bench:") \
        else os.path.join(a.peers, script)
    cmd = [py, path, "--model", model, "--threads", str(threads), "--mode", mode,
           "--steps", str(a.steps), "--warm", str(a.warm)]
    if name in ("jax", "ptxla"):
        cmd.append("--no-pipelined")
    if script.startswith("bench:"):
        cmd += ["--peers", a.peers]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=a.timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
    j = json.loads(lines[-1])
    return dict(median_ms=j["median_step_ms"], first_step_s=j["first_step_s"], version=j.get("version"),
                cpu_util=j.get("cpu_util"))


def spread(xs):
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs)) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--axle-train", required=True)
    ap.add_argument("--peers", default="", help="shared/reference/peers (scripts)")
    ap.add_argument("--venvs", default=os.path.expanduser("~/.cache/axle-peers"))
    ap.add_argument("--systems", default="axle-xla axle-cpu pt-eager pt-compile jax ptxla")
    ap.add_argument("--models", default="mlp cnn")
    ap.add_argument("--threads", default="1 2")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per run")
    ap.add_argument("--warm", type=int, default=20, help="warm-up steps per run (not timed)")
    ap.add_argument("--reps", type=int, default=2, help="rounds: runs of each system per configuration")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # keep the table in order with the progress on stderr

    systems, skipped, pythons = [], {}, {}
    for s in a.systems.split():
        if s in AXLE:
            systems.append(s)
        elif s in PEERS:
            py, why = (None, "peer scripts not found (shared/reference/peers)") if not a.peers else \
                peer_ready(a.venvs, PEERS[s][0])
            if py:
                systems.append(s)
                pythons[s] = py
            else:
                skipped[s] = why
                print(f"bench: skipping {s} ({PEERS[s][3]}): {why}", flush=True)
        else:
            sys.exit(f"bench: unknown system {s!r} (known: {' '.join([*AXLE, *PEERS])})")
    if BASE not in systems:
        systems.insert(0, BASE)  # the ratios' reference

    load0 = os.getloadavg()
    if load0[0] > (os.cpu_count() or 1):
        print(f"bench: load average {load0[0]:.1f} on {os.cpu_count()} cores: other work is running, "
              "figures will be noisy", flush=True)
    runs = {}  # (model, threads, system) -> list of per-round records (None: that run failed)
    versions = {}
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split():
            for threads in [int(t) for t in a.threads.split()]:
                for r in range(a.reps):
                    for s in systems:
                        t0 = time.time()
                        try:
                            rec = run_axle(a, s, model, threads, tmp) if s in AXLE else \
                                run_peer(a, s, pythons[s], model, threads)
                            if rec.get("version"):
                                versions[s] = rec["version"]
                            log(f"  {model} threads={threads} round {r + 1}/{a.reps} {s}: "
                                f"{rec['median_ms']:.3f} ms ({time.time() - t0:.0f} s)")
                        except (RuntimeError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
                            rec = None
                            print(f"bench: {s} {model} threads={threads} round {r + 1} failed: {e}", flush=True)
                        runs.setdefault((model, threads, s), []).append(rec)

    rows = []
    for (model, threads, s), recs in runs.items():
        base = runs[(model, threads, BASE)]
        ms = [x["median_ms"] for x in recs if x]
        key = "wall_ms" if s in AXLE_ENV else "median_ms"  # async: wall clock against wall clock
        ratios = [x[key] / b[key] for x, b in zip(recs, base) if x and b]
        row = dict(model=model, threads=threads, system=s,
                   label=AXLE[s][1] if s in AXLE else PEERS[s][3],
                   runs_ms=[x["median_ms"] if x else None for x in recs],
                   step_ms=spread(ms), vs_axle_xla=spread(ratios),
                   first_step_s=spread([x["first_step_s"] for x in recs if x]))
        ovh = [x["overhead_ms"] for x in recs if x and "overhead_ms" in x]
        if ovh:
            row["overhead_ms"] = statistics.median(ovh)
        wall = [x["wall_ms"] for x in recs if x and "wall_ms" in x]
        if wall:
            row["wall_ms"] = spread(wall)
        rows.append(row)

    print(f"\nstep time: median ms of {a.reps} runs per system (each run: median of {a.steps} steps after "
          f"{a.warm} warm-up), runs alternating between systems; batch 128, SGD lr 0.01 momentum 0.9")
    print(f"{'model':5} {'thr':>3}  {'system':15} {'median ms':>10} {'range ms':>17} {'x axle-xla':>10} "
          f"{'ratio range':>12} {'1st step s':>10}")
    for row in rows:
        st, rt, fs = row["step_ms"], row["vs_axle_xla"], row["first_step_s"]
        if st is None:
            print(f"{row['model']:5} {row['threads']:>3}  {row['system']:15} {'failed':>10}")
            continue
        rng = f"{st['min']:.2f}-{st['max']:.2f}"
        rat = f"{rt['median']:.2f}" if rt else "-"
        rrng = f"{rt['min']:.2f}-{rt['max']:.2f}" if rt else "-"
        extra = f"  (xla overhead {row['overhead_ms']:.3f} ms/step)" if "overhead_ms" in row else ""
        if "wall_ms" in row:
            w = row["wall_ms"]
            extra += f"  (wall {w['median']:.2f} ms/step, {w['min']:.2f}-{w['max']:.2f})"
        print(f"{row['model']:5} {row['threads']:>3}  {row['system']:15} {st['median']:10.2f} {rng:>17} {rat:>10} "
              f"{rrng:>12} {fs['median']:10.2f}{extra}")
    print("x axle-xla: the system's step time over axle xla's in the same round (> 1: axle xla is faster), "
          "median and range over rounds.")
    print("axle-xla-async: its step time and ratio are wall clock per step (loss read and loader included) "
          "against axle-xla's wall clock, since an async step returns before its graph ran.")
    print("1st step s: the first step's time (peers: trace + compile; torch.compile from a cold cache).")
    print("systems: " + "; ".join(f"{s} = {AXLE[s][1] if s in AXLE else PEERS[s][3]}" for s in systems))

    out = dict(date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), seconds=round(time.time() - t_start),
               machine=dict(cpu=cpu_model(), cores=os.cpu_count(), kernel=platform.release(),
                            loadavg_start=load0, loadavg_end=os.getloadavg()),
               config=dict(steps=a.steps, warm=a.warm, reps=a.reps, batch=128, models=a.models.split(),
                           threads=[int(t) for t in a.threads.split()]),
               baseline=BASE, versions=versions, skipped=skipped, rows=rows)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"(JSON: {a.json}; {out['seconds']} s)")
    # A peer may be missing or fail (printed above); axle itself failing is an error.
    if any(rec is None for (_, _, s), recs in runs.items() if s in AXLE for rec in recs):
        sys.exit("bench: an axle run failed (see above)")


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
