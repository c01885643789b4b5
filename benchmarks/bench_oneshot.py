"""One-shot commands' wall time: median of N, the commands alternated round by round.

Each command runs to its end N times (stdout to a pipe, read whole, as a script would); the
rounds go through every command before the next round, so a drift of the machine falls on all.
Reported per command: median, min and max wall seconds, exit codes, the first stderr line
(gpumix's commands say there which source they used) and the size of stdout. Issue 13's goal:
`gpumix-top --once --json`, `gpumix doctor` and `gpumix power show` <= 1.5x `gpustat --json`, and
<= 0.15 s when a hub is running.

    python benchmarks/bench_oneshot.py --repeats 5 --label no-hub --out oneshot.json \\
        --cmd "gpumix-top --once --json" --cmd "gpumix doctor" --cmd "gpustat --json" --cmd nvidia-smi
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GOAL_RATIO_TO_GPUSTAT = 1.5
GOAL_WITH_HUB_S = 0.15


def run_once(command: list[str], timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"wall_s": None, "exit": "timeout", "stderr_first_line": "", "stdout_bytes": 0}
    except OSError as error:
        return {"wall_s": None, "exit": f"cannot run: {error}", "stderr_first_line": "", "stdout_bytes": 0}
    wall_s = time.perf_counter() - started
    stderr = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return {"wall_s": round(wall_s, 4), "exit": done.returncode, "stdout_bytes": len(done.stdout),
            "stderr_first_line": stderr[0][:200] if stderr else ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cmd", action="append", required=True, metavar="COMMAND", help="a command (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per run before it counts as failed")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    commands = [shlex.split(text) for text in args.cmd]
    runs: dict[int, list[dict[str, Any]]] = {index: [] for index in range(len(commands))}
    for _ in range(args.repeats):
        for index, command in enumerate(commands):
            runs[index].append(run_once(command, args.timeout))
    lines = []
    for index, command in enumerate(commands):
        walls = [run["wall_s"] for run in runs[index] if run["wall_s"] is not None]
        lines.append({
            "command": shlex.join(command),
            "median_s": round(statistics.median(walls), 4) if walls else None,
            "min_s": min(walls) if walls else None, "max_s": max(walls) if walls else None,
            "exits": [run["exit"] for run in runs[index]],
            "stderr_first_line": runs[index][-1].get("stderr_first_line"),
            "stdout_bytes": runs[index][-1].get("stdout_bytes"),
            "wall_s": [run["wall_s"] for run in runs[index]],
        })
    result = {
        "tool": "bench_oneshot", "label": args.label,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"hostname": platform.node(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "argv": sys.argv[1:], "repeats": args.repeats,
        "goals": {"ratio_to_gpustat_json": GOAL_RATIO_TO_GPUSTAT, "with_hub_s": GOAL_WITH_HUB_S},
        "commands": lines,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    for line in lines:
        print(f"{line['median_s']} s median ({line['min_s']}-{line['max_s']}), exits {line['exits']}: {line['command']}"
              f"  [{(line['stderr_first_line'] or '')[:80]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
