#!/bin/bash
# Lay out gpumix as imported (gpumix/, with tui/, agent/ and themes/ inside it) from one commit, so that
# `PYTHONPATH=DIR .venv/bin/python -m gpumix.tui.main` runs that commit beside the checkout's editable
# install (PYTHONPATH comes before the editable finder): before/after benchmarks in one alternated run.
#
#   bash benchmarks/tree_at.sh 08e2a8f /tmp/tree_before
set -eu
commit=$1 dir=$2
rm -rf "$dir"; mkdir -p "$dir/src"
git -C "$(dirname "$0")/.." archive "$commit" gpumix tui agent themes | tar -x -C "$dir/src"
mv "$dir/src/gpumix" "$dir/gpumix"
for part in tui agent themes; do mv "$dir/src/$part" "$dir/gpumix/$part"; done
rm -rf "$dir/src"
echo "$dir: gpumix at $(git -C "$(dirname "$0")/.." rev-parse --short "$commit")"
