"""The planner reads the ranks' measured compute spread (the hub's compute_spread_s, session 12): the
step's compute is the median of the slowest of the ranks' computes, each normally spread by its IQR /
1.349, with what the ranks slowest now already hold taken out; with no spread reported, the max of the
medians as before (plan.spread, docs/planner.md)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import pytest

from gpumix.plan.inputs import PlanInputError, measures
from gpumix.plan.planner import PlanRequest, RankMeasure, plan
from gpumix.plan.spread import IQR_PER_SD, StepSpread, slowest_median_s

SD = 0.02  # each rank's compute deviation, as a share of its compute


def rank(r: int, compute_s: float, spread: bool, samples: int = 64) -> RankMeasure:
    """A rank measured at `samples` in `compute_s` (compute only), its IQR that of a 2 % deviation."""
    return RankMeasure(rank=r, samples_per_s=samples / compute_s, current_samples=samples, link_bytes_per_s=1e10,
                       compute_spread_s=IQR_PER_SD * SD * compute_s if spread else None)


def request(batch: int = 128) -> PlanRequest:
    return PlanRequest(global_batch=batch, gradient_bytes=1e6, measured_comm_s=0.0)


def test_the_median_of_the_slowest_of_two_equal_ranks_by_hand() -> None:
    # P(both done by x) = Phi(z)^2 = 1/2: z = Phi^-1(sqrt(1/2)) = 0.5449 deviations past the median
    z = NormalDist().inv_cdf(math.sqrt(0.5))
    assert math.isclose(slowest_median_s([1.0, 1.0], [SD, SD]), 1 + SD * z, rel_tol=1e-9)
    assert math.isclose(slowest_median_s([1.0, 1.0], [SD, SD]), 1.010899, rel_tol=1e-6)
    # a point (no spread) and a rank far below the slowest leave the max of the medians
    assert slowest_median_s([1.0, 1.0], [0.0, 0.0]) == 1.0
    assert slowest_median_s([1.0, 0.5], [SD, SD]) == 1.0


def test_no_spread_reported_predicts_the_max_of_the_medians() -> None:
    found = [rank(0, 0.30, spread=False), rank(1, 0.20, spread=False)]
    result = plan(found, request())
    counts = [r.samples for r in result.ranks]
    assert result.proposed.compute_s == max(m.expected_time_s(n) for m, n in zip(found, counts, strict=True))
    assert result.current.compute_s == 0.30


def test_a_balanced_proposal_waits_for_the_slowest_of_its_ranks() -> None:
    # rank 0 alone paces the split running now (0.30 s against 0.20 s): its measure holds no one else's
    found = [rank(0, 0.30, spread=True), rank(1, 0.20, spread=True)]
    result = plan(found, request())
    assert math.isclose(result.current.compute_s, 0.30, rel_tol=1e-9)
    t0, t1 = (m.expected_time_s(r.samples) for m, r in zip(found, result.ranks, strict=True))
    x = result.proposed.compute_s
    both_done = NormalDist(t0, SD * t0).cdf(x) * NormalDist(t1, SD * t1).cdf(x)
    assert math.isclose(both_done, 0.5, rel_tol=1e-6)
    assert x > max(t0, t1) * 1.005  # the two finish close together: later than either's median
    plain = plan([rank(0, 0.30, spread=False), rank(1, 0.20, spread=False)], request())
    assert [r.samples for r in result.ranks] == [r.samples for r in plain.ranks]  # the search is as before
    assert result.speedup < plain.speedup


def test_ranks_slowest_together_now_are_predicted_as_measured() -> None:
    # two ranks both measured at 0.20 s: each measure is already the median of the slowest of them
    found = [rank(0, 0.20, spread=True), rank(1, 0.20, spread=True)]
    spread = StepSpread.at_current(found)
    assert spread.tied == frozenset({0, 1})
    assert math.isclose(spread.factor, 1 / 1.010899, rel_tol=1e-5)
    result = plan(found, request())
    assert math.isclose(result.current.compute_s, 0.20, rel_tol=1e-9)


def snapshot(spread: Any) -> dict[str, Any]:
    row = {"rank": 0, "job": "train", "connected": True, "samples": 64, "samples_per_s": 200.0, "step_time_s": 0.32,
           "compute_s": 0.30, "gpu_uuid": None}
    if spread != "absent":
        row["compute_spread_s"] = spread
    return {"gpus": [], "ranks": [row]}


def test_the_inputs_read_the_spread_and_refuse_an_implausible_one() -> None:
    assert measures(snapshot(0.006), "train")[0].compute_spread_s == 0.006
    assert measures(snapshot(None), "train")[0].compute_spread_s is None
    assert measures(snapshot("absent"), "train")[0].compute_spread_s is None  # a hub before session 12
    with pytest.raises(PlanInputError, match="compute_spread_s"):
        measures(snapshot(-0.5), "train")
