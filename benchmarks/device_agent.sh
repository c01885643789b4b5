#!/bin/bash
# The agent on one lent GPU (issue 13), in one call, read-only on the GPU: its CUDA values sampled
# (agent/sampling.py: the first step, then at most one copy each 0.1 s, always the step after a pause):
#   1. agent_cuda_check.py under torch's sync debug "error" against a live hub: no sync, the steps
#      the rule picks copied and no others, the hub's loss history equal to their losses;
#   2. bench_agent_calls.py, no hub and a live hub alternated: the loss a CUDA tensor (empty steps;
#      1 ms steps, where one step in a hundred copies; every step copying, the agent before sampling),
#      and a CPU tensor.
#
#   OUT=/tmp/out bash benchmarks/device_agent.sh     # wheels (gpumix-top's own, built from this tree) in .whl/
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/gpumix-agent}; mkdir -p "$OUT"
WORK=/tmp/agent-check; rm -rf "$WORK"; mkdir -p "$WORK/run"; chmod 700 "$WORK/run"
LOG=$OUT/log.txt; : >"$LOG"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=$WORK/run  # this run's own hub socket
unset GPUMIX_HUB
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1 \
    || { echo "wheel install failed"; tail -20 "$LOG"; exit 1; }
  export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
fi
cd "$WORK" || exit 1  # not the checkout: its gpumix/ lacks gpumix.agent (mapped from agent/)
say() { echo "=== $(date -u +%H:%M:%S) +${SECONDS}s $*" | tee -a "$LOG"; }
step() { local limit=$1 name=$2; shift 2; say "$name"; timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1; say "$name: exit $?"; }
{ nvidia-smi -L; nproc; $PY --version; $PY -c 'import gpumix.agent.sampling as s; print(s.__file__)'; } >>"$LOG" 2>&1

$PY -m gpumix.cli.main hub --interval 1 >"$WORK/hub.log" 2>&1 &
HUB=$!
for _ in $(seq 50); do [ -S "$WORK/run/gpumix/hub.sock" ] && break; sleep 0.2; done
sleep 1.5
step 90 "agent CUDA values sampled, under sync debug, live hub" $PY "$REPO/benchmarks/agent_cuda_check.py" \
  --hub "$WORK/run/gpumix/hub.sock" --out "$OUT/agent_cuda_check.json"
kill "$HUB"; wait "$HUB" 2>/dev/null
CALLS=($PY "$REPO/benchmarks/bench_agent_calls.py" --case both)
step 90 "agent per step, CUDA loss, empty steps" "${CALLS[@]}" --device cuda --pairs 3 --steps 5000 \
  --out "$OUT/agent_calls_cuda.json"
step 90 "agent per step, CUDA loss, 1 ms steps" "${CALLS[@]}" --device cuda --pairs 2 --steps 2000 --body-us 1000 \
  --out "$OUT/agent_calls_cuda_1ms.json"
step 90 "agent per step, CUDA loss, every step copying" "${CALLS[@]}" --device cuda --pairs 3 --steps 5000 \
  --device-read-interval 0 --out "$OUT/agent_calls_cuda_every.json"
step 60 "agent per step, CPU loss" "${CALLS[@]}" --device cpu --pairs 2 --steps 5000 --out "$OUT/agent_calls_cpu.json"
say done
