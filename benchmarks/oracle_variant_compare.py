"""One oracle run of the sets (benchmarks/oracle_all_sets.sh's OUT: SPEC.json or SPEC.json.gz) against another,
rig by rig (issue 16): where the oracle gains at least 5 %, the rigs under 85 % of its gain and the sets whose
worst is at least 85 %, rigs better or worse by more than a point, restarts, the sets' median prediction
errors and median shares.

    python benchmarks/oracle_variant_compare.py --before 'benchmarks/results/oracle_replan_{g}{seed}_after_s22_2026-12-07.json.gz' \
        --after OUT_DIR --variant "what changed" --out benchmarks/results/oracle_replan_variant_NAME.json

--before is a pattern: {g} the granularity's name (g4, g16), {seed} "_seedN" or "" for the shipped set;
--after a folder of SPEC.json[.gz] (g4, g4_29, ...) or such a pattern.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from oracle_sets_summary import GOAL_WORST, WORTH_GAIN, load_set  # beside this file


def after_files(after: str) -> list[tuple[str, Path]]:
    """(spec, path) of each set the --after folder or pattern holds, by spec."""
    if "{" not in after:
        folder = Path(after)
        return sorted((p.name.split(".")[0], p) for p in [*folder.glob("*.json"), *folder.glob("*.json.gz")])
    shape = re.compile(re.escape(after).replace(r"\{g\}", r"(g\d+)").replace(r"\{seed\}", r"(?:_seed(\d+))?") + "$")
    found = []
    for path in glob.glob(after.format(g="g*", seed="*")) + glob.glob(after.format(g="g*", seed="")):
        match = shape.match(path)
        if match:
            found.append((match[1] + (f"_{match[2]}" if match[2] else ""), Path(path)))
    return sorted(set(found))


def set_figures(rigs: list[dict[str, Any]]) -> dict[str, Any]:
    worth = [r["gain_share_of_oracle"] for r in rigs if r["oracle_gain"] >= WORTH_GAIN]
    errors = [p["prediction_error"] for r in rigs for p in r["plans"] if "prediction_error" in p]
    return {"worst": min(worth) if worth else None, "median": statistics.median(worth) if worth else None,
            "error_median": statistics.median(errors) if errors else None,
            "restarts": sum(r["restarts"] for r in rigs), "restarts_max": max(r["restarts"] for r in rigs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--runs", default="", help="the command that made the --after sets, for the record")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sets: dict[str, Any] = {}
    better, worse, under = [], [], {"before": [], "after": []}
    shares: dict[str, list[float]] = {"before": [], "after": []}
    for spec, after_path in after_files(args.after):
        g, _, seed = spec.partition("_")
        before_rigs = {r["rig"]: r for r in load_set(args.before.format(g=g, seed=f"_seed{seed}" if seed else ""))["rigs"]}
        after_rigs = load_set(after_path)["rigs"]
        for rig in after_rigs:
            old = before_rigs[rig["rig"]]
            if old["oracle_gain"] < WORTH_GAIN:
                continue
            label = f"{spec} {rig['rig']}"
            was, now = old["gain_share_of_oracle"], rig["gain_share_of_oracle"]
            shares["before"].append(was)
            shares["after"].append(now)
            if was < GOAL_WORST:
                under["before"].append(f"{label} {was:.1%}")
            if now < GOAL_WORST:
                under["after"].append(f"{label} {now:.1%}")
            if now > was + 0.01:
                better.append(f"{label} {was:.1%} -> {now:.1%}")
            elif now < was - 0.01:
                worse.append(f"{label} {was:.1%} -> {now:.1%}")
        sets[spec] = {"before": set_figures(list(before_rigs.values())), "after": set_figures(after_rigs)}
    met = {side: sum(1 for s in sets.values() if s[side]["worst"] is None or s[side]["worst"] >= GOAL_WORST)
           for side in ("before", "after")}
    result = {
        "variant": args.variant, "runs": args.runs, "command": " ".join(["python", *sys.argv]), "sets": len(sets),
        "sets_whose_worst_is_at_least_85pct": met,
        "goal_rigs": len(shares["after"]),
        "mean_share_of_goal_rigs": {side: statistics.mean(values) for side, values in shares.items()},
        "rigs_under_85pct": {side: len(rigs) for side, rigs in under.items()},
        "rigs_under_85pct_listed": under,
        "rigs_better_by_a_point": len(better), "rigs_worse_by_a_point": len(worse),
        "restarts": {side: sum(s[side]["restarts"] for s in sets.values()) for side in ("before", "after")},
        "restarts_max": {side: max(s[side]["restarts_max"] for s in sets.values()) for side in ("before", "after")},
        "sets_median_under_95pct": {side: [k for k, s in sets.items() if (s[side]["median"] or 1.0) < 0.95]
                                    for side in ("before", "after")},
        "sets_median_error_over_5pct": {side: [k for k, s in sets.items() if (s[side]["error_median"] or 0.0) > 0.05]
                                        for side in ("before", "after")},
        "error_median_of_sets": {side: statistics.median(s[side]["error_median"] for s in sets.values())
                                 for side in ("before", "after")},
        "better": better, "worse": worse, "by_set": sets,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("by_set", "better", "worse", "rigs_under_85pct_listed")},
                     indent=1))


if __name__ == "__main__":
    main()
