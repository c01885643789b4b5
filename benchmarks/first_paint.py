"""Wall seconds from spawning `gpumix-top` to its first screen showing the GPU, for trees laid out by
benchmarks/tree_at.sh, alternated (issue 13: what a start-up cut or a lazy import costs at start).

Each run: the console script with PYTHONPATH=TREE (so the -OO re-exec is as a user gets it; PYTHONDONTWRITEBYTECODE
unset) in a 160x48 pseudo-terminal, the one-GPU simulated rig in-process, until the GPU's name is drawn.

    python benchmarks/first_paint.py --tree before=/tmp/b --tree after=/tmp/a --rounds 5 --out paint.json
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import spawn_in_pty, stop  # noqa: E402 (a sibling script, not a package)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / ".venv" / "bin" / "gpumix-top"
MARK = b"4090"  # benchmarks/rig_1gpu.toml's GPU


def first_paint_s(tree: str, timeout_s: float = 60.0) -> float:
    for name in ("PYTHONDONTWRITEBYTECODE", "GPUMIX_HUB"):
        os.environ.pop(name, None)
    command = ["env", f"PYTHONPATH={tree}", str(SCRIPT), "--interval", "1", "--sim", str(REPO / "benchmarks" / "rig_1gpu.toml")]
    start = time.monotonic()
    pid, master = spawn_in_pty(command, 160, 48)
    seen = bytearray()
    elapsed = float("nan")
    while time.monotonic() - start < timeout_s:
        if select.select([master], [], [], 0.02)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            if MARK in seen:
                elapsed = time.monotonic() - start
                break
    stop(pid, master, b"q", bytearray())
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = [item.split("=", 1) for item in args.tree]
    for _, tree in trees:
        first_paint_s(tree)  # warm: -OO's compiled files written
    seconds: dict[str, list[float]] = {label: [] for label, _ in trees}
    for round_index in range(args.rounds):
        for label, tree in trees if round_index % 2 == 0 else list(reversed(trees)):
            seconds[label].append(round(first_paint_s(tree), 3))
    result: dict[str, Any] = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "trees": dict(trees),
                              "seconds": seconds,
                              "median_s": {label: sorted(v)[len(v) // 2] for label, v in seconds.items()}}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
