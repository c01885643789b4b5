#!/usr/bin/env bash
# Set up a virtual environment (CPU torch first: a plain `torch` could pull a
# multi-GB CUDA build), then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[test]'
# DeepSpeed ships as a source package: build it against the torch above, without its CUDA ops
# (an isolated build would fetch a multi-GB CUDA torch).
.venv/bin/python -c 'import deepspeed' 2>/dev/null ||
    DS_BUILD_OPS=0 .venv/bin/pip install -q --no-build-isolation deepspeed==0.19.8
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -rs "$@"
