"""Issue 16's power goal over oracle_replan.py sets: throughput at the fitted caps as a share of the oracle's
best caps under the budget (goal >= 97 %), from the prior and from the curves a profile learned, and
whether caps ever went above the budget.

    python benchmarks/oracle_power_summary.py 'benchmarks/results/oracle_replan_*_after_s25_2026-12-07.json.gz' \\
        --out benchmarks/results/oracle_power_summary_s25_2026-12-07.json
"""

from __future__ import annotations

import argparse
import glob
import statistics
from pathlib import Path
from typing import Any

from oracle_sets_summary import load_set  # beside this file
from result_out import report

GOAL = 0.97


def figures(runs: list[tuple[float, str]]) -> dict[str, Any]:
    runs = sorted(runs)
    return {"rigs": len(runs), "median": round(statistics.median(share for share, _ in runs), 4),
            "worst": [[round(share, 4), where] for share, where in runs[:5]],
            "under_goal": sum(1 for share, _ in runs if share < GOAL)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern", help="a glob of oracle_replan.py outputs (.json or .json.gz)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    prior: list[tuple[float, str]] = []
    learned: list[tuple[float, str]] = []
    over_budget: list[str] = []
    paths = sorted(glob.glob(args.pattern))
    for path in paths:
        for rig in load_set(path)["rigs"]:
            power = rig.get("power")
            if not power:
                continue
            where = f"{Path(path).name.split('.')[0]} {rig['rig']}"
            prior.append((power["throughput_share_of_oracle"], where))
            fitted = power.get("learned_curve") or {}
            if "throughput_share_of_oracle" in fitted:
                learned.append((fitted["throughput_share_of_oracle"], where))
            if not power["within_budget"] or not fitted.get("within_budget", True):
                over_budget.append(where)
    result = {"command": f"python benchmarks/oracle_power_summary.py '{args.pattern}' --out {args.out}",
              "sets": len(paths), "goal": GOAL, "prior": figures(prior), "learned": figures(learned),
              "caps_over_budget": over_budget}
    return report(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
