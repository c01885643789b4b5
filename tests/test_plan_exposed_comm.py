"""The exposed all-reduce the planner predicts at another slowest compute (issue 16, gen-19).

The reference here is a bucket pipeline written out step by step, as DDP runs it: the backward
produces the gradient in 25 MiB buckets in order (the last one holding what is left), and each
bucket is reduced once it is produced and the link is free. The model sees one measured wait at
one slowest compute and must say what the wait becomes when a re-plan shortens the compute."""

from __future__ import annotations

import math

from gpumix.model.step_model import CommModel

MIB = 1024**2
BACKWARD = 2 / 3  # of a rank's compute


def pipeline_wait_s(compute_s: float, allreduce_s: float, gradient_bytes: float) -> float:
    """Seconds past the compute until the last bucket is reduced."""
    forward_s = compute_s * (1 - BACKWARD)
    produced = link_free_s = 0.0
    while produced < gradient_bytes:
        size = min(25 * MIB, gradient_bytes - produced)
        produced += size
        ready_s = forward_s + compute_s * BACKWARD * produced / gradient_bytes
        link_free_s = max(link_free_s, ready_s) + allreduce_s * size / gradient_bytes
    return link_free_s - compute_s


def predicted_wait_s(gradient_bytes: float, allreduce_s: float, measured_at_s: float, predict_at_s: float) -> float:
    links = (1e9, 1e9, 1e9)
    model = CommModel(gradient_bytes, measured_s=pipeline_wait_s(measured_at_s, allreduce_s, gradient_bytes),
                      measured_links=links, measured_compute_s=measured_at_s)
    return model.seconds(links, predict_at_s)


def test_links_slower_than_the_backward_the_first_bucket_is_waited_for() -> None:
    # gen-19's case: a 0.20 s all-reduce longer than the backward; a re-plan halves the slowest
    # compute. No bucket is reduced before the backward has produced it, so the backward hides less
    # than all of itself: 0.08 s waited at 0.24 s of compute, 0.14 s at 0.12 s (the old model said 0.16).
    gradient = 100 * MIB
    assert math.isclose(pipeline_wait_s(0.24, 0.20, gradient), 0.08)
    for compute_s in (0.12, 0.16, 0.20):
        expected = pipeline_wait_s(compute_s, 0.20, gradient)
        assert math.isclose(predicted_wait_s(gradient, 0.20, 0.24, compute_s), expected, rel_tol=1e-9), compute_s


def test_a_measured_tail_is_the_last_bucket_what_is_left_of_the_gradient() -> None:
    # 87.5 MiB: three 25 MiB buckets and a last one of 12.5 MiB. A backward longer than the all-reduce
    # leaves only that last bucket's reduction to wait for (0.1 s x 1/7); once a re-plan shortens the
    # compute below the all-reduce, the wait grows (the old model read the tail as a 25 MiB bucket's,
    # a 0.05 s all-reduce, and kept the tail: half the wait).
    gradient = 87.5 * MIB
    assert math.isclose(pipeline_wait_s(0.30, 0.10, gradient), 0.10 / 7)
    for compute_s in (0.30, 0.15, 0.10):
        expected = pipeline_wait_s(compute_s, 0.10, gradient)
        assert math.isclose(predicted_wait_s(gradient, 0.10, 0.30, compute_s), expected, rel_tol=1e-9), compute_s



def test_the_split_running_now_is_predicted_as_measured() -> None:
    # Whatever wait was measured, the model's all-reduce gives it back at the compute it was measured
    # at: 87.5 MiB in buckets of 2/7 and a last of 1/7, a wait between the two readings' crossing
    # (a 0.1667 s all-reduce) and the backward (0.20 s) used to come back 44 % too long.
    gradient, compute_s = 87.5 * MIB, 0.30
    links = (1e9, 1e9)
    for wait_s in (0.01, 0.18 / 7, 0.0257, 0.03, 0.1):
        model = CommModel(gradient, measured_s=wait_s, measured_links=links, measured_compute_s=compute_s)
        assert math.isclose(model.seconds(links, compute_s), wait_s, rel_tol=1e-9), wait_s


def test_a_spread_in_the_measured_wait_is_not_read_as_a_longer_all_reduce() -> None:
    # The step waits for each step's slowest rank, the model reads the slowest of the per-rank medians:
    # 0.01 s of spread on top of a 0.03 s tail (a 0.12 s all-reduce over links that do it in 0.12 s).
    # Read as a tail alone it would be a 0.16 s all-reduce, and a re-plan to 0.12 s of compute would be
    # predicted to wait 0.10 s; the world waits 0.06 s plus the spread.
    gradient = 100 * MIB
    links = (2 * 2 / 3 * gradient / 0.12,) * 3  # three ranks whose links do the all-reduce in 0.12 s
    spread_s = 0.01
    measured_s = pipeline_wait_s(0.30, 0.12, gradient) + spread_s
    model = CommModel(gradient, measured_s=measured_s, measured_links=links, measured_compute_s=0.30)
    assert math.isclose(model.seconds(links, 0.30), measured_s, rel_tol=1e-9)  # the split running now
    for compute_s in (0.12, 0.20):
        expected = pipeline_wait_s(compute_s, 0.12, gradient) + spread_s
        assert math.isclose(model.seconds(links, compute_s), expected, rel_tol=1e-9), compute_s
