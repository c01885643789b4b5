#!/bin/bash
# The dashboard's CPU, bytes and RSS before and after a change (issue 13), alternated in one run per
# case with benchmarks/bench_tui.py: `gpumix-top --demo` (its own hub) at 80x24 and 160x48, the TUI
# attached to `gpumix hub --demo` at both sizes, and attached to a hub on a one-GPU simulated rig
# (benchmarks/rig_1gpu.toml: the closest to the one-GPU H200) at 160x48. Each tree is laid out by
# benchmarks/tree_at.sh and put first on PYTHONPATH; extra trees (TREES) run as more peers.
#
#   bash benchmarks/tui_cost_ab.sh BEFORE_COMMIT AFTER_COMMIT [TAG]
#   REPEATS=3 SECS=15 WARM=5 CASES="demo-80x24 attached-160x48" bash benchmarks/tui_cost_ab.sh 08e2a8f HEAD
#
# Writes benchmarks/results/tui_cost_<case>_<TAG>.json (TAG defaults to today's date).
set -eu
cd "$(dirname "$0")/.."
REPO=$PWD
before=$1 after=$2 tag=${3:-$(date -u +%Y-%m-%d)}
REPEATS=${REPEATS:-3} SECS=${SECS:-15} WARM=${WARM:-5}
CASES=${CASES:-"demo-80x24 demo-160x48 attached-80x24 attached-160x48 onegpu-160x48"}
WORK=${WORK:-/tmp/tui-cost-ab}
mkdir -p "$WORK/run"; chmod 700 "$WORK/run"
export XDG_RUNTIME_DIR=$WORK/run  # this run's own hub sockets, never another user's
unset GPUMIX_HUB
bash benchmarks/tree_at.sh "$before" "$WORK/before"
bash benchmarks/tree_at.sh "$after" "$WORK/after"
TOP="$REPO/.venv/bin/gpumix-top"
hub_pids=()
start_hub() {  # $1 socket, rest: the hub's source flags
  local socket=$1; shift
  PYTHONPATH=$WORK/after "$REPO/.venv/bin/gpumix" hub "$@" --interval 1 --socket "$socket" >"$socket.log" 2>&1 &
  hub_pids+=($!)
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
}
trap 'for pid in "${hub_pids[@]}"; do kill "$pid" 2>/dev/null; done' EXIT
start_hub "$WORK/demo.sock" --demo
start_hub "$WORK/one.sock" --sim "$REPO/benchmarks/rig_1gpu.toml"
sleep 3
for case in $CASES; do
  kind=${case%-*} size=${case##*-}
  cols=${size%x*} rows=${size#*x}
  case $kind in
    demo) args="--demo --interval 1" ;;
    attached) args="--interval 1 --hub $WORK/demo.sock" ;;
    onegpu) args="--interval 1 --hub $WORK/one.sock" ;;
  esac
  peers=(--peer "env PYTHONPATH=$WORK/after $TOP $args")
  for extra in ${TREES:-}; do peers+=(--peer "env PYTHONPATH=$extra $TOP $args"); done
  .venv/bin/python benchmarks/bench_tui.py --repeats "$REPEATS" --seconds "$SECS" --warmup "$WARM" --cols "$cols" --rows "$rows" \
    --label "$case before=$(git rev-parse --short "$before") after=$(git rev-parse --short "$after")" \
    --out "benchmarks/results/tui_cost_${case}_${tag}.json" "${peers[@]}" -- env PYTHONPATH="$WORK/before" $TOP $args
done
