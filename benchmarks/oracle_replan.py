"""The planner and the power fit against an oracle in the simulated world (issue 16, item 3).

For each shipped rig and GENERATED rigs (fixed seed: 2-10 GPUs, mixed models, links x1-x16, some
memory-bound), two questions, each answered in the world (gpumix/sim/world.py), never with the
product's model:

Split. The best split at the planner's granularity g: every rank takes a multiple of g (>= g), the
micro-batch fits memory under the planner's own rule (10 % margin) with n = m x k. The step's mean
time is the slowest rank's compute plus the all-reduce tail its backward does not hide, and that tail
grows with the slowest compute, so the best split is the one with the least slowest compute: an
exact min-max. For each candidate time T (every rank's cost at every multiple of g) a rank can take
at most the largest n with cost <= T (costs never fall as n grows); the least T at which these
maxima reach B is optimal, and any split under it reaching B is one. Where the space is small
(<= 200 000 splits) an exhaustive search over every split checks it (`exhaustive_agrees`).

The planner, end to end: the equal split runs; a real Hub (over the simulated rig, on a manual clock)
receives each rank's steps from the world, noise and loader stalls included, as the agent would send
them; `plan_from_snapshot` plans from the hub's snapshot; the job "restarts" into the plan (the hub
carries each rank's operating point across, as for a relaunched process); it is measured again; and
so on. Each restart is decided by the product's own `AutoReplan.propose`, as `gpumix run --auto-replan`
decides it (settle_steps 0: a phase is 30 steps and read whole), so a rule inside it shows here too.

Power. The split in force (the planner's), a budget of 85 % of the stock caps (a rig's own budget
where it has one): `fit_to_budget` from the hub's snapshot against the best caps under the budget
found in the world (an exact min-max over continuous caps: each rank's least cap that computes within
T, bisection on T), over each card's whole settable range, and within its stock cap (the fit only
lowers caps).

    python benchmarks/oracle_replan.py --granularity 4 --out benchmarks/results/oracle_replan_g4.json
    python benchmarks/oracle_replan.py --granularity 16 --out benchmarks/results/oracle_replan_g16.json

Rules and tolerances of the planner were tuned on seed 16's rigs; `--seed 17 --no-shipped` generates
24 others, held out to check them:

    python benchmarks/oracle_replan.py --granularity 4 --seed 17 --no-shipped --out benchmarks/results/oracle_replan_g4_heldout_2026-12-01.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumix.agent.probe_schedule import probe_micro_batch, probe_steps
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.power.budget import fit_to_budget
from gpumix.power.profile import DEFAULT_STEP_SHARE, DEFAULT_STEPS, profile_steps
from gpumix.run.auto_replan import CHECK_S, AutoReplan
from gpumix.sim import job_model
from gpumix.sim import world as world_module
from gpumix.sim.rig import BUILTIN_RIGS, Rig, load_builtin_rig, parse_rig
from gpumix.sim.world import World

try:
    from gpumix.power.snapshot_inputs import gpu_power_from_snapshot
except ImportError:  # a tree from before session 9 (benchmarks/tree_at.sh), where budget.py held it
    from gpumix.power.budget import gpu_power_from_snapshot  # type: ignore[attr-defined,no-redef]

SEED = 16
GENERATED = 24
GRANULARITY = 4
MARGIN = 0.10  # the planner's memory safety margin, applied to the oracle too
POLICY = AutoReplan()
STEPS_PER_PHASE = 3 * MEDIAN_WINDOW  # steps each split runs before it is read
MODELS = ["rtx3060", "rtx3090", "rtx3090-oc", "rtx4090", "rtx5070ti"]
EXHAUSTIVE_LIMIT = 200_000
PROBE = False  # --probe


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


# -- the world's costs ---------------------------------------------------------------------------


def micro_cap(rig: Rig, index: int) -> int:
    """The largest micro-batch that fits the card's memory under the planner's margin."""
    usable = rig.gpus[index].model.mem_gib * 1024**3 * (1 - MARGIN)
    return max(1, math.floor((usable - job_model.MODEL_STATE_BYTES) / job_model.ACTIVATION_BYTES_PER_SAMPLE))


def best_factor(world: World, index: int, n: int, cap: int, caps_w: Sequence[float | None]) -> tuple[float, int]:
    """(compute s, micro-batch) of n samples on this GPU: the fastest n = m x k with m <= cap."""
    best: tuple[float, int] | None = None
    for k in range(math.ceil(n / cap), n + 1):
        if n % k == 0:
            t = world.compute_s(index, n, caps_w[index], n // k)
            if best is None or t < best[0]:
                best = (t, n // k)
            if k > math.ceil(n / cap) + 16:
                break
    assert best is not None
    return best


def step_s(world: World, counts: Sequence[int], caps_w: Sequence[float | None], micro: Sequence[int | None]) -> float:
    return world.mean_step(counts, caps_w, micro).step_s


def oracle_split(world: World, total: int, caps_w: Sequence[float | None]) -> dict[str, Any]:
    rig = world.rig
    R = len(rig.gpus)
    units = total // GRANULARITY
    cost = [[best_factor(world, r, u * GRANULARITY, micro_cap(rig, r), caps_w)[0] if u else 0.0
             for u in range(units + 1)] for r in range(R)]

    def most_units(r: int, limit_s: float) -> int:
        return max((u for u in range(1, units + 1) if cost[r][u] <= limit_s + 1e-15), default=0)

    candidates = sorted({cost[r][u] for r in range(R) for u in range(1, units + 1)})
    low, high = 0, len(candidates) - 1
    while low < high:  # the least T whose per-rank maxima reach B (feasibility only grows with T)
        mid = (low + high) // 2
        if all(most_units(r, candidates[mid]) >= 1 for r in range(R)) and \
                sum(most_units(r, candidates[mid]) for r in range(R)) >= units:
            high = mid
        else:
            low = mid + 1
    limit_s = candidates[low]
    take = [most_units(r, limit_s) for r in range(R)]
    excess = sum(take) - units
    for r in sorted(range(R), key=lambda r: -take[r]):
        give = min(excess, take[r] - 1)
        take[r] -= give
        excess -= give
    counts = [u * GRANULARITY for u in take]
    micro = [best_factor(world, r, counts[r], micro_cap(rig, r), caps_w)[1] for r in range(R)]
    result = {"counts": counts, "slowest_compute_s": limit_s, "step_s": step_s(world, counts, caps_w, micro)}
    space = math.comb(units - 1, R - 1)
    if space <= EXHAUSTIVE_LIMIT:
        best = min((max(cost[r][u] for r, u in enumerate(split)), split)
                   for split in _compositions(units, R))
        result["exhaustive_agrees"] = math.isclose(best[0], limit_s, rel_tol=1e-12)
        result["splits_searched"] = space
    return result


def _compositions(units: int, parts: int):
    for cuts in itertools.combinations(range(1, units), parts - 1):
        edges = (0, *cuts, units)
        yield tuple(b - a for a, b in itertools.pairwise(edges))


def oracle_caps(world: World, counts: Sequence[int], micro: Sequence[int | None], budget_w: float,
                within_stock: bool = False) -> list[float]:
    """The caps under the budget with the least slowest compute (exact to 0.01 W and 1e-9 s);
    within_stock: no cap above the card's default limit."""
    gpus = world.rig.gpus
    low_w = [g.model.power_limit_min_w for g in gpus]
    high_w = [g.model.tdp_w if within_stock else g.model.power_limit_max_w for g in gpus]

    def least_cap(r: int, limit_s: float) -> float | None:
        if counts[r] == 0:
            return low_w[r]
        if world.compute_s(r, counts[r], high_w[r], micro[r]) > limit_s:
            return None
        lo, hi = low_w[r], high_w[r]
        if world.compute_s(r, counts[r], lo, micro[r]) <= limit_s:
            return lo
        while hi - lo > 0.01:
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if world.compute_s(r, counts[r], mid, micro[r]) <= limit_s else (mid, hi)
        return hi

    def caps_for(limit_s: float) -> list[float] | None:
        caps = [least_cap(r, limit_s) for r in range(len(gpus))]
        return None if any(c is None for c in caps) or sum(caps) > budget_w else caps  # type: ignore[arg-type]

    lo_s, hi_s = 0.0, max(world.compute_s(r, n, low_w[r], micro[r]) for r, n in enumerate(counts))
    for _ in range(60):
        mid = (lo_s + hi_s) / 2
        lo_s, hi_s = (lo_s, mid) if caps_for(mid) is not None else (mid, hi_s)
    caps = caps_for(hi_s)
    assert caps is not None
    return caps


# -- the planner, end to end through a hub ----------------------------------------------------


@dataclass
class Job:
    rig: Rig
    world: World
    hub: Hub
    clock: Clock
    step: int = 0
    pid: int = 1000
    keys: list[Any] | None = None

    @classmethod
    def start(cls, rig: Rig) -> Job:
        clock = Clock()
        hardware = simulated_hardware(rig, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
        hub = Hub(hardware, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock(), hostname="oracle")
        hub.tick()
        return cls(rig, World(rig), hub, clock)

    def run(self, counts: Sequence[int], micro: Sequence[int], caps_w: Sequence[float | None],
            probe: Sequence[Sequence[int]] = ()) -> dict[str, Any]:
        """A (re)launch: one process per rank at this split, STEPS_PER_PHASE steps from the world, as
        the agent reports them (step, comm and data wait per rank). The old processes are gone. `probe`:
        a stair probe's splits, one a step, run first, each rank's passes as probe_passes lays them out."""
        for key in self.keys or []:
            self.hub.agent_gone(key)
        uuids = [g.uuid for g in self.rig.gpus]
        self.keys = []
        for rank, uuid in enumerate(uuids):
            self.pid += 1
            self.keys.append(self.hub.agent_hello(parse_hello({
                "rank": rank, "world_size": len(uuids), "job": "bench", "pid": self.pid, "gpu_uuid": uuid})))
        steps = []
        for index, split in enumerate([*probe, *[counts] * STEPS_PER_PHASE]):
            passes = list(micro) if index >= len(probe) else self.probe_passes(micro, split)
            timing = self.world.step(split, caps_w, step=self.step, micro_batches=passes)
            for rank, key in enumerate(self.keys):
                comm = timing.step_s - timing.compute_s[rank] - timing.data_wait_s[rank]
                self.hub.agent_step(key, parse_step({
                    "step": self.step, "step_time_s": timing.step_s, "samples": split[rank],
                    "micro_batch": passes[rank], "comm_s": comm, "data_wait_s": timing.data_wait_s[rank],
                    "mem_peak_bytes": job_model.memory_used_bytes(passes[rank]),
                    "gradient_bytes": self.world.gradient_bytes}))
            steps.append(timing.step_s)
            self.clock.now_s += timing.step_s
            self.step += 1
        self.hub.tick()
        return {"measured_step_s": statistics.median(steps[-MEDIAN_WINDOW:]), "probe_steps": len(probe)}

    def probe_passes(self, micro: Sequence[int], split: Sequence[int]) -> list[int]:
        """Each rank's micro-batch in a probe's step, as gpumix.agent.probe_schedule.probe_micro_batch lays it
        out (the peak at its micro-batch from the world's memory model). The earlier layouts of
        docs/planner.md's session 23 are their commits' (`3b420e9`, `b07e2a7`)."""
        return [probe_micro_batch(n, m, job_model.memory_used_bytes(m), self.rig.gpus[r].model.mem_gib * 1024**3)
                for r, (m, n) in enumerate(zip(micro, split, strict=True))]


def equal_split(rig: Rig, per_rank: int) -> tuple[list[int], list[int]]:
    counts = [per_rank] * len(rig.gpus)
    micro = []
    for r in range(len(rig.gpus)):  # the user's start: the largest micro-batch that fits and divides
        cap = micro_cap(rig, r)
        micro.append(next(per_rank // k for k in range(1, per_rank + 1) if per_rank % k == 0 and per_rank // k <= cap))
    return counts, micro


def bench_rig(rig: Rig, per_rank: int, budget_w: float | None) -> dict[str, Any]:
    world = World(rig)
    R = len(rig.gpus)
    total = per_rank * R
    stock: list[float | None] = [None] * R
    counts, micro = equal_split(rig, per_rank)
    equal_s = step_s(world, counts, stock, micro)
    oracle = oracle_split(world, total, stock)

    job = Job.start(rig)
    first = job.run(counts, micro, stock, probe_steps(counts, GRANULARITY) if PROBE else [])
    plans: list[dict[str, Any]] = []
    restarts = 0
    auto = AutoReplan(settle_steps=0)
    while True:
        # the hub's clock, each look CHECK_S after the last as the supervisor's (a phase may be shorter)
        look_s = job.clock.now_s + CHECK_S * len(plans)
        proposal = auto.propose(job.hub.snapshot(), "bench", 0, GRANULARITY, look_s)
        if proposal is None:  # the plan behind a "kept", read again for the record only
            _, plan = plan_from_snapshot(job.hub.snapshot(), "bench", granularity=GRANULARITY)
            outcome = "no restarts left" if auto.proposed >= auto.max_restarts else auto.last_outcome
            plans.append({"kept_current": plan.kept_current, "speedup": plan.speedup, "outcome": outcome})
            break
        ranks = sorted(proposal["ranks"], key=lambda r: r["rank"])
        counts, micro = [r["samples"] for r in ranks], [r["micro_batch"] for r in ranks]
        measured = job.run(counts, micro, stock)
        restarts += 1
        mean = world.mean_step(counts, stock, micro)
        # the step's two parts, the model's against the world's mean (what a prediction error is made of);
        # none where the proposal is a split measured before (no prediction: auto re-plan's step back)
        predicted = proposal.get("proposed") or {}
        parts = {"predicted_step_s": predicted["step_time_s"], "predicted_compute_s": predicted["compute_s"],
                 "predicted_comm_s": predicted["allreduce_s"]} if predicted else {"note": proposal.get("note")}
        plans.append({"counts": counts, **parts, "world_mean_compute_s": max(mean.compute_s),
                      "world_mean_comm_s": mean.comm_wait_s, "measured_step_s": measured["measured_step_s"],
                      "world_mean_step_s": mean.step_s,
                      **({"prediction_error": abs(predicted["step_time_s"] - measured["measured_step_s"])
                          / measured["measured_step_s"]} if predicted else {})})
    final_s = step_s(world, counts, stock, micro)
    gain_oracle = equal_s / oracle["step_s"] - 1
    share = (equal_s / final_s - 1) / gain_oracle if gain_oracle > 1e-9 else 1.0
    result: dict[str, Any] = {
        "rig": rig.name, "gpus": [g.model.key for g in rig.gpus], "slot_widths": [g.slot_width for g in rig.gpus],
        "global_batch": total, "granularity": GRANULARITY,
        "memory_bound": any(micro_cap(rig, r) < per_rank for r in range(R)),
        "equal_step_s": equal_s, "oracle": oracle, "oracle_gain": gain_oracle, "final_counts": counts, "final_step_s": final_s,
        "gain_share_of_oracle": share, "restarts": restarts, "plans": plans, "probe_steps": first["probe_steps"],
    }
    if budget_w is not None:
        result["power"] = bench_power(job, world, counts, micro, budget_w)
    return result


PROFILE_STEPS, PROFILE_SHARE = DEFAULT_STEPS, DEFAULT_STEP_SHARE  # --profile-steps, --profile-share


def profile_through_hub(job: Job, counts: list[int], micro: list[int]) -> int:
    """Item 4 as a user would run it: `gpumix power profile TIER` for each tier in the job, one after
    the other (the product's own steps: 3 x 10 % of each card's range below its cap, each held for a
    relaunch of STEPS_PER_PHASE steps), the caps restored after each; the hub files every step under
    its GPU's cap (gpumix.hub.cap_samples). Then the split runs again at stock caps. The caps are set
    through the hardware backend, as the hub's control does, without its audit line. Returns the steps run."""
    snapshot = job.hub.snapshot()
    stock = [g["power_cap_w"] for g in snapshot["gpus"]]
    steps_run = 0
    for tier in sorted({g["tier"] for g in snapshot["gpus"]}):
        gpus = [g for g in snapshot["gpus"] if g["tier"] == tier and counts[g["index"]] > 0]
        if not gpus:
            continue
        for caps in profile_steps(gpus, PROFILE_STEPS, PROFILE_SHARE):
            for index, watts in caps.items():
                job.hub.hardware.backend.set_power_limit_w(index, watts)
            job.hub.tick()
            job.run(counts, micro, [caps.get(i) for i in range(len(counts))])
            steps_run += STEPS_PER_PHASE
        for g in gpus:
            job.hub.hardware.backend.set_power_limit_w(g["index"], stock[g["index"]])
    job.hub.tick()
    job.run(counts, micro, [None] * len(counts))
    return steps_run


def bench_power(job: Job, world: World, counts: list[int], micro: list[int], budget_w: float) -> dict[str, Any]:
    gpus = gpu_power_from_snapshot(job.hub.snapshot())
    fit = fit_to_budget(gpus, budget_w)
    fitted = [next(p.new_w for p in fit.proposals if p.index == i) for i in range(len(counts))]
    profile_steps_run = profile_through_hub(job, counts, micro)
    learned = gpu_power_from_snapshot({**job.hub.snapshot(), "power_points": job.hub.power_points()})
    fit_learned = fit_to_budget(learned, budget_w)
    fitted_learned = [next(p.new_w for p in fit_learned.proposals if p.index == i) for i in range(len(counts))]
    best = oracle_caps(world, counts, micro, budget_w)
    stock = oracle_caps(world, counts, micro, budget_w, within_stock=True)
    fitted_s, best_s = step_s(world, counts, fitted, micro), step_s(world, counts, best, micro)
    return {"budget_w": budget_w, "fitted_caps_w": fitted, "oracle_caps_w": best, "oracle_within_stock_caps_w": stock,
            "share_of_oracle_within_stock": step_s(world, counts, stock, micro) / fitted_s,
            "learned_curve": {"source": f"gpumix power profile per tier through the hub ({PROFILE_STEPS} x"
                                        f" {PROFILE_SHARE:.0%} of the range)",
                              "profile_steps_run": profile_steps_run,
                              "curves": sorted({p.basis.curve or "?" for p in fit_learned.proposals}),
                              "fitted_caps_w": fitted_learned, "caps_sum_w": sum(fitted_learned),
                              "within_budget": sum(fitted_learned) <= budget_w + 1e-9,
                              "throughput_share_of_oracle": best_s / step_s(world, counts, fitted_learned, micro),
                              "share_of_oracle_within_stock": step_s(world, counts, stock, micro)
                              / step_s(world, counts, fitted_learned, micro)},
            "fitted_caps_sum_w": sum(fitted), "oracle_caps_sum_w": sum(best),
            "fitted_step_s": fitted_s, "oracle_step_s": best_s, "throughput_share_of_oracle": best_s / fitted_s,
            "predicted_kept": fit.throughput_kept,
            "world_kept": step_s(world, counts, [None] * len(counts), micro) / fitted_s,
            "within_budget": sum(fitted) <= budget_w + 1e-9,
            "bases": sorted({p.basis.source for p in fit.proposals})}


def generated_rig(rng: random.Random, number: int) -> tuple[Rig, int]:
    count = rng.randint(2, 10)
    lines = [f'name = "gen-{number:02d}"', f"seed = {number}", f"host_memory_gb_s = {rng.choice([20, 38, 60])}"]
    chipset_left = 3
    for _ in range(count):
        width = rng.choice([1, 4, 8, 16, 16])
        chipset = width <= 4 and chipset_left > 0 and rng.random() < 0.6
        chipset_left -= chipset
        lines += ["[[gpus]]", f'model = "{rng.choice(MODELS)}"', f"slot_width = {width}",
                  *(["behind_chipset = true"] if chipset else [])]
    per_rank = rng.choice([32, 64, 64, 96, 128])  # 96 and 128 per rank: micro-batches cap on small cards
    return parse_rig("\n".join(lines) + "\n", f"generated:{number}"), per_rank


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    shares = [r["gain_share_of_oracle"] for r in results]
    # where the oracle gains less than auto re-plan's threshold, a planner that keeps the equal split
    # acts as designed: the share is shown for those apart
    worth = [r["gain_share_of_oracle"] for r in results if r["oracle_gain"] >= POLICY.min_speedup - 1]
    errors = [p["prediction_error"] for r in results for p in r["plans"] if "prediction_error" in p]
    power = [r["power"]["throughput_share_of_oracle"] for r in results if "power" in r]
    power_stock = [r["power"]["share_of_oracle_within_stock"] for r in results if "power" in r]
    learned_shares = [r["power"]["learned_curve"]["throughput_share_of_oracle"] for r in results if "power" in r]
    learned_stock = [r["power"]["learned_curve"]["share_of_oracle_within_stock"] for r in results if "power" in r]
    return {
        "rigs": len(results),
        "gain_share_median": statistics.median(shares), "gain_share_worst": min(shares),
        "rigs_oracle_gain_at_least_5pct": len(worth),
        "gain_share_median_where_worth": statistics.median(worth) if worth else None,
        "gain_share_worst_where_worth": min(worth) if worth else None,
        "prediction_error_median": statistics.median(errors) if errors else None,
        "prediction_error_worst": max(errors) if errors else None,
        "restarts_max": max(r["restarts"] for r in results),
        "restarts_median": statistics.median(r["restarts"] for r in results),
        "exhaustive_checks": sum(1 for r in results if "exhaustive_agrees" in r["oracle"]),
        "exhaustive_all_agree": all(r["oracle"].get("exhaustive_agrees", True) for r in results),
        "power_share_median": statistics.median(power) if power else None,
        "power_share_worst": min(power) if power else None,
        "power_share_within_stock_median": statistics.median(power_stock) if power_stock else None,
        "power_share_within_stock_worst": min(power_stock) if power_stock else None,
        "power_always_within_budget": all(r["power"]["within_budget"] and r["power"]["learned_curve"]["within_budget"]
                                          for r in results if "power" in r),
        "power_learned_share_median": statistics.median(learned_shares) if learned_shares else None,
        "power_learned_share_worst": min(learned_shares) if learned_shares else None,
        "power_learned_within_stock_median": statistics.median(learned_stock) if learned_stock else None,
        "power_learned_within_stock_worst": min(learned_stock) if learned_stock else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/oracle_replan.json")
    parser.add_argument("--generated", type=int, default=GENERATED)
    parser.add_argument("--granularity", type=int, default=4)
    parser.add_argument("--seed", type=int, default=SEED, help="the generated rigs' (another: a held-out set)")
    parser.add_argument("--no-shipped", action="store_true", help="generated rigs only")
    parser.add_argument("--profile-steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--profile-share", type=float, default=DEFAULT_STEP_SHARE)
    parser.add_argument("--probe", action="store_true",
                        help="a stair probe (gpumix.agent.probe_schedule) in the first launch, before the first look")
    parser.add_argument("--world-pass-s", type=float, default=world_module.PASS_OVERHEAD_S,
                        help="the world's cost of a pass (the planner's prior stays): how it fares when they differ")
    args = parser.parse_args()
    globals()["PROFILE_STEPS"], globals()["PROFILE_SHARE"] = args.profile_steps, args.profile_share
    globals()["PROBE"] = args.probe
    world_module.PASS_OVERHEAD_S = args.world_pass_s
    globals()["GRANULARITY"] = args.granularity  # the split's unit everywhere in this run
    results = []
    for name in [] if args.no_shipped else BUILTIN_RIGS:
        rig = load_builtin_rig(name)
        budget = rig.power_budget_w or 0.85 * sum(g.model.tdp_w for g in rig.gpus)
        results.append(bench_rig(rig, 64, budget))
        print(name, f"{results[-1]['gain_share_of_oracle']:.3f}", file=sys.stderr)
    rng = random.Random(args.seed)
    for number in range(args.generated):
        rig, per_rank = generated_rig(rng, number)
        results.append(bench_rig(rig, per_rank, 0.85 * sum(g.model.tdp_w for g in rig.gpus)))
        print(rig.name, f"{results[-1]['gain_share_of_oracle']:.3f}", file=sys.stderr)
    data = {"seed": args.seed, "granularity": GRANULARITY, "command": " ".join(["python", *sys.argv]), "summary": summary(results), "rigs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(json.dumps(data["summary"], indent=1))


if __name__ == "__main__":
    main()
