"""Aggregate oracle_replan.py sets (issue 16's split goal) per group: the mean share of the oracle's gain, the
rigs under 85 %, the sets whose worst rig is at least 85 %, restarts and the median prediction error, over the
rigs where the oracle gains at least 5 % (the goal's rigs). Beside the share, what it leaves in step time: each
rig's final step over the oracle's (median, 90th percentile, worst), and how many of the rigs under 85 % end
within the restart bar (5 %) of the oracle's step, where a further restart would be asked for less than
`gpumix run --auto-replan` asks.

    python benchmarks/oracle_sets_summary.py --group "23 sets, after_s20" 'benchmarks/results/oracle_replan_*_after_s20_*.json' \
        --out benchmarks/results/oracle_replan_sets_s20_2026-12-07.json

Each --group is a label and globs, comma-separated (quoted), of set files (`.json`, or `.json.gz`); a set is named
by its granularity and seed."""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from spread import median_p90_worst  # beside this file

WORTH_GAIN = 0.05  # the goal's rigs: the oracle gains at least this over the equal split
GOAL_WORST = 0.85
RESTART_BAR = 1.05  # AutoReplan's bar for a predicted speedup (gpumix/run/auto_replan.py)


def set_name(data: dict[str, Any]) -> str:
    return f"g{data['granularity']}_{data['seed']}"


def load_set(path: str | Path) -> dict[str, Any]:
    """A set's file as oracle_replan.py wrote it, or gzipped (session 22's: the repository travels to the device)."""
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def summarize(paths: list[str]) -> dict[str, Any]:
    shares: list[float] = []
    under: list[str] = []
    worst_by_set: dict[str, float] = {}
    restarts: list[int] = []
    errors: list[float] = []
    over_oracle: list[float] = []  # the final step over the oracle's, the goal's rigs
    under_within_bar = 0
    for path in sorted(paths):
        data = load_set(path)
        name = set_name(data)
        worth = [rig for rig in data["rigs"] if rig["oracle_gain"] >= WORTH_GAIN]
        shares += [rig["gain_share_of_oracle"] for rig in worth]
        under += [f"{name} {rig['rig']} {100 * rig['gain_share_of_oracle']:.1f} %"
                  for rig in worth if rig["gain_share_of_oracle"] < GOAL_WORST]
        for rig in worth:
            over_oracle.append(rig["final_step_s"] / rig["oracle"]["step_s"])
            under_within_bar += rig["gain_share_of_oracle"] < GOAL_WORST and over_oracle[-1] <= RESTART_BAR
        worst_by_set[name] = round(100 * min((rig["gain_share_of_oracle"] for rig in worth), default=1.0), 1)
        restarts += [rig["restarts"] for rig in data["rigs"]]
        errors += [plan["prediction_error"] for rig in data["rigs"] for plan in rig["plans"] if "prediction_error" in plan]
    return {"sets": len(worst_by_set), "rigs": len(restarts), "rigs_where_oracle_gains_5pct": len(shares),
            "mean_share_where_oracle_gains_5pct": statistics.fmean(shares) if shares else None,
            "rigs_under_85pct": under,
            "sets_whose_worst_is_at_least_85pct": sum(w >= 100 * GOAL_WORST for w in worst_by_set.values()),
            "restarts_mean": statistics.fmean(restarts) if restarts else None,
            "rigs_with_3_restarts": sum(r >= 3 for r in restarts),
            "prediction_error_median": statistics.median(errors) if errors else None,
            "worst_share_by_set_pct": worst_by_set,
            **step_over_oracle(over_oracle), "rigs_under_85pct_within_the_restart_bar": under_within_bar}


def step_over_oracle(ratios: list[float]) -> dict[str, float | None]:
    """The final step over the oracle's: median, 90th percentile and worst."""
    if not ratios:
        return {"step_over_oracle_median": None, "step_over_oracle_p90": None, "step_over_oracle_worst": None}
    median, p90, worst = median_p90_worst(ratios)
    return {"step_over_oracle_median": round(median, 4), "step_over_oracle_p90": round(p90, 4),
            "step_over_oracle_worst": round(worst, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", nargs=2, action="append", metavar=("LABEL", "GLOB"), required=True)
    parser.add_argument("--out", help="write the groups' aggregates here as JSON")
    args = parser.parse_args()
    groups = {}
    for label, pattern in args.group:
        paths = sorted({path for one in pattern.split(",") for path in glob.glob(one.strip())})
        if not paths:
            parser.error(f"--group {label!r}: no file matches {pattern!r}")
        groups[label] = {"glob": pattern, **summarize(paths)}
        found = groups[label]
        print(f"{label}: {found['sets']} sets, mean share {100 * found['mean_share_where_oracle_gains_5pct']:.2f} %, "
              f"{len(found['rigs_under_85pct'])} rigs under 85 %, {found['sets_whose_worst_is_at_least_85pct']} sets met, "
              f"restarts {found['restarts_mean']:.3f}, median error {100 * found['prediction_error_median']:.2f} %, "
              f"step over the oracle's: median {found['step_over_oracle_median']}, worst {found['step_over_oracle_worst']}; "
              f"{found['rigs_under_85pct_within_the_restart_bar']} rigs under 85 % within 5 % of its step")
    if args.out:
        Path(args.out).write_text(json.dumps({"command": "python benchmarks/oracle_sets_summary.py " + " ".join(
            f"--group {label!r} {pattern!r}" for label, pattern in args.group), "groups": groups}, indent=1) + "\n")


if __name__ == "__main__":
    main()
