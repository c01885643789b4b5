#!/bin/bash
# Issue 16's 51 oracle sets (docs/planner.md: the 23 sets, 10 held-out, 8 fresh, 10 new), two at a time, with
# the gpumix/ of TREE (a folder holding a copy of gpumix/, e.g. `bash benchmarks/tree_at.sh COMMIT TREE`):
#   PY=.venv/bin/python bash benchmarks/oracle_all_sets.sh TREE OUT_DIR   # OUT_DIR/g4_173.json, … (9 min on 2 cores)
# PY: a Python with gpumix's dependencies (default python3); ORACLE_ARGS: more arguments for each set (--probe)
set -eu
tree=$(realpath "$1"); out=$(realpath -m "$2"); mkdir -p "$out"
cd "$(dirname "$0")/.."
PY=${PY:-python3}
SETS="g4 g16"
for seed in 29 41 59 61 67 71 73 79 83 89 97 101 103 107 109; do SETS+=" g4_$seed"; done   # the 23 sets (with g16's)
for seed in 29 41 59 61 67 71; do SETS+=" g16_$seed"; done
for seed in 113 127 131 137 139 149; do SETS+=" g4_$seed"; done                             # 10 held-out
for seed in 113 127 131 137; do SETS+=" g16_$seed"; done
for seed in 151 157; do SETS+=" g4_$seed"; done                                             # 8 fresh
for seed in 151 157 163 167 173 179; do SETS+=" g16_$seed"; done
for seed in 163 167 173 179; do SETS+=" g4_$seed"; done                                     # 10 new
for seed in 181 191 193 197 199 211; do SETS+=" g16_$seed"; done
one() {  # SPEC: g4 | g16 | g4_SEED | g16_SEED
  local spec=$1 g=${1%%_*} extra=()
  [[ $spec == *_* ]] && extra=(--seed "${spec#*_}" --no-shipped)
  PYTHONPATH=$tree $PY -P benchmarks/oracle_replan.py --granularity "${g#g}" "${extra[@]}" ${ORACLE_ARGS:-} \
    --out "$out/$spec.json" \
    >"$out/$spec.log" 2>&1
  echo "$spec rc=$?"
}
export -f one; export tree out PY ORACLE_ARGS
printf '%s\n' $SETS | xargs -P2 -I{} bash -c 'one {}'
