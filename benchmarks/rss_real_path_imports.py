"""The dashboard's start on real GPUs, without the GPUs: RSS after what `gpumix-top` loads with a hub of its own
(issue 13: RSS <= nvitop's + 10 MB), for trees laid out by benchmarks/tree_at.sh, alternated in fresh processes.

The simulated rig (`--sim`) loads the simulator, and with it importlib.resources' readers and zipfile, which the
real path does not: a before/after on `--sim` hides a cut there. This follows tui/main.py's run_with_own_hub up to
the app's first screen without a driver: asyncio without ssl, the hardware and node modules (NVML's backend and
pynvml), pynvml narrowed where the tree has it (gpumix.hw.nvml_narrow, as its run_with_own_hub does), then
Textual's app and the dashboard with its themes loaded (no terminal, no event loop). Each run in a fresh
interpreter at -OO with PYTHONNODEBUGRANGES (as the re-executed monitor); VmRSS, RssAnon and the module count.

    python benchmarks/rss_real_path_imports.py --tree before=/tmp/b --tree after=/tmp/a --rounds 5 --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = r"""
import gc, json, sys
sys.path = [p for p in sys.path if p not in ("", ".")]
from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl
import_asyncio_without_ssl()
import gpumix.cli.hardware, gpumix.cli.node, gpumix.hub.connections, gpumix.hw.types, gpumix.hw.nvml_backend
try:
    from gpumix.hw.nvml_narrow import narrow_pynvml
except ImportError:
    narrow_pynvml = None
narrowed = narrow_pynvml() if narrow_pynvml else 0
import gpumix.tui.app, gpumix.tui.input_driver, gpumix.tui.partial_render
from textual.widgets import DataTable, Footer, Static
from gpumix.tui.themes import load_themes
load_themes()
gc.collect()
status = {line.split(":")[0]: int(line.split()[1]) for line in open("/proc/self/status")
          if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile"))}
print(json.dumps({"status_kb": status, "modules": len(sys.modules), "narrowed": narrowed,
                  "gpumix_file": gpumix.tui.app.__file__}))
"""


def run_once(tree: str) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "GPUMIX_HUB")}
    env.update({"PYTHONPATH": tree, "PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1"})
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env, cwd="/")
    if result.returncode != 0:
        raise SystemExit(f"{tree}: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = [item.split("=", 1) for item in args.tree]
    for _, tree in trees:
        run_once(tree)  # warm: -OO's compiled files written
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
    for round_index in range(args.rounds):
        order = trees if round_index % 2 == 0 else list(reversed(trees))
        for label, tree in order:
            runs[label].append(run_once(tree))
    summary = {label: {key: statistics.median(run["status_kb"][key] for run in items)
                       for key in ("VmRSS", "RssAnon", "RssFile")} | {"modules": items[0]["modules"],
                                                                      "narrowed": items[0]["narrowed"]}
               for label, items in runs.items()}
    result = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "python": sys.version.split()[0],
              "trees": dict(trees), "rounds": args.rounds, "summary_median_kb": summary, "runs": runs}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
