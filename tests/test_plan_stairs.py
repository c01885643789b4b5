"""Stairs wider than the granularity, learned from a rank's measured points (gpumix.plan.stairs)."""

from __future__ import annotations

import math
from dataclasses import replace

from gpumix.plan.planner import PlanRequest, RankMeasure, plan
from gpumix.plan.stairs import fitting_tiles, learned_tile, pass_work, with_stairs

FIXED_S = 0.002  # a step's fixed cost in the stair world below
PASS_S = 0.005  # each pass's own cost: an H100 paid 5.0-5.4 ms (benchmarks/pass_cost_probe.py)


def stair_s(samples: int, micro: int, tile: int, samples_per_s: float) -> float:
    """A GPU that computes each pass in whole tiles (as real kernels do) and pays for each pass: the
    planner's truth here."""
    full, rest = divmod(samples, micro)
    work = full * math.ceil(micro / tile) * tile + (math.ceil(rest / tile) * tile if rest else 0)
    return FIXED_S + work / samples_per_s + math.ceil(samples / micro) * PASS_S


def measure(rank: int, tier: str, now: tuple[int, int], before: tuple[int, int], tile: int,
            speed: float) -> RankMeasure:
    """A rank running `now` (samples, micro-batch) that ran `before` earlier in one pass, in the
    stair world (a point of unknown micro-batch is taken as one pass)."""
    now_s = stair_s(*now, tile, speed)
    return RankMeasure(rank=rank, samples_per_s=now[0] / now_s, current_samples=now[0], link_bytes_per_s=1e10,
                       micro_batch=now[1], tier=tier, compute_points=((before[0], stair_s(*before, tile, speed)),))


def test_pass_work_pads_each_pass_to_whole_tiles() -> None:
    assert pass_work(168, 56, 16) == 192  # 3 passes of 56: 4 tiles of 16 each
    assert pass_work(168, 56, 8) == 168
    assert pass_work(100, 48, 16) == 2 * 48 + 16  # two full passes and one of 4
    assert pass_work(96, None, 16) == 96


def test_a_point_slower_than_its_work_reveals_the_tile() -> None:
    speed = 800.0
    stair = [(96, 96, stair_s(96, 96, 16, speed)), (168, 56, stair_s(168, 56, 16, speed))]
    assert learned_tile(stair, 4) == 16  # 168 took 2x the time of 96: padded to 3 x 64
    line = [(96, 96, stair_s(96, 96, 16, speed)), (176, 16, stair_s(176, 16, 16, speed))]
    assert learned_tile(line, 4) == 4  # on the line: nothing says the tile is wider
    assert learned_tile(stair[:1], 4) == 4  # one point says nothing
    assert learned_tile(stair, 16) == 16


def test_the_tier_plans_whole_tiles_and_predicts_them() -> None:
    """Two cards of one tier with 16-sample tiles, one of them measured on a stair (168 as 3 x 56),
    and a card with 8-sample tiles: the plan predicts each rank's compute as the stair world computes
    it (the line through 96 and 168 is 12 % off at 176), and its slowest is the best split's."""
    ranks = [measure(0, "4090", (168, 56), (96, 96), 16, 800.0),
             measure(1, "4090", (176, 88), (96, 96), 16, 800.0),
             measure(2, "3090", (104, 104), (96, 96), 8, 400.0)]
    tiles, speeds = [16, 16, 8], [800.0, 800.0, 400.0]
    result = plan(ranks, PlanRequest(global_batch=448, gradient_bytes=1e6, granularity=4, max_micro_batch=133))
    for r in result.ranks:
        truth_s = stair_s(r.samples, r.micro_batch, tiles[r.rank], speeds[r.rank])
        assert abs(r.compute_s - truth_s) / truth_s < 0.02, (r, truth_s)
    planned_s = max(stair_s(r.samples, r.micro_batch, tiles[r.rank], speeds[r.rank]) for r in result.ranks)
    assert planned_s <= best_split_s(448, tiles, speeds) + 1e-12


def best_split_s(total: int, tiles: list[int], speeds: list[float]) -> float:
    """The least slowest compute over splits into multiples of 4, each count at its best micro-batch."""
    def best(n: int, r: int) -> float:
        return min(stair_s(n, n // k, tiles[r], speeds[r]) for k in range(math.ceil(n / 133), n + 1) if n % k == 0)
    return min(max(best(a, 0), best(b, 1), best(total - a - b, 2))
               for a in range(4, total, 4) for b in range(4, total - a, 4))


def test_a_tier_shares_the_tile_one_of_its_ranks_showed() -> None:
    """Rank 1 ran 176 as 11 x 16, on the line; rank 0 of the same model showed the stair, and the
    card of another model says nothing: the tile is the model's kernels', so rank 1 takes it too."""
    ranks = [measure(0, "4090", (168, 56), (96, 96), 16, 800.0),
             measure(1, "4090", (176, 16), (96, 96), 16, 800.0),
             measure(2, "3090", (104, 104), (96, 96), 8, 400.0)]
    request = PlanRequest(global_batch=448, gradient_bytes=1e6, granularity=4, max_micro_batch=133)
    read = with_stairs(ranks, request)
    assert [m.tile_samples for m in read] == [16, 16, None]
    truth_s = stair_s(168, 84, 16, 800.0)  # 168 on rank 1 as factorize runs it with that tile: 2 x 84
    # (3 % here: the prior's pass is 5.4 ms, this world's 5.0; 11 passes of 16 are in rank 1's point)
    assert abs(read[1].compute_curve().time_s(168) - truth_s) / truth_s < 0.03
    # the other model's card learns no tile: in one pass its counts cost what its own line says
    for n in (96, 100, 104):
        assert math.isclose(read[2].compute_curve().time_s(n), ranks[2].compute_curve().time_s(n))


def test_a_tier_mate_without_a_measured_split_keeps_its_estimate() -> None:
    # rank 0 shows 16-sample stairs; rank 1 of its tier runs nothing yet and has no earlier split:
    # the tier's tile must not give it a curve from no points (ValueError: the plan failed)
    a = measure(0, "4090", (168, 56), (96, 96), 16, 800.0)
    b = replace(measure(1, "4090", (176, 88), (96, 96), 16, 800.0), current_samples=0, compute_points=())
    result = plan([a, b], PlanRequest(global_batch=448, gradient_bytes=1e6, granularity=4, max_micro_batch=133,
                                      exclude=frozenset({1})))
    assert sum(r.samples for r in result.ranks) == 448 and result.ranks[1].samples == 0


def test_one_rank_s_noise_does_not_widen_its_tier_s_tile() -> None:
    """Seed 17 gen-03 at granularity 4: four 3090s (8-sample waves) measured at 64 and 68; one rank's
    medians, 2 % low at 64 and 1.5 % high at 68, say its tile is 16 (68 padded to 80), the others' say
    8. Taking the tier's widest read 80 samples as costing no more than 68, and the second re-plan put
    80 on two of them (11 % slower than predicted). The tier takes the narrowest tile its ranks show."""
    speed = 400.0

    def rank(index: int, noise_64: float, noise_68: float) -> RankMeasure:
        now_s = stair_s(68, 68, 8, speed) * noise_68
        return RankMeasure(rank=index, samples_per_s=68 / now_s, current_samples=68, link_bytes_per_s=1e10,
                           micro_batch=68, tier="3090", compute_points=((64, stair_s(64, 64, 8, speed) * noise_64),),
                           compute_point_micro_batches=(64,))
    ranks = [rank(0, 0.98, 1.015), rank(1, 1.0, 1.0), rank(2, 1.0, 1.0), rank(3, 1.0, 1.0)]
    assert learned_tile(ranks[0].measured_points(), 4) == 16  # its own medians alone
    assert learned_tile(ranks[1].measured_points(), 4) == 8
    read = with_stairs(ranks, PlanRequest(global_batch=272, gradient_bytes=1e6, granularity=4, max_micro_batch=133))
    assert [m.tile_samples for m in read] == [8, 8, 8, 8]
    for m in read:  # 80 samples are 10 waves of 8, not the 9 of 68: every curve says they cost 11 % more
        curve = m.compute_curve()
        assert curve.time_s(80) > 1.08 * curve.time_s(68), m.rank
        truth_s = stair_s(80, 80, 8, speed)
        assert abs(curve.time_s(80) - truth_s) / truth_s < 0.05, m.rank


def test_a_pair_that_takes_the_same_time_for_less_work_reveals_the_tile() -> None:
    """Seed 31 gen-03 at granularity 4: a 5070 Ti (8-sample waves) ran 96 as 2 x 48, then 88 as 2 x 44,
    in the same time (44 pads to 48). At the granularity 88 is 8 % less work than 96, and only a fixed
    cost of the whole step could hide that; read as one stair, 80 in one pass is 10 waves, not the
    flat line's 12, and the re-plan can move work off the card (it had kept 96 on its tier-mate)."""
    speed = 380.0
    points = [(96, 48, stair_s(96, 48, 8, speed)), (88, 44, stair_s(88, 44, 8, speed))]
    assert learned_tile(points, 4) == 8
    now_s = points[1][2]
    rank = RankMeasure(rank=0, samples_per_s=88 / now_s, current_samples=88, link_bytes_per_s=1e10, micro_batch=44,
                       tier="5070 Ti", compute_points=((96, points[0][2]),), compute_point_micro_batches=(48,))
    read = with_stairs([rank], PlanRequest(global_batch=88, gradient_bytes=1e6, granularity=4, max_micro_batch=84))
    truth_s = stair_s(80, 80, 8, speed)
    assert read[0].tile_samples == 8
    assert abs(read[0].compute_curve().time_s(80) - truth_s) / truth_s < 0.03
    # a pair that grows with its work, less a fixed cost (the step's 40 %, as the time-sliced H200's),
    # shows nothing: 256 in 22.1 ms, 512 in 35.3 ms
    assert learned_tile([(256, 256, 0.0221), (512, 512, 0.0353)], 4) == 4


# A 4090 (tiles of 16) probed at 56-72 in one pass each, as the oracle's world measured it (g4 seed 29
# gen-02, session 24): 60 read 2.4 % fast and 72 2.1 % slow, medians of 5 steps of 2 % noise each
PROBED_4090 = [(56, 56, 0.10332), (60, 60, 0.10119), (64, 64, 0.10315), (68, 68, 0.12908), (72, 72, 0.13056)]


def test_a_probe_s_noisy_counts_on_one_stair_still_show_it() -> None:
    """Counts one tile pads alike are one work: their time is their median's, so 60's and 72's noise,
    each within the tolerance of its stair-mates, does not rule the true tile out (checked pair by pair,
    60 against 72 grew 4 % past their work's growth, and no tile fit)."""
    assert fitting_tiles(PROBED_4090, 1) == [16]
    assert learned_tile(PROBED_4090, 1) == 16


def test_counts_one_tile_would_pad_alike_but_that_differ_by_a_stair_rule_it_out() -> None:
    """The same 4090's 64 and 68 in tiles of 64 would be one work; 25 % apart, they rule 64 out, and so
    does a 3090's 120 and 128 (tiles of 8: 15 and 16 of them, 6.7 % apart) rule out 16."""
    assert 64 not in fitting_tiles(PROBED_4090, 1)
    speed = 400.0
    probed_3090 = [(n, n, stair_s(n, n, 8, speed)) for n in (112, 116, 120, 124, 128)]
    assert fitting_tiles(probed_3090, 1)[0] == 8 and 16 not in fitting_tiles(probed_3090, 1)
