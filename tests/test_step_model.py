"""The product's own step model: every prediction says what it stands on (measured points, how
many and how old, or which prior), in `gpumix plan --json`, `gpumix power fit --json` and the screens."""

from __future__ import annotations

import math

import pytest

from gpumix.hub import Hub
from gpumix.model.priors import power_factor_prior
from gpumix.model.step_model import Basis, PowerCurve, basis_text
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.planner import plan_to_json
from gpumix.power.budget import GpuPower, fit_to_budget
from gpumix.tui.plan_screen import plan_table
from gpumix.tui.power_screens import basis_lines
from tests.conftest import ManualClock
from tests.test_plan_inputs import run_process


def test_a_plan_says_its_compute_stands_on_measured_splits_and_their_ages(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05)
    run_process(demo_hub, clock, pid=101, samples=40, compute_s=0.20, comm_s=0.05, ends=False)
    clock.advance(100.0)
    job, result = plan_from_snapshot(demo_hub.snapshot(), "train")
    data = {**plan_to_json(result), "job": job}
    (compute,) = data["basis"]["compute"]
    assert compute["rank"] == 0 and compute["source"] == "measured+prior" and compute["points"] == 2
    assert compute["newest_age_s"] == 0.0 and compute["oldest_age_s"] > 100.0  # the older split, aged
    text = plan_table(data, demo_hub.snapshot())
    assert "compute, ranks 0: measured: 2 points" in text


def test_one_split_is_proportional_and_says_so(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05, ends=False)
    _, result = plan_from_snapshot(demo_hub.snapshot(), "train")
    (compute,) = plan_to_json(result)["basis"]["compute"]
    assert compute["points"] == 1 and "proportional" in compute["prior"]


def test_communication_basis_is_the_link_prior_until_measured() -> None:
    from gpumix.plan.planner import PlanRequest, RankMeasure, plan
    ranks = [RankMeasure(rank=i, samples_per_s=100.0 * (i + 1), current_samples=32, link_bytes_per_s=1e10)
             for i in range(2)]
    prior = plan(ranks, PlanRequest(global_batch=64, gradient_bytes=1e8))
    assert prior.comm_basis is not None and prior.comm_basis.source == "prior" and "link prior" in prior.comm_basis.prior
    measured = plan(ranks, PlanRequest(global_batch=64, gradient_bytes=1e8, measured_comm_s=0.02))
    assert measured.comm_basis is not None and measured.comm_basis.source == "measured+prior"
    assert "overlap prior" in measured.comm_basis.prior


def test_a_power_curve_learned_from_two_caps_replaces_the_prior_between_them() -> None:
    # a 3090 measured at 280 W and 350 W: 0.80 and 0.92 of peak (published fp32 figures), i.e.
    # 1/0.80 and 1/0.92 seconds per unit of work
    curve = PowerCurve.learned(350.0, [(280.0, 1 / 0.80), (350.0, 1 / 0.92)], [30.0, 0.0])
    kept = 1 / curve.time_ratio(350.0, 280.0)
    assert math.isclose(kept, 0.80 / 0.92)
    assert abs(kept - power_factor_prior(280, 350)) > 0.05  # the prior says 0.946: 8 % too kind
    assert curve.basis().source == "measured" and curve.basis().points == 2
    assert PowerCurve(350.0).basis().source == "prior"


def test_the_fit_says_which_cards_stand_on_the_prior() -> None:
    measured = GpuPower(index=0, uuid="GPU-0", tier="RTX 3090 24G", cap_w=350, default_w=350, min_w=100, max_w=400,
                        compute_s=0.2, comm_s=0.05, power_points=((280.0, 0.23),), power_point_ages_s=(60.0,))
    assumed = GpuPower(index=1, uuid="GPU-1", tier="RTX 3090 24G", cap_w=350, default_w=350, min_w=100, max_w=400,
                       compute_s=0.2, comm_s=0.05)
    data = fit_to_budget([measured, assumed], 600).to_json()
    bases = {gpu["index"]: gpu["basis"] for gpu in data["gpus"]}
    assert bases[0]["source"] == "measured" and bases[0]["points"] == 2 and bases[0]["oldest_age_s"] == 60.0
    assert bases[1]["source"] == "measured+prior" and "power prior" in bases[1]["prior"]
    lines = basis_lines(data["gpus"])
    assert any(line.startswith(" GPU 0: measured: 2 points") for line in lines)


@pytest.mark.parametrize("hostile", [None, "x", {"points": float("nan"), "prior": "[red]x[/]"}, {"points": 1e300}])
def test_a_basis_from_outside_is_text_never_a_crash(hostile: object) -> None:
    assert isinstance(basis_text(hostile), str)


def test_basis_text() -> None:
    assert Basis.measured([0.0, 300.0]).text() == "measured: 2 points, 0 s to 5 min old"
    assert Basis(prior="p").text() == "prior: p"


def test_below_the_lowest_measured_cap_the_learned_line_wins_where_it_is_slower() -> None:
    # 0.80 and 0.92 of peak at 280 and 350 W: at 200 W the lowest segment's line says 1.436 s per unit,
    # the prior's shape anchored at 280 W only 1.25 x (280/200)^0.25 = 1.360 s (too kind: speed falls
    # faster at low caps on every published sweep)
    curve = PowerCurve.learned(350.0, [(280.0, 1 / 0.80), (350.0, 1 / 0.92)])
    line_s = 1.25 + (1 / 0.92 - 1.25) * (200 - 280) / 70
    assert math.isclose(curve.time_ratio(350.0, 200.0), line_s * 0.92)
    assert math.isclose(curve.time_ratio(350.0, 300.0), (1.25 + (1 / 0.92 - 1.25) * 20 / 70) * 0.92)  # between: the line
    assert curve.basis().curve == "learned" and curve.basis().text().endswith("; learned power curve")
    assert PowerCurve.learned(350.0, [(350.0, 1.0)]).basis().curve == "prior anchored at one cap"
    assert basis_text(curve.basis().to_json()).endswith("; learned power curve")


def test_a_measured_all_reduce_floor_replaces_the_link_prior_and_says_so(demo_hub: Hub, clock: ManualClock) -> None:
    run_process(demo_hub, clock, pid=100, samples=64, compute_s=0.30, comm_s=0.05, ends=False)
    floor = (5e9, "measured all-reduce floor: 5.0 GB/s bus through host memory over these GPUs (gpumix probe, 3 h ago)")
    _, measured = plan_from_snapshot(demo_hub.snapshot(), "train", allreduce_floor=floor)
    assert measured.comm_basis is not None and measured.comm_basis.prior == floor[1]
    _, prior = plan_from_snapshot(demo_hub.snapshot(), "train")
    assert prior.comm_basis is not None and "link prior" in (prior.comm_basis.prior or "")
    for nonsense in (float("nan"), float("inf"), -1.0, 0.0):  # not a rate: the link prior stands
        _, fallback = plan_from_snapshot(demo_hub.snapshot(), "train", allreduce_floor=(nonsense, "x"))
        assert fallback.comm_basis is not None and "link prior" in (fallback.comm_basis.prior or "")
    # two ranks on the floor: the ring moves 2(R-1)/R x gradient bytes over it
    from gpumix.plan.planner import PlanRequest, RankMeasure, plan
    ranks = [RankMeasure(rank=i, samples_per_s=100.0, current_samples=32, link_bytes_per_s=5e9) for i in range(2)]
    result = plan(ranks, PlanRequest(global_batch=64, gradient_bytes=1e8, link_basis=floor[1]))
    assert result.proposed.allreduce_s == pytest.approx(1e8 / 5e9) and result.comm_basis.prior == floor[1]
