#!/bin/bash
# The dashboard's Python calls per snapshot (benchmarks/tui_calls_per_snapshot.py), two commits alternated:
# ROUNDS rounds, each case (160x48 and 80x24, busy and the rig's synthetic job) before then after; each tree laid
# out by benchmarks/tree_at.sh and run by this checkout's script (issue 13). Then tui_calls_ab_combine.py.
#
#   ROUNDS=3 WORK=/tmp/ab bash benchmarks/tui_calls_ab.sh BEFORE AFTER
set -eu
cd /work/main
BEFORE=$1 AFTER=$2 ROUNDS=${ROUNDS:-3} WORK=${WORK:-/tmp/h4/ab}
rm -rf "$WORK"; mkdir -p "$WORK/raw"
bash benchmarks/tree_at.sh "$BEFORE" "$WORK/before" >/dev/null
bash benchmarks/tree_at.sh "$AFTER" "$WORK/after" >/dev/null
for round in $(seq 1 "$ROUNDS"); do
  for case in "160x48 --busy" "80x24 --busy" "160x48" "80x24"; do
    set -- $case; size=$1; busy=${2:-}
    for tree in before after; do
      name="${size}${busy:+_busy}_${tree}_${round}"
      PYTHONPATH="$WORK/$tree" .venv/bin/python benchmarks/tui_calls_per_snapshot.py --rig benchmarks/rig_1gpu.toml \
        --size "$size" --snapshots 40 --warm 6 $busy --out "$WORK/raw/$name.json" >/dev/null
    done
  done
done
