#!/usr/bin/env bash
# bf16 autocast correctness (issue 27, item 4), on 1 thread per run:
#  1. gpt, STEPS (1000) steps from the same initial weights (PyTorch's, written by
#     bench/gpt_train_pt.py --save-init), dropout 0, validation every 100 steps over EVAL_ITERS
#     batches: axle-train --precision bf16 and fp32, PyTorch 2.15 autocast-bf16 and fp32
#     (bench/gpt_train_pt.py; skipped with a line when PY has no torch). Targets: axle bf16's
#     final validation loss within 2% of PyTorch autocast-bf16's, within 3% of axle fp32's.
#  2. mlp and cnn, one epoch each, fp32 and bf16: test accuracy within 0.01.
# Everything goes to OUT (build/bf16-curve): each run's JSON and log, and summary.txt (the table
# printed at the end). Usage: bash bench/bf16_curve.sh   (BUILD, PY, OUT, STEPS, EVAL_ITERS, PARTS)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PY:-$HOME/.cache/axle/venv-torch-2.15.0/bin/python}
OUT=${OUT:-build/bf16-curve}
STEPS=${STEPS:-1000}
EVAL_ITERS=${EVAL_ITERS:-50}
PARTS=${PARTS:-"gpt fmnist"}
TRAIN="$BUILD/bin/axle-train"
mkdir -p "$OUT"
have_torch() { [ -x "$PY" ] && "$PY" -c 'import torch' 2>/dev/null; }

if [[ " $PARTS " == *" gpt "* ]]; then
  INIT="$OUT/gpt_init.safetensors"
  if have_torch; then
    "$PY" bench/gpt_train_pt.py --save-init "$INIT"
  elif [ ! -f "$INIT" ]; then
    echo "no PyTorch at $PY: axle runs start from axle's own initialisation, PyTorch runs skipped"
    INIT=""
  fi
  for p in bf16 fp32; do
    echo "axle gpt $p ..."
    "$TRAIN" --model gpt --max-steps "$STEPS" --dropout 0 --eval-every 100 --eval-iters "$EVAL_ITERS" \
      --threads 1 --precision "$p" ${INIT:+--init "$INIT"} --json "$OUT/axle_gpt_$p.json" > "$OUT/axle_gpt_$p.log" 2>&1
    if have_torch; then
      echo "pytorch gpt $p ..."
      "$PY" bench/gpt_train_pt.py --init "$INIT" --max-steps "$STEPS" --eval-iters "$EVAL_ITERS" --threads 1 \
        --precision "$p" --json "$OUT/pt_gpt_$p.json" > "$OUT/pt_gpt_$p.log" 2>&1
    fi
  done
fi
if [[ " $PARTS " == *" fmnist "* ]]; then
  for m in mlp cnn; do
    for p in fp32 bf16; do
      echo "axle $m $p ..."
      "$TRAIN" --model "$m" --epochs 1 --threads 1 --precision "$p" --json "$OUT/axle_${m}_$p.json" \
        > "$OUT/axle_${m}_$p.log" 2>&1
    done
  done
fi

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n)
    return json.load(open(p)) if os.path.exists(p) else None
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = set(next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), []))
print(f"processor: {cpu}; avx512_bf16: {'avx512_bf16' in flags}; amx_bf16: {'amx_bf16' in flags}")
runs = {k: load(f"{k}.json") for k in ("axle_gpt_bf16", "axle_gpt_fp32", "pt_gpt_bf16", "pt_gpt_fp32")}
def curve(j):
    if not j: return {}
    c = dict(zip(j["val_steps"], j["val_losses"]))
    if 0 not in c and j.get("losses"): c[0] = j["losses"][0]  # axle: step 0 = the first training loss
    return c
curves = {k: curve(v) for k, v in runs.items()}
if any(curves.values()):
    print("gpt validation loss (step 0 of axle: its first training loss)")
    print("step | " + " | ".join(curves))
    steps = sorted(set().union(*[set(c) for c in curves.values()]))
    for s in steps:
        print(f"{s} | " + " | ".join(f"{c[s]:.4f}" if s in c else "-" for c in curves.values()))
    fin = {k: (v["val_losses"][-1] if v else None) for k, v in runs.items()}
    for a, b, tol in (("axle_gpt_bf16", "pt_gpt_bf16", 0.02), ("axle_gpt_bf16", "axle_gpt_fp32", 0.03),
                      ("axle_gpt_fp32", "pt_gpt_fp32", None)):
        if fin[a] and fin[b]:
            r = fin[a] / fin[b] - 1
            ok = "" if tol is None else (" (target within %.0f%%: %s)" % (100 * tol, "met" if abs(r) <= tol else "NOT met"))
            print(f"final {a} vs {b}: {fin[a]:.4f} vs {fin[b]:.4f}, {100 * r:+.2f}%{ok}")
    for k, v in runs.items():
        if v: print(f"{k}: median step {v.get('median_step_ms', 0):.1f} ms")
for m in ("mlp", "cnn"):
    f, b = load(f"axle_{m}_fp32.json"), load(f"axle_{m}_bf16.json")
    if f and b:
        d = b["test_accuracy"] - f["test_accuracy"]
        print(f"{m} 1 epoch: accuracy fp32 {f['test_accuracy']:.4f}, bf16 {b['test_accuracy']:.4f}, "
              f"difference {d:+.4f} (target within 0.01: {'met' if abs(d) <= 0.01 else 'NOT met'}); "
              f"median step fp32 {f['median_step_ms']:.2f} ms, bf16 {b['median_step_ms']:.2f} ms")
EOF
