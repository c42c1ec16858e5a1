#!/usr/bin/env python3
"""GPT training-step times of axle against PyTorch (issue 15), run by bench/run.

The step of shared/reference/peers/gpt_pt2.py: a char-level GPT (vocab 96, block 128, 4 layers,
4 heads, 128 embd, no dropout), batch 32 of random tokens, AdamW (wd 0.1 on matrices, betas
0.9/0.95) and clip_grad_norm_(1.0). axle runs build/bin/axle-gpt-step (--device xla: lazy,
traced and compiled at the step boundary; --device cpu: eager), PyTorch 2.15 runs gpt_pt2.py
eager and under torch.compile (the step function compiled). For each thread count every system
runs once per round, REPS rounds in turn (A B C D A B C D), so a slow phase of this shared machine
hits every system alike. Reported per system: the median of its runs' median step times, their
range, tokens/s, and the ratio to PyTorch eager's step time of the same round (system ms /
pt-eager ms; < 1: faster than PyTorch eager), median and range over the rounds. Target (issue
15): axle-xla <= 0.7x PyTorch eager, and faster than torch.compile's steady state.
Standard library only (runs on /usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEMS = {
    "axle-xla": ("axle", ["--device", "xla"], "axle xla (lazy: one graph per step)"),
    "axle-cpu": ("axle", ["--device", "cpu"], "axle cpu (eager)"),
    "pt-eager": ("pt215", ["--mode", "eager"], "PyTorch 2.15 eager"),
    "pt-compile": ("pt215", ["--mode", "compile"], "PyTorch 2.15 torch.compile(step)"),
    # bf16 (issue 27): axle-gpt-step --precision bf16 (forward and loss under axle::autocast) and
    # PyTorch eager under torch.autocast('cpu', torch.bfloat16) (bench/gpt_train_pt.py --bench: the
    # same model and step as gpt_pt2.py).
    "axle-xla-bf16": ("axle", ["--device", "xla", "--precision", "bf16"], "axle xla, bf16 autocast"),
    "axle-cpu-bf16": ("axle", ["--device", "cpu", "--precision", "bf16"], "axle cpu (eager), bf16 autocast"),
    "pt-eager-bf16": ("pt215-twin", ["--bench", "--precision", "bf16"], "PyTorch 2.15 eager, autocast bf16"),
    # Before/after a change in one run: axle-gpt-step of another build (AXLE_GPT_BEFORE=path).
    "axle-xla-before": ("before", ["--device", "xla"], "axle xla of the AXLE_GPT_BEFORE build"),
}
BASE = "pt-eager"
TOKENS = 32 * 128


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(a, s, threads):
    kind, args, _ = SYSTEMS[s]
    common = ["--threads", str(threads), "--steps", str(a.steps), "--warm", str(a.warm)]
    if kind == "pt215":
        cmd = [os.path.join(a.venvs, "pt215", "bin", "python"), os.path.join(a.peers, "gpt_pt2.py"), *args, *common]
    elif kind == "pt215-twin":
        cmd = [os.path.join(a.venvs, "pt215", "bin", "python"),
               os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_train_pt.py"), *args, *common]
    else:
        binary = a.axle if kind == "axle" else os.environ.get("AXLE_GPT_BEFORE", "")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no executable {binary!r}")
        cmd = [binary, *args, *common]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=a.timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
    j = json.loads(lines[-1])
    return dict(median_ms=j["median_step_ms"], p10_ms=j["p10_step_ms"], p90_ms=j["p90_step_ms"],
                first_step_s=j["first_step_s"], version=j.get("version"))


def processor():
    """The processor's name and whether it has the bf16 instructions (AVX512_BF16, AMX-BF16)."""
    name, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return dict(processor=name, avx512_bf16="avx512_bf16" in flags, amx_bf16="amx_bf16" in flags)


def spread(xs):
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs)) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--axle", required=True, help="build/bin/axle-gpt-step")
    ap.add_argument("--peers", default="", help="shared/reference/peers (scripts)")
    ap.add_argument("--venvs", default=os.path.expanduser("~/.cache/axle-peers"))
    ap.add_argument("--systems", default="axle-xla axle-cpu pt-eager pt-compile")
    ap.add_argument("--threads", default="1 2")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run")
    ap.add_argument("--warm", type=int, default=5, help="warm-up steps per run (not timed)")
    ap.add_argument("--reps", type=int, default=2, help="rounds: runs of each system per thread count")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    systems, skipped = [], {}
    for s in a.systems.split():
        if s not in SYSTEMS:
            sys.exit(f"bench: unknown gpt system {s!r} (known: {' '.join(SYSTEMS)})")
        if SYSTEMS[s][0] in ("pt215", "pt215-twin"):
            py = os.path.join(a.venvs, "pt215", "bin", "python")
            why = "peer scripts not found (shared/reference/peers)" if not a.peers else \
                None if os.access(py, os.X_OK) and os.path.exists(os.path.join(a.venvs, "pt215", ".anchors-stamp")) \
                else f"no complete virtual environment {os.path.join(a.venvs, 'pt215')}"
            if why:
                skipped[s] = why
                print(f"bench: skipping {s} ({SYSTEMS[s][2]}): {why}", flush=True)
                continue
        systems.append(s)

    load0 = os.getloadavg()
    if load0[0] > (os.cpu_count() or 1):
        print(f"bench: load average {load0[0]:.1f} on {os.cpu_count()} cores: other work is running, "
              "figures will be noisy", flush=True)
    runs, versions, t_start = {}, {}, time.time()
    for threads in [int(t) for t in a.threads.split()]:
        for r in range(a.reps):
            for s in systems:
                t0 = time.time()
                try:
                    rec = run(a, s, threads)
                    if rec.get("version"):
                        versions[s] = rec["version"]
                    log(f"  gpt threads={threads} round {r + 1}/{a.reps} {s}: {rec['median_ms']:.1f} ms "
                        f"({time.time() - t0:.0f} s)")
                except (RuntimeError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
                    rec = None
                    print(f"bench: gpt {s} threads={threads} round {r + 1} failed: {e}", flush=True)
                runs.setdefault((threads, s), []).append(rec)

    rows = []
    for (threads, s), recs in runs.items():
        base = runs.get((threads, BASE), [None] * len(recs))
        ms = [x["median_ms"] for x in recs if x]
        rows.append(dict(model="gpt", threads=threads, system=s, label=SYSTEMS[s][2],
                         runs_ms=[x["median_ms"] if x else None for x in recs], step_ms=spread(ms),
                         tokens_per_s=TOKENS / (statistics.median(ms) / 1e3) if ms else None,
                         vs_pt_eager=spread([x["median_ms"] / b["median_ms"] for x, b in zip(recs, base) if x and b]),
                         first_step_s=spread([x["first_step_s"] for x in recs if x])))

    pr = processor()
    print(f"\nprocessor: {pr['processor']}; AVX512_BF16: {'yes' if pr['avx512_bf16'] else 'no'}; "
          f"AMX-BF16: {'yes' if pr['amx_bf16'] else 'no'}")
    print(f"GPT step (batch 32 x block 128, 4 layers, 128 embd, AdamW + clipping): median ms of {a.reps} runs "
          f"per system (each: median of {a.steps} steps after {a.warm} warm-up), runs alternating between systems")
    print(f"{'thr':>3}  {'system':15} {'median ms':>10} {'range ms':>15} {'tokens/s':>9} {'x pt-eager':>10} "
          f"{'ratio range':>12} {'1st step s':>10}")
    for row in rows:
        st, rt, fs = row["step_ms"], row["vs_pt_eager"], row["first_step_s"]
        if st is None:
            print(f"{row['threads']:>3}  {row['system']:15} {'failed':>10}")
            continue
        rat = f"{rt['median']:.2f}" if rt else "-"
        rrng = f"{rt['min']:.2f}-{rt['max']:.2f}" if rt else "-"
        print(f"{row['threads']:>3}  {row['system']:15} {st['median']:10.1f} {st['min']:7.1f}-{st['max']:<7.1f} "
              f"{row['tokens_per_s']:9.0f} {rat:>10} {rrng:>12} {fs['median']:10.2f}")
    print("x pt-eager: the system's step time over PyTorch eager's in the same round (< 1: faster than PyTorch "
          "eager); target: axle-xla <= 0.70 and below pt-compile.")
    print("1st step s: the first step (axle xla: trace + compile; torch.compile: from its cache as left by earlier runs).")
    out = dict(date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), seconds=round(time.time() - t_start),
               machine=dict(cores=os.cpu_count(), loadavg_start=load0, loadavg_end=os.getloadavg(), **processor()),
               config=dict(steps=a.steps, warm=a.warm, reps=a.reps, batch=32, block=128,
                           threads=[int(t) for t in a.threads.split()]),
               baseline=BASE, versions=versions, skipped=skipped, rows=rows)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"(JSON: {a.json}; {out['seconds']} s)")
    if any(rec is None for (_, s), recs in runs.items() if SYSTEMS[s][0] == "axle" for rec in recs):
        sys.exit("bench: an axle gpt run failed (see above)")


if __name__ == "__main__":
    main()
