"""A stair that a fixed cost could hide is learned where a wider tile explains the points without one
(gpumix/plan/stairs.py, `learned_tile`; docs/planner.md, session 16).

g4 seed 97 gen-16 of the oracle: three 5070 Tis (waves of 8 samples in the simulated world) measured at
64 and 52 samples, one pass each. 52 runs as 7 waves, like 56. The points fit no tile if 38 % of a step
is a fixed cost, and fit tiles of 8 with almost none. Before session 16 the narrowest fitting tile won,
so 56 was priced above 52 and the plan kept the 4090s on their stair (36.7 % of the oracle's gain)."""

from __future__ import annotations

from gpumix.plan.stairs import consistent, fixed_share, learned_tile

# (samples, micro-batch, compute s): rank 0 of the rig, its medians at the equal split and the first plan
FIVE_070_TI = [(64, 64, 0.1629), (52, 52, 0.1426)]


def test_points_a_wider_tile_explains_without_a_fixed_cost_learn_that_tile() -> None:
    assert fixed_share(FIVE_070_TI, 1) > 0.3  # read as a line: a third of the step fixed
    assert fixed_share(FIVE_070_TI, 8) < 0.05  # 7 and 8 waves of 8: proportional
    assert learned_tile(FIVE_070_TI, 1) == 8
    assert learned_tile(FIVE_070_TI, 4) == 8


def test_a_fixed_cost_a_wider_tile_explains_no_better_keeps_the_narrowest() -> None:
    # 28 % of 52's step fixed, the rest proportional to the samples: tiles of 8 fit these points too, but
    # only with a fixed cost about as large (its line's intercept), so they are no better an explanation
    points = [(n, n, 0.028 + 0.072 * n / 52) for n in (52, 64)]
    assert consistent(points, 8) and 0.2 < fixed_share(points, 8) < fixed_share(points, 1)
    assert learned_tile(points, 1) == 1


def test_points_every_tile_pads_alike_keep_the_narrowest() -> None:
    # 64 and 96 are whole tiles of 1 to 16 alike: the works, and so the fixed shares, are the same
    points = [(64, 64, 0.13), (96, 96, 0.19)]
    assert fixed_share(points, 1) == fixed_share(points, 16)
    assert learned_tile(points, 1) == 1
