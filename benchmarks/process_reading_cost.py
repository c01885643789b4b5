"""What the hub's reading of the processes on the GPUs costs a tick (issue 13): `HostSampler.processes` for N
live processes (one rank a GPU: ten ranks on ten GPUs read ten), once every PAUSE_S as a hub reads them, of one
tree against another, alternated in one run (each tree in its own child process: `--tree LABEL=DIR`,
a folder laid out by benchmarks/tree_at.sh, or `LABEL=.` for the checkout).

    python benchmarks/process_reading_cost.py --tree before=/tmp/tree_s25 --tree after=. --rounds 4 \
        --out benchmarks/results/process_reading_cost_cpu_box_s26_2026-12-07.json

Per round and tree: the median over TICKS readings (after 3 unmeasured) of the process CPU
(time.process_time_ns) of one `processes(pids)` call, in µs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from result_out import report

REPO = Path(__file__).resolve().parent.parent

MEASURE = """
import json, statistics, sys, time
from gpumix.hw.host import HostSampler
pids, ticks, pause_s = set(json.loads(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3])
sampler = HostSampler()
costs = []
for tick in range(3 + ticks):
    time.sleep(pause_s)
    started = time.process_time_ns()
    readings = sampler.processes(pids)
    costs.append((time.process_time_ns() - started) / 1e3)
assert all(reading.rss_bytes for reading in readings.values()), readings
print(json.dumps({"median_us": statistics.median(costs[3:]), "gpumix": __import__("gpumix").__file__}))
"""


def measure(tree: str, pids: list[int], ticks: int, pause_s: float) -> dict[str, Any]:
    env = dict(os.environ)
    if tree != ".":  # before what the environment holds (psutil and pynvml where they are wheels there)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-P", "-c", MEASURE, json.dumps(pids), str(ticks), str(pause_s)],
                         env=env, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="LABEL=DIR (DIR . for the checkout)")
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--ticks", type=int, default=15)
    parser.add_argument("--pause-s", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.tree)
    sleepers = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
                for _ in range(args.processes)]
    try:
        pids = [process.pid for process in sleepers]
        runs = []
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))  # ABBA
            for label in order:
                runs.append({"round": round_number, "tree": label,
                             **measure(trees[label], pids, args.ticks, args.pause_s)})
    finally:
        for process in sleepers:
            process.kill()
            process.wait()
    summary = {label: statistics.median(run["median_us"] for run in runs if run["tree"] == label) for label in trees}
    return report({
        "benchmark": "process_reading_cost", "command": "python " + " ".join(sys.argv),
        "machine": {"hostname": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "load_average": list(os.getloadavg())},
        "processes": args.processes, "ticks": args.ticks, "pause_s": args.pause_s, "trees": trees,
        "runs": runs, "median_us_per_tick": summary,
    }, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
