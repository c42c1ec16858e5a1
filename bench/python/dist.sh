#!/usr/bin/env bash
# Distributed training from Python, side by side and alternating (issue 25, item 8): the seed's
# Pattern 3 on axle (torch_xla.launch + the xla process group + DDP) with 2 processes against 1,
# PyTorch's own DDP on gloo (CPU) with 2 against 1 as the anchor in the same rounds, and axle's SPMD
# with 2 devices against 1 (bench/python/dist.py says what each runs).
#   bench/python/dist.sh [ROUNDS=3] [MODEL=cnn] [BATCH=64] [STEPS=20]
# Writes one JSON line per run to build/bench-python-dist.jsonl and prints, per system and world
# size, the median samples/s over the rounds with its range, and the per-round ratios (2 against 1;
# axle against PyTorch at the same size) as median (min-max). Names the processor (lscpu).
# On a machine with fewer cores than 2 processes x threads the 2-process figures are contended.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-cnn}
BATCH=${BATCH:-64}
STEPS=${STEPS:-20}
AXLE_VENV=${AXLE_VENV:-$HOME/.cache/axle/venv-torch-2.15.0}
PY="$AXLE_VENV/bin/python"
OUT=${OUT:-$ROOT/build/bench-python-dist.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
echo "processor: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores" >&2
common="--model $MODEL --batch-size $BATCH --steps $STEPS"
for r in $(seq "$ROUNDS"); do
  for n in 1 2; do
    env -u AXLE_NUM_DEVICES -u CPU_NUM_DEVICES PYTHONPATH="$ROOT/python" "$PY" "$HERE/dist.py" --system axle-ddp --procs "$n" $common \
      | sed 's/^\[rank 0\] //' | grep '^{' >> "$OUT"
    "$PY" "$HERE/dist.py" --system torch-ddp --procs "$n" $common | sed 's/^\[rank 0\] //' | grep '^{' >> "$OUT"
    PYTHONPATH="$ROOT/python" "$PY" "$HERE/dist.py" --system axle-spmd --devices "$n" $common | sed 's/^\[rank 0\] //' | grep '^{' >> "$OUT"
  done
  echo "round $r done" >&2
done
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def runs(system, world):
    return [r["samples_per_s"] for r in rows if r["system"] == system and r.get("devices", r["world"]) == world]
def med(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
print(f"{'system':10} {'world':>5} {'samples/s median (range)':>28} {'x world 1':>20} {'axle / torch':>20}")
for s in ("axle-ddp", "torch-ddp", "axle-spmd"):
    for w in (1, 2):
        v, one = runs(s, w), runs(s, 1)
        scale = med([x / y for x, y in zip(v, one)]) if w == 2 else ""
        vs = med([x / y for x, y in zip(v, runs("torch-ddp", w))]) if s == "axle-ddp" else ""
        print(f"{s:10} {w:>5} {med(v):>28} {scale:>20} {vs:>20}")
PY
