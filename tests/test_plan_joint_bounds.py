"""The joint offer's split is bounded as the planner's is (gpumix/cli/plan_joint.py): a rank takes at
most its memory's micro-batch cap times the accumulation steps, never the whole batch because its
curve is fast (a review found every rank bounded by the global batch alone)."""

from __future__ import annotations

from gpumix.cli.plan_joint import _most_samples
from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS, PlanRequest, RankMeasure

GIB = 1 << 30


def rank(total_bytes: int, peak_bytes: int, micro_batch: int) -> RankMeasure:
    return RankMeasure(rank=0, samples_per_s=1000.0, current_samples=micro_batch, link_bytes_per_s=1e10,
                       micro_batch=micro_batch, mem_total_bytes=total_bytes, mem_peak_bytes=peak_bytes)


def test_a_rank_whose_memory_caps_its_micro_batch_is_bounded_by_cap_times_accumulation() -> None:
    batch = 4 * MAX_ACCUMULATION_STEPS
    request = PlanRequest(global_batch=batch, gradient_bytes=0.0, granularity=1)
    # 1 sample takes the whole usable memory: a cap of 1, so at most MAX_ACCUMULATION_STEPS samples
    assert _most_samples(rank(10 * GIB, 9 * GIB, 1), request) == MAX_ACCUMULATION_STEPS


def test_a_rank_with_room_is_bounded_by_the_batch() -> None:
    request = PlanRequest(global_batch=512, gradient_bytes=0.0, granularity=16)
    assert _most_samples(rank(80 * GIB, GIB, 64), request) == 512
    assert _most_samples(RankMeasure(rank=1, samples_per_s=10.0, current_samples=64, link_bytes_per_s=1e10),
                         request) == 512  # no memory figures: nothing but the batch limits it
