#!/usr/bin/env bash
# Side by side, alternating (issue 24, item 7): the same step.py under axle's xla device, PyTorch 2.15
# eager CPU, and torch_xla 2.9 on CPU (when its venv exists: shared/reference/peers/setup.sh ptxla).
#   bench/python/run.sh [ROUNDS=3] [MODELS="cnn gpt"] [THREADS="1 2"]
# Writes one JSON line per run to build/bench-python.jsonl and prints a table of medians over the
# rounds with their ranges, as ratios to PyTorch eager. Names the processor (lscpu).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-"cnn gpt"}
THREADS=${THREADS:-"1 2"}
AXLE_VENV=${AXLE_VENV:-$HOME/.cache/axle/venv-torch-2.15.0}
PTXLA=${ANCHORS_DIR:-$HOME/.cache/axle-peers}/ptxla/bin/python
OUT=${OUT:-$ROOT/build/bench-python.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
steps_for() { case "$1" in gpt) echo "--steps 8 --warm 2" ;; *) echo "--steps 60 --warm 5" ;; esac; }
echo "processor: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores" >&2
for r in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    for t in $THREADS; do
      args="--model $m --threads $t $(steps_for "$m")"
      PYTHONPATH="$ROOT/python" "$AXLE_VENV/bin/python" "$HERE/step.py" --device xla $args >> "$OUT"
      "$AXLE_VENV/bin/python" "$HERE/step.py" --device cpu $args >> "$OUT"
      if [ -x "$PTXLA" ]; then
        timeout 900 "$PTXLA" "$HERE/step.py" --device xla $args >> "$OUT" || echo "torch_xla $m $t failed" >&2
      fi
      echo "round $r $m threads $t done" >&2
    done
  done
done
"$AXLE_VENV/bin/python" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
key = lambda r: (r["model"], r["threads"])
print(f"{'model':5} {'thr':>3} {'system':18} {'median ms':>10} {'range ms':>17} {'x eager':>14} {'trace ms':>9} {'us/tensor':>9}")
for k in sorted({key(r) for r in rows}):
    eager = [r["median_step_ms"] for r in rows if key(r) == k and r["system"] == "pytorch-eager"]
    for s in sorted({r["system"] for r in rows if key(r) == k}):
        v = [r for r in rows if key(r) == k and r["system"] == s]
        ms = [r["median_step_ms"] for r in v]
        # ratio per round (runs alternate, so round i of each system ran side by side)
        ratios = [m / e for m, e in zip(ms, eager)] if eager else []
        rat = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"
        tr = statistics.median([r["trace_ms"] for r in v]) if "trace_ms" in v[0] else None
        us = statistics.median([r["trace_us_per_tensor"] for r in v]) if "trace_us_per_tensor" in v[0] else None
        print(f"{k[0]:5} {k[1]:>3} {s:18} {statistics.median(ms):>10.2f} {min(ms):>8.2f}-{max(ms):<8.2f} {rat:>14} "
              f"{'' if tr is None else f'{tr:.2f}':>9} {'' if us is None else f'{us:.2f}':>9}")
PY
