"""A pstats file (benchmarks/profiled.py's) summed by source file: each file's own time (tottime), the waits
(a lock's acquire, epoll, sleep) left out, so what is left is the process's Python and C work.

    python benchmarks/profile_by_module.py OUT.prof --run-json bench_hub.json --out by_module.json
"""

from __future__ import annotations

import argparse
import collections
import json
import pstats
import sys
from pathlib import Path

from result_out import report

WAITS = ("acquire", "poll", "sleep")


def by_module(profile: str) -> dict[str, float]:
    totals: collections.Counter[str] = collections.Counter()
    for (file, _line, name), (_calls, _primitive, own_s, _cumulative, _callers) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if file == "~" and any(wait in name for wait in WAITS):
            continue
        key = file.split("/site/")[-1].split("/python3.12/")[-1] if file != "~" else "built-in"
        totals[key] += own_s
    return {name: round(seconds * 1e3, 2) for name, seconds in totals.most_common()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile")
    parser.add_argument("--run-json", type=Path, help="bench_hub.py --tick-cpu's JSON for the profiled run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    modules = by_module(args.profile)
    result = {"benchmark": "hub profile by module (benchmarks/profiled.py, every thread)",
              "command": "python " + " ".join(sys.argv), "python_ms_not_waiting": round(sum(modules.values()), 2),
              "by_module_ms": modules}
    if args.run_json:
        run = json.loads(args.run_json.read_text())["runs"][0]
        result["profiled_hub_cpu_pct_of_one_core_schedstat"] = run["hub_cpu_pct_of_one_core_schedstat"]
    return report(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
