"""A rank's curve pads passes only to a tile its points show, not to the granularity (gpumix/plan/stairs.py,
`with_stairs`; docs/planner.md, session 16).

The granularity says which counts and micro-batches to hand out. Before session 16 it was also the tile
a rank's curve padded every pass to, until its points showed a wider one. In the oracle's g16 seed 41
gen-03 a 3090 (waves of 8 samples in the simulated world) and a 3060 shared 256 samples at granularity
16. The curve priced the 3090's 176 as 2 x 96, the same as 192, so the plan was 192/64 (0.493 s in the
world). 176/80 is the oracle's split (0.459 s)."""

from __future__ import annotations

from gpumix.plan.planner import plan
from gpumix.plan.split_types import PlanRequest, RankMeasure

GIB = 1 << 30
PER_SAMPLE_BYTES = 0.1 * GIB


def rank(index: int, micro_batch: int, compute_s: float, cap: int) -> RankMeasure:
    """A rank measured at 128 samples in passes of `micro_batch`, memory for at most `cap` a pass
    (1 GiB fixed and 0.1 GiB a sample, under the planner's 10 % margin)."""
    total = int((GIB + PER_SAMPLE_BYTES * (cap + 0.5)) / 0.9)
    return RankMeasure(rank=index, samples_per_s=128 / compute_s, current_samples=128, link_bytes_per_s=1e15,
                       micro_batch=micro_batch, mem_total_bytes=total,
                       mem_peak_bytes=int(GIB + PER_SAMPLE_BYTES * micro_batch),
                       mem_per_sample_bytes=PER_SAMPLE_BYTES, tier=f"tier-{index}")


def test_a_count_whose_micro_batch_is_off_the_granularity_is_not_priced_as_padded_to_it() -> None:
    fast, slow = rank(0, 128, 0.3296, cap=133), rank(1, 32, 0.7379, cap=60)
    proposed = plan([fast, slow], PlanRequest(global_batch=256, gradient_bytes=1e8, granularity=16))
    by_rank = {r.rank: r for r in proposed.ranks}
    # 176 does not fit one pass (cap 133): 2 x 88, priced as 176 samples' work, not 2 x 96
    assert (by_rank[0].samples, by_rank[0].micro_batch, by_rank[0].accumulation_steps) == (176, 88, 2)
    assert by_rank[1].samples == 80
    # its price: 0.457 s by the line through its one point (pass cost included), not 192's 0.497 s
    assert by_rank[0].compute_s < 0.48


def test_a_micro_batch_handed_out_stays_a_multiple_of_the_granularity_where_one_fits() -> None:
    # The slow rank's 80 under a cap of 60: 5 x 16 (whole multiples of the granularity), not 2 x 40. The
    # granularity still aligns what is handed out; only the price of a pass off it changed.
    fast, slow = rank(0, 128, 0.3296, cap=133), rank(1, 32, 0.7379, cap=60)
    proposed = plan([fast, slow], PlanRequest(global_batch=256, gradient_bytes=1e8, granularity=16))
    assert [(r.micro_batch, r.accumulation_steps) for r in proposed.ranks if r.rank == 1] == [(16, 5)]
