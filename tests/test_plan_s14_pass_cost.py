"""A pass's own cost, measured (issue 16, session 14).

On an H100 training ResNet-50 in eager PyTorch each pass of forward and backward cost 5.4 ms (fp32)
or 5.0 ms (bf16) beyond its samples (benchmarks/pass_cost_probe.py, fitted by pass_cost_fit.py). The
planner had weighed a pass at 0 to 1 sample and the simulated world at nothing. Now the prior is the
measured time, in samples of each rank's own compute, and it is in the curves' work: a count in more
passes pays for them, a tile shows through points in different passes, and a micro-batch is chosen by
its padded work plus its passes. Numbers worked by hand below.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpumix.model.priors import PASS_COST_PRIOR_S, pass_cost_samples
from gpumix.plan.memory import factorize
from gpumix.plan.planner import PlanRequest, RankMeasure, plan
from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS
from gpumix.plan.stairs import (
    PASS_SHARE_MAX,
    learned_tile,
    points_pass_cost,
    tiled_curve,
    with_stairs,
)

FIT = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "pass_cost_fit_h100_s14_2026-12-06.json"


def test_the_prior_is_the_measured_pass_in_each_rank_s_samples() -> None:
    fitted = json.loads(FIT.read_text())["modes"]
    assert PASS_COST_PRIOR_S == max(mode["pass_overhead_s"] for mode in fitted.values())  # fp32's 5.4 ms
    assert math.isclose(pass_cost_samples(0.0025), 2.16)  # a 3090 at 400 samples/s
    assert pass_cost_samples(0.0) == 0.0
    # at most a quarter of a measured pass: an H200 ran 512 samples of an MLP in one 13.75 ms pass,
    # where 5.4 ms would be 201 samples
    assert PASS_SHARE_MAX == 0.25 and points_pass_cost([(512, 512, 0.01375)]) == 128


def test_a_tile_shows_through_points_in_different_passes() -> None:
    """Seed 71 gen-05 (new world, session 14): a 4090 ran 128 in one pass in 0.198 s and 168 as 3 x 56 in
    0.3068 s, 1.549x. In tiles of 16, 168 is 192 samples of work, 1.5x, and 3 % over it is 1.545x: no
    tile fitted, the tier learned none and the re-plan put 168 on its other 4090s. With the passes'
    cost in the work (2.96 samples each), 168 is 200.9 against 131.0, 1.534x (1.58x with the 3 %), and
    in tiles of 8 it is 176.9, 1.35x (1.39x): the tile is 16."""
    points = [(128, 128, 0.198), (168, 56, 0.3068)]
    assert math.isclose(points_pass_cost(points), PASS_COST_PRIOR_S / (0.3068 / 168))
    assert learned_tile(points, 4) == 16


def test_a_count_in_more_passes_pays_for_them() -> None:
    # One point, 96 as 2 x 48 in 0.244 s (a 5070 Ti under a cap of 60): 2.12 samples a pass. 120 runs as
    # 3 x 40 (120 + 3 passes against 2 x 60's 124 on average over tiles of 4 and 8, + 2): 126.4 samples
    # of work against the point's 100.2, so 0.3076 s where proportional says 0.305 s.
    pass_cost = PASS_COST_PRIOR_S / (0.244 / 96)
    curve = tiled_curve([(96, 48, 0.244)], 4, 60, MAX_ACCUMULATION_STEPS)
    assert math.isclose(curve.time_s(96), 0.244)
    assert math.isclose(curve.time_s(120), 0.244 * (120 + 3 * pass_cost) / (96 + 2 * pass_cost))
    # a rank whose points show no stair gets that curve too (before, only a rank with a learned tile)
    rank = RankMeasure(rank=0, samples_per_s=96 / 0.244, current_samples=96, link_bytes_per_s=1e10,
                       micro_batch=48, tier="A")
    read = with_stairs([rank], PlanRequest(global_batch=96, gradient_bytes=1.0, granularity=4,
                                           max_micro_batch=60))[0]
    assert read.tile_samples is None
    assert math.isclose(read.compute_curve().time_s(120), curve.time_s(120))


def test_a_micro_batch_weighs_its_passes_and_the_tiles_it_may_pad_to() -> None:
    # Seed 73 gen-08: 80 on a 5070 Ti under a cap of 60 at granularity 4. 80 = 16 x 5 is aligned to 16,
    # a tile only guessed: 2 x 40 pads to 80, 80 or 96 (tiles of 4, 8, 16: 85.3 on average) + 2 passes,
    # 5 x 16 to 80 + 5 passes. At 2.1 samples a pass, 89.5 against 90.5: 2 x 40 (the world's waves of 8
    # run it in 10 waves and 2 passes; 5 x 16 took 0.217 s where 80 in one pass took 0.197 s).
    assert factorize(80, 60, MAX_ACCUMULATION_STEPS, 4, 2.1) == (40, 2)
    # Seed 71 gen-19: 120 on a 5070 Ti under 84: 2 x 60 (60 or 64: 124 + 2 passes) against 3 x 40 (120
    # + 3): 128.2 against 126.3 at 2.1, so 3 x 40, the oracle's.
    assert factorize(120, 84, MAX_ACCUMULATION_STEPS, 4, 2.1) == (40, 3)
    # a learned tile is no guess: 88 in tiles of 8 under 84, 2 x 44 is 96 + 2 passes, 11 x 8 is 88 + 11
    assert factorize(88, 84, MAX_ACCUMULATION_STEPS, 8, 2.1) == (44, 2)  # 100.2 against 111.1
    assert factorize(88, 84, MAX_ACCUMULATION_STEPS, 8, 0.5) == (8, 11)  # 97 against 93.5


def test_a_plan_that_drops_passes_stays_above_its_bound() -> None:
    """Three ranks measured in 8 passes of 8 and planned in one: the passes saved make the plan faster
    than the line through its point, and the bound (`ideal`) reads each curve at the least work a count
    can be, so it stays below the plan."""
    ranks = [RankMeasure(rank=i, samples_per_s=speed, current_samples=64, link_bytes_per_s=1e10, micro_batch=8)
             for i, speed in enumerate((400.0, 400.0, 800.0))]
    result = plan(ranks, PlanRequest(global_batch=192, gradient_bytes=1e6, max_micro_batch=128))
    assert all(r.accumulation_steps == 1 for r in result.ranks)
    assert result.ideal.compute_s <= result.proposed.compute_s <= result.current.compute_s
