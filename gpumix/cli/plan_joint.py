"""`gpumix plan --json`'s `joint`: split and caps together, offered only on the model's own evidence.

The wiring between the planner (gpumix.plan) and the power search (gpumix.power.joint), which may not
import each other: the job's ranks and their measured splits, each card's power curve (learned where
the snapshot carries the hub's `power_points`, else the prior: then there is no offer), the machine's
total budget, and the plan's split with its caps fitted by the same model (split then fit) to beat.
Both steps add the wait as the proposal's step adds it (plan.prediction.step_wait_s, from the proposal's
communication model rebuilt from the snapshot and checked against the plan's own figure).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpumix.advice.probe_results import job_allreduce_floor
from gpumix.plan.inputs import PlanInputError, planner_inputs
from gpumix.plan.memory import effective_max_k, micro_batch_cap
from gpumix.plan.padding import ExpectedCurve, with_possible_stairs
from gpumix.plan.prediction import comm_model, hindsight_error, step_wait_s
from gpumix.plan.split_types import PlanRequest, RankMeasure
from gpumix.plan.stairs import with_stairs
from gpumix.power.joint import (
    MAX_DP_WORK,
    MAX_UNITS,
    JointOffer,
    JointRank,
    joint_offer,
    joint_plan,
)
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot, unread_cap


def joint_json(snapshot: dict[str, Any], job: str, plan: dict[str, Any], granularity: int,
               gradient_bytes: float | None = None) -> dict[str, Any]:
    """The joint proposal for this job against the plan's split with fitted caps: offered or why not.
    `gradient_bytes`: as the plan was given it (`--gradient-mb`), else the ranks' reports, as the plan."""
    budget_w = snapshot.get("power_budget_w")
    if isinstance(budget_w, bool) or not isinstance(budget_w, (int, float)) or not 0 < budget_w < 1e7:
        return JointOffer(False, "no power budget declared (gpumix power budget, or the rig's)").to_json()
    units = plan["global_batch"] // max(1, granularity)
    if plan["global_batch"] % max(1, granularity) or units > MAX_UNITS or len(plan["ranks"]) * units**2 > MAX_DP_WORK:
        return JointOffer(False, f"not searched: the batch is {plan['global_batch']} / {granularity} samples, at most"
                                 f" {MAX_UNITS} whole units are (use --granularity)").to_json()
    # the planner's own view of each rank: its stairs learned, the tiles one count leaves open (a split is
    # compared by the time the proposal's step is predicted by), its memory's micro-batch cap
    try:  # the ranks and request as the plan's own (plan_from_snapshot), so the wait is the proposal's
        found, request = planner_inputs(snapshot, job, plan["global_batch"], gradient_bytes, max(1, granularity),
                                        allreduce_floor=job_allreduce_floor(snapshot, job))
    except PlanInputError as error:
        return JointOffer(False, str(error)).to_json()
    read = with_possible_stairs(with_stairs(found, request), request)
    ranks_now = {m.gpu_uuid: m for m in read if m.gpu_uuid}
    planned = {r["gpu_uuid"]: r["samples"] for r in plan["ranks"] if r.get("samples")}
    unread = unread_cap(snapshot)
    if unread is not None:
        return JointOffer(False, unread).to_json()
    gpus = gpu_power_from_snapshot(snapshot)
    taking = [g for g in gpus if g.uuid in planned and g.uuid in ranks_now]
    if len(taking) != len(planned):
        return JointOffer(False, "a planned rank has no GPU with power readings").to_json()
    fixed_w = sum(g.cap_w for g in gpus if g.uuid not in planned)
    wait_s = _proposal_wait(read, request, [ranks_now[g.uuid] for g in taking])
    proposed = plan.get("proposed") or {}
    if not math.isclose(wait_s(proposed.get("compute_s", math.nan)), proposed.get("allreduce_s", math.nan),
                        rel_tol=1e-9, abs_tol=1e-12):  # the wait rebuilt is not the plan's (inputs it was not given)
        return JointOffer(False, "the proposal's wait could not be rebuilt from the snapshot: no offer").to_json()
    ranks = []
    for g in taking:
        ranks.append(JointRank(index=g.index, compute=ExpectedCurve.of(ranks_now[g.uuid]), cap_w=g.cap_w, min_w=g.min_w,
                               max_w=max(g.cap_w, g.default_w), power=g.power_curve(),
                               upper_samples=_most_samples(ranks_now[g.uuid], request)))
    # split then fit, by the same model: the plan's split held, the least slowest compute under the budget
    held = [JointRank(r.index, r.compute, r.cap_w, r.min_w, r.max_w, r.power, planned[g.uuid], planned[g.uuid])
            for r, g in zip(ranks, taking, strict=True)]
    serial = joint_plan(held, plan["global_batch"], granularity, float(budget_w), fixed_w)
    if serial is None:
        return JointOffer(False, "the plan's split has no caps under the budget to compare with").to_json()
    error = hindsight_error(list(ranks_now.values()))
    serial_step_s = serial.compute_s + wait_s(serial.compute_s)
    offer = joint_offer(ranks, plan["global_batch"], granularity, float(budget_w), serial_step_s, wait_s, error,
                        fixed_w)
    return {**offer.to_json(), "split_then_fit_step_s": serial_step_s, "budget_w": budget_w,
            "gpu_indices": [g.index for g in taking]}


def _proposal_wait(read: list[RankMeasure], request: PlanRequest,
                   taking: list[RankMeasure]) -> Callable[[float], float]:
    """The wait these ranks' step adds at a slowest compute, as the proposal's step is predicted
    (plan.planner.plan: its communication model over every rank read, the taking ranks' links)."""
    comm = comm_model(read, request)
    return lambda compute_s: step_wait_s(comm, taking, compute_s)


def _most_samples(measure: Any, request: PlanRequest) -> int:
    """The most samples a rank's memory allows in one step: its micro-batch cap times the accumulation
    steps (the planner's bound: without it the search handed a fast rank nearly the whole batch)."""
    cap = micro_batch_cap(measure, request)
    most = cap * effective_max_k(request) if cap else request.global_batch
    return max(1, min(request.global_batch, most))
