"""Stairs one measured count cannot show, predicted in expectation (gpumix.plan.padding)."""

from __future__ import annotations

import math

import pytest

from gpumix.model import priors
from gpumix.plan.lattice import LATTICE_TOLERANCE
from gpumix.plan.padding import open_tiles, with_possible_stairs
from gpumix.plan.planner import PlanRequest, RankMeasure, plan, plan_to_json

HUGE_LINK = 1e15  # comm ~ 0: compute alone decides


@pytest.fixture(autouse=True)
def _no_pass_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """These examples are worked by hand for the tiles left open, with passes that cost nothing; the measured pass
    cost has its own tests (tests/test_plan_s14_pass_cost.py)."""
    monkeypatch.setattr(priors, "PASS_COST_PRIOR_S", 0.0)



def rank(index: int, tier: str, samples: int, compute_s: float,
         points: tuple[tuple[int, float], ...] = ()) -> RankMeasure:
    return RankMeasure(rank=index, samples_per_s=samples / compute_s, current_samples=samples,
                       link_bytes_per_s=HUGE_LINK, micro_batch=samples, tier=tier, compute_points=points)


def test_a_count_off_the_one_measured_is_predicted_over_the_tiles_left_open() -> None:
    # Seed 41 gen-10 at granularity 4: every rank at 64, the fast card moved to 88, which tiles of 16
    # run as 96 (the first plan 7.8 % slower than predicted). From one count, 88 costs 88 (plain, or
    # tiles of 8) or 96 (tiles of 16): the prediction takes the mean, 90.67 samples' worth.
    measures = [rank(0, "slow", 64, 0.160), rank(1, "fast", 64, 0.100)]
    result = plan(measures, PlanRequest(global_batch=192, gradient_bytes=1e8, granularity=4))
    fast = result.ranks[1]
    assert fast.samples not in (64, 80, 96, 112, 128)  # off every whole tile of 16: the case at hand
    plain_s = 0.100 * fast.samples / 64
    padded_s = 0.100 * math.ceil(fast.samples / 16) * 16 / 64
    tiles_of_8_s = 0.100 * math.ceil(fast.samples / 8) * 8 / 64
    expected_s = (plain_s + tiles_of_8_s + padded_s) / 3
    slow_s = 0.160 * result.ranks[0].samples / 64
    assert math.isclose(result.proposed.compute_s, max(expected_s, slow_s))
    assert expected_s > slow_s  # the fast card's possible stair sets the predicted step
    # the rank reported at the time the step is predicted by, and as what paces it
    assert math.isclose(fast.compute_s, expected_s) and "granularity" in fast.limited_by
    # the split running now is predicted as measured
    assert math.isclose(result.current.compute_s, 0.160)
    # and its basis says so
    compute = plan_to_json(result)["basis"]["compute"]
    assert "8, 16" in compute[1]["prior"]


def test_a_tile_one_rank_of_the_tier_ruled_out_is_out_for_the_tier() -> None:
    # Rank 1 ran 64 and 56 in proportion: tiles of 16 would have run 56 as 64, so none of its tier
    # (the same GPU model) computes in tiles of 16; rank 0, measured at 64 only, keeps tiles of 8 open.
    request = PlanRequest(global_batch=120, gradient_bytes=1e8, granularity=4)
    ruled_out = rank(1, "3090", 56, 0.140, points=((64, 0.160),))
    assert open_tiles(ruled_out.measured_points(), 4) == {8}
    read = with_possible_stairs([rank(0, "3090", 64, 0.160), ruled_out], request)
    assert read[0].possible_tiles == (8,)
    assert read[1].possible_tiles == ()  # measured at two counts: its own curve, as before
    assert math.isclose(read[0].expected_time_s(60), (0.160 * 60 / 64 + 0.160 * 64 / 64) / 2)


def test_nothing_changes_without_a_granularity_or_at_the_widest_tile() -> None:
    measures = [rank(0, "slow", 64, 0.160), rank(1, "fast", 64, 0.100)]
    for granularity in (1, 16):
        read = with_possible_stairs(measures, PlanRequest(global_batch=192, gradient_bytes=1e8,
                                                          granularity=granularity))
        assert all(m.possible_curves == () for m in read)


def test_a_point_with_no_time_does_not_count_as_a_second_count() -> None:
    # an earlier split's point with no time (0 s, which the request's checks let through) shows no stair: the
    # rank is still one measured count, and its prediction still takes the tiles left open
    request = PlanRequest(global_batch=192, gradient_bytes=1e8, granularity=4)
    read = with_possible_stairs([rank(0, "slow", 64, 0.160), rank(1, "fast", 64, 0.100, points=((48, 0.0),))], request)
    assert read[1].possible_tiles == (8, 16)


def test_a_coarser_split_predicted_faster_by_more_than_the_margin_is_taken() -> None:
    # The review's case (session 10): two ranks measured at 32 only, a batch of 64 at granularity 4. The
    # plain curve's best is [44, 20] (0.1178 s), but 20 may run as 24 or 32 (tiles of 8 or 16 are open):
    # predicted 0.1492 s, where [48, 16] (on whole tiles of 16, the measured lattice's level) is 0.1281 s.
    measures = [rank(0, "a", 32, 0.0854), rank(1, "b", 32, 0.1884)]
    request = PlanRequest(global_batch=64, gradient_bytes=1e8, granularity=4)
    result = plan(measures, request)
    assert [r.samples for r in result.ranks] == [48, 16]
    assert math.isclose(result.proposed.compute_s, 0.0854 * 48 / 32)
    read = with_possible_stairs(measures, request)
    assert math.isclose(max(read[0].expected_time_s(44), read[1].expected_time_s(20)), 0.1492, rel_tol=1e-3)
    # every split of the granularity is predicted no faster than the proposal
    for n in range(4, 64, 4):
        assert max(read[0].expected_time_s(n), read[1].expected_time_s(64 - n)) >= result.proposed.compute_s - 1e-12


def test_a_coarser_split_predicted_faster_by_less_than_the_margin_is_not_taken() -> None:
    # Two ranks measured at 64, a batch of 128: the line's [40, 88] is predicted 0.1201 s (88 may run as 96),
    # the tiles of 16's [32, 96] 0.1187 s, 1.25 % faster: within LATTICE_TOLERANCE, the line's split stays.
    measures = [rank(0, "a", 64, 0.1802), rank(1, "b", 64, 0.0791)]
    request = PlanRequest(global_batch=128, gradient_bytes=1e8, granularity=4)
    result = plan(measures, request)
    assert [r.samples for r in result.ranks] == [40, 88]
    read = with_possible_stairs(measures, request)
    coarser_s = max(read[0].expected_time_s(32), read[1].expected_time_s(96))
    assert result.proposed.compute_s > coarser_s > result.proposed.compute_s / (1 + LATTICE_TOLERANCE)


def test_a_finer_level_must_beat_the_coarser_split_taken_by_the_margin_too() -> None:
    # Three ranks measured at 64, a batch of 192. The line's [36, 88, 68] is predicted 0.0985 s; the tiles
    # of 16's [32, 96, 64] 0.0949 s (3.7 % faster: taken); the tiles of 8's [32, 88, 72] 0.0933 s is 5.2 %
    # faster than the line's but 1.7 % faster than the split taken: not taken.
    measures = [rank(0, "a", 64, 0.1525), rank(1, "b", 64, 0.0633), rank(2, "c", 64, 0.0800)]
    request = PlanRequest(global_batch=192, gradient_bytes=1e8, granularity=4)
    result = plan(measures, request)
    assert [r.samples for r in result.ranks] == [32, 96, 64]
    read = with_possible_stairs(measures, request)
    line_s, finer_s = (max(m.expected_time_s(n) for m, n in zip(read, counts, strict=True))
                       for counts in ([36, 88, 68], [32, 88, 72]))
    assert result.proposed.compute_s * (1 + LATTICE_TOLERANCE) < line_s
    assert finer_s < result.proposed.compute_s < finer_s * (1 + LATTICE_TOLERANCE)
