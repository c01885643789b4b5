# The set-up the device scripts share (sourced from the repository root, not run):
#
#   . benchmarks/device_setup.sh NAME     # NAME: costs, recheck, ...
#
# It sets REPO (the checkout), OUT (default /tmp/gpumix-NAME) and its LOG ($OUT/log.txt), a fresh WORK
# folder (/tmp/NAME) with a runtime dir of its own (this run's hub socket, never another user's), PY
# (python3), DRY (1: a dry run without a GPU, gpumix's commands on the simulated rig in $SRC) and
# BUDGET_S; installs the wheels in .whl/ (gpumix-top's own among them) into $SITE when there are any;
# cds into WORK (not the checkout: its gpumix/ lacks gpumix.tui and gpumix.agent, mapped from tui/,
# agent/). Functions: say LINE; pack (WORK, less the sockets, into $OUT/NAME.tgz: a call returns at most
# 8 files); step LIMIT NAME COMMAND... (a timeout each, skipped when it could end past BUDGET_S, output
# to the log, packed after); start_hub TAG [FLAGS] / stop_hub (the node's hub at the default socket);
# demo_dashboards LIMIT BENCH_TUI... (the 10-GPU demo's dashboard at 80x24 and 160x48, attached to
# `gpumix hub --demo`, then with its hub in-process; JSON tui_demo_{attached,in_process}_SIZE.json in WORK).
NAME=$1
REPO=$PWD
OUT=${OUT:-/tmp/gpumix-$NAME}; mkdir -p "$OUT"
WORK=/tmp/$NAME; rm -rf "$WORK"; mkdir -p "$WORK/run"; chmod 700 "$WORK/run"
LOG=$OUT/log.txt; : >"$LOG"
BUDGET_S=${BUDGET_S:-360}
DRY=${DRY:-0}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_RUNTIME_DIR=$WORK/run
unset GPUMIX_HUB
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1 \
    || { echo "wheel install failed"; tail -20 "$LOG"; exit 1; }
  export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
  # gpumix-top re-executes itself at -OO (gpumix/cli/docstring_free.py): compile its -OO files once, as a
  # user's first start does (beside the sources where writable, else in the user's private cache)
  for prefix in "" "${XDG_CACHE_HOME:-$HOME/.cache}/gpumix/pycache"; do
    (cd / && PYTHONPYCACHEPREFIX=$prefix PYTHONOPTIMIZE=2 $PY -c "import gpumix.tui.app, gpumix.cli.node, gpumix.cli.hardware, gpumix.hub.client, pynvml, psutil") >>"$LOG" 2>&1
  done  # from /: the checkout's gpumix/ (no gpumix.tui) would stand in the way of the wheel's
fi
cd "$WORK" || exit 1
SRC=""; [ "$DRY" = 1 ] && SRC="--sim 4090-x2-desktop"   # gpumix's commands look at this instead of NVML

say() { echo "=== $(date -u +%H:%M:%S) +${SECONDS}s $*" | tee -a "$LOG"; }
pack() { tar czf "$OUT/$NAME.tgz" -C "$WORK" --exclude run . 2>/dev/null; }
step() {
  local limit=$1 name=$2; shift 2
  if [ $((SECONDS + limit)) -gt "$BUDGET_S" ]; then say "SKIP $name (needs ${limit}s, ${SECONDS}s used of $BUDGET_S)"; return 0; fi
  say "$name"
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  say "$name: exit $?"
  pack
}
start_hub() {  # TAG [FLAGS]: the node's hub at the default socket, as a user would start it; its log hub_TAG.log
  local tag=$1; shift
  $PY -m gpumix.cli.main hub "$@" --interval 1 >"$WORK/hub_$tag.log" 2>&1 &
  HUB=$!
  for _ in $(seq 50); do [ -S "$WORK/run/gpumix/hub.sock" ] && break; sleep 0.2; done
  sleep 1.5  # two ticks: the hub has rates
}
stop_hub() { kill "$HUB" 2>/dev/null; wait "$HUB" 2>/dev/null; }
demo_dashboards() {  # LIMIT BENCH_TUI_COMMAND...: the 10-GPU demo's dashboard, attached then in-process
  local limit=$1 size; shift
  start_hub demo --demo
  sleep 3  # the demo's ten ranks connect and step
  for size in 80x24 160x48; do
    step "$limit" "demo dashboard $size, attached to gpumix hub --demo" "$@" --cols "${size%x*}" --rows "${size#*x}" \
      --label "demo-attached-$size" --out "$WORK/tui_demo_attached_$size.json" -- gpumix-top --interval 1
  done
  stop_hub
  for size in 80x24 160x48; do
    step "$limit" "demo dashboard $size, hub in-process" "$@" --cols "${size%x*}" --rows "${size#*x}" \
      --label "demo-in-process-$size" --out "$WORK/tui_demo_in_process_$size.json" -- gpumix-top --demo --interval 1
  done
}
