"""The power fit alone against the oracle, on fit inputs captured from benchmarks/oracle_replan.py (issue 16).

oracle_replan.py runs the planner end to end, then a profile of each tier through the hub, then the fit;
the fit is the last link and the cheapest. `capture` runs oracle_replan.py unchanged (the same JSON, to
--out) and also pickles what each rig's two fits were given (the prior's and the learned GpuPower lists,
the budget, the split in force, the world's oracle caps) to --cache. `eval` re-runs only the fit of the
gpumix on PYTHONPATH on those inputs, against the same oracle, in seconds: for trying fit changes
without re-running the planner and the profile (whose figures move with the planner helper's commits).

    PYTHONPATH=/tmp/h2_before python benchmarks/power_fit_check.py capture --granularity 16 --seed 31 \
        --no-shipped --out benchmarks/results/oracle_replan_power_g16_seed31_s9_2026-12-02.json --cache /tmp/c.pkl
    python benchmarks/power_fit_check.py eval /tmp/c.pkl [--rig gen-22]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_replan  # noqa: E402  (benchmarks/, beside this file)

from gpumix.power import budget as power_budget  # noqa: E402
from gpumix.sim.world import World  # noqa: E402


def capture(argv: list[str], cache: Path) -> None:
    records: list[dict[str, Any]] = []
    real_bench_power, real_fit = oracle_replan.bench_power, oracle_replan.fit_to_budget
    calls: list[tuple[list[Any], float]] = []

    def fit_recording(gpus: list[Any], budget_w: float, *args: Any, **kwargs: Any) -> Any:
        calls.append((list(gpus), budget_w))
        return real_fit(gpus, budget_w, *args, **kwargs)

    def bench_power(job: Any, world: World, counts: list[int], micro: list[int], budget_w: float) -> dict[str, Any]:
        calls.clear()
        result = real_bench_power(job, world, counts, micro, budget_w)
        records.append({"rig": world.rig, "counts": list(counts), "micro": list(micro), "budget_w": budget_w,
                        "prior_gpus": calls[0][0], "learned_gpus": calls[1][0],
                        "oracle_caps_w": result["oracle_caps_w"],
                        "oracle_within_stock_caps_w": result["oracle_within_stock_caps_w"]})
        return result

    oracle_replan.bench_power, oracle_replan.fit_to_budget = bench_power, fit_recording
    sys.argv = ["benchmarks/oracle_replan.py", *argv]
    oracle_replan.main()
    cache.write_bytes(pickle.dumps(records))


def evaluate(cache: Path, only: str | None) -> dict[str, Any]:
    rows = []
    for rec in pickle.loads(cache.read_bytes()):
        if only and rec["rig"].name != only:
            continue
        world = World(rec["rig"])
        counts, micro, budget_w = rec["counts"], rec["micro"], rec["budget_w"]
        oracle_s = oracle_replan.step_s(world, counts, rec["oracle_caps_w"], micro)
        stock_s = oracle_replan.step_s(world, counts, rec["oracle_within_stock_caps_w"], micro)
        row: dict[str, Any] = {"rig": rec["rig"].name, "budget_w": budget_w}
        for name in ("prior", "learned"):
            fit = power_budget.fit_to_budget(rec[f"{name}_gpus"], budget_w)
            caps = [next(p.new_w for p in fit.proposals if p.index == i) for i in range(len(counts))]
            fitted_s = oracle_replan.step_s(world, counts, caps, micro)
            row[name] = {"share": oracle_s / fitted_s, "within_stock": stock_s / fitted_s, "caps_w": caps,
                         "within_budget": sum(caps) <= budget_w + 1e-9}
        row["oracle_caps_w"] = rec["oracle_caps_w"]
        rows.append(row)
    summary: dict[str, Any] = {"rigs": len(rows)}
    for name in ("prior", "learned"):
        for key in ("share", "within_stock"):
            values = [r[name][key] for r in rows]
            summary[f"{name}_{key}_median"], summary[f"{name}_{key}_worst"] = statistics.median(values), min(values)
        summary[f"{name}_within_budget"] = all(r[name]["within_budget"] for r in rows)
    worst = min(rows, key=lambda r: r["learned"]["share"])
    summary["learned_worst_rig"] = worst["rig"]
    return {"summary": summary, "rigs": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("--cache", required=True, type=Path)
    ev = sub.add_parser("eval")
    ev.add_argument("cache", type=Path)
    ev.add_argument("--rig")
    ev.add_argument("--out", type=Path)
    args, rest = parser.parse_known_args()
    if args.mode == "capture":
        capture(rest, args.cache)
        return
    data = evaluate(args.cache, args.rig)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1))
    print(json.dumps(data["summary"] if not args.rig else data, indent=1))


if __name__ == "__main__":
    main()
