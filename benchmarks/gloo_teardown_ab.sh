#!/bin/bash
# Does a two-rank gloo run of examples/ddp_train.py abort at exit ("terminate called without an active
# exception")? The example at OLD (destroy_process_group with DDP alive) against the checkout's, alternated,
# in two loops side by side (the CI box is loaded); one line per run in $OUT/loop_{A,B}.log, failures kept.
#
#   OLD=80cb42a RUNS=80 OUT=/tmp/gloo_ab bash benchmarks/gloo_teardown_ab.sh
set -u
cd "$(dirname "$0")/.."
OLD=${OLD:-80cb42a} RUNS=${RUNS:-80} OUT=${OUT:-/tmp/gloo_ab}
mkdir -p "$OUT"
git show "$OLD:examples/ddp_train.py" > "$OUT/ddp_old.py"
cp examples/ddp_train.py "$OUT/ddp_new.py"
loop() {
  for i in $(seq 1 "$RUNS"); do
    for v in old new; do
      OMP_NUM_THREADS=1 timeout 120 .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node=2 \
        "$OUT/ddp_$v.py" --steps 30 --width 64 --batch 8 --device cpu --timing-out "$OUT/t_$1.json" --no-agent \
        > "$OUT/last_$1_$v.txt" 2>&1
      rc=$?; echo "$i $v rc=$rc"; [ $rc != 0 ] && cp "$OUT/last_$1_$v.txt" "$OUT/fail_$1_${v}_$i.txt"
    done
  done > "$OUT/loop_$1.log"
}
loop A & loop B & wait
grep -c "rc=0" "$OUT"/loop_*.log; grep -v "rc=0" "$OUT"/loop_*.log
