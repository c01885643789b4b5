"""A pass cost no one measured, weighed at both ends of its range (issue 16, session 13).

Where the tile is told or learned, factorize takes the split whose work is least above the best at
p = 0 and at p = PASS_COST_PRIOR_SAMPLES (1 sample a pass); where the tile is only the count's own
alignment, the prior alone decides, as before. Numbers worked by hand below.
"""

from __future__ import annotations

from gpumix.model.priors import PASS_COST_PRIOR_SAMPLES
from gpumix.plan.memory import factorize
from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS
from gpumix.plan.stairs import tiled_curve

CAP_5070TI = 84  # seed 59 gen-13's 5070 Ti: 88 needs two passes at least


def test_a_learned_tile_takes_the_least_regret_an_assumed_one_the_prior() -> None:
    assert PASS_COST_PRIOR_SAMPLES == 1.0
    # 88 in tiles of 8: 2 x 44 pads to 2 x 48 = 96 (98 at p = 1); 11 x 8 is 88 (99 at p = 1).
    # 2 x 44 is 96 / 88 = 9.1 % above the best at p = 0; 11 x 8 is 99 / 98 = 1.0 % above it at p = 1.
    assert factorize(88, CAP_5070TI, MAX_ACCUMULATION_STEPS, 8) == (8, 11)
    # 104: 2 x 52 pads to 112 (114), 13 x 8 is 104 (117): 7.7 % against 2.6 %.
    assert factorize(104, CAP_5070TI, MAX_ACCUMULATION_STEPS, 8) == (8, 13)
    # 152 under 133: 2 x 76 pads to 160 (162), 19 x 8 is 152 (171): 5.3 % against 5.6 %: 2 x 76 stays.
    assert factorize(152, 133, MAX_ACCUMULATION_STEPS, 8) == (76, 2)
    # 172 in tiles of 4: 2 x 86 pads to 176 (178), 43 x 4 is 172 (215): 2.3 % against 20.8 %.
    assert factorize(172, 133, MAX_ACCUMULATION_STEPS, 4) == (86, 2)
    # Told 4 only: 88's 8 is its alignment, not a tile anyone saw; 98 < 99 at the prior: 2 x 44.
    assert factorize(88, CAP_5070TI, MAX_ACCUMULATION_STEPS, 4) == (44, 2)
    # 136 under 133 (a 4090, waves of 16 in the simulated world): 2 x 68 at 146, 17 x 8 at 153.
    assert factorize(136, 133, MAX_ACCUMULATION_STEPS, 4) == (68, 2)


def test_a_tiled_curve_prices_the_count_as_run_in_narrow_passes() -> None:
    # One point, 96 as 2 x 48 in 0.2304 s: 0.0024 s a sample of whole-tile work (proportional).
    curve = tiled_curve([(96, 48, 0.2304)], 8, CAP_5070TI, MAX_ACCUMULATION_STEPS)
    assert abs(curve.time_s(88) - 88 * 0.0024) < 1e-9  # 11 x 8: 0.2112 s; as 2 x 44 it was 96: 0.2304 s
