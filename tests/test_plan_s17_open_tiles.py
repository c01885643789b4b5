"""A count's alignment is a guess only up to the widest tile the rank's points leave open
(gpumix/plan/stairs.py `widest_tile`, gpumix/plan/memory.py `factorize`; docs/planner.md, session 17).

factorize pads a pass, on average, over the tiles from the one learned up to the count's own alignment:
80 at granularity 4 is aligned to 16, so 2 x 40 was priced as if 40 might pad to 48, and 5 x 16 won. In
the oracle's g4 seed 109 gen-18 a 3060 (waves of 4 in the simulated world) ran 96 as 2 x 48 and 76 as
2 x 38 in 0.545 and 0.458 s. Tiles of 16 would pad 2 x 38 to 2 x 48, the same work as 96, in 16 % less
time: the points rule 16 out. The curve still priced 80 as 5 x 16 (three passes more than 76's 2 x 38),
3 % above 76, where both run as 2 x 40; the re-plan put 0.472 s on 80 (0.457 s in the world)."""

from __future__ import annotations

from gpumix.plan.memory import MAX_ACCUMULATION_STEPS, MAX_ALIGNED_TILE, factorize
from gpumix.plan.planner import plan
from gpumix.plan.split_types import PlanRequest, RankMeasure
from gpumix.plan.stairs import learned_tile, widest_tile, with_stairs

GIB = 1 << 30
PER_SAMPLE_BYTES = 0.1 * GIB
REQUEST = PlanRequest(global_batch=176, gradient_bytes=1e8, granularity=4)


def rank(index: int, points: tuple[tuple[int, int, float], ...], now: tuple[int, int, float], cap: int,
         tier: str) -> RankMeasure:
    """A rank that ran `points` (samples, micro-batch, compute s) before and runs `now`, memory for at most
    `cap` samples a pass (1 GiB fixed and 0.1 GiB a sample, under the planner's 10 % margin)."""
    samples, micro, seconds = now
    total = int((GIB + PER_SAMPLE_BYTES * (cap + 0.5)) / 0.9)
    return RankMeasure(rank=index, samples_per_s=samples / seconds, current_samples=samples, link_bytes_per_s=1e15,
                       micro_batch=micro, mem_total_bytes=total, mem_peak_bytes=int(GIB + PER_SAMPLE_BYTES * micro),
                       mem_per_sample_bytes=PER_SAMPLE_BYTES, tier=tier,
                       compute_points=tuple((n, t) for n, _, t in points),
                       compute_point_micro_batches=tuple(m for _, m, _ in points))


GEN18_3060 = rank(0, ((96, 48, 0.5449),), (76, 38, 0.4579), cap=60, tier="RTX 3060 12G")


def test_the_widest_open_tile_is_where_the_points_stop_fitting() -> None:
    # 2 x 38 padded to 16 is 2 x 48, 96's work in 16 % less time: 8 is the widest tile left open
    assert widest_tile(GEN18_3060.measured_points(), 1) == 8
    # one work says nothing: every tile stays open
    assert widest_tile([(96, 48, 0.5449)], 1) == MAX_ALIGNED_TILE
    assert widest_tile([(96, 48, 0.5449), (96, 48, 0.55)], 4) == MAX_ALIGNED_TILE


def test_an_alignment_past_the_widest_open_tile_buys_no_passes() -> None:
    pass_cost = 0.9  # samples, the 3060's ~5 ms a pass
    # 80 is aligned to 16: 2 x 40 may pad to 2 x 48 if 16 is open, so five whole passes of 16 win ...
    assert factorize(80, 60, MAX_ACCUMULATION_STEPS, 4, pass_cost) == (16, 5)
    # ... not where the points rule 16 out: two passes of 40
    assert factorize(80, 60, MAX_ACCUMULATION_STEPS, 4, pass_cost, widest=8) == (40, 2)


def test_the_curve_prices_80_as_the_76_it_runs_as() -> None:
    [measure] = with_stairs([GEN18_3060], REQUEST)
    assert measure.widest_tile_samples == 8
    # 76 as 2 x 38 and 80 as 2 x 40 are the same whole tiles of 4: the same time (was 3 % more for 80)
    assert abs(measure.compute_curve().time_s(80) - measure.compute_curve().time_s(76)) < 1e-9


def test_a_tier_mate_that_rules_a_tile_out_rules_it_out_for_the_tier() -> None:
    # the same model, measured at one count only: its own point leaves 16 open, its tier-mate's do not
    mate = rank(1, (), (96, 48, 0.5449), cap=60, tier="RTX 3060 12G")
    stairs = with_stairs([GEN18_3060, mate], REQUEST)
    assert [m.widest_tile_samples for m in stairs] == [8, 8]


def test_the_plan_hands_out_the_micro_batch_it_priced() -> None:
    # 176 over the 3060 and a card measured at 100 in one pass in 0.48 s: the 3060's 80 goes out as
    # 2 x 40, priced as 76's time (was 5 x 16, priced 0.4725 s: the step's pace)
    fast = rank(1, (), (100, 100, 0.48), cap=133, tier="other")
    proposed = plan([GEN18_3060, fast], REQUEST)
    slow = next(r for r in proposed.ranks if r.rank == 0)
    assert (slow.samples, slow.micro_batch, slow.accumulation_steps) == (80, 40, 2)
    assert abs(slow.compute_s - 0.4579) < 1e-3


def test_a_stair_learned_leaves_the_tiles_past_it_open_and_noise_rules_nothing_out() -> None:
    # a 4090 (waves of 16): 128 in one pass, 176 as 2 x 88 taking 96's two passes of work: 16 learned, 16 open
    stair = [(128, 128, 0.2000), (176, 88, 0.3000 + 0.0054)]
    assert widest_tile(stair, 16) == MAX_ALIGNED_TILE
    # a card learned at 8 whose points 16 would also fit: 16 stays open (the search from 8 up, not from 1,
    # where 2 does not fit them: 68 is 6 % more work than 64 in 12.5 % more time)
    eight = [(64, 64, 0.1000), (68, 68, 0.1125)]  # 68 padded to 8s is 72, to 16s is 80
    assert learned_tile(eight, 1) == 8 and widest_tile(eight, 8) == 16
    # points no tile fits (a median off by noise) say nothing: every tile stays open
    assert widest_tile([(96, 96, 0.20), (112, 112, 0.30)], 1) == MAX_ALIGNED_TILE
