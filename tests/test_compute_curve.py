"""A rank's compute time over its share of the batch, from measured points."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumix.model.compute_curve import ComputeCurve


def test_one_point_is_proportional() -> None:
    curve = ComputeCurve.from_points([(512, 0.040)])
    assert math.isclose(curve.time_s(256), 0.020)
    assert math.isclose(curve.samples_within(0.030), 384)
    assert curve.time_s(0) == 0.0
    assert math.isclose(ComputeCurve.proportional(1000.0).time_s(250), 0.25)


def test_between_points_it_interpolates() -> None:
    # An H200 time-sliced with a competing matmul loop (measured): a fixed cost per step.
    curve = ComputeCurve.from_points([(512, 0.0353), (384, 0.0309)])
    assert math.isclose(curve.time_s(448), (0.0353 + 0.0309) / 2)


def test_outside_the_points_it_takes_the_slower_guess() -> None:
    # Fixed cost: the line stays above proportional below the points.
    fixed = ComputeCurve.from_points([(384, 0.0309), (512, 0.0353)])
    line_at_256 = 0.0309 - (0.0353 - 0.0309) / 128 * 128
    assert math.isclose(fixed.time_s(256), line_at_256)
    assert fixed.time_s(256) > 0.0309 * 256 / 384
    # Above the points, proportional to the last one is slower than the flat line.
    assert math.isclose(fixed.time_s(1024), 0.0353 * 1024 / 512)
    # Superlinear points (more time per sample for more): below them proportional is slower.
    steep = ComputeCurve.from_points([(100, 0.010), (200, 0.030)])
    assert math.isclose(steep.time_s(50), 0.005)  # the line would say -0.005
    # Above them, proportional to the last point: their steeper line is a stair's jump between them
    assert math.isclose(steep.time_s(300), 0.045)  # the line would say 0.050


def test_past_the_points_it_is_proportional_to_the_last_not_a_stair_s_jump() -> None:
    """A probe's points a granule apart, one stair's jump between the last two (BERT-base on an H100:
    +14 % from 88 to 92 samples): the jump carried over 24 more samples (the nearest segment) would price
    116 at 1.49x the last point, the span's line at 1.42x; past the points, growth in proportion to the
    last one, 1.26x, is what such stairs average out to (benchmarks/probe_real_stairs.py). Below the
    points the span's line still stands where it is the slower guess."""
    curve = ComputeCurve.from_points([(84, 0.1469), (88, 0.1498), (92, 0.1707)])
    span_slope = (0.1707 - 0.1469) / 8
    assert math.isclose(curve.time_s(116), 0.1707 * 116 / 92)
    assert curve.time_s(116) < 0.1707 + span_slope * 24 * 0.8
    assert math.isclose(curve.time_s(72), max(0.1469 - span_slope * 12, 0.1469 * 72 / 84))


def test_noise_never_makes_more_samples_faster() -> None:
    curve = ComputeCurve.from_points([(200, 0.030), (300, 0.025), (400, 0.040)])
    times = [curve.time_s(n) for n in range(1, 600, 7)]
    assert times == sorted(times)
    assert curve.points[1] == (300.0, 0.030)


def test_the_last_measurement_at_a_split_wins() -> None:
    assert ComputeCurve.from_points([(100, 0.5), (100, 0.2)]).time_s(100) == 0.2


def test_no_usable_point_is_an_error() -> None:
    with pytest.raises(ValueError, match="samples > 0"):
        ComputeCurve.from_points([(0, 1.0), (5, 0.0)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2000), st.floats(1e-4, 1.0)), min_size=1, max_size=6),
       st.floats(0.5, 4000.0))
def test_samples_within_inverts_time(points, samples) -> None:
    curve = ComputeCurve.from_points(points)
    time_s = curve.time_s(samples)
    back = curve.samples_within(time_s)
    assert back <= samples + 1e-6 * samples  # the least share that takes this long
    assert math.isclose(curve.time_s(back), time_s, rel_tol=1e-6)
