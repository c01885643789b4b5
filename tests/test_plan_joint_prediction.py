"""`gpumix plan --json`'s joint offer compares splits by the time the proposal's step is predicted by
(gpumix/cli/plan_joint.py): where a rank measured at one count has tiles left open (plan.padding), split
then fit is the proposal's predicted compute, not the plain curve's (session 10's review: they differed)."""

from __future__ import annotations

import math
from typing import Any

from gpumix.cli.plan_joint import joint_json
from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.planner import plan_to_json

GPUS = (0, 3)  # two different models of the demo rig


def steps(hub: Hub, key: Any, compute_s: float) -> None:
    for step in range(MEDIAN_WINDOW):
        hub.agent_step(key, parse_step({"step": step, "step_time_s": compute_s + 0.05, "samples": 64,
                                        "micro_batch": 64, "comm_s": 0.05, "data_wait_s": 0.0}))


def test_split_then_fit_is_the_proposal_predicted_compute_where_tiles_are_open(demo_hardware: Any) -> None:
    hub = Hub(demo_hardware)
    hub.tick()
    uuids = [g["uuid"] for g in hub.snapshot()["gpus"]]
    keys = [hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "train", "pid": 100 + r,
                                         "gpu_uuid": uuids[gpu]})) for r, gpu in enumerate(GPUS)]
    steps(hub, keys[0], 0.17)  # each measured at 64 only: tiles of 8 and 16 open at granularity 4
    steps(hub, keys[1], 0.22)
    hub.tick()
    snapshot = {**hub.snapshot(), "power_budget_w": 100_000.0}  # no cap binds: split then fit is the split
    job, plan = plan_from_snapshot(snapshot, "train", None, 100e6, 4, frozenset())
    data = {**plan_to_json(plan), "job": job}
    assert any("not yet ruled out" in (b["prior"] or "") for b in data["basis"]["compute"])
    joint = joint_json(snapshot, job, data, 4, gradient_bytes=100e6)  # as the plan was given it
    # the plain curve's slowest compute of this split is faster than the prediction's: the case at hand
    plain_s = max(r["samples"] * t / 64 for r, t in zip(data["ranks"], (0.17, 0.22), strict=True))
    assert plan.proposed.compute_s > plain_s * 1.01
    # the wait added as the proposal adds it (session 12: both steps, tests/test_plan_s12_joint_wait.py)
    assert math.isclose(joint["split_then_fit_step_s"] - plan.proposed.allreduce_s, plan.proposed.compute_s,
                        rel_tol=1e-6)
