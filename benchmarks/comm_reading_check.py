"""Issue 16, session 9: where the planner's step-time prediction errors come from, and what other
readings of the measured wait would have predicted, checked against the world offline.

For each plan an oracle_replan.py results file holds (a restart's prediction), the error split into
three parts, each as a share of the measured step: compute (the model's slowest compute against the
world's mean), communication (the model's wait against the world's mean wait) and the spread (the
world's mean step against the measured median: the step waits for each step's slowest rank). Then the
job is run again through a hub as the benchmark ran it, to the same splits (checked), and at each plan
the measured wait W at the slowest compute C (what the model read) is read by other rules, their wait
predicted at the plan's compute and compared with the world's:

- current: the step model as it is (gpumix.model.step_model.CommModel);
- tail_link_prior: a tail kept as measured, the link prior's all-reduce behind it (session 8's try);
- two_waits: idea (a) of session 8, a line through the waits of the two latest splits (the earlier ones
  from the run's own history, as the hub would keep them), the current model outside them.

It also counts which reading the model took (a bucket before the last, the tail, the tail bounded by the
link prior) and how many plans sit where the lag and tail readings meet (idea (b)).

    python benchmarks/comm_reading_check.py --results benchmarks/results/oracle_replan_g4_heldout_s9_2026-12-02.json \
        --seed 17 --no-shipped --out benchmarks/results/comm_reading_check_g4_heldout_after_s9_2026-12-02.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import oracle_replan as bench  # noqa: E402

from gpumix.model.priors import allreduce_seconds_prior  # noqa: E402
from gpumix.model.step_model import CommModel, bucket_ends, pipeline_readings_s, pipeline_wait_s  # noqa: E402
from gpumix.plan import planner  # noqa: E402
from gpumix.plan.inputs import measured_comm_s, measures, plan_from_snapshot  # noqa: E402
from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig  # noqa: E402

# The planner's wall-clock safety net (10 s) can trip on a loaded box; the plans are the same with more.
planner.plan.__defaults__ = (120.0,)
GRADIENT_BYTES = bench.World(load_builtin_rig(next(iter(BUILTIN_RIGS)))).gradient_bytes  # what the ranks report


def current(row: dict[str, Any], compute_s: float) -> float:
    return CommModel(GRADIENT_BYTES, row["W"], row["links"], row["C"]).seconds(row["links"], compute_s)


def tail_link_prior(row: dict[str, Any], compute_s: float) -> float:
    ends = bucket_ends(GRADIENT_BYTES)
    *others, tail_s = pipeline_readings_s(row["W"], row["C"], ends)
    paced_s = min(others)
    if paced_s <= tail_s:
        return pipeline_wait_s(paced_s, compute_s, ends)
    allreduce_s = min(paced_s, allreduce_seconds_prior(row["links"], GRADIENT_BYTES))
    spread_s = max(0.0, row["W"] - pipeline_wait_s(allreduce_s, row["C"], ends))
    return max(row["W"], spread_s + pipeline_wait_s(allreduce_s, compute_s, ends[:-1]))


def two_waits(row: dict[str, Any], compute_s: float) -> float:
    base = current(row, compute_s)
    (c1, w1), earlier = row["history"][-1], [(c, w) for c, w in row["history"][:-1] if abs(c - row["C"]) > 0.02 * row["C"]]
    if not earlier:
        return base
    c2, w2 = earlier[-1]
    slope = min(0.0, max(-2 / 3, (w1 - w2) / (c1 - c2)))  # dW/dC: the backward hides at most itself
    line = max(0.0, w1 + slope * (compute_s - c1))
    return line if min(c1, c2) <= compute_s <= max(c1, c2) else max(base, line)


RULES = {"current": current, "tail_link_prior": tail_link_prior, "two_waits": two_waits}


def reading(row: dict[str, Any]) -> str:
    *others, tail_s = pipeline_readings_s(row["W"], row["C"], bucket_ends(GRADIENT_BYTES))
    if min(others) < tail_s:
        return "paced"
    return "tail" if tail_s <= allreduce_seconds_prior(row["links"], GRADIENT_BYTES) else "tail_bounded"


def near_the_jump(row: dict[str, Any]) -> bool:
    """Where the model's all-reduce jumps (session 8's idea (b)): the link prior below both readings,
    and the two within 30 % of each other."""
    *others, tail_s = pipeline_readings_s(row["W"], row["C"], bucket_ends(GRADIENT_BYTES))
    paced_s = min(others)
    return allreduce_seconds_prior(row["links"], GRADIENT_BYTES) < min(paced_s, tail_s) and \
        abs(paced_s - tail_s) < 0.3 * paced_s


def rows_of(results: dict[str, Any], seed: int, shipped: bool) -> list[dict[str, Any]]:
    bench.GRANULARITY = results["granularity"]
    rigs = [(load_builtin_rig(name), 64) for name in BUILTIN_RIGS] if shipped else []
    rng = random.Random(seed)
    rigs += [bench.generated_rig(rng, i) for i in range(len(results["rigs"]) - len(rigs))]
    rows = []
    for (rig, per_rank), result in zip(rigs, results["rigs"], strict=True):
        assert rig.name == result["rig"]
        stock: list[float | None] = [None] * len(rig.gpus)
        counts, micro = bench.equal_split(rig, per_rank)
        job = bench.Job.start(rig)
        job.run(counts, micro, stock)
        history: list[tuple[float, float]] = []
        for index, planned in enumerate(p for p in result["plans"] if "prediction_error" in p):
            snapshot = job.hub.snapshot()
            _, plan = plan_from_snapshot(snapshot, "bench", granularity=bench.GRANULARITY)
            assert [r.samples for r in plan.ranks] == planned["counts"], (rig.name, index)
            found = measures(snapshot, "bench")
            slowest_s = max(m.compute_curve().time_s(m.current_samples) for m in found)
            history.append((slowest_s, measured_comm_s(snapshot, "bench") or 0.0))
            rows.append({"rig": rig.name, "plan": index, "W": history[-1][1], "C": slowest_s, "history": list(history),
                         "links": tuple(m.link_bytes_per_s for m in found), **{k: planned[k] for k in (
                             "predicted_compute_s", "predicted_comm_s", "world_mean_compute_s", "world_mean_comm_s",
                             "world_mean_step_s", "measured_step_s", "prediction_error")}})
            job.run(planned["counts"], [r.micro_batch for r in plan.ranks], stock)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(value: float, row: dict[str, Any]) -> float:
        return value / row["measured_step_s"]
    parts = {
        "compute": [share(r["predicted_compute_s"] - r["world_mean_compute_s"], r) for r in rows],
        "communication": [share(r["predicted_comm_s"] - r["world_mean_comm_s"], r) for r in rows],
        "spread": [share(r["world_mean_step_s"] - r["measured_step_s"], r) for r in rows],
    }
    out: dict[str, Any] = {
        "plans": len(rows),
        "prediction_error_median": statistics.median(r["prediction_error"] for r in rows),
        "error_parts_mean": {k: statistics.mean(v) for k, v in parts.items()},
        "error_parts_mean_abs": {k: statistics.mean(map(abs, v)) for k, v in parts.items()},
        # the median step error were one part exact (the other two as they are)
        "median_if_communication_exact": statistics.median(abs(c + s) for c, s in zip(parts["compute"], parts["spread"], strict=True)),
        "median_if_compute_exact": statistics.median(abs(w + s) for w, s in zip(parts["communication"], parts["spread"], strict=True)),
        "readings": {k: sum(1 for r in rows if reading(r) == k) for k in ("paced", "tail", "tail_bounded")},
        "near_the_jump": [f"{r['rig']} plan {r['plan']}" for r in rows if near_the_jump(r)],
        "rules": {},
    }
    for group, picked in (("first_plans", [r for r in rows if r["plan"] == 0]), ("later_plans", [r for r in rows if r["plan"] > 0]),
                          ("all", rows)):
        if not picked:
            continue
        out["rules"][group] = {}
        for name, rule in RULES.items():
            comm = [share(rule(r, r["predicted_compute_s"]) - r["world_mean_comm_s"], r) for r in picked]
            step = [abs(r["predicted_compute_s"] + rule(r, r["predicted_compute_s"]) - r["measured_step_s"]) / r["measured_step_s"]
                    for r in picked]
            out["rules"][group][name] = {"plans": len(picked), "comm_error_mean": statistics.mean(comm),
                                         "comm_error_mean_abs": statistics.mean(map(abs, comm)),
                                         "step_error_median": statistics.median(step), "step_error_worst": max(step)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True, help="an oracle_replan.py results file")
    parser.add_argument("--seed", type=int, default=bench.SEED)
    parser.add_argument("--no-shipped", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    rows = rows_of(results, args.seed, not args.no_shipped)
    for row in rows:  # the current rule must give the benchmark's own prediction back
        assert abs(current(row, row["predicted_compute_s"]) - row["predicted_comm_s"]) < 1e-12, row["rig"]
    data = {"command": " ".join(["python", *sys.argv]), "results": args.results, "summary": summary(rows),
            "rows": [{k: v for k, v in r.items() if k != "links"} for r in rows]}
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(json.dumps(data["summary"], indent=1))


if __name__ == "__main__":
    main()
