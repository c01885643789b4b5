#!/bin/bash
# Issue 13's figures on one lent H200, read-only on the GPU, in two calls (each under the 600 s limit):
#   PART=a: gpumix-top against nvitop at 1 s (160x48 idle and busy, 80x24 idle; alternated rounds; the
#           80x24 bytes by screen row, each),
#           the one-shots with a hub, the hub's CPU per tick with 0 and 10 ranks on the GPU and on
#           the simulated 10-GPU rig (`--sim mixed-10`: 10 GPUs and 10 ranks).
#   PART=b: the agent's per-step cost (1 ms steps and empty steps, a CUDA loss, no hub and a live hub,
#           alternated), DDP steps with and without the agent (paired, one rank, NCCL), the 10-GPU
#           demo's dashboard attached to `gpumix hub --demo` and with its hub in-process.
#   PART=demo: the demo's dashboards of PART=b alone.
#   PART=rss: where gpumix-top's and nvitop's resident memory goes (one /proc/PID/smaps reading each,
#           grouped by `benchmarks/rss_breakdown.py`), gpumix-top also with MALLOC_ARENA_MAX=2.
#   PART=more: the hub over 30 s windows (twice), RSS by kind with and without the -OO re-exec, the
#           re-exec's environment, the 80x24 bytes by row after 45 s (both tools), the demo attached at 80x24.
#   PART=s10: the hub over 30 s windows (twice), RSS by kind (both tools, and without the re-exec), the agent's
#           1 ms steps in 7 alternated pairs and with the GPU busy.
#   PART=s10b: the one-shots with a hub, the agent's 1 ms steps in 8 ABBA pairs.
#   PART=s11: a real GPU's reading in the hub by NVML call, idle and busy, session 10's code (its tree in
#           .whl/tree_before: `bash benchmarks/tree_at.sh 80cb42a .whl/tree_before`) and this one's, in ABBA
#           order; the pair of counter reads against NVML's 20 ms window under load; the one-shots without a
#           hub; the hub's CPU per tick on the GPU with 0 and 10 ranks; the dashboard against nvitop at 160x48, idle.
#   PART=s12: each NVML getter's process CPU asked once a second against back to back, idle and busy
#           (benchmarks/nvml_call_costs.py); the GPU's reading with session 11's tree (.whl/tree_s11) and this
#           one's in ABBA order over 30 ticks (the rare readings are every 30 s); the hub's CPU per tick.
#   PART=s12busy: the dashboard against nvitop at 160x48 with the GPU busy (3 alternated rounds).
#   PART=s13: the settled readings (gpumix/hw/nvml_settled.py): CUDA processes listed against raw NVML's list
#           (benchmarks/process_listing_check.py); the GPU's reading with session 12's tree (.whl/tree_s12:
#           `bash benchmarks/tree_at.sh f5a9d2f .whl/tree_s12`) and this one's in ABBA order over 30 ticks, idle
#           and busy; the hub's CPU per tick on the GPU with 0 and 10 ranks, session 12's tree then this one's
#           (HUBTICK=0: not the hub's).
#   PART=s13b: the process listing check alone; the dashboard against nvitop at 160x48, idle then busy.
#   PART=s13agent: the agent's 1 ms steps (CUDA loss) in 6 ABBA pairs without and with a live hub; DDP (one rank,
#           NCCL) with and without the agent in 5 pairs.
#   PART=s16: an idle GPU's reading in the hub over TICKS (75) ticks, session 16's code before the quiet GPU's
#           longer waits (.whl/tree_s16before: `bash benchmarks/tree_at.sh 786757e .whl/tree_s16before`) and
#           after, in ABBA order.
#   PART=s18: session 16's quiet-GPU waits measured: an idle GPU's reading in the hub, ABBA as PART=s16 but
#           after WARMUP (36) ticks, so that the TICKS (60) counted hold the 30 s schedule's reads (at 35 s, then
#           65 and 95 s); then the agent's 1 ms steps (CUDA loss) in PAIRS (3) ABBA pairs with each run's bare-step reference.
#   PART=s19: the floor under a GPU's reading (benchmarks/nvml_tick_floor.py: the tick's getters in raw pynvml
#           against gpumix's reading, once a second, idle then busy); the machine's GPU read as 1 and as 10
#           (benchmarks/alias_nvml.py), idle (TICKS 16 after WARMUP 6); the hub's CPU per tick with the GPU as 10
#           and 0 and 10 ranks; the agent's 1 ms steps, session 17's tree (.whl/tree_s17: `bash benchmarks/tree_at.sh
#           6ae5f4b .whl/tree_s17`) against this one's in ABBA order (PAIRS 1 each); the idle readings again in
#           the other order (ABBA); busy: the floor and the GPU read as 1 and 10. What comes last is skipped first.
#   PART=s21: busy GPUs' PCIe on the slow schedule while no dashboard views the hub: with the GPU busy (copies and
#           matmuls), the hub's CPU per tick with the GPU read as 10 and 0 and 10 ranks, session 20's tree
#           (.whl/tree_s20: `bash benchmarks/tree_at.sh e566658 .whl/tree_s20`) against this one's in ABBA order,
#           then this one's with a dashboard's snapshot asked once a second (`--tick-viewer`).
#   PART=s21b: as s21, each hub with a dashboard's snapshot asked once a second (`--tick-viewer`), session 20's
#           tree against this one's in ABBA order: what a viewed hub costs before and after.
#   PART=s21c: with the GPU busy, `gpumix hub` on it and GPU 0's rates in its snapshot each second, asked without
#           "view" for 20 s and with it for 10 s, beside NVML's 20 ms window (benchmarks/unviewed_rates_check.py);
#           then raw counter pairs 1, 2, 5 and 20 ms apart against the window (benchmarks/pcie_pair_check.py).
#   PART=s22: session 22's doubled waits for a busy GPU no dashboard views: with the GPU busy, the hub's CPU
#           per tick with the GPU read as 10 and 10 ranks over TICK_S (30) s after WARMUP (40) s, when the waits
#           have reached 30 s, session 21's tree (.whl/tree_s21: `bash benchmarks/tree_at.sh 20e7584 .whl/tree_s21`)
#           against this one's in ABBA order; then PART=s21c's rates check, unviewed for 45 s.
#   PART=s22b: as s22 in BAAB order, then with no rank, this one's tree then session 21's.
#   PART=s22c: with the GPU busy and the hub over it read as 10 at the default socket, no dashboard: plain and
#           fresh snapshots timed (benchmarks/fresh_snapshot_cost.py), then the one-shots against gpustat.
#   PART=s22d: the busy hub read as 10 with 0 and 10 ranks, every thread under cProfile (benchmarks/profiled.py).
#   PART=s25: session 25's agent change (a step's own micro-batch: agent/step_record.py PASSES): the agent per step
#           (1 ms steps, CUDA loss, no hub and a live hub) with session 24's tree (.whl/tree_s24:
#           `bash benchmarks/tree_at.sh 9eb3c4e .whl/tree_s24`) against this one's in ABBA order; then, the GPU busy,
#           this tree's hub read as 10 with 10 ranks and no dashboard, three windows of TICK_S (30) s after WARMUP (40) s
#           (the hub's code is session 22's: more windows of the figure at the goal's edge).
#   PART=s26: session 26's hub (the sampling thread merges no ranks; each GPU process read from /proc): the
#           processes' reading alone (benchmarks/process_reading_cost.py, ten sleeping processes, session 25's
#           tree .whl/tree_s25: `bash benchmarks/tree_at.sh cbef721 .whl/tree_s25`, against this one's); then,
#           the GPU busy with ten CUDA processes on it (the copies and matmuls and nine idle contexts: ten
#           ranks' processes as ten GPUs would list them), the hub read as 10 with 10 ranks and no dashboard,
#           session 25's tree against this one's in ABBA order over TICK_S (30) s after WARMUP (40) s; then
#           viewed (a dashboard's snapshot each second), this one's then session 25's.
#   PART=s26b: as s26's busy hub without the nine idle CUDA processes (one process on the GPU), ABBA; then with
#           them, this tree's hub under cProfile (benchmarks/profiled.py), 10 ranks.
#   PART=s26c: with the GPU busy and this tree's hub over it read as 10 at the default socket (no rank, no
#           dashboard), the one-shots attached to it, session 25's tree (.whl/tree_s25) against this one's
#           (.whl/tree_s26: `bash benchmarks/tree_at.sh b533938 .whl/tree_s26`), alternated
#           (benchmarks/oneshot_attached_ab.py); then PART=s26b's busy hub with one process, ABBA.
#   PART=s27: the dashboard against nvitop with session 26's hub (each GPU process read from /proc, the sampling
#           thread merging no ranks): 160x48 idle and busy (3 alternated rounds each), then 80x24 idle (2 rounds).
#   PART=hub: the hub's CPU per tick with 0 and 10 ranks, on the GPU and on 10 simulated GPUs, with the
#           agents' reads in shared rounds of 0.1 s (GPUMIX_HUB_AGENT_READ_PAUSE_S=0.1) and without,
#           alternated.
#
#   PART=a OUT=/tmp/out bash benchmarks/device_issue13.sh        # wheels (gpumix-top's own among them) in .whl/
#   DRY=1 PART=a OUT=/tmp/out bash benchmarks/device_issue13.sh  # a dry run without a GPU (simulated rig)
#
# JSON goes into WORK, packed into $OUT/issue13.tgz after each part; the log is $OUT/log.txt.
set -u
cd "$(dirname "$0")/.."
BUDGET_S=${BUDGET_S:-560}
PART=${PART:-a}
. benchmarks/device_setup.sh issue13   # REPO OUT LOG WORK PY DRY SRC BUDGET_S; wheels; say, step, pack, start_hub, stop_hub
SECS=${SECS:-10}
WARM=${WARM:-3}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,power.draw,power.limit --format=csv,noheader; nproc
  $PY --version; nvitop --version; } >>"$LOG" 2>&1
cp "$LOG" "$WORK/machine.txt"
TUI=($PY "$REPO/benchmarks/bench_tui.py" --seconds "$SECS" --warmup "$WARM")

start_load() {  # SECONDS: benchmarks/gpu_load.py (host-to-device copies and matmuls) in the background, once copying
  [ "$DRY" = 1 ] && return 0
  $PY $REPO/benchmarks/gpu_load.py --seconds "$1" >"$WORK/gpu_load.log" 2>&1 &
  LOAD=$!
  for _ in $(seq 60); do grep -q "GB copied" "$WORK/gpu_load.log" 2>/dev/null && break; sleep 0.5; done
}
stop_load() { [ "$DRY" = 1 ] && return 0; kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null; tail -3 "$WORK/gpu_load.log" >>"$LOG"; }

vs_nvitop() {  # LIMIT REPEATS COLS ROWS STATE: the dashboard against nvitop at 1 s (alternated rounds), the GPU idle or busy
  local limit=$1 repeats=$2 cols=$3 rows=$4 state=$5
  step "$limit" "dashboard ${cols}x$rows, $state GPU" "${TUI[@]}" --repeats "$repeats" --cols "$cols" --rows "$rows" \
    --label "$state-${cols}x$rows" --out "$WORK/tui_vs_nvitop_${state}_${cols}x$rows.json" --peer "nvitop --interval 1" \
    -- gpumix-top --interval 1 $SRC
}

hub_windows_and_memory() {  # PART=more and s10: the hub over two 30 s windows, RSS by kind (with and without the -OO re-exec)
  for round in 1 2; do
    step 90 "hub CPU per tick over 30 s, 10 simulated GPUs ($round)" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \
      --tick-seconds 30 --tick-warmup 3 --hub-command "$PY -m gpumix.cli.main hub --interval 1 --sim mixed-10" \
      --out "$WORK/hub_tick30_mixed10_$round.json"
  done
  BREAK=($PY "$REPO/benchmarks/rss_breakdown.py" --warmup 10 --cols 160 --rows 48)
  step 30 "RSS by kind, gpumix-top" "${BREAK[@]}" --out "$WORK/rss_breakdown_gpumix.json" -- gpumix-top --interval 1 $SRC
  step 30 "RSS by kind, nvitop" "${BREAK[@]}" --out "$WORK/rss_breakdown_nvitop.json" -- nvitop --interval 1
  step 30 "RSS by kind, gpumix-top keeping its docstrings (no -OO re-exec)" "${BREAK[@]}" \
    --out "$WORK/rss_breakdown_gpumix_docstrings.json" -- env GPUMIX_TOP_DOCSTRINGS=1 gpumix-top --interval 1 $SRC
}

if [ "$PART" = a ]; then
  step 20 "pynvml narrowed: the hub's GPU fields before and after, real NVML" $PY "$REPO/benchmarks/nvml_narrow_check.py" \
    --out "$WORK/nvml_narrow_check.json" $SRC
  vs_nvitop 100 3 160 48 idle
  vs_nvitop 70 2 80 24 idle
  step 40 "bytes by row, 80x24, idle GPU, gpumix-top" $PY "$REPO/benchmarks/tui_bytes_by_row.py" --seconds 20 --warmup 5 \
    --cols 80 --rows 24 --out "$WORK/tui_bytes_by_row_80x24.json" -- gpumix-top --interval 1 $SRC
  step 40 "bytes by row, 80x24, idle GPU, nvitop" $PY "$REPO/benchmarks/tui_bytes_by_row.py" --seconds 20 --warmup 5 \
    --cols 80 --rows 24 --out "$WORK/tui_bytes_by_row_80x24_nvitop.json" -- nvitop --interval 1
  start_load 120
  vs_nvitop 100 3 160 48 busy
  stop_load
  step 70 "hub CPU per tick, this machine's GPU" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --tick-seconds 12 \
    --tick-warmup 3 --hub-command "$PY -m gpumix.cli.main hub --interval 1 $SRC" --out "$WORK/hub_tick_gpu.json"
  step 70 "hub CPU per tick, 10 simulated GPUs" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --tick-seconds 12 \
    --tick-warmup 3 --hub-command "$PY -m gpumix.cli.main hub --interval 1 --sim mixed-10" --out "$WORK/hub_tick_mixed10.json"
  start_hub oneshot $SRC
  step 60 "one-shots, a hub running" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label hub --out "$WORK/oneshot_hub.json" \
    --cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpumix power show" --cmd "gpustat --json" --cmd "nvitop --once"
  stop_hub
fi

if [ "$PART" = hub ]; then
  ROUNDS="env GPUMIX_HUB_AGENT_READ_PAUSE_S=0.1"
  for round in 1 2; do
    for mode in plain rounds; do
      prefix=""; [ "$mode" = rounds ] && prefix=$ROUNDS
      step 50 "hub CPU per tick, 10 simulated GPUs, $mode ($round)" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \
        --tick-seconds 12 --tick-warmup 3 --hub-command "$prefix $PY -m gpumix.cli.main hub --interval 1 --sim mixed-10" \
        --out "$WORK/hub_tick_mixed10_${mode}_$round.json"
    done
  done
  step 50 "hub CPU per tick, this machine's GPU, rounds" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 --tick-seconds 12 \
    --tick-warmup 3 --hub-command "$ROUNDS $PY -m gpumix.cli.main hub --interval 1 $SRC" --out "$WORK/hub_tick_gpu_rounds.json"
  # step -> snapshot (10 agents at 20 steps/s, an in-process hub), without and with the rounds
  step 40 "hub latency, plain" $PY $REPO/benchmarks/bench_hub.py --skip-ingest --latency-agents 10 --rate 20 --latency-seconds 10 \
    --out "$WORK/hub_latency_plain.json"
  step 40 "hub latency, rounds" $ROUNDS $PY $REPO/benchmarks/bench_hub.py --skip-ingest --latency-agents 10 --rate 20 \
    --latency-seconds 10 --out "$WORK/hub_latency_rounds.json"
fi

if [ "$PART" = more ]; then  # session 8: longer hub windows, memory with and without the -OO re-exec, steady bytes
  hub_windows_and_memory
  step 20 "the monitor's environment after its re-exec" $PY "$REPO/benchmarks/reexec_check.py" --out "$WORK/reexec_check.json"
  for tool in gpumix-top nvitop; do
    step 80 "bytes by row, 80x24, idle GPU, $tool, after 45 s" $PY "$REPO/benchmarks/tui_bytes_by_row.py" --seconds 30 \
      --warmup 45 --cols 80 --rows 24 --out "$WORK/tui_bytes_by_row_80x24_steady_$tool.json" -- $tool --interval 1 $SRC
  done
  start_hub demo --demo
  sleep 3
  step 60 "demo dashboard 80x24, attached to gpumix hub --demo, 3 rounds" $PY "$REPO/benchmarks/bench_tui.py" --repeats 3 \
    --seconds 8 --warmup "$WARM" --cols 80 --rows 24 --label demo-attached-80x24 --out "$WORK/tui_demo_attached_80x24_r3.json" \
    -- gpumix-top --interval 1
  stop_hub
fi

if [ "$PART" = s10 ]; then  # session 10: the hub over 30 s windows, memory by kind, the agent in 7 alternated pairs
  hub_windows_and_memory
  if [ "$DRY" != 1 ]; then  # 7 pairs: this VM's run-to-run spread (a run's median 6.8 to 14.5 µs) is the figure's error
    step 180 "agent per step, 1 ms steps, CUDA loss, 7 pairs" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both \
      --pairs 7 --steps 5000 --body-us 1000 --out "$WORK/agent_calls_1ms_p7.json"
    step 100 "agent per step, 1 ms steps, GPU busy, a new CUDA loss each step" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda \
      --case both --pairs 3 --steps 5000 --body-us 1000 --gpu-work 2048 --out "$WORK/agent_calls_1ms_gpu_busy.json"
  fi
fi

if [ "$PART" = s10b ]; then  # session 10: the one-shots with a hub, then the agent's 1 ms steps in 8 ABBA pairs
  start_hub oneshot $SRC
  step 60 "one-shots, a hub running" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label hub --out "$WORK/oneshot_hub.json" \
    --cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpumix power show" --cmd "gpustat --json" --cmd "nvitop --once"
  stop_hub
  [ "$DRY" != 1 ] && step 220 "agent per step, 1 ms steps, CUDA loss, 8 ABBA pairs" $PY "$REPO/benchmarks/bench_agent_calls.py" \
    --device cuda --case both --pairs 8 --steps 5000 --body-us 1000 --out "$WORK/agent_calls_1ms_abba8.json"
fi

if [ "$PART" = s11 ]; then  # session 11: the PCIe pair and the quiet GPU's slow reads, before and after
  COST=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-15}" --by-call $SRC)
  reading() {  # TREE LABEL: the reading cost with session 10's tree or this one's
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_before:$SITE step 40 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"
    else step 40 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"; fi
  }
  reading before idle_before_1; reading after idle_after_1
  [ "${ABBA:-1}" = 1 ] && { reading after idle_after_2; reading before idle_before_2; }
  start_load 150
  [ "$DRY" != 1 ] && step 30 "pair against window, busy" $PY "$REPO/benchmarks/pcie_pair_check.py" --rounds 20 \
    --out "$WORK/pcie_pair_check_busy.json"
  reading before busy_before_1; reading after busy_after_1
  [ "${ABBA:-1}" = 1 ] && { reading after busy_after_2; reading before busy_before_2; }
  stop_load
  [ "${HUBTICK:-1}" = 1 ] && step 70 "hub CPU per tick, this machine's GPU" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \
    --tick-seconds 20 --tick-warmup 3 --hub-command "$PY -m gpumix.cli.main hub --interval 1 $SRC" --out "$WORK/hub_tick_gpu.json"
  [ "${ONESHOTS:-1}" = 1 ] && step 45 "one-shots, no hub" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 5 --label nohub --out "$WORK/oneshot_nohub.json" \
    --cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpustat --json" --cmd "nvitop --once"
  [ "${DASHBOARD:-1}" = 1 ] && vs_nvitop 75 2 160 48 idle
fi

if [ "$PART" = s12 ]; then  # session 12: each NVML getter's cost once a second; the rare readings, before and after
  step 60 "NVML calls once a second and back to back, idle" $PY "$REPO/benchmarks/nvml_call_costs.py" --rounds 25 --label idle \
    --out "$WORK/nvml_call_costs_idle.json"
  COST=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-30}" --by-call $SRC)
  reading() {  # TREE LABEL: session 11's tree (.whl/tree_s11: `bash benchmarks/tree_at.sh 5781faf .whl/tree_s11`) or this one
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s11:$SITE step 60 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"
    else step 60 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"; fi
  }
  reading before idle_before_1; reading after idle_after_1; reading after idle_after_2; reading before idle_before_2
  start_load 240
  [ "$DRY" != 1 ] && step 60 "NVML calls once a second and back to back, busy" $PY "$REPO/benchmarks/nvml_call_costs.py" \
    --rounds 25 --label busy --out "$WORK/nvml_call_costs_busy.json"
  reading before busy_before_1; reading after busy_after_1; reading after busy_after_2; reading before busy_before_2
  stop_load
  [ "${HUBTICK:-1}" = 1 ] && step 70 "hub CPU per tick, this machine's GPU" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \
    --tick-seconds 20 --tick-warmup 3 --hub-command "$PY -m gpumix.cli.main hub --interval 1 $SRC" --out "$WORK/hub_tick_gpu.json"
fi

if [ "$PART" = s13 ]; then  # session 13: the settled readings, listed right and what they save
  [ "$DRY" != 1 ] && step 60 "CUDA processes listed against raw NVML" $PY "$REPO/benchmarks/process_listing_check.py" \
    --out "$WORK/process_listing_check.json"
  COST=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-30}" --by-call $SRC)
  reading() {  # TREE LABEL
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s12:$SITE step 50 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"
    else step 50 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"; fi
  }
  reading before idle_before_1; reading after idle_after_1; reading after idle_after_2; reading before idle_before_2
  start_load 200
  reading before busy_before_1; reading after busy_after_1; reading after busy_after_2; reading before busy_before_2
  stop_load
  for tree in $([ "${HUBTICK:-1}" = 1 ] && echo before after); do
    hub_py="$PY"; [ "$tree" = before ] && hub_py="env PYTHONPATH=$REPO/.whl/tree_s12:$SITE $PY -P"
    step 70 "hub CPU per tick, this machine's GPU, $tree" $PY $REPO/benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \
      --tick-seconds 20 --tick-warmup 3 --hub-command "$hub_py -m gpumix.cli.main hub --interval 1 $SRC" \
      --out "$WORK/hub_tick_gpu_$tree.json"
  done
fi

if [ "$PART" = s13b ]; then  # session 13: the process listing check; the dashboard against nvitop, idle and busy
  [ "$DRY" != 1 ] && step 60 "CUDA processes listed against raw NVML" $PY "$REPO/benchmarks/process_listing_check.py" \
    --out "$WORK/process_listing_check.json"
  vs_nvitop 100 3 160 48 idle
  start_load 150
  vs_nvitop 110 3 160 48 busy
  stop_load
fi

if [ "$PART" = s13agent ]; then  # session 13: the agent's per-step cost with and without a live hub; DDP paired
  step 200 "agent per step, 1 ms steps, CUDA loss, 6 ABBA pairs" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda \
    --case both --pairs 6 --steps 5000 --body-us 1000 --out "$WORK/agent_calls_1ms.json"
  start_hub ddp
  step 220 "DDP step with and without the agent, paired" $PY "$REPO/benchmarks/bench_agent_overhead.py" --gpus 1 --pairs 5 \
    --steps 300 --hub "$WORK/run/gpumix/hub.sock" --out "$WORK/ddp_agent_overhead.json"
  stop_hub
fi

if [ "$PART" = s12busy ]; then  # session 12: the dashboard against nvitop at 160x48 with the GPU busy
  start_load 150
  vs_nvitop 110 3 160 48 busy
  stop_load
fi

if [ "$PART" = rss ]; then
  BREAK=($PY "$REPO/benchmarks/rss_breakdown.py" --warmup 10 --cols 160 --rows 48)
  step 30 "RSS by kind, gpumix-top" "${BREAK[@]}" --out "$WORK/rss_breakdown_gpumix.json" -- gpumix-top --interval 1 $SRC
  step 30 "RSS by kind, nvitop" "${BREAK[@]}" --out "$WORK/rss_breakdown_nvitop.json" -- nvitop --interval 1
  step 30 "RSS by kind, gpumix-top, MALLOC_ARENA_MAX=2" "${BREAK[@]}" --out "$WORK/rss_breakdown_gpumix_arena2.json" -- \
    env MALLOC_ARENA_MAX=2 gpumix-top --interval 1 $SRC
fi

if [ "$PART" = demo ]; then
  demo_dashboards 50 "$PY" "$REPO/benchmarks/bench_tui.py" --repeats 2 --seconds 8 --warmup "$WARM"
fi

if [ "$PART" = b ]; then
  if [ "$DRY" != 1 ]; then
    step 100 "agent per step, 1 ms steps, CUDA loss" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both --pairs 3 \
      --steps 5000 --body-us 1000 --out "$WORK/agent_calls_1ms.json"
    step 100 "agent per step, 1 ms steps, GPU busy, a new CUDA loss each step" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda \
      --case both --pairs 3 --steps 5000 --body-us 1000 --gpu-work 2048 --out "$WORK/agent_calls_1ms_gpu_busy.json"
    step 60 "agent per step, empty steps, CUDA loss" $PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both --pairs 3 \
      --steps 5000 --out "$WORK/agent_calls_empty.json"
    start_hub ddp
    step 60 "agent CUDA values under sync debug, live hub (the values the hub got are the steps')" $PY \
      "$REPO/benchmarks/agent_cuda_check.py" --hub "$WORK/run/gpumix/hub.sock" --pause-s 0.6 --pause-every 12 \
      --out "$WORK/agent_cuda_check.json"  # pauses past the copy interval (0.5 s at the 1 s send period)
    step 200 "DDP step with and without the agent, paired" $PY "$REPO/benchmarks/bench_agent_overhead.py" ${DDP_ARGS:---gpus 1 --pairs 5 --steps 300} \
      --hub "$WORK/run/gpumix/hub.sock" --out "$WORK/ddp_agent_overhead.json"
    stop_hub
  fi
  DEMO=($PY "$REPO/benchmarks/bench_tui.py" --repeats 2 --seconds 8 --warmup "$WARM")
  demo_dashboards 50 "${DEMO[@]}"
fi
if [ "$PART" = s16 ]; then  # session 16: a quiet GPU read 5, 10, 20 s apart, then every 30 s
  COST=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-75}" --by-call $SRC)
  reading() {  # TREE LABEL
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s16before:$SITE step 110 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"
    else step 110 "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"; fi
  }
  reading before idle_before_1; reading after idle_after_1; reading after idle_after_2; reading before idle_before_2
fi
if [ "$PART" = s18 ]; then  # session 18: the quiet GPU's waits on a real GPU, then the agent with its reference
  COST=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-60}" --warmup "${WARMUP:-36}" --by-call $SRC)
  limit=$(( ${TICKS:-60} + ${WARMUP:-36} + 20 ))  # the ticks, the start (NVML's init, the imports)
  reading() {  # TREE LABEL
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s16before:$SITE step $limit "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"
    else step $limit "reading, $2" "${COST[@]}" --out "$WORK/reading_$2.json"; fi
  }
  reading before idle_before_1; reading after idle_after_1; reading after idle_after_2; reading before idle_before_2
  [ "$DRY" != 1 ] && step 80 "agent per step, 1 ms steps, CUDA loss, ${PAIRS:-3} ABBA pairs, bare-step reference" $PY \
    "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both --pairs "${PAIRS:-3}" --steps 5000 --body-us 1000 \
    --out "$WORK/agent_calls_1ms_ref.json"
fi
if [ "$PART" = s19 ] && [ "$DRY" != 1 ]; then  # session 19 (NVML only: no dry run); what comes last is skipped first
  floor() { step "$(( $1 + 25 ))" "NVML floor, $2" $PY -P "$REPO/benchmarks/nvml_tick_floor.py" --rounds "$1" --label "$2" \
    --out "$WORK/nvml_tick_floor_$2.json"; }
  ALIAS=($PY -P "$REPO/benchmarks/hub_gpu_reading_cost.py" --ticks "${TICKS:-16}" --warmup "${WARMUP:-6}")
  limit=$(( ${TICKS:-16} + ${WARMUP:-6} + 20 ))
  aliased() { step $limit "reading as $1 GPUs, $2" "${ALIAS[@]}" --alias-gpus "$1" --out "$WORK/reading_alias$1_$2.json"; }
  agent() {  # TREE LABEL
    local run=($PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both --pairs "${PAIRS:-1}" --steps 5000
      --body-us 1000 --out "$WORK/agent_$2.json")
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s17:$SITE step 50 "agent, $2" "${run[@]}"
    else step 50 "agent, $2" "${run[@]}"; fi
  }
  floor "${FLOOR_ROUNDS:-24}" idle
  aliased 1 idle_1; aliased 10 idle_1
  step 80 "hub CPU per tick, the GPU read as 10, 0 and 10 ranks" $PY "$REPO/benchmarks/bench_hub.py" --tick-cpu \
    --tick-ranks 0,10 --tick-seconds 15 --tick-warmup 3 --out "$WORK/hub_tick_alias10.json" \
    --hub-command "$PY -P $REPO/benchmarks/aliased_hub.py 10 hub --interval 1"
  agent before before_1; agent after after_1; agent after after_2; agent before before_2
  aliased 10 idle_2; aliased 1 idle_2
  start_load 300
  floor "${FLOOR_ROUNDS:-24}" busy
  aliased 1 busy_1; aliased 10 busy_1
  stop_load
fi
ALIASED="$PY -P $REPO/benchmarks/aliased_hub.py 10 hub --interval 1"
busy_hub() {  # TREE LABEL [FLAGS]: the hub's CPU with the GPU read as 10, busy (BEFORE_TREE: the tree before)
  local tree=$1 label=$2 command=$ALIASED; shift 2
  [ "$tree" = before ] && command="env PYTHONPATH=$REPO/.whl/${BEFORE_TREE:-tree_s20}:$SITE $ALIASED"
  step "${STEP_S:-80}" "hub CPU per tick, the GPU read as 10, busy, $label" $PY "$REPO/benchmarks/bench_hub.py" --tick-cpu \
    --tick-ranks "${RANKS:-0,10}" --tick-seconds "${TICK_S:-15}" --tick-warmup "${WARMUP:-6}" \
    --out "$WORK/hub_tick_alias10_busy_$label.json" --hub-command "$command" "$@"
}
start_aliased_hub() {  # this tree's hub over the GPU read as 10 at the default socket, as a user's hub (HUB: its pid)
  $ALIASED >"$WORK/hub_aliased.log" 2>&1 &
  HUB=$!
  for _ in $(seq 50); do [ -S "$WORK/run/gpumix/hub.sock" ] && break; sleep 0.2; done
  sleep 8  # past the first slow read: busy GPUs carry their rates
}
rates_check() {  # UNVIEWED_S: a busy GPU's rates in the hub's snapshot, unviewed then viewed for 10 s, beside the window
  start_hub rates
  step $(( $1 + 25 )) "a busy GPU's rates, unviewed then viewed, beside NVML's window" $PY "$REPO/benchmarks/unviewed_rates_check.py" \
    --socket "$WORK/run/gpumix/hub.sock" --unviewed-s "$1" --viewed-s 10 --out "$WORK/unviewed_rates_check.json"
  stop_hub
}
if [ "${PART%b}" = s21 ] && [ "$DRY" != 1 ]; then  # session 21 (NVML only)
  start_load 500
  if [ "$PART" = s21 ]; then
    busy_hub before before_1; busy_hub after after_1; busy_hub after after_2; busy_hub before before_2
    busy_hub after viewed_1 --tick-viewer
  else
    busy_hub before viewed_before_1 --tick-viewer; busy_hub after viewed_after_1 --tick-viewer
    busy_hub after viewed_after_2 --tick-viewer; busy_hub before viewed_before_2 --tick-viewer
  fi
  stop_load
fi
if [ "${PART%b}" = s22 ] && [ "$DRY" != 1 ]; then  # session 22 (NVML only)
  start_load 560
  export BEFORE_TREE=tree_s21 RANKS=10 TICK_S=${TICK_S:-30} WARMUP=${WARMUP:-40} STEP_S=120
  if [ "$PART" = s22 ]; then
    busy_hub before before_1; busy_hub after after_1; busy_hub after after_2; busy_hub before before_2
    rates_check 45
  else  # s22b: BAAB with ten ranks, then no rank, after then before
    busy_hub after after_3; busy_hub before before_3; busy_hub before before_4; busy_hub after after_4
    RANKS=0 busy_hub after after_norank_1; RANKS=0 busy_hub before before_norank_1
  fi
  stop_load
fi
if [ "$PART" = s22c ] && [ "$DRY" != 1 ]; then  # session 22 (NVML only)
  start_load 200
  start_aliased_hub
  step 60 "plain and fresh snapshots of the busy hub read as 10, 2.5 s apart" $PY "$REPO/benchmarks/fresh_snapshot_cost.py" \
    --socket "$WORK/run/gpumix/hub.sock" --hub-pid "$HUB" --rounds 8 --out "$WORK/fresh_snapshot_cost.json"
  step 90 "one-shots attached to the busy hub read as 10" $PY "$REPO/benchmarks/bench_oneshot.py" --repeats 7 \
    --label busy-hub-alias10 --out "$WORK/oneshot_busy_hub_alias10.json" --cmd "gpumix-top --once --json" \
    --cmd "gpumix doctor" --cmd "gpumix power show" --cmd "gpustat --json"
  stop_hub
  stop_load
fi
if [ "$PART" = s22d ] && [ "$DRY" != 1 ]; then  # session 22 (NVML only): where the busy hub's time goes
  start_load 200
  for ranks in 0 10; do
    step 90 "the busy hub read as 10, every thread profiled, $ranks ranks" $PY "$REPO/benchmarks/bench_hub.py" --tick-cpu \
      --tick-ranks "$ranks" --tick-seconds 30 --tick-warmup 10 --out "$WORK/hub_tick_alias10_busy_profiled_r$ranks.json" \
      --hub-command "$PY -P $REPO/benchmarks/profiled.py $WORK/hub_profile_alias10_busy_r$ranks.prof $REPO/benchmarks/aliased_hub.py 10 hub --interval 1"
  done
  stop_load
fi
if [ "$PART" = s21c ] && [ "$DRY" != 1 ]; then  # session 21 (NVML only)
  start_load 150
  rates_check 20
  for gap in 0.001 0.002 0.005 0.02; do
    step 25 "counter pairs ${gap} s apart against the window" $PY "$REPO/benchmarks/pcie_pair_check.py" --rounds 20 \
      --gap-s "$gap" --out "$WORK/pcie_pair_gap_${gap}.json"
  done
  stop_load
fi
if [ "$PART" = s25 ] && [ "$DRY" != 1 ]; then  # session 25 (NVML only)
  agent() {  # TREE LABEL
    local run=($PY "$REPO/benchmarks/bench_agent_calls.py" --device cuda --case both --pairs "${PAIRS:-1}" --steps 5000
      --body-us 1000 --out "$WORK/agent_$2.json")
    if [ "$1" = before ]; then PYTHONPATH=$REPO/.whl/tree_s24:$SITE step 60 "agent, $2" "${run[@]}"
    else step 60 "agent, $2" "${run[@]}"; fi
  }
  agent before before_1; agent after after_1; agent after after_2; agent before before_2
  start_load 330
  export RANKS=10 TICK_S=${TICK_S:-30} WARMUP=${WARMUP:-40} STEP_S=100
  busy_hub after s25_1; busy_hub after s25_2; busy_hub after s25_3
  stop_load
fi
sleepers() {  # COUNT SECONDS: idle CUDA contexts on the GPU, as more ranks' processes would list there
  SLEEPERS=()
  for _ in $(seq "$1"); do
    $PY -c "import time, torch; x = torch.ones(1, device='cuda'); torch.cuda.synchronize(); time.sleep($2)" &
    SLEEPERS+=($!)
  done
  sleep 15
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$LOG" 2>&1
}
if [ "$PART" = s26b ] && [ "$DRY" != 1 ]; then  # session 26 (NVML only)
  start_load 520
  export BEFORE_TREE=tree_s25 RANKS=10 TICK_S=${TICK_S:-30} WARMUP=${WARMUP:-40} STEP_S=100
  busy_hub before one_before_1; busy_hub after one_after_1; busy_hub after one_after_2; busy_hub before one_before_2
  sleepers 9 200
  step 100 "the busy hub read as 10 with ten processes, every thread profiled, 10 ranks" $PY "$REPO/benchmarks/bench_hub.py" \
    --tick-cpu --tick-ranks 10 --tick-seconds 30 --tick-warmup 20 --out "$WORK/hub_tick_alias10_busy_profiled_p10.json" \
    --hub-command "$PY -P $REPO/benchmarks/profiled.py $WORK/hub_profile_alias10_busy_p10.prof $REPO/benchmarks/aliased_hub.py 10 hub --interval 1"
  kill "${SLEEPERS[@]}" 2>/dev/null; wait "${SLEEPERS[@]}" 2>/dev/null
  stop_load
fi
if [ "$PART" = s27 ]; then  # session 27 (NVML only)
  vs_nvitop 100 3 160 48 idle
  start_load 120
  vs_nvitop 100 3 160 48 busy
  stop_load
  vs_nvitop 70 2 80 24 idle  # last: skipped where the budget leaves no room
fi
if [ "$PART" = s26c ] && [ "$DRY" != 1 ]; then  # session 26 (NVML only)
  start_load 520
  start_aliased_hub
  step 120 "one-shots attached to the busy hub read as 10, session 25's tree against this one's" $PY \
    "$REPO/benchmarks/oneshot_attached_ab.py" --hub "$WORK/run/gpumix/hub.sock" --before "$REPO/.whl/tree_s25" \
    --after "$REPO/.whl/tree_s26" --rounds 11 --out "$WORK/oneshot_attached_ab.json" \
    --note "one H100 busy, read as 10 by this tree's hub (aliased_hub.py) at the default socket, no rank, no dashboard"
  stop_hub
  export BEFORE_TREE=tree_s25 RANKS=10 TICK_S=${TICK_S:-30} WARMUP=${WARMUP:-40} STEP_S=100
  busy_hub before one_before_1; busy_hub after one_after_1; busy_hub after one_after_2; busy_hub before one_before_2
  stop_load
fi
if [ "$PART" = s26 ] && [ "$DRY" != 1 ]; then  # session 26 (NVML only)
  step 60 "ten processes' reading, session 25's tree against this one's" $PY "$REPO/benchmarks/process_reading_cost.py" \
    --tree before="$REPO/.whl/tree_s25" --tree after=. --rounds 2 --out "$WORK/process_reading_cost.json"
  start_load 500
  sleepers 9 490  # nine more CUDA contexts on the GPU: ten processes listed, as ten GPUs with a rank each
  export BEFORE_TREE=tree_s25 RANKS=10 TICK_S=${TICK_S:-30} WARMUP=${WARMUP:-40} STEP_S=100
  busy_hub before before_1; busy_hub after after_1; busy_hub after after_2; busy_hub before before_2
  TICK_S=20 WARMUP=15 STEP_S=60 busy_hub after viewed_after_1 --tick-viewer
  TICK_S=20 WARMUP=15 STEP_S=60 busy_hub before viewed_before_1 --tick-viewer
  kill "${SLEEPERS[@]}" 2>/dev/null; wait "${SLEEPERS[@]}" 2>/dev/null
  stop_load
fi
say done
pack
