"""How far the planner's step-time predictions erred, split by whether the plan interpolated between the
counts its ranks had run (issue 16, docs/planner.md session 19): from oracle_replan.py's result files, a
plan is "inside" when each rank's count lies within the counts that rank ran before it (the equal split and
the earlier plans of the same rig; two different counts at least). Reads only the files named.

    python benchmarks/interpolation_errors.py benchmarks/results/oracle_replan_*_after_s17_2026-12-06.json \\
        --out benchmarks/results/interpolation_errors_after_s17_s19_2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def split_errors(results: list[dict[str, Any]]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"inside": [], "outside": []}
    for result in results:
        for rig in result["rigs"]:
            per_rank = rig["global_batch"] // len(rig["gpus"])
            seen: list[set[int]] = [{per_rank} for _ in rig["gpus"]]  # the equal split ran first
            for plan in rig["plans"]:
                if "counts" not in plan:
                    continue
                if "prediction_error" in plan:
                    inside = all(len(ran) >= 2 and min(ran) <= count <= max(ran)
                                 for ran, count in zip(seen, plan["counts"], strict=True))
                    found["inside" if inside else "outside"].append(plan["prediction_error"])
                for ran, count in zip(seen, plan["counts"], strict=True):
                    ran.add(count)
    return found


def _stats(errors: list[float]) -> dict[str, float | int | None]:
    ordered = sorted(errors)
    return {"plans": len(ordered), "median": statistics.median(ordered) if ordered else None,
            "p90": ordered[int(0.9 * len(ordered))] if ordered else None, "worst": max(ordered, default=None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out")
    args = parser.parse_args()
    found = split_errors([json.loads(Path(name).read_text()) for name in args.files])
    result = {"command": " ".join(["python", *sys.argv]), "files": [Path(name).name for name in args.files],
              "prediction_error": {kind: _stats(errors) for kind, errors in found.items()}}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
