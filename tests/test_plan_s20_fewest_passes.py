"""A granularity is no tile (issue 16, session 20: gpumix/plan/memory.py factorize's `least_tile`).

At granularity 16 under a micro-batch cap of 84, 112 samples split into whole tiles of 16 as 7 x 16, or
into 2 x 56, which pads to 2 x 64 if the card computes in tiles of 16. Where no tile was learned, 16 is
only what the user asked counts to be multiples of: the card may compute in tiles of 1 to 16, and 2 x 56
pads on average to 57.6 a pass. Five passes fewer win then. Where the card's points showed tiles of 16,
the padding is known and 7 x 16 stays. The cards below are slow (0.86 samples a pass), so that
the pass cost does not decide it alone."""

from __future__ import annotations

import pytest

from gpumix.plan.memory import factorize
from gpumix.plan.planner import plan
from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS, PlanRequest, RankMeasure
from gpumix.plan.stairs import points_pass_cost, with_stairs

REQUEST = PlanRequest(global_batch=112, gradient_bytes=1e6, granularity=16, max_micro_batch=84)


def test_the_fewest_passes_win_where_the_tile_is_only_the_granularity() -> None:
    # at 2 samples a pass: 7 x 16 is 112 + 14 = 126; 2 x 56 in tiles of 16 is 128 + 4 = 132, in tiles of
    # 1, 2, 4, 8 or 16 on average 115.2 + 4 = 119.2
    assert factorize(112, 84, MAX_ACCUMULATION_STEPS, 16, 2.0) == (16, 7)  # the tile is the card's
    assert factorize(112, 84, MAX_ACCUMULATION_STEPS, 16, 2.0, least_tile=1) == (56, 2)
    assert factorize(112, 84, MAX_ACCUMULATION_STEPS, 16, 2.0, least_tile=16) == (16, 7)  # learned: no guess
    # tiles of 8 learned under a granularity of 16: 2 x 56 pads to 56 or 64, 124 against 126
    assert factorize(112, 84, MAX_ACCUMULATION_STEPS, 16, 2.0, least_tile=8) == (56, 2)
    # a tile learned as wide as the one handed out is the card's: session 14's 88 in learned tiles of 8 under
    # 84 stays 11 x 8 (88 + 5.5 against 2 x 48 + 1); averaged from tiles of 1 it would be 2 x 44 (90 + 1)
    assert factorize(88, 84, MAX_ACCUMULATION_STEPS, 8, 0.5, least_tile=8) == (8, 11)
    assert factorize(88, 84, MAX_ACCUMULATION_STEPS, 8, 0.5, least_tile=1) == (44, 2)
    assert factorize(96, 84, MAX_ACCUMULATION_STEPS, 16, 2.0, least_tile=1) == (48, 2)  # whole tiles already


def slow_card(points: tuple[tuple[int, float], ...], now: tuple[int, int, float]) -> RankMeasure:
    samples, micro, seconds = now
    return RankMeasure(rank=0, samples_per_s=samples / seconds, current_samples=samples, link_bytes_per_s=1e10,
                       micro_batch=micro, tier="A", compute_points=points,
                       compute_point_micro_batches=tuple(n for n, _ in points))


def test_a_card_with_no_tile_learned_gets_the_fewest_passes_and_its_curve_prices_them() -> None:
    card = slow_card((), (96, 48, 0.6))  # one point: no stair to learn a tile from
    read = with_stairs([card], REQUEST)[0]
    assert read.learned_tile_samples == 1
    result = plan([card], REQUEST)
    assert [(r.micro_batch, r.accumulation_steps) for r in result.ranks] == [(56, 2)]
    # the curve prices 112 as the plan hands it out: 2 passes of 56 against the point's 2 of 48
    pass_cost = points_pass_cost([(96, 48, 0.6)])
    assert read.compute_curve().time_s(112) == pytest.approx(0.6 * (112 + 2 * pass_cost) / (96 + 2 * pass_cost))


def test_a_card_whose_points_show_tiles_of_the_granularity_keeps_whole_tiles() -> None:
    # 64 in 0.4 s, 72 in 0.5 s (padded to 80), 80 in 0.5 s: tiles of 16, learned at granularity 16, where
    # the measure's tile_samples (wider than the granularity only) says nothing
    card = slow_card(((64, 0.4), (72, 0.5)), (80, 80, 0.5))
    read = with_stairs([card], REQUEST)[0]
    assert read.learned_tile_samples == 16 and read.tile_samples is None
    result = plan([card], REQUEST)
    assert [(r.micro_batch, r.accumulation_steps) for r in result.ranks] == [(16, 7)]
