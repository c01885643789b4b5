"""Split and caps together against one after the other, in the simulated world (issue 16, item 5).

For each shipped rig and the GENERATED rigs of benchmarks/oracle_replan.py (same seed), a budget of
85 % of the stock caps (a rig's own where it has one), granularity 16:

1. the planner end to end at stock caps (measure -> plan -> restart, as auto re-plan does), then a
   power profile of each tier through the hub (3 steps of 10 % of the range: the product's default);
2. split then fit: `fit_to_budget` at the planner's split (the fit the product runs now);
3. joint: `gpumix.power.joint.joint_plan` from the same measurements (the ranks' compute curves,
   the cards' power curves), split and caps at once;
4. the joint oracle: the same search over the world's own costs (each rank's least cap, to 1 W, that
   computes its share within T, bisection on T; exact for whole units and 1 W caps), caps within
   [min, stock].

Each with the learned curves and with the prior. Throughput in the world (mean step, noise-free) as a
share of the joint oracle's; the caps' sum never above the budget. `offered`: where the model predicts
the joint proposal at least MIN_GAIN faster than split-then-fit (where the product would offer it), and
whether the world agrees.

    python benchmarks/joint_plan.py --out benchmarks/results/joint_plan.json
    python benchmarks/joint_plan.py --min-gain 0.02 --out benchmarks/results/joint_plan_gain2.json
    python benchmarks/joint_plan.py --seed 17 --no-shipped --out benchmarks/results/joint_plan_heldout.json

The 3 % threshold was chosen on the first set (seed 16); seed 17's 24 rigs are held out to check it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import oracle_replan as oracle

from gpumix.plan.inputs import measures, plan_from_snapshot
from gpumix.plan.prediction import hindsight_error
from gpumix.power.budget import GpuPower, fit_to_budget
from gpumix.power.joint import JointRank, joint_offer, joint_plan
from gpumix.sim.rig import BUILTIN_RIGS, Rig, load_builtin_rig
from gpumix.sim.world import World

try:
    from gpumix.power.snapshot_inputs import gpu_power_from_snapshot
except ImportError:  # a tree from before session 9 (benchmarks/tree_at.sh), where budget.py held it
    from gpumix.power.budget import gpu_power_from_snapshot  # type: ignore[attr-defined,no-redef]

GRANULARITY = 16
MIN_GAIN = 0.03  # a joint proposal is offered when predicted this much faster than split-then-fit
MAX_K = 1024  # the planner's accumulation bound


def micro_for(rig: Rig, counts: Sequence[int]) -> list[int]:
    """The largest micro-batch that divides n and fits memory (the planner's rule)."""
    return [max(m for m in range(1, n + 1) if n % m == 0 and m <= oracle.micro_cap(rig, r)) for r, n in enumerate(counts)]


class WorldRank:
    """JointRank's interface over the world's own costs: the oracle's search."""

    def __init__(self, world: World, index: int, min_w: float, max_w: float, upper_samples: int) -> None:
        self.world, self.index, self.min_w, self.max_w, self.upper_samples = world, index, min_w, max_w, upper_samples
        self.lower_samples = 0
        self.rig = world.rig

    def time_s(self, samples: int, cap_w: float) -> float:
        return oracle.best_factor(self.world, self.index, samples, oracle.micro_cap(self.rig, self.index),
                                  [cap_w if i == self.index else None for i in range(len(self.rig.gpus))])[0]

    least_cap_w = JointRank.least_cap_w


def planner_split(job: oracle.Job, counts: list[int], micro: list[int]) -> tuple[list[int], list[int], int]:
    stock: list[float | None] = [None] * len(counts)
    restarts = 0
    for _ in range(oracle.POLICY.max_restarts + 1):
        _, plan = plan_from_snapshot(job.hub.snapshot(), "bench", granularity=GRANULARITY)
        if plan.kept_current or not plan.speedup >= oracle.POLICY.min_speedup or restarts >= oracle.POLICY.max_restarts:
            break
        counts = [r.samples for r in plan.ranks]
        micro = [r.micro_batch for r in plan.ranks]
        job.run(counts, micro, stock)
        restarts += 1
    return counts, micro, restarts


def strategies(job: oracle.Job, world: World, gpus: list[GpuPower], counts: list[int], micro: list[int],
               budget_w: float) -> dict[str, Any]:
    rig = world.rig
    total = sum(counts)
    fit = fit_to_budget(gpus, budget_w)
    fitted = [next(p.new_w for p in fit.proposals if p.index == i) for i in range(len(counts))]
    by_rank = {m.rank: m for m in measures(job.hub.snapshot(), "bench")}
    comm_s = max((g.comm_s for g in gpus), default=0.0)
    ranks = [JointRank(index=g.index, compute=by_rank[g.index].compute_curve(), cap_w=g.cap_w, min_w=g.min_w,
                       max_w=max(g.cap_w, g.default_w), power=g.power_curve(),
                       upper_samples=oracle.micro_cap(rig, g.index) * MAX_K)
             for g in gpus]
    proposal = joint_plan(ranks, total, GRANULARITY, budget_w)
    offer = joint_offer(ranks, total, GRANULARITY, budget_w, fit.step_after_s or 0.0, comm_s,
                        hindsight_error(list(by_rank.values())))
    result: dict[str, Any] = {
        "split_then_fit": {"counts": counts, "caps_w": fitted, "caps_sum_w": sum(fitted),
                           "predicted_step_s": fit.step_after_s, "world_step_s": oracle.step_s(world, counts, fitted, micro)},
        "joint": None, "offer": offer.to_json(),
        "measured_caps_w": {g.index: [c for c, _ in g.power_curve().points] for g in gpus},
    }
    if offer.proposal is not None:
        offer_micro = micro_for(rig, offer.proposal.samples)
        result["offer"]["world_step_s"] = oracle.step_s(world, offer.proposal.samples, offer.proposal.caps_w, offer_micro)
        result["offer"]["world_gain"] = result["split_then_fit"]["world_step_s"] / result["offer"]["world_step_s"] - 1
    if proposal is not None:
        joint_micro = micro_for(rig, proposal.samples)
        result["joint"] = {"counts": list(proposal.samples), "caps_w": list(proposal.caps_w),
                           "caps_sum_w": sum(proposal.caps_w), "predicted_step_s": proposal.compute_s + comm_s,
                           "world_step_s": oracle.step_s(world, proposal.samples, proposal.caps_w, joint_micro)}
    return result


def bench_rig(rig: Rig, per_rank: int, budget_w: float) -> dict[str, Any]:
    world = World(rig)
    R = len(rig.gpus)
    counts, micro = oracle.equal_split(rig, per_rank)
    job = oracle.Job.start(rig)
    job.run(counts, micro, [None] * R)
    counts, micro, restarts = planner_split(job, counts, micro)
    oracle.profile_through_hub(job, counts, micro)
    snapshot = job.hub.snapshot()
    learned = gpu_power_from_snapshot({**snapshot, "power_points": job.hub.power_points()})
    prior = gpu_power_from_snapshot({k: v for k, v in snapshot.items() if k != "power_points"})  # the hub's snapshot has them
    stock_w = [g.model.tdp_w for g in rig.gpus]
    world_ranks = [WorldRank(world, r, g.model.power_limit_min_w, stock_w[r], oracle.micro_cap(rig, r) * MAX_K)
                   for r, g in enumerate(rig.gpus)]
    best = joint_plan(world_ranks, per_rank * R, GRANULARITY, budget_w)  # type: ignore[arg-type]
    assert best is not None
    best_micro = [oracle.best_factor(world, r, n, oracle.micro_cap(rig, r), best.caps_w)[1] for r, n in enumerate(best.samples)]
    best_step = oracle.step_s(world, best.samples, best.caps_w, best_micro)  # at the micro-batches it searched
    result: dict[str, Any] = {"rig": rig.name, "gpus": [g.model.key for g in rig.gpus], "global_batch": per_rank * R,
                              "budget_w": budget_w, "planner_restarts": restarts,
                              "oracle": {"counts": list(best.samples), "caps_w": list(best.caps_w),
                                         "caps_sum_w": sum(best.caps_w), "world_step_s": best_step}}
    for label, gpus in (("learned", learned), ("prior", prior)):
        found = strategies(job, world, gpus, counts, micro, budget_w)
        for entry in (found["split_then_fit"], found["joint"]):
            if entry is not None:
                entry["share_of_oracle"] = best_step / entry["world_step_s"]
                entry["within_budget"] = entry["caps_sum_w"] <= budget_w + 1e-6
        joint, serial = found["joint"], found["split_then_fit"]
        if joint is not None and serial["predicted_step_s"]:
            predicted_gain = serial["predicted_step_s"] / joint["predicted_step_s"] - 1
            found["unguarded_offered"] = predicted_gain >= MIN_GAIN  # the old rule: no evidence bounds
            found["predicted_gain"] = predicted_gain
            found["world_gain"] = serial["world_step_s"] / joint["world_step_s"] - 1
        found["offered"] = found["offer"]["offered"]  # the product's rule (gpumix.power.joint.joint_offer)
        result[label] = found
    return result


def _with_offer(found: dict[str, Any], best_step_s: float) -> float:
    if found.get("offered"):
        return best_step_s / found["offer"]["world_step_s"]
    return found["split_then_fit"]["share_of_oracle"]


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rigs": len(results)}
    for label in ("learned", "prior"):
        serial = [r[label]["split_then_fit"]["share_of_oracle"] for r in results]
        joint = [r[label]["joint"]["share_of_oracle"] for r in results if r[label]["joint"]]
        offered = [r[label] for r in results if r[label].get("offered")]
        out[label] = {
            "split_then_fit_median": statistics.median(serial), "split_then_fit_worst": min(serial),
            "joint_median": statistics.median(joint) if joint else None, "joint_worst": min(joint) if joint else None,
            "joint_found": len(joint),
            "offered": len(offered),
            "offered_and_faster_in_world": sum(1 for f in offered if f["offer"]["world_gain"] > 0),
            "offered_world_gain_median": statistics.median(f["offer"]["world_gain"] for f in offered) if offered else None,
            "offered_world_gain_best": max(f["offer"]["world_gain"] for f in offered) if offered else None,
            "offered_world_gain_worst": min(f["offer"]["world_gain"] for f in offered) if offered else None,
            "offer_reasons": sorted({r[label]["offer"]["why"].split(":")[0][:60] for r in results}),
            # the old rule (no evidence bounds, MIN_GAIN predicted), for comparison
            "unguarded_offered": sum(1 for r in results if r[label].get("unguarded_offered")),
            "unguarded_world_gain_worst": min((r[label]["world_gain"] for r in results if r[label].get("unguarded_offered")),
                                              default=None),
            # the joint proposal taken where offered, split then fit elsewhere
            "with_offer_median": statistics.median(_with_offer(r[label], r["oracle"]["world_step_s"]) for r in results),
            "with_offer_worst": min(_with_offer(r[label], r["oracle"]["world_step_s"]) for r in results),
            "always_within_budget": all(e["within_budget"] for r in results for e in
                                        (r[label]["split_then_fit"], r[label]["joint"]) if e),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/joint_plan.json")
    parser.add_argument("--generated", type=int, default=oracle.GENERATED)
    parser.add_argument("--seed", type=int, default=oracle.SEED, help="the generated rigs' (another: held out)")
    parser.add_argument("--min-gain", type=float, default=MIN_GAIN)
    parser.add_argument("--no-shipped", action="store_true", help="generated rigs only")
    args = parser.parse_args()
    oracle.GRANULARITY = GRANULARITY
    globals()["MIN_GAIN"] = args.min_gain
    results = []
    for name in [] if args.no_shipped else BUILTIN_RIGS:
        rig = load_builtin_rig(name)
        results.append(bench_rig(rig, 64, rig.power_budget_w or 0.85 * sum(g.model.tdp_w for g in rig.gpus)))
        print(name, file=sys.stderr)
    rng = random.Random(args.seed)
    for number in range(args.generated):
        rig, per_rank = oracle.generated_rig(rng, number)
        results.append(bench_rig(rig, per_rank, 0.85 * sum(g.model.tdp_w for g in rig.gpus)))
        print(rig.name, file=sys.stderr)
    data = {"seed": args.seed, "granularity": GRANULARITY, "min_gain": MIN_GAIN, "command": " ".join(["python", *sys.argv]),
            "summary": summary(results), "rigs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(json.dumps(data["summary"], indent=1))


if __name__ == "__main__":
    main()
