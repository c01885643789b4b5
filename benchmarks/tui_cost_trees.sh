#!/bin/bash
# The dashboard's CPU, bytes and RSS for two laid-out trees (benchmarks/tree_at.sh), alternated in one
# run per case with benchmarks/bench_tui.py, against hubs already running (so a hub change between the
# commits is not measured): as benchmarks/tui_cost_ab.sh, which starts its own hubs from the after tree.
#
#   DEMO_SOCK=/tmp/x/demo.sock ONE_SOCK=/tmp/x/one.sock \
#     bash benchmarks/tui_cost_trees.sh BEFORE_TREE AFTER_TREE TAG onegpu-80x24 onegpu-160x48 attached-80x24 demo-80x24
#
# with `gpumix hub --demo --socket $DEMO_SOCK` and `gpumix hub --sim benchmarks/rig_1gpu.toml --socket $ONE_SOCK`
# running (`sim1-COLSxROWS`: the one-GPU rig with its hub in-process, no socket needed).
# Writes benchmarks/results/tui_cost_<case>_<TAG>.json ($PREFIX instead of tui_cost when set).
set -eu
cd "$(dirname "$0")/.."
before=$1 after=$2 tag=$3; shift 3
unset GPUMIX_HUB
TOP="$PWD/.venv/bin/gpumix-top"
for case in "$@"; do
  kind=${case%-*} size=${case##*-}; cols=${size%x*} rows=${size#*x}
  case $kind in
    demo) args="--demo --interval 1" ;;
    attached) args="--interval 1 --hub $DEMO_SOCK" ;;
    onegpu) args="--interval 1 --hub $ONE_SOCK" ;;
    sim1) args="--interval 1 --sim benchmarks/rig_1gpu.toml" ;;  # the one-GPU rig, its hub in-process
  esac
  .venv/bin/python benchmarks/bench_tui.py --repeats "${REPEATS:-3}" --seconds "${SECS:-12}" --warmup "${WARM:-4}" \
    --cols "$cols" --rows "$rows" --label "$case before=$before after=$after" \
    --out "benchmarks/results/${PREFIX:-tui_cost}_${case}_${tag}.json" \
    --peer "env PYTHONPATH=$after $TOP $args" -- env PYTHONPATH="$before" $TOP $args
done
