"""The planner's inputs from the hub: operating points kept across restarts, memory per sample,
the communication the step waits for."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, POINT_MAX_AGE_S, parse_hello, parse_step
from gpumix.plan.inputs import measured_comm_s, measures, plan_from_snapshot
from tests.conftest import ManualClock

GIB = 1024**3


def run_process(hub: Hub, clock: ManualClock, pid: int, samples: int, compute_s: float, comm_s: float,
                gpu: int = 0, steps: int = MEDIAN_WINDOW + 2, ends: bool = True) -> None:
    """One process of rank 0 reporting `steps` steps at this split (micro-batch = samples), then exiting."""
    uuid = hub.snapshot()["gpus"][gpu]["uuid"]
    key = hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "train", "pid": pid,
                                      "gpu_uuid": uuid}))
    for step in range(steps):
        hub.agent_step(key, parse_step({
            "step": step, "step_time_s": compute_s + comm_s, "samples": samples, "micro_batch": samples,
            "comm_s": comm_s, "data_wait_s": 0.0, "mem_peak_bytes": 2 * GIB + samples * 10 * 2**20,
            "gradient_bytes": 1e8}))
        clock.advance(compute_s + comm_s)
    if ends:
        hub.agent_gone(key, pid)


def rank0(hub: Hub) -> dict[str, Any]:
    return next(r for r in hub.snapshot()["ranks"] if r["rank"] == 0)


def test_a_restarted_rank_keeps_what_it_measured_at_the_old_split(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05)
    assert rank0(demo_hub)["points"] == []
    run_process(demo_hub, clock, pid=101, samples=40, compute_s=0.20, comm_s=0.05)
    points = rank0(demo_hub)["points"]
    assert len(points) == 1 and points[0]["samples"] == 64
    assert math.isclose(points[0]["compute_s"], 0.30) and points[0]["micro_batch"] == 64
    run_process(demo_hub, clock, pid=102, samples=48, compute_s=0.24, comm_s=0.05, ends=False)
    assert [p["samples"] for p in rank0(demo_hub)["points"]] == [64, 40]
    # The inputs: both earlier splits as compute points, memory per sample from three micro-batches.
    (measure,) = measures(demo_hub.snapshot(), "train")
    assert measure.compute_points == ((64, 0.30), (40, 0.20))
    # with their micro-batches: a stair is told from a point's padded passes (plan.stairs)
    assert measure.compute_point_micro_batches == (64, 40)
    assert math.isclose(measure.mem_per_sample_bytes, 10 * 2**20)
    assert math.isclose(measure.compute_curve().time_s(56), 0.27)  # halfway from 48 to 64


def test_a_point_at_the_same_split_replaces_the_older_one(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05)
    run_process(demo_hub, clock, pid=101, samples=40, compute_s=0.20, comm_s=0.05)
    run_process(demo_hub, clock, pid=102, samples=64, compute_s=0.50, comm_s=0.05)  # the GPU got busier
    run_process(demo_hub, clock, pid=103, samples=32, compute_s=0.20, comm_s=0.05)
    assert [(p["samples"], p["compute_s"]) for p in rank0(demo_hub)["points"]] == [(40, 0.20), (64, 0.50)]


def test_old_points_and_warm_up_only_processes_are_not_used(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05)
    run_process(demo_hub, clock, pid=101, samples=40, compute_s=0.20, comm_s=0.05, steps=3)  # died in warm-up
    assert [p["samples"] for p in rank0(demo_hub)["points"]] == [64]
    clock.advance(POINT_MAX_AGE_S + 1)
    run_process(demo_hub, clock, pid=102, samples=32, compute_s=0.20, comm_s=0.05)
    assert rank0(demo_hub)["points"] == []


def test_a_rank_on_another_gpu_starts_afresh(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05, gpu=0)
    run_process(demo_hub, clock, pid=101, samples=40, compute_s=0.20, comm_s=0.05, gpu=7)
    assert rank0(demo_hub)["points"] == []


def test_the_step_beyond_the_slowest_compute_is_the_measured_communication(demo_hub: Hub, clock: ManualClock) -> None:
    for rank, compute_s in enumerate((0.30, 0.10)):
        uuid = demo_hub.snapshot()["gpus"][rank]["uuid"]
        key = demo_hub.agent_hello(parse_hello({"rank": rank, "world_size": 2, "job": "train", "pid": 10 + rank,
                                                "gpu_uuid": uuid}))
        for step in range(MEDIAN_WINDOW):  # the fast rank waits for the slow one inside the all-reduce
            demo_hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.35, "samples": 32,
                                                 "comm_s": 0.35 - compute_s, "data_wait_s": 0.0,
                                                 "gradient_bytes": 1e8}))
    snapshot = demo_hub.snapshot()
    assert math.isclose(measured_comm_s(snapshot, "train"), 0.05)
    _, plan = plan_from_snapshot(snapshot, "train", granularity=8)
    assert math.isclose(plan.current.step_time_s, 0.35)
    assert all(r.samples % 8 == 0 for r in plan.ranks)
    assert plan.proposed.step_time_s < 0.35


def straggling_job(hub: Hub, computes: tuple[float, ...] = (0.30, 0.10, 0.0)) -> dict[str, Any]:
    """Ranks with these compute times in a 0.35 s step (the others wait in the all-reduce)."""
    for rank, compute_s in enumerate(computes):
        uuid = hub.snapshot()["gpus"][rank]["uuid"]
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(computes), "job": "train",
                                           "pid": 10 + rank, "gpu_uuid": uuid}))
        for step in range(MEDIAN_WINDOW + 20):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.35, "samples": 32, "comm_s": 0.35 - compute_s,
                                            "data_wait_s": 0.0, "gradient_bytes": 1e8}))
    return hub.snapshot()


def test_a_rank_that_only_waits_is_fast_but_not_infinitely(demo_hub: Hub) -> None:
    found = {m.rank: m for m in measures(straggling_job(demo_hub), "train")}
    assert math.isclose(found[2].compute_samples_per_s, 100 * 32 / 0.35)  # 1 % of the step at least


def test_auto_replan_proposes_when_due_and_warmed_up(demo_hub: Hub) -> None:
    from gpumix.run.auto_replan import CHECK_S, AutoReplan

    snapshot = straggling_job(demo_hub)
    auto = AutoReplan(min_speedup=1.5, max_restarts=1, settle_steps=20)
    assert auto.propose(snapshot, "train", resume_step=25, granularity=1, now_s=0.0) is None  # warming up
    plan = auto.propose(snapshot, "train", resume_step=0, granularity=1, now_s=0.0)
    assert plan is not None and plan["plan_id"] == "auto-1" and plan["speedup"] >= 1.5
    assert plan["ranks"][0]["samples"] < 32 < plan["ranks"][2]["samples"]
    assert auto.propose(snapshot, "train", 0, 1, now_s=CHECK_S + 1) is None  # at most max_restarts
    picky = AutoReplan(min_speedup=100.0, settle_steps=20)
    assert picky.propose(snapshot, "train", 0, 1, now_s=0.0) is None  # nothing pays that much
    assert picky.last_outcome.startswith("kept:") and not picky.due(now_s=1.0)  # planned: next look in CHECK_S


def test_auto_replan_looks_again_soon_when_the_ranks_are_not_measured_yet(demo_hub: Hub) -> None:
    # A short run must not lose its only chance: a snapshot without samples per second costs no
    # planning, so the next look comes in NOT_READY_RETRY_S, not CHECK_S (a loaded CI box missed it).
    from gpumix.run.auto_replan import CHECK_S, NOT_READY_RETRY_S, AutoReplan

    snapshot = straggling_job(demo_hub)
    unmeasured = {**snapshot, "ranks": [{**r, "samples_per_s": None} if r["rank"] == 1 else r
                                        for r in snapshot["ranks"]]}
    auto = AutoReplan(min_speedup=1.5, max_restarts=1, settle_steps=20)
    assert auto.propose(unmeasured, "train", resume_step=0, granularity=1, now_s=0.0) is None
    assert "not measured yet" in auto.last_outcome
    assert NOT_READY_RETRY_S < CHECK_S and auto.due(now_s=NOT_READY_RETRY_S)
    plan = auto.propose(snapshot, "train", resume_step=0, granularity=1, now_s=NOT_READY_RETRY_S)
    assert plan is not None and plan["plan_id"] == "auto-1"


# -- absurd measurements and requests: one line, no hang (issue 10, item 10) ----------------------


def with_rank(snapshot: dict[str, Any], rank: int, **fields: Any) -> dict[str, Any]:
    """The snapshot with one rank's row changed as a hostile or broken agent could make it."""
    ranks = [{**r, **fields} if r["rank"] == rank else r for r in snapshot["ranks"]]
    return {**snapshot, "ranks": ranks}


@pytest.mark.parametrize("fields", [
    {"samples": 1e30}, {"samples": math.inf}, {"samples_per_s": math.nan}, {"compute_s": 1e308},
    {"samples_per_s": 1e-308}, {"mem_peak_bytes": -1.0}, {"gradient_bytes": math.inf},
])
def test_a_rank_reporting_absurd_numbers_makes_the_plan_refuse(demo_hub: Hub, fields: dict[str, Any]) -> None:
    snapshot = with_rank(straggling_job(demo_hub), 1, **fields)
    with pytest.raises(ValueError) as refused:  # PlanInputError or PlanError: both one line
        plan_from_snapshot(snapshot, "train")
    message = str(refused.value)
    assert "rank 1" in message and "not a plausible measurement" in message and "\n" not in message


@pytest.mark.parametrize(("arguments", "says"), [
    ({"global_batch": 0}, "global batch 0: must be 1 to"),
    ({"global_batch": 10**30}, "must be 1 to 10000000 samples per step"),
    ({"exclude": frozenset({99})}, "excluded ranks [99] are not in the job"),
    ({"gradient_bytes": math.inf}, "gradient size inf bytes"),
    ({"granularity": 1_000_000}, "granularity 1000000: must be 1 to the global batch (96)"),
])
def test_absurd_requests_from_the_command_line_are_refused(demo_hub: Hub, arguments: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        plan_from_snapshot(straggling_job(demo_hub), "train", **arguments)


def _two_tier_job(hub: Hub, clock: ManualClock) -> None:
    """Rank 0 on GPU 0 (a 3060): 32 samples in 0.20 s of compute; rank 1 on GPU 7 (a 4090): 32 in
    0.05 s, then it waits 0.15 s; the all-reduce's tail: 0.02 s. Step 0.22 s for 64 samples."""
    uuids = [hub.snapshot()["gpus"][i]["uuid"] for i in (0, 7)]
    keys = [hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "train", "pid": 300 + r,
                                         "gpu_uuid": uuids[r]})) for r in range(2)]
    for step in range(MEDIAN_WINDOW + 2):
        for compute_s, key in zip((0.20, 0.05), keys, strict=True):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.22, "samples": 32, "micro_batch": 32,
                                            "comm_s": 0.22 - compute_s, "data_wait_s": 0.0}))
        clock.advance(0.22)


def test_the_run_shows_its_share_of_the_gpus_isolated_sum(demo_hub: Hub, clock: ManualClock) -> None:
    from gpumix.tui.panels import run_line

    _two_tier_job(demo_hub, clock)
    snapshot = demo_hub.snapshot()
    eff = snapshot["run"]["efficiency"]
    bound = 32 / 0.20 + 32 / 0.05  # 160 + 640 samples/s, each GPU alone
    assert math.isclose(eff["bound_samples_per_s"], bound)
    assert math.isclose(eff["share"], 64 / 0.22 / bound)  # 291 of 800: 36 %
    assert math.isclose(eff["equal_split_share"], eff["share"])  # the job runs the equal split
    # the 4090 alone: 64 samples in 0.1 s, no all-reduce: 640 of 800
    assert eff["fast_tier"] == "RTX 4090 24G" and math.isclose(eff["fast_tier_only_share"], 640 / bound)
    assert "36 % of Σ GPUs (equal 36 %, fast tier 80 %)" in run_line(snapshot)


def test_no_efficiency_until_every_rank_reports_its_compute(demo_hub: Hub, clock: ManualClock) -> None:
    uuid = demo_hub.snapshot()["gpus"][0]["uuid"]
    key = demo_hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "train", "pid": 5, "gpu_uuid": uuid}))
    demo_hub.agent_step(key, parse_step({"step": 0, "step_time_s": 0.2}))  # no samples
    run = demo_hub.snapshot()["run"]
    assert run["efficiency"] is None
    from gpumix.tui.panels import run_line
    assert "Σ GPUs" not in run_line(demo_hub.snapshot())
