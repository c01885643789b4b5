"""`gpumix plan --json`'s joint offer predicts its steps as the proposal's step is predicted
(gpumix/cli/plan_joint.py): each rank's curve scaled by its power curve at its cap, plus the wait the
proposal adds (plan.prediction.step_wait_s: the bucket pipeline at that compute), not the wait measured
at the split running now (docs/planner.md, session 12)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from gpumix.cli.main import build_parser
from gpumix.cli.plan import run_plan_command
from gpumix.hub import Hub
from gpumix.hub.ranks import MEDIAN_WINDOW, parse_hello, parse_step
from gpumix.model import priors
from gpumix.model.step_model import BUCKET_BYTES_PRIOR

GPUS = (0, 3)  # the demo rig's first 3060 (cap 170 W) and first 3090 (cap 350 W)
COMPUTE_S = (0.17, 0.22)  # each at 64 samples, at the cap in force
STEP_S = 0.30  # both ranks' step: the slowest compute (0.22 s) and a wait of 0.08 s
GRADIENT_BYTES = 2 * BUCKET_BYTES_PRIOR  # two buckets: the first ends at half the gradient
# Each card measured at one cap below stock as well (`power_points`): the 3060 at 120 W 5 % slower, the
# 3090 at 200 W 60 % slower; between two caps the seconds are interpolated on a line.
POWER_POINTS = ((120.0, 0.17 * 1.05), (200.0, 0.22 * 1.6))


@pytest.fixture(autouse=True)
def _no_pass_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """These examples are worked by hand for the joint offer's wait, with passes that cost nothing; the
    measured pass cost has its own tests (tests/test_plan_s14_pass_cost.py)."""
    monkeypatch.setattr(priors, "PASS_COST_PRIOR_S", 0.0)



def first_bucket_allreduce_s() -> float:
    """The all-reduce the measured wait reads as (by hand): at a slowest compute of 0.22 s the backward
    (2/3 of it) runs 0.1467 s, and the first bucket is ready halfway; the first bucket's reading is
    0.08 + 0.1467 x 0.5 = 0.1533 s, the last bucket's 0.08 / 0.5 = 0.16 s: the least is the first's,
    and that pipeline waits exactly 0.08 s at 0.22 s (nothing left unexplained)."""
    return 0.08 + (2 / 3) * 0.22 * 0.5


def wait_by_hand_s(slowest_compute_s: float) -> float:
    """The first bucket's wait (all of it, less the backward left after it) or the last bucket's
    (its own half of the all-reduce), whichever is longer."""
    allreduce_s = first_bucket_allreduce_s()
    return max(allreduce_s - (2 / 3) * slowest_compute_s * 0.5, allreduce_s * 0.5)


def snapshot(demo_hardware: Any, room_w: float) -> dict[str, Any]:
    """Two ranks of job "train" on GPUS, the budget the other cards' caps plus `room_w`."""
    hub = Hub(demo_hardware)
    hub.tick()
    uuids = [g["uuid"] for g in hub.snapshot()["gpus"]]
    for r, (gpu, compute_s) in enumerate(zip(GPUS, COMPUTE_S, strict=True)):
        key = hub.agent_hello(parse_hello({"rank": r, "world_size": 2, "job": "train", "pid": 100 + r,
                                           "gpu_uuid": uuids[gpu]}))
        for step in range(MEDIAN_WINDOW):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": STEP_S, "samples": 64, "micro_batch": 64,
                                            "comm_s": STEP_S - compute_s, "data_wait_s": 0.0,
                                            "gradient_bytes": GRADIENT_BYTES}))
    hub.tick()
    found = hub.snapshot()
    fixed_w = sum(g["power_cap_w"] for g in found["gpus"] if g["uuid"] not in {uuids[i] for i in GPUS})
    points = {uuids[gpu]: [{"samples": 64, "cap_w": cap_w, "compute_s": compute_s, "age_s": 5.0}]
              for gpu, (cap_w, compute_s) in zip(GPUS, POWER_POINTS, strict=True)}
    return {**found, "power_budget_w": fixed_w + room_w, "power_points": points}


class Source:
    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def snapshot(self) -> dict[str, Any]:
        return self.snap

    def control(self, message: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("nothing is applied here")


def plan_json(snap: dict[str, Any], *flags: str) -> dict[str, Any]:
    """`gpumix plan --json` against this snapshot."""
    args = build_parser().parse_args(["plan", "--json", "--granularity", "16", "--global-batch", "256", *flags])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_plan_command(args, Source(snap)) == 0
    return json.loads(out.getvalue())


def test_split_then_fit_at_the_caps_in_force_is_the_proposal_s_predicted_step(demo_hardware: Any) -> None:
    data = plan_json(snapshot(demo_hardware, room_w=100_000.0))  # no cap binds: the caps in force stay
    joint, proposed = data["joint"], data["proposed"]
    assert [r["samples"] for r in data["ranks"]] == [144, 112]
    # the proposal by hand: 144 on the 3060 (0.17 x 144 / 64 = 0.3825 s), 112 on the 3090 (0.385 s, the
    # slowest), the wait at 0.385 s the last bucket's: 0.1533 / 2 = 0.0767 s (the 0.08 s measured at 0.22 s
    # hid less: a longer compute hides more of the first bucket)
    assert math.isclose(proposed["compute_s"], 0.22 * 112 / 64)
    assert math.isclose(proposed["allreduce_s"], wait_by_hand_s(0.385))
    assert math.isclose(wait_by_hand_s(0.385), first_bucket_allreduce_s() / 2)
    # split then fit, the plan's split at the caps in force, is predicted as the proposal's step
    assert math.isclose(joint["split_then_fit_step_s"], proposed["step_time_s"], rel_tol=1e-9)


def test_the_offer_s_step_at_caps_below_stock_is_its_split_s_compute_at_those_caps_plus_the_wait(
        demo_hardware: Any) -> None:
    joint = plan_json(snapshot(demo_hardware, room_w=360.0))["joint"]  # stock caps are 170 + 350 = 520 W
    assert joint["offered"] is True
    # Work moves to the 3060, whose speed falls little with its cap; the 3090 goes to its measured 200 W.
    assert joint["samples"] == [176, 80] and joint["caps_w"] == [160, 200]
    # By hand: the 3060 at 160 W, between 120 W (0.1785 s) and 170 W (0.17 s): 0.1785 - 0.0085 x 40 / 50
    # = 0.1717 s, 1.01 x its time at 170 W; 176 samples: 0.17 x 176 / 64 x 1.01 = 0.472175 s. The 3090 at
    # 200 W, 1.6 x: 0.22 x 80 / 64 x 1.6 = 0.44 s. The slowest 0.472175 s; the wait there is the last
    # bucket's, 0.0767 s (not the 0.08 s measured at 0.22 s).
    compute_s = max(0.17 * 176 / 64 * 1.01, 0.22 * 80 / 64 * 1.6)
    assert math.isclose(compute_s, 0.472175)
    assert math.isclose(wait_by_hand_s(compute_s), 0.15333333333333332 / 2)
    assert math.isclose(joint["predicted_step_s"], compute_s + wait_by_hand_s(compute_s), rel_tol=1e-9)
    assert math.isclose(joint["predicted_gain"], joint["split_then_fit_step_s"] / joint["predicted_step_s"] - 1)


def test_a_gradient_size_given_to_the_plan_never_leaves_the_offer_on_another_wait(demo_hardware: Any) -> None:
    # --gradient-mb 200 where the ranks report 52 MB: the proposal's wait is the pipeline of 200 MB, and the
    # joint offer predicts split then fit with that same wait (gpumix/cli/plan.py hands it the size).
    data = plan_json(snapshot(demo_hardware, room_w=100_000.0), "--gradient-mb", "200")
    joint = data["joint"]
    assert joint["split_then_fit_step_s"] is not None, joint["why"]
    assert math.isclose(joint["split_then_fit_step_s"], data["proposed"]["step_time_s"], rel_tol=1e-9)


def test_the_offer_s_wait_is_taken_at_its_own_compute_where_the_wait_still_moves(demo_hardware: Any) -> None:
    # A batch of 96: the offer's slowest compute falls under 0.23 s, where a shorter compute hides less of
    # the first bucket, so the wait at the offer's compute differs from the wait at split then fit's.
    data = plan_json(snapshot(demo_hardware, room_w=360.0), "--global-batch", "96")
    joint = data["joint"]
    assert joint["samples"] == [64, 32] and joint["caps_w"] == [153, 207]
    # By hand: the 3060 at 153 W, between 120 W (0.1785 s) and 170 W (0.17 s), 64 samples; the 3090 at
    # 207 W, between 200 W (0.352 s) and 350 W (0.22 s), 32 samples.
    compute_s = max(0.1785 - 0.0085 * 33 / 50, (0.352 - 0.132 * 7 / 150) * 32 / 64)
    assert math.isclose(compute_s, 0.17292, rel_tol=1e-6) and compute_s < 0.23
    assert wait_by_hand_s(compute_s) > wait_by_hand_s(0.23)  # the wait still moves here
    assert math.isclose(joint["predicted_step_s"], compute_s + wait_by_hand_s(compute_s), rel_tol=1e-9)


def test_no_offer_while_a_gpu_s_cap_does_not_read(demo_hardware: Any) -> None:
    # a card outside the job whose cap did not read would be left out of the budget's sum (0 W)
    snap = snapshot(demo_hardware, room_w=360.0)
    snap["gpus"][5]["power_cap_w"] = None
    joint = plan_json(snap)["joint"]
    assert joint["offered"] is False and joint["why"].startswith("GPU 5's power cap could not be read")
    assert joint["samples"] is None
