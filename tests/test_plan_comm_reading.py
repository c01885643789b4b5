"""How the step model reads the all-reduce from one measured wait (issue 16, session 8).

Against a bucket pipeline written out step by step: the earlier reading took a wait set by a bucket
between the first and the last for the first bucket's lag, so an all-reduce a little too long, and
predicted a shorter compute to wait too long (seed 16 gen-23 in the session-7 world: a re-split that
gained 5.6 % predicted at 3.7 %, under auto re-plan's 5 %)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpumix.model.step_model import CommModel

MIB = 1024**2
BACKWARD = 2 / 3  # of a rank's compute


def wait_s(compute_s: float, allreduce_s: float, bucket_shares: Sequence[float],
           produced_at: Sequence[float]) -> float:
    """Seconds past the compute until the last bucket is reduced: bucket i (a share of the gradient)
    is ready once the backward is `produced_at[i]` of the way through, and the link reduces one
    bucket at a time, in order."""
    forward_s = compute_s * (1 - BACKWARD)
    link_free_s = 0.0
    for share, at in zip(bucket_shares, produced_at, strict=True):
        ready_s = forward_s + compute_s * BACKWARD * at
        link_free_s = max(link_free_s, ready_s) + allreduce_s * share
    return link_free_s - compute_s


def links_for(allreduce_s: float, gradient_bytes: float, ranks: int = 3) -> tuple[float, ...]:
    """Links on which the link prior's all-reduce takes allreduce_s."""
    return (2 * (ranks - 1) / ranks * gradient_bytes / allreduce_s,) * ranks


def test_a_wait_set_by_a_middle_bucket_reads_the_all_reduce_it_came_from() -> None:
    # 102.4 MB in three 25 MiB buckets and a last of 23 %, produced evenly over the backward (the
    # model's own prior), links that nearly keep pace with it: the third bucket sets the wait (0.0251 s
    # at 0.1618 s of compute; the first bucket's lag would say 0.0224, the tail 0.0238). Read as a lag,
    # the all-reduce came out 0.1052 s instead of 0.1027, and at 0.1472 s of compute the wait 0.0317 s
    # instead of 0.0297.
    gradient = 102_400_000
    at = (*(i * 25 * MIB / gradient for i in (1, 2, 3)), 1.0)
    shares = tuple(b - a for a, b in zip((0.0, *at[:-1]), at, strict=True))
    assert math.isclose(wait_s(0.1618, 0.1027, shares, at), 0.0251, abs_tol=5e-5)
    links = links_for(0.2, gradient)  # the link prior is not what binds here
    measured = wait_s(0.1618, 0.1027, shares, at)
    model = CommModel(gradient, measured_s=measured, measured_links=links, measured_compute_s=0.1618)
    assert math.isclose(model.seconds(links, 0.1618), measured, rel_tol=1e-9)
    for compute_s in (0.1472, 0.12, 0.08):
        assert math.isclose(model.seconds(links, compute_s), wait_s(compute_s, 0.1027, shares, at),
                            rel_tol=1e-9), compute_s



def test_a_huge_gradient_keeps_the_plan_bounded() -> None:
    """Gradient sizes up to 1e15 B pass the request checks and come from agents' reports: one float per
    25 MiB bucket was 38 M of them, seconds of the hub's executor per candidate (review). Past
    MAX_BUCKETS x 25 MiB the gradient is read as MAX_BUCKETS equal buckets."""
    from gpumix.model.step_model import MAX_BUCKETS, bucket_ends

    ends = bucket_ends(1e15)
    assert len(ends) == MAX_BUCKETS and ends[-1] == 1.0 and ends[0] == 1 / MAX_BUCKETS
    assert len(bucket_ends(1e9)) == 39  # below the cap: 38 of 25 MiB, the last what is left
    assert bucket_ends(float("nan")) == (1.0,)
