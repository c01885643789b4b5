"""Split and caps chosen together (gpumix/power/joint.py): the search against brute force over every
split, the budget and ranges held, and refusals."""

from __future__ import annotations

import itertools

import pytest

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.step_model import PowerCurve
from gpumix.power.joint import JointRank, joint_plan


def rank(index: int, samples_per_s: float, points: tuple[tuple[float, float], ...] = ()) -> JointRank:
    return JointRank(index=index, compute=ComputeCurve.proportional(samples_per_s), cap_w=350.0, min_w=100.0,
                     max_w=350.0, power=PowerCurve.learned(350.0, [*points, (350.0, 1.0)]), upper_samples=10_000)


# A fast card whose speed falls steeply with its cap (learned), and two slower ones on the prior.
RANKS = [rank(0, 400.0, ((200.0, 1.6), (280.0, 1.15))), rank(1, 200.0), rank(2, 150.0)]


def best_by_brute_force(ranks: list[JointRank], batch: int, unit: int, budget_w: float) -> float:
    """Every split of whole units; for each, the least compute time whose least caps fit the budget (as
    reached at those caps, rounded up to the watt)."""
    best = float("inf")
    for cuts in itertools.combinations(range(1, batch // unit), len(ranks) - 1):
        units = [b - a for a, b in itertools.pairwise((0, *cuts, batch // unit))]
        low, high, reached = 0.0, 10.0, float("inf")
        for _ in range(50):
            middle = (low + high) / 2
            caps = [r.least_cap_w(u * unit, middle) for r, u in zip(ranks, units, strict=True)]
            if None not in caps and sum(caps) <= budget_w:  # type: ignore[arg-type]
                high = middle
                reached = max(r.time_s(u * unit, c) for r, u, c in zip(ranks, units, caps, strict=True))
            else:
                low = middle
        best = min(best, reached)
    return best


@pytest.mark.parametrize("budget_w", [400.0, 450.0, 600.0, 800.0, 1050.0])
def test_the_search_finds_the_best_split_and_caps(budget_w: float) -> None:
    found = joint_plan(RANKS, 96, 4, budget_w)
    assert found is not None
    assert sum(found.samples) == 96 and all(n % 4 == 0 and n >= 4 for n in found.samples)
    assert sum(found.caps_w) <= budget_w and all(100.0 <= c <= 350.0 for c in found.caps_w)
    assert found.compute_s == pytest.approx(best_by_brute_force(RANKS, 96, 4, budget_w), rel=2e-3)
    # the caps it names do compute the shares within the time it predicts
    assert max(r.time_s(n, c) for r, n, c in zip(RANKS, found.samples, found.caps_w, strict=True)) \
        == pytest.approx(found.compute_s)


def test_a_tight_budget_moves_work_off_the_card_that_slows_most_when_capped() -> None:
    roomy, tight = joint_plan(RANKS, 96, 4, 600.0), joint_plan(RANKS, 96, 4, 400.0)
    assert roomy is not None and tight is not None
    assert roomy.samples == (56, 24, 16) and tight.samples == (48, 28, 20)  # card 0 slows most when capped


@pytest.mark.parametrize("batch, unit, budget_w", [(97, 8, 1000.0), (96, 8, 250.0), (16, 8, 1000.0), (96, 0, 1000.0)])
def test_what_cannot_be_searched_is_none(batch: int, unit: int, budget_w: float) -> None:
    # not whole units; a budget below the minimum caps (300 W); fewer units than ranks; no unit
    assert joint_plan(RANKS, batch, unit, budget_w) is None
