#!/bin/bash
# Lay out gpumix as imported (gpumix/, with tui/, agent/ and themes/ inside it) from one commit, so that
# `PYTHONPATH=DIR .venv/bin/python -P -m gpumix.tui.main` runs that commit beside the checkout's editable
# install (PYTHONPATH comes before the editable finder): before/after benchmarks in one alternated run.
# -P matters: `python -m` puts the current directory first on the path, and from the repository root its
# gpumix/ is the checkout's, so without -P both trees run the checkout (a script run by its path, or an
# entry point such as .venv/bin/gpumix-top, puts its own folder there instead and is not affected).
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
