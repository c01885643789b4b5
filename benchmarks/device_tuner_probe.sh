#!/bin/bash
# Session 5 on one lent H200, read-only on the GPU (issues 14 and 16):
#   1. `gpumix power profile TIER --dry-run` and `gpumix power fit --dry-run` against a hub on the real
#      GPU, whose NVML setters are a tripwire (benchmarks/hub_tripwire.py): any setter call is refused
#      and recorded; the power limit read before and after by nvidia-smi;
#   2. the probe from the monitor: gpumix-top attached to that hub, `m`, run, results
#      (benchmarks/device_probe_screen.py).
#
#   OUT=/tmp/out bash benchmarks/device_tuner_probe.sh     # wheels (gpumix-top's own among them) in .whl/
#   DRY=1 OUT=/tmp/out bash benchmarks/device_tuner_probe.sh   # a dry run without a GPU: a simulated rig
set -u
cd "$(dirname "$0")/.."
. benchmarks/device_setup.sh tuner-probe   # REPO OUT LOG WORK PY; wheels; say, step, pack
limits() { nvidia-smi --query-gpu=index,power.limit,enforced.power.limit,power.default_limit --format=csv,noheader; }
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; } >>"$LOG" 2>&1
limits >"$OUT/power_limits_before.txt" 2>&1

$PY "$REPO/benchmarks/hub_tripwire.py" --attempts "$OUT/nvml_setter_attempts.txt" -- --interval 1 $SRC >"$WORK/hub.log" 2>&1 &
HUB=$!
SOCK=$WORK/run/gpumix/hub.sock
for _ in $(seq 60); do [ -S "$SOCK" ] && break; sleep 0.2; done
sleep 2
TIER=$(gpumix-top --once --json 2>>"$LOG" | $PY -c "import json, sys; print(json.load(sys.stdin)['gpus'][0]['tier'])")
say "tier: $TIER"
step 30 "power profile --dry-run" bash -c "gpumix power profile '$TIER' --dry-run --json >'$OUT/power_profile_dry_run_h200.json'"
step 30 "power profile --dry-run (text)" bash -c "gpumix power profile '$TIER' --dry-run --steps 3 --step-pct 10 --hold 30 >'$OUT/power_profile_dry_run_h200.txt' 2>&1"
step 30 "power fit --dry-run" bash -c "gpumix power fit --dry-run --budget 600 --json >'$OUT/power_fit_dry_run_h200.json'"
step 170 "probe from the monitor" $PY "$REPO/benchmarks/device_probe_screen.py" --hub "$SOCK" --out "$OUT"
kill "$HUB"; wait "$HUB" 2>/dev/null
cp "$WORK/hub.log" "$OUT/tuner_probe_hub.log"
limits >"$OUT/power_limits_after.txt" 2>&1
say "setter attempts: $(wc -l <"$OUT/nvml_setter_attempts.txt")"
cmp -s "$OUT/power_limits_before.txt" "$OUT/power_limits_after.txt" && say "power limits unchanged" || say "POWER LIMITS DIFFER"
pack
say done
