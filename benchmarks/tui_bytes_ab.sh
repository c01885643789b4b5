#!/bin/bash
# The dashboard's bytes to the terminal by screen row, before and after a change (issue 13), alternated
# (before, after, after, before, ...) REPEATS rounds per case with benchmarks/tui_bytes_by_row.py, each
# tree laid out by benchmarks/tree_at.sh. Cases: CASE-COLSxROWS with CASE one of
#   idle  - one simulated GPU idling with the PCIe noise an idle H200 read (benchmarks/idle_sim_hub.py)
#   busy  - the same rig under its synthetic training job (`gpumix hub --sim benchmarks/rig_1gpu.toml`)
#   demo  - the TUI attached to `gpumix hub --demo` (10 GPUs, 10 ranks)
#
#   REPEATS=3 SECS=15 WARM=5 bash benchmarks/tui_bytes_ab.sh BEFORE AFTER [TAG]
#
# Writes benchmarks/results/tui_bytes_<case>_<TAG>.json: every run, and each tree's median bytes/s.
set -eu
cd "$(dirname "$0")/.."
REPO=$PWD
before=$1 after=$2 tag=${3:-$(date -u +%Y-%m-%d)}
REPEATS=${REPEATS:-3} SECS=${SECS:-15} WARM=${WARM:-5}
CASES=${CASES:-"idle-80x24 idle-160x48 busy-80x24 busy-160x48 demo-80x24 demo-160x48"}
WORK=${WORK:-/tmp/tui-bytes-ab}
mkdir -p "$WORK/run" "$WORK/runs"; chmod 700 "$WORK/run"
export XDG_RUNTIME_DIR=$WORK/run
unset GPUMIX_HUB
bash benchmarks/tree_at.sh "$before" "$WORK/before"
bash benchmarks/tree_at.sh "$after" "$WORK/after"
PY=$REPO/.venv/bin/python
hub_pids=()
wait_socket() { for _ in $(seq 100); do [ -S "$1" ] && return; sleep 0.1; done; echo "no hub on $1" >&2; exit 1; }
trap 'for pid in "${hub_pids[@]}"; do kill "$pid" 2>/dev/null; done' EXIT
PYTHONPATH=$WORK/after "$REPO/.venv/bin/gpumix" hub --demo --interval 1 --socket "$WORK/demo.sock" >"$WORK/demo.log" 2>&1 &
hub_pids+=($!)
PYTHONPATH=$WORK/after "$REPO/.venv/bin/gpumix" hub --sim benchmarks/rig_1gpu.toml --interval 1 --socket "$WORK/busy.sock" >"$WORK/busy.log" 2>&1 &
hub_pids+=($!)
PYTHONPATH=$WORK/after "$PY" benchmarks/idle_sim_hub.py --sim benchmarks/rig_1gpu.toml --socket "$WORK/idle.sock" >"$WORK/idle.log" 2>&1 &
hub_pids+=($!)
for socket in demo busy idle; do wait_socket "$WORK/$socket.sock"; done
sleep 3
for case in $CASES; do
  kind=${case%-*} size=${case##*-}
  cols=${size%x*} rows=${size#*x}
  runs=()
  for round in $(seq "$REPEATS"); do
    order="before after"; [ $((round % 2)) -eq 0 ] && order="after before"
    for tree in $order; do
      out=$WORK/runs/${case}_${tree}_$round.json
      "$PY" benchmarks/tui_bytes_by_row.py --seconds "$SECS" --warmup "$WARM" --cols "$cols" --rows "$rows" --out "$out" \
        -- env PYTHONPATH="$WORK/$tree" "$REPO/.venv/bin/gpumix-top" --interval 1 --hub "$WORK/$kind.sock" >/dev/null
      runs+=("$tree=$out")
    done
  done
  "$PY" - "benchmarks/results/tui_bytes_${case}_${tag}.json" "$case" "$(git rev-parse --short "$before")" \
    "$(git rev-parse --short "$after")" "${runs[@]}" <<'EOF'
import json, statistics, sys
out, case, before, after, *runs = sys.argv[1:]
result = {"case": case, "before": before, "after": after, "runs": []}
for run in runs:
    tree, path = run.split("=", 1)
    result["runs"].append({"tree": tree, **json.load(open(path))})
for tree in ("before", "after"):
    values = [r["bytes_per_s"] for r in result["runs"] if r["tree"] == tree]
    result[f"{tree}_bytes_per_s"] = {"median": statistics.median(values), "min": min(values), "max": max(values), "all": values}
json.dump(result, open(out, "w"), indent=1)
print(case, "before", result["before_bytes_per_s"], "after", result["after_bytes_per_s"], flush=True)
EOF
done
