#!/bin/bash
# The GPU checks, batched for a lent 2-GPU machine (read-only on the GPUs: NVML getters and
# ordinary CUDA work). Usage: OUT=/tmp/out bash benchmarks/device_runs.sh [a|b|c|sweep|auto]
#   a: PCIe counters under copies, DDP over NCCL with the agent and the transport probe
#      (P2P on, then NCCL_P2P_DISABLE=1), agent overhead, weighted-gradient checks (DDP/NCCL,
#      DeepSpeed ZeRO-2), the DeepSpeed example with the agent.
#   b: the DeepSpeed example, agent overhead, re-planning a job whose GPU 1 is slowed.
#   c: PCIe check, agent costs, re-planning with NVLink, then with NCCL_P2P_DISABLE=1 (SHM).
#   sweep: every split of one batch measured, GPU 1 free then slowed (benchmarks/split_sweep.py).
#   auto: the slowed job left to `gpumix run --auto-replan`, then fixed splits for comparison.
#   i17a (issue 17): `gpumix probe` on both GPUs (pairs, the all-reduce floor with and without
#      NCCL_P2P_DISABLE=1), the CPU-forwarding finding on real ranks (doctor attached to a hub, a DDP
#      job over SHM then over NVLink), full split sweeps at granularity 64 over NVLink and over SHM.
#   i17c (issue 17, the second call, after i17a's jobs failed to import gpumix.agent from the
#      checkout): the CPU-forwarding runs again, then short full sweeps (10 steps a split) over
#      NVLink and over SHM, as far as $STOP_AT (seconds since the part began) allows.
#   i17d (issue 17, the third call: i17c's runs waited for a compute time that a step of all
#      exposed communication reports as 0, and their timeout left the jobs running): the
#      CPU-forwarding runs alone.
#   i17b (issue 17): re-planning the slowed GPU over NVLink and over SHM, splits tried: $TRY_NVLINK,
#      $TRY_SHM (the sweeps' best), then the auto re-plan if AUTO=1.
# Wheels for what the machine lacks go in .whl/ (see docs/benchmarks.md).
set -u
cd "$(dirname "$0")/.."
PART=${1:-a}
OUT=${OUT:-/tmp/gpumix-out}; mkdir -p "$OUT"
LOG=$OUT/log-$PART.txt
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=4
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || { cat "$LOG"; exit 1; }
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
step() { echo "=== $(date -u +%H:%M:%S) $*" >>"$LOG"; timeout "${LIMIT:-240}" "$@" >>"$LOG" 2>&1; echo "=== exit $?" >>"$LOG"; }
snapshot() {  # the hub's view of the ranks after a job: $1 = file
  python3 - "$1" <<'PY'
import json, sys
from gpumix.hub.client import HubClient
s = HubClient("/tmp/gpumix-hub.sock").snapshot()
keep = ("rank", "job", "gpu_uuid", "step", "step_time_s", "samples_per_s", "comm_share", "data_wait_share",
        "mem_peak_bytes", "transport", "env", "versions", "micro_batch", "accumulation_steps", "gradient_bytes")
out = {"ranks": [{k: r.get(k) for k in keep} for r in s["ranks"]],
       "gpus": [{k: g[k] for k in ("index", "uuid", "name", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")} for g in s["gpus"]],
       "findings": [f["id"] for f in s["findings"]]}
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
}
{ date -u; nvidia-smi -L; nvidia-smi topo -m; python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"; } >>"$LOG" 2>&1

if [ "$PART" = a ]; then
  step python3 benchmarks/nvml_probe.py --out "$OUT/probe.json" --load h2d,d2h --load-seconds 8
  gpumix hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 3
  export GPUMIX_HUB=/tmp/gpumix-hub.sock
  step python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/ddp_train.py --steps 300 --width 4096 --batch 256 --nccl-probe
  snapshot "$OUT/ddp_p2p.json"
  NCCL_P2P_DISABLE=1 step python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/ddp_train.py --steps 300 --width 4096 --batch 256 --nccl-probe
  snapshot "$OUT/ddp_shm.json"
  step python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/deepspeed_train.py --steps 50 --zero 2
  snapshot "$OUT/deepspeed.json"
  step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/weighted_check.py --mode ddp --out "$OUT/weighted_ddp.json"
  step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/weighted_check.py --mode deepspeed --out "$OUT/weighted_ds.json"
  LIMIT=300 step python3 benchmarks/bench_agent_overhead.py --gpus 2 --pairs 5 --steps 300 --width 4096 --batch 256 --hub /tmp/gpumix-hub.sock --out "$OUT/overhead.json"
  kill $HUB
elif [ "$PART" = c ]; then
  step python3 benchmarks/nvml_probe.py --out "$OUT/probe_c.json" --load h2d,d2h --load-seconds 5
  step python3 benchmarks/bench_agent_calls.py --out "$OUT/agent_calls.json"
  gpumix hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 3
  LIMIT=200 step python3 benchmarks/bench_agent_overhead.py --gpus 2 --pairs 4 --steps 300 --width 4096 --batch 256 --hub /tmp/gpumix-hub.sock --out "$OUT/overhead_c.json"
  kill $HUB
  LIMIT=330 step python3 benchmarks/bench_replan_gpu.py --out "$OUT/replan_nvlink.json"
  NCCL_P2P_DISABLE=1 LIMIT=240 step python3 benchmarks/bench_replan_gpu.py --try 704,768,832 --out "$OUT/replan_shm.json"
elif [ "$PART" = auto ]; then
  LIMIT=300 step python3 benchmarks/bench_replan_gpu.py --auto --try 768,832 --window 6 --out "$OUT/replan_auto.json"
elif [ "$PART" = sweep ]; then
  LIMIT=150 step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/split_sweep.py --out "$OUT/sweep_8192.json"
  LIMIT=150 step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/split_sweep.py --hidden 4096 --global-batch 8192 --out "$OUT/sweep_4096.json"
elif [ "$PART" = i17a ]; then
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} XDG_STATE_HOME=/tmp/state
  { python3 -m gpumix.cli.main probe --gpus 0,1 --json > "$OUT/probe_2xh200_default.json"; echo "=== probe exit $?"; } >>"$LOG" 2>&1
  { python3 -m gpumix.cli.main probe --gpus 0,1 --json --max-memory-mib 2048 --allreduce-mib 512 --time-limit 60 \
      > "$OUT/probe_2xh200_512mib.json"; echo "=== probe exit $?"; } >>"$LOG" 2>&1
  python3 -m gpumix.cli.main hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 3
  NCCL_P2P_DISABLE=1 LIMIT=150 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label shm \
      --out "$OUT/forwarding_2xh200_shm.json" -- --width 8192 --batch 256 --nccl-probe
  LIMIT=150 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label nvlink \
      --out "$OUT/forwarding_2xh200_nvlink.json" -- --width 8192 --batch 256 --nccl-probe
  kill $HUB
  SHARES=0.0625,0.125,0.1875,0.25,0.3125,0.375,0.4375,0.5,0.5625,0.625,0.6875,0.75,0.8125,0.875,0.9375
  LIMIT=150 step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/split_sweep.py \
      --shares $SHARES --out "$OUT/sweep_2xh200_nvlink.json"
  NCCL_P2P_DISABLE=1 LIMIT=200 step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/split_sweep.py \
      --shares $SHARES --out "$OUT/sweep_2xh200_shm.json"
elif [ "$PART" = i17c ]; then
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  # installed, agent/ is gpumix.agent (pyproject's package-dir); from a bare checkout it needs this link
  [ -e gpumix/agent ] || ln -s ../agent gpumix/agent
  python3 -m gpumix.cli.main hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 2
  NCCL_P2P_DISABLE=1 LIMIT=60 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label shm \
      --out "$OUT/forwarding_2xh200_shm.json" -- --width 8192 --batch 256 --nccl-probe
  LIMIT=50 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label nvlink \
      --out "$OUT/forwarding_2xh200_nvlink.json" -- --width 8192 --batch 256 --nccl-probe
  kill $HUB
  SHARES=0.0625,0.125,0.1875,0.25,0.3125,0.375,0.4375,0.5,0.5625,0.625,0.6875,0.75,0.8125,0.875,0.9375
  for transport in nvlink shm; do
    left=$(( ${STOP_AT:-160} - SECONDS )); [ $left -gt 20 ] || break
    [ $transport = shm ] && export NCCL_P2P_DISABLE=1
    LIMIT=$left step python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/split_sweep.py \
        --shares $SHARES --steps 10 --isolated 2 --out "$OUT/sweep_2xh200_$transport.json"
  done
  unset NCCL_P2P_DISABLE
elif [ "$PART" = i17d ]; then
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  [ -e gpumix/agent ] || ln -s ../agent gpumix/agent  # as in i17c
  python3 -m gpumix.cli.main hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 2
  NCCL_P2P_DISABLE=1 LIMIT=55 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label shm \
      --wait 35 --min-step 100 --out "$OUT/forwarding_2xh200_shm.json" -- --width 8192 --batch 256 --nccl-probe
  LIMIT=55 step python3 benchmarks/cpu_forwarding_run.py --hub /tmp/gpumix-hub.sock --label nvlink \
      --wait 35 --min-step 100 --out "$OUT/forwarding_2xh200_nvlink.json" -- --width 8192 --batch 256 --nccl-probe
  kill $HUB
elif [ "$PART" = i17b ]; then
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  LIMIT=270 step python3 benchmarks/bench_replan_gpu.py --window 6 --try "${TRY_NVLINK:-768}" --out "$OUT/replan_2xh200_nvlink.json"
  NCCL_P2P_DISABLE=1 LIMIT=240 step python3 benchmarks/bench_replan_gpu.py --window 6 --try "${TRY_SHM:-832}" --out "$OUT/replan_2xh200_shm.json"
  if [ "${AUTO:-0}" = 1 ]; then
    LIMIT=200 step python3 benchmarks/bench_replan_gpu.py --auto --window 6 --try "${TRY_NVLINK:-768}" --out "$OUT/replan_2xh200_auto.json"
  fi
else
  step python3 benchmarks/nvml_probe.py --out "$OUT/probe_b.json" --load h2d,d2h --load-seconds 6
  gpumix hub --socket /tmp/gpumix-hub.sock --interval 0.5 >>"$LOG" 2>&1 &
  HUB=$!; sleep 3
  export GPUMIX_HUB=/tmp/gpumix-hub.sock
  step python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/deepspeed_train.py --steps 50 --zero 2
  snapshot "$OUT/deepspeed.json"
  LIMIT=200 step python3 benchmarks/bench_agent_overhead.py --gpus 2 --pairs 4 --steps 300 --width 4096 --batch 256 --hub /tmp/gpumix-hub.sock --out "$OUT/overhead_b.json"
  kill $HUB
  LIMIT=330 step python3 benchmarks/bench_replan_gpu.py --out "$OUT/replan.json"
fi
echo "=== done $(date -u +%H:%M:%S)" >>"$LOG"
