#!/bin/bash
# Issue 13's recheck on one lent H200, in one call, read-only on the GPU:
#   1. the agent's CUDA loss values, read on its sender thread, under sync debug "error" against a
#      live hub (benchmarks/agent_cuda_check.py);
#   2. the one-shots (gpumix-top --once --json, gpumix doctor, gpumix power show) against gpustat,
#      nvitop --once and nvidia-smi, with then without a running hub, median of 5, alternated; and
#      Python's own floor in the same rounds (python3 -c pass, python3 -c "import json, socket");
#   3. the agent's per-step cost, no hub and a live hub, loss on the GPU and on the CPU;
#   4. the 10-GPU demo's dashboard at 80x24 and 160x48: gpumix-top attached to `gpumix hub --demo`,
#      then gpumix-top --demo with its hub in-process (bench_tui, 2 alternated rounds of $SECS s).
#
#   OUT=/tmp/out bash benchmarks/device_recheck.sh          # wheels (gpumix-top's own among them) in .whl/
#   DRY=1 OUT=/tmp/out bash benchmarks/device_recheck.sh    # a dry run without a GPU: a simulated rig, no agent parts
#
# JSON and the log ($OUT/log.txt) go to $OUT; the dashboards' JSON and the hubs' logs are packed into
# $OUT/recheck.tgz (a call returns at most 8 files). Set-up and step runner: benchmarks/device_setup.sh.
set -u
cd "$(dirname "$0")/.."
BUDGET_S=${BUDGET_S:-540}
. benchmarks/device_setup.sh recheck   # REPO OUT LOG WORK PY DRY SRC BUDGET_S; wheels; say, step, pack, start_hub, stop_hub
SECS=${SECS:-8}   # the dashboards' measuring window
WARM=${WARM:-3}
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; $PY --version; } >>"$LOG" 2>&1

start_hub oneshot $SRC
if [ "$DRY" != 1 ]; then
  step 60 "agent CUDA values under sync debug, live hub" $PY "$REPO/benchmarks/agent_cuda_check.py" \
    --hub "$WORK/run/gpumix/hub.sock" --out "$OUT/agent_cuda_check.json"
fi
ONESHOTS=(--cmd "gpumix-top --once --json $SRC" --cmd "gpumix doctor $SRC" --cmd "gpumix power show $SRC"
          --cmd "gpustat --json" --cmd "nvitop --once" --cmd "nvidia-smi"
          --cmd "$PY -c pass" --cmd "$PY -c 'import json, socket'")
ATTACHED=(--cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpumix power show" "${ONESHOTS[@]:6}")
step 30 "one-shots warm-up" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 1 "${ONESHOTS[@]}" --label warm-up
step 60 "one-shots, a hub running" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label hub \
  --out "$OUT/costs_oneshot_hub_recheck.json" "${ATTACHED[@]}"
importtime() {  # NAME MODULE ARGS...: where an attached one-shot's time goes, started as the installed script
  local name=$1 module=$2; shift 2
  step 20 "import times of $name, a hub running" bash -c "$PY -X importtime -c 'import sys; from $module import main; sys.exit(main())' $* \
    2>'$WORK/importtime_hub_$name.txt' >/dev/null"
}
importtime doctor gpumix.cli.main doctor
importtime power_show gpumix.cli.main power show
importtime once gpumix.tui.main --once --json
stop_hub
step 60 "one-shots, no hub" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label no-hub \
  --out "$OUT/costs_oneshot_nohub_recheck.json" "${ONESHOTS[@]}"
if [ "$DRY" != 1 ]; then
  step 90 "agent per step, loss on the GPU" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both \
    --pairs 3 --steps 5000 --out "$OUT/agent_calls_h200_cuda_recheck.json"
  step 60 "agent per step, loss on the CPU" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cpu --case both \
    --pairs 2 --steps 5000 --out "$OUT/agent_calls_h200_cpu_recheck.json"
fi

# -- the 10-GPU demo's dashboard: attached to `gpumix hub --demo`, then with its hub in-process ------------
TUI=($PY "$REPO/benchmarks/bench_tui.py" --repeats 2 --seconds "$SECS" --warmup "$WARM")
demo_dashboards 60 "${TUI[@]}"
say done
pack
