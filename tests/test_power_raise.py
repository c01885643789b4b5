"""The fit may raise a card that paces the job above its stock cap, up to its maximum, within the budget."""

from __future__ import annotations

import math

from gpumix.power.budget import ABOVE_STOCK_CURVE, GpuPower, fit_to_budget
from gpumix.power.supplies import PowerLayout, Supply, fit_to_layout

# A 3060 that paces the job and a 4090 that waits, each with a learned curve (two caps below stock measured).
SLOW_POINTS = ((153.0, 0.42), (136.0, 0.45))
FAST_POINTS = ((405.0, 0.205), (360.0, 0.215))


def job(slow_max_w: float = 200.0, learned: bool = True) -> list[GpuPower]:
    return [GpuPower(0, "GPU-0", "RTX 3060 12G", 170, 170, 100, slow_max_w, compute_s=0.40, comm_s=0.05,
                     power_points=SLOW_POINTS if learned else ()),
            GpuPower(1, "GPU-1", "RTX 4090 24G", 450, 450, 150, 600, compute_s=0.20, comm_s=0.05,
                     power_points=FAST_POINTS if learned else ())]


def caps_of(fit) -> dict[int, float]:
    return {p.index: p.new_w for p in fit.proposals}


def test_the_pacing_card_is_raised_to_its_maximum_with_watts_the_waiting_card_gives_up() -> None:
    fit = fit_to_budget(job(), 620)  # exactly the stock caps: the old fit changed nothing
    caps = caps_of(fit)
    assert caps[0] == 200.0 and caps[1] == 420.0 and sum(caps.values()) <= 620
    assert fit.step_after_s < fit.step_before_s and fit.throughput_kept > 1.0
    rows = {row["index"]: row for row in fit.to_json()["gpus"]}
    assert rows[0]["above_stock"] is True and rows[0]["above_stock_curve"] == ABOVE_STOCK_CURVE
    assert rows[0]["basis"]["curve"] == "learned" and rows[0]["reason"].startswith("raised 30 W")
    assert "above its 170 W stock cap (the gain there is assumed, not measured)" in rows[0]["reason"]  # the dialog says so
    assert rows[1]["above_stock"] is False and "above_stock_curve" not in rows[1]


def test_a_card_that_does_not_pace_is_not_left_above_stock_when_the_budget_is_loose() -> None:
    caps = caps_of(fit_to_budget(job(), 2000))
    assert caps == {0: 200.0, 1: 450.0}


def test_no_raise_where_the_maximum_is_unknown_or_the_curves_are_the_prior() -> None:
    assert caps_of(fit_to_budget(job(slow_max_w=math.nan), 620)) == {0: 170.0, 1: 450.0}
    assert caps_of(fit_to_budget(job(learned=False), 620)) == {0: 170.0, 1: 450.0}
    assert caps_of(fit_to_budget(job(), 620, raise_above_stock=False)) == {0: 170.0, 1: 450.0}


def test_supplies_and_circuits_are_fitted_without_raising() -> None:
    psu = Supply(name="psu", rating_w=1000, circuit=None, efficiency=0.9, board=True, other_w=0, gpus=(0, 1), slot_gpus=())
    layout = PowerLayout(supplies=(psu,), circuits=())
    fit = fit_to_layout(job(), layout, 620)
    assert all(p.new_w <= p.old_w for p in fit.proposals) and fit.caps_after_w <= 620
