#!/bin/bash
# Session 4's recheck on one lent H200, in one call (issue 13), read-only on the GPU:
#   1. the agent's CUDA loss values, now read on its sender thread, under sync debug "error"
#      against a live hub (benchmarks/agent_cuda_check.py);
#   2. the agent's per-step cost, no hub and a live hub, loss on the GPU and on the CPU;
#   3. the one-shots (gpumix-top --once --json, gpumix doctor, gpumix power show) against gpustat,
#      nvitop --once and nvidia-smi, without and with a running hub, median of 5, alternated.
#
#   OUT=/tmp/out bash benchmarks/device_recheck.sh     # wheels (gpumix-top's own among them) in .whl/
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/gpumix-recheck}; mkdir -p "$OUT"
WORK=/tmp/recheck; rm -rf "$WORK"; mkdir -p "$WORK/run"; chmod 700 "$WORK/run"
LOG=$OUT/log.txt; : >"$LOG"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=$WORK/run
unset GPUMIX_HUB
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1 \
  || { echo "wheel install failed"; tail -20 "$LOG"; exit 1; }
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
cd "$WORK"
say() { echo "=== $(date -u +%H:%M:%S) +${SECONDS}s $*" | tee -a "$LOG"; }
step() { local limit=$1 name=$2; shift 2; say "$name"; timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1; say "$name: exit $?"; }
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; python3 --version; } >>"$LOG" 2>&1

python3 -m gpumix.cli.main hub --interval 1 >"$WORK/hub.log" 2>&1 &
HUB=$!
for _ in $(seq 50); do [ -S "$WORK/run/gpumix/hub.sock" ] && break; sleep 0.2; done
sleep 1.5
step 60 "agent CUDA values under sync debug, live hub" python3 "$REPO/benchmarks/agent_cuda_check.py" \
  --hub "$WORK/run/gpumix/hub.sock" --out "$OUT/agent_cuda_check.json"
ONESHOTS=(--cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpumix power show"
          --cmd "gpustat --json" --cmd "nvitop --once" --cmd "nvidia-smi")
step 30 "one-shots warm-up" python3 "$REPO/benchmarks/bench_oneshot.py" --repeats 1 "${ONESHOTS[@]}" --label warm-up
step 60 "one-shots, a hub running" python3 "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label hub \
  --out "$OUT/costs_oneshot_hub_recheck.json" "${ONESHOTS[@]}"
kill "$HUB"; wait "$HUB" 2>/dev/null
step 60 "one-shots, no hub" python3 "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label no-hub \
  --out "$OUT/costs_oneshot_nohub_recheck.json" "${ONESHOTS[@]}"
step 90 "agent per step, loss on the GPU" python3 "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both \
  --pairs 3 --steps 5000 --out "$OUT/agent_calls_h200_cuda_recheck.json"
step 60 "agent per step, loss on the CPU" python3 "$REPO/benchmarks/bench_agent_calls.py" --device cpu --case both \
  --pairs 2 --steps 5000 --out "$OUT/agent_calls_h200_cpu_recheck.json"
say done
