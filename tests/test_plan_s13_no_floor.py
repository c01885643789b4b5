"""Session 13 (issue 16): a pair of measured points that no tile fits sets no floor on the curve.

A rank ran 96 samples in 0.230 s, then 80 in 0.240 s: more samples faster, by more than the medians'
noise (plan.stairs.STAIR_TOLERANCE), at every tile up to the widest (80 and 96 pad to the same work
from 32 up, and then 80 is 4 % slow). Kept as measured, the curve is flat at 0.240 s from 80 to 96,
and its line, extended below 80, priced every smaller count at 0.240 s too.
"""

from __future__ import annotations

import math

from gpumix.model.priors import PASS_COST_PRIOR_S
from gpumix.plan.planner import PlanRequest, RankMeasure, plan
from gpumix.plan.stairs import FIXED_SHARE_MAX, learned_tile, with_stairs

PASS = PASS_COST_PRIOR_S / (0.240 / 80)  # a pass's cost in samples of this rank (1.8), in each point's work


def noisy_rank() -> RankMeasure:
    return RankMeasure(rank=0, samples_per_s=80 / 0.240, current_samples=80, link_bytes_per_s=1e10,
                       micro_batch=80, tier="A", compute_points=((96, 0.230),), compute_point_micro_batches=(96,))


def test_below_a_pair_no_tile_fits_the_line_is_bounded_by_the_largest_fixed_share() -> None:
    rank = noisy_rank()
    assert learned_tile(rank.measured_points(), 4) == 4  # no tile fits: the granularity's, no say
    read = with_stairs([rank], PlanRequest(global_batch=80, gradient_bytes=1.0, granularity=4))[0]
    curve = read.compute_curve()
    assert FIXED_SHARE_MAX == 0.5
    # 64 samples: at most half of 0.240 s fixed, the rest proportional to the work (samples and the
    # pass's cost): 0.240 x (0.5 + 0.5 x 65.8/81.8) = 0.2165 s (the flat line said 0.240 s)
    assert math.isclose(curve.time_s(64), 0.240 * (0.5 + 0.5 * (64 + PASS) / (80 + PASS)))
    assert math.isclose(curve.time_s(8), 0.240 * (0.5 + 0.5 * (8 + PASS) / (80 + PASS)))
    assert math.isclose(curve.time_s(80), 0.240) and math.isclose(curve.time_s(96), 0.240)  # measured: as before
    assert read.tile_samples is None


def test_the_plan_moves_work_off_such_a_rank() -> None:
    """With a second rank at 0.002 s a sample (80 in 0.160 s), 160 samples at granularity 1: rank 0 at n
    below 80 takes 0.120 + 0.120 (n + 1.8) / 81.8 s, rank 1 0.002 (160 - n) s; equal at n = 56.9, so
    [57, 103] with rank 0 the slower, 0.2063 s (rank 1: 0.206 s). The floor said 0.240 s for any count
    on rank 0, the split running now's slowest compute: no split beat it."""
    other = RankMeasure(rank=1, samples_per_s=80 / 0.160, current_samples=80, link_bytes_per_s=1e10,
                        micro_batch=80, tier="B")
    found = plan([noisy_rank(), other], PlanRequest(global_batch=160, gradient_bytes=1.0, granularity=1))
    assert [r.samples for r in found.ranks] == [57, 103]
    rank0_s = 0.120 + 0.120 * (57 + PASS) / (80 + PASS)
    assert math.isclose(found.proposed.compute_s, rank0_s) and rank0_s > 0.002 * 103
    assert math.isclose(found.ranks[0].compute_s, rank0_s)
    assert math.isclose(found.current.compute_s, 0.240)
