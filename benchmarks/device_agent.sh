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
BUDGET_S=${BUDGET_S:-600}  # every part runs: their limits add up to 420 s
. benchmarks/device_setup.sh agent   # REPO OUT LOG WORK PY; wheels; say, step, start_hub, stop_hub
{ nvidia-smi -L; nproc; $PY --version; $PY -c 'import gpumix.agent.sampling as s; print(s.__file__)'; } >>"$LOG" 2>&1

start_hub agent
step 90 "agent CUDA values sampled, under sync debug, live hub" $PY "$REPO/benchmarks/agent_cuda_check.py" \
  --hub "$WORK/run/gpumix/hub.sock" --out "$OUT/agent_cuda_check.json"
stop_hub
CALLS=($PY "$REPO/benchmarks/bench_agent_calls.py" --case both)
step 90 "agent per step, CUDA loss, empty steps" "${CALLS[@]}" --device cuda --pairs 3 --steps 5000 \
  --out "$OUT/agent_calls_cuda.json"
step 90 "agent per step, CUDA loss, 1 ms steps" "${CALLS[@]}" --device cuda --pairs 2 --steps 2000 --body-us 1000 \
  --out "$OUT/agent_calls_cuda_1ms.json"
step 90 "agent per step, CUDA loss, every step copying" "${CALLS[@]}" --device cuda --pairs 3 --steps 5000 \
  --device-read-interval 0 --out "$OUT/agent_calls_cuda_every.json"
step 60 "agent per step, CPU loss" "${CALLS[@]}" --device cpu --pairs 2 --steps 5000 --out "$OUT/agent_calls_cpu.json"
say done
