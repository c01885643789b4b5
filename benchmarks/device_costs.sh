#!/bin/bash
# Issue 13's costs on one lent H200, in one call: gpumix-top against nvitop (CPU, bytes to the
# terminal, RSS; idle then busy GPU; alternated pairs), the one-shot commands against gpustat,
# nvitop --once and nvidia-smi (without, then with a running hub), the hub's CPU per tick with
# 0 and 10 ranks, cProfile of the hub and the TUI, the agent's per-step cost.
# Read-only on the GPU: NVML getters, `gpumix power show`, and ordinary CUDA work (the load).
#
#   OUT=/tmp/out bash benchmarks/device_costs.sh          # on the GPU machine (wheels in .whl/)
#   DRY=1 OUT=/tmp/out bash benchmarks/device_costs.sh    # a dry run without a GPU: a simulated rig
#
# Every part has its own timeout and is skipped when it would end past BUDGET_S seconds; the results
# are packed into $OUT/costs.tgz after each part (a call returns at most 8 files), the log is $OUT/log.txt
# (the set-up, the step runner and the hub: benchmarks/device_setup.sh).
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh costs   # REPO OUT LOG WORK PY DRY SRC BUDGET_S; wheels; say, step, pack, start_hub, stop_hub
SECS=${SECS:-8}   # the dashboards' measuring window
WARM=${WARM:-3}

profile_once() {  # $1: name; one `gpumix-top --once --json` under cProfile, the top 50 by cumulative time
  say "profile of gpumix-top --once --json ($1)"
  timeout 30 $PY -m cProfile -o "$WORK/once_$1.prof" -m gpumix.tui.main --once --json $SRC >/dev/null 2>>"$LOG" \
    && $PY -c "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(50)" "$WORK/once_$1.prof" \
       >"$WORK/profile_once_$1.txt"
}

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,power.draw,power.limit --format=csv
  $PY --version; nproc; $PY -c "import gpumix, textual, rich, pynvml; print('textual', textual.__version__, 'rich', __import__('importlib.metadata').metadata.version('rich'))"
  nvitop --version; gpustat --version; } >>"$LOG" 2>&1
cp "$LOG" "$WORK/machine.txt"

# -- one-shots -----------------------------------------------------------------------------------
GPUMIX_ONESHOTS=(--cmd "gpumix-top --once --json $SRC" --cmd "gpumix doctor $SRC" --cmd "gpumix power show $SRC")
PEER_ONESHOTS=(--cmd "gpustat --json" --cmd "nvitop --once" --cmd "nvidia-smi")
# the first run of each compiles its modules (installed with pip): not measured
step 40 "warm-up runs" $PY $REPO/benchmarks/bench_oneshot.py --repeats 1 "${GPUMIX_ONESHOTS[@]}" "${PEER_ONESHOTS[@]}" --label warm-up
step 30 "import times of gpumix-top --once" bash -c "$PY -X importtime -m gpumix.tui.main --once --json $SRC 2>'$WORK/importtime_once.txt' >/dev/null"
profile_once nohub
step 60 "one-shots, no hub" $PY $REPO/benchmarks/bench_oneshot.py --repeats 5 --label no-hub --out "$WORK/costs_oneshot_nohub.json" \
  "${GPUMIX_ONESHOTS[@]}" "${PEER_ONESHOTS[@]}"
start_hub oneshot $SRC
step 40 "one-shots, a hub running" $PY $REPO/benchmarks/bench_oneshot.py --repeats 5 --label hub --out "$WORK/costs_oneshot_hub.json" \
  --cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpumix power show" "${PEER_ONESHOTS[@]}"
profile_once hub
stop_hub

# -- one sample's cost, and the wrap guard's reads over 10 s of 1 s ticks, idle GPU --------------------
step 40 "sampling, idle GPU" $PY $REPO/benchmarks/bench_sampling.py --ticks 30 --fallback-ticks 5 --extra-repeats 0 --peer-ticks 20 \
  --guard-seconds 10 --label idle --out "$WORK/sampling_idle.json" $([ "$DRY" = 1 ] && echo --demo)

# -- the dashboard against nvitop, idle GPU --------------------------------------------------------
step 75 "dashboard 160x48, idle GPU" $PY $REPO/benchmarks/bench_tui.py --repeats 2 --seconds "$SECS" --warmup "$WARM" --cols 160 --rows 48 \
  --label idle-160x48 --out "$WORK/costs_tui_idle_160x48.json" --peer "nvitop --interval 1" -- gpumix-top --interval 1 $SRC

# -- busy GPU: the load runs through this part -------------------------------------------------------
if [ "$DRY" != 1 ]; then
  $PY $REPO/benchmarks/gpu_load.py --seconds 150 >"$WORK/gpu_load.log" 2>&1 &
  LOAD=$!
  for _ in $(seq 60); do grep -q "GB copied" "$WORK/gpu_load.log" 2>/dev/null && break; sleep 0.5; done
  nvidia-smi --query-gpu=utilization.gpu,power.draw,pcie.link.gen.current --format=csv >>"$LOG" 2>&1
fi
step 40 "sampling, busy GPU" $PY $REPO/benchmarks/bench_sampling.py --ticks 30 --fallback-ticks 5 --extra-repeats 0 --peer-ticks 20 \
  --guard-seconds 10 --label busy --out "$WORK/sampling_busy.json" $([ "$DRY" = 1 ] && echo --demo)
step 75 "dashboard 160x48, busy GPU" $PY $REPO/benchmarks/bench_tui.py --repeats 2 --seconds "$SECS" --warmup "$WARM" --cols 160 --rows 48 \
  --label busy-160x48 --out "$WORK/costs_tui_busy_160x48.json" --peer "nvitop --interval 1" -- gpumix-top --interval 1 $SRC
[ "$DRY" != 1 ] && { kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null; tail -3 "$WORK/gpu_load.log" >>"$LOG"; }

# -- the hub's CPU per tick, 0 and 10 ranks ----------------------------------------------------------
step 70 "hub CPU per tick" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --tick-seconds 10 --tick-warmup 3 \
  --hub-command "$PY -m gpumix.cli.main hub --interval 1 $SRC" --out "$WORK/costs_hub_tick.json"

# -- the agent's per-step cost, without and with a live hub ---------------------------------------------
if [ "$DRY" != 1 ]; then
  if $PY $REPO/benchmarks/bench_agent_calls.py --help 2>/dev/null | grep -q -- "--case"; then
    step 60 "agent per step, no hub and a live hub, alternated" $PY $REPO/benchmarks/bench_agent_calls.py --case both --pairs 3 \
      --steps 5000 --out "$WORK/costs_agent_calls.json"
  else
    say "bench_agent_calls.py has no connected case (--case): the no-hub case only"
    step 40 "agent per step, no hub" $PY $REPO/benchmarks/bench_agent_calls.py --steps 5000 --out "$WORK/costs_agent_nohub.json"
  fi
fi

# -- profiles: the hub with 10 ranks, a TUI attached to it, a TUI with its own hub, ~14 s each ---------------
PROFILE=($REPO/benchmarks/profile_threads.py --entries 45)
timeout -k 5 60 $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 10 --tick-seconds 12 --tick-warmup 2 --socket "$WORK/prof.sock" \
  --hub-command "$PY ${PROFILE[*]} --out $WORK/hub.prof --top $WORK/profile_hub_top.txt -- -m gpumix.cli.main hub --interval 1 $SRC" \
  --out "$WORK/costs_hub_tick_profiled.json" >>"$LOG" 2>&1 &
PROFILED_HUB=$!
for _ in $(seq 100); do [ -S "$WORK/prof.sock" ] && break; sleep 0.2; done
step 30 "profile: TUI attached to the hub (160x48)" $PY $REPO/benchmarks/bench_tui.py --seconds 12 --warmup 2 --cols 160 --rows 48 --label profile-attached \
  --out "$WORK/tui_profile_attached.json" -- $PY "${PROFILE[@]}" --top "$WORK/profile_tui_attached_top.txt" -- -m gpumix.tui.main --interval 1 --hub "$WORK/prof.sock"
wait "$PROFILED_HUB"
step 30 "profile: TUI with its own hub (160x48, idle GPU)" $PY $REPO/benchmarks/bench_tui.py --seconds 12 --warmup 2 --cols 160 --rows 48 --label profile-own-hub \
  --out "$WORK/tui_profile_own_hub.json" -- $PY "${PROFILE[@]}" --top "$WORK/profile_tui_own_hub_top.txt" -- -m gpumix.tui.main --interval 1 $SRC

# -- 80x24 -----------------------------------------------------------------------------------------
step 40 "dashboard 80x24, idle GPU" $PY $REPO/benchmarks/bench_tui.py --repeats 1 --seconds "$SECS" --warmup "$WARM" --cols 80 --rows 24 \
  --label idle-80x24 --out "$WORK/costs_tui_idle_80x24.json" --peer "nvitop --interval 1" -- gpumix-top --interval 1 $SRC

say "done"
pack
