"""A rank's compute spread (issue 16, session 12): each step's own compute (its time less its comm and data
wait, where sent, at least 0), and the interquartile range of those over the rank's window, in the rank row
(compute_spread_s) and its operating point. compute_s stays median(step) - median(comm) - median(data
wait): the median of the per-step computes lost gain share in the planner's sets (docs/hub.md)."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from gpumix.hub.ranks import MEDIAN_WINDOW, RankStream, operating_point, parse_step, rank_summary
from gpumix.hub.step_window import window_spread
from gpumix.wire.protocol import ProtocolError


def stream_of(messages: list[dict[str, Any]]) -> RankStream:
    """A rank whose steps are these messages, each through the hub's own check (parse_step)."""
    stream = RankStream(rank=0, world_size=2, local_rank=0, pid=1, hostname="box", gpu_uuid="GPU-0",
                        nvml_index=0, job="j", env={}, versions={})
    for index, message in enumerate(messages):
        stream.steps.append(parse_step({"step": index, "samples": 32, **message}))
    return stream


def test_alternating_compute_and_comm_spread_each_steps_own_compute() -> None:
    """Slow compute with fast comm, then fast compute with slow comm: the step times and the comm times
    each spread widely (0.32-0.70 s, 0.02-0.60 s) where the computes are 0.1 s five times and 0.3-0.5 s."""
    messages = []
    for k in range(5):
        messages.append({"step_time_s": 0.32 + 0.05 * k, "comm_s": 0.02})  # computes 0.30 .. 0.50
        messages.append({"step_time_s": 0.50 + 0.05 * k, "comm_s": 0.40 + 0.05 * k})  # computes 0.10
    row = rank_summary(stream_of(messages))
    # quartiles of 0.1 x5, 0.3, 0.35, 0.4, 0.45, 0.5 at index 2.25 (0.1) and 6.75 (0.35 + 0.75 x 0.05)
    assert row["compute_spread_s"] == pytest.approx(0.2875)
    assert row["compute_s"] == pytest.approx(0.51 - 0.21)  # the medians' difference, as before


def test_the_spread_by_hand_over_the_last_window_only() -> None:
    """Computes 0.1 .. 1.0 s in the window (the five steps before it compute 9 s each and are left out):
    first quartile at index 2.25 = 0.325, third at 6.75 = 0.775, spread 0.45."""
    old = [{"step_time_s": 9.0, "comm_s": 0.0}] * 5
    shuffled = [0.1 * k for k in (7, 2, 10, 5, 1, 9, 4, 8, 3, 6)]
    stream = stream_of([*old, *({"step_time_s": t + 0.05, "comm_s": 0.05} for t in shuffled)])
    assert len(stream.steps) == MEDIAN_WINDOW + 5
    row = rank_summary(stream)
    assert row["compute_spread_s"] == pytest.approx(0.45)
    assert row["compute_s"] == pytest.approx(0.55)


def test_steady_steps_have_no_spread_and_under_four_steps_it_is_unknown() -> None:
    row = rank_summary(stream_of([{"step_time_s": 0.4, "comm_s": 0.1, "data_wait_s": 0.05}] * 12))
    assert row["compute_s"] == pytest.approx(0.25) and row["compute_spread_s"] == 0.0
    spread = [0.1, 0.5, 0.2, 0.9]  # quartiles at 0.75 (0.175) and 2.25 (0.6): 0.425 from four steps
    assert rank_summary(stream_of([{"step_time_s": t} for t in spread]))["compute_spread_s"] == pytest.approx(0.425)
    assert rank_summary(stream_of([{"step_time_s": t} for t in spread[:3]]))["compute_spread_s"] is None
    assert rank_summary(stream_of([{"step_time_s": 0.4, "data_wait_s": 0.1}]))["compute_spread_s"] is None
    empty = rank_summary(stream_of([]))
    assert empty["compute_s"] is None and "compute_spread_s" in empty and empty["compute_spread_s"] is None


def test_missing_comm_or_data_wait_is_no_wait_for_that_step_only() -> None:
    """A step that did not send its comm (or data wait) computed its whole time less what it sent."""
    # computes 0.5 x4, 1.0 x6: quartiles at 2.25 (0.5) and 6.75 (1.0)
    row = rank_summary(stream_of([{"step_time_s": 1.0}] * 6 + [{"step_time_s": 1.0, "comm_s": 0.5}] * 4))
    assert row["compute_spread_s"] == pytest.approx(0.5)
    # data waits on some steps: computes 0.2 x7, 0.8 x3: third quartile 0.2 + 0.75 x 0.6
    waits = rank_summary(stream_of([{"step_time_s": 0.8, "data_wait_s": 0.6}] * 7 + [{"step_time_s": 0.8}] * 3))
    assert waits["compute_spread_s"] == pytest.approx(0.45)
    # neither field ever: the step times' own spread
    plain = rank_summary(stream_of([{"step_time_s": 0.1 * k} for k in range(1, 11)]))
    assert plain["compute_spread_s"] == pytest.approx(0.45)


def test_waits_longer_than_the_step_clip_that_step_at_zero() -> None:
    """A framework's timers and the wall clock differ: a step whose comm passes its time computed 0 s,
    not -2 s (unclipped, five of -2 s and five of 1 s would spread 3 s)."""
    messages = [{"step_time_s": 1.0, "comm_s": 3.0}, {"step_time_s": 1.0, "comm_s": 0.0}] * 5
    assert rank_summary(stream_of(messages))["compute_spread_s"] == pytest.approx(1.0)
    assert rank_summary(stream_of([{"step_time_s": 1.0, "comm_s": 3.0}] * 4))["compute_spread_s"] == 0.0


def test_hostile_waits_never_reach_the_window_and_a_dropped_one_reads_as_not_sent() -> None:
    """NaN and inf waits are refused whole by parse_step (the frame path checks as it does,
    tests/test_hub_step_frames.py); a negative one is set to None (named in "rejected"), so that step
    computed its whole time: computes 1.0 x6 and 0.4 x4, spread 0.6."""
    for key in ("comm_s", "data_wait_s"):
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ProtocolError):
                parse_step({"step": 0, "step_time_s": 1.0, key: value})
    stream = stream_of([{"step_time_s": 1.0, "comm_s": -0.2}] * 6 + [{"step_time_s": 1.0, "comm_s": 0.6}] * 4)
    assert stream.steps[0]["comm_s"] is None and stream.steps[0]["rejected"] == ["comm_s"]
    assert rank_summary(stream)["compute_spread_s"] == pytest.approx(0.6)


def test_the_operating_point_carries_the_spread() -> None:
    messages = [{"step_time_s": 0.3 + 0.01 * (k % 5), "comm_s": 0.1} for k in range(MEDIAN_WINDOW)]
    point = operating_point(stream_of(messages), now_s=5.0)
    assert point is not None and point["compute_s"] == pytest.approx(0.22)
    assert point["compute_spread_s"] == pytest.approx(0.02)  # 0.2 .. 0.24 twice: 0.23 - 0.21


def _plain_spread(steps: list[dict[str, Any]]) -> float | None:
    """The reference: the last window's per-step computes through statistics.quantiles."""
    computes = [max(0.0, s["step_time_s"] - (s["comm_s"] or 0.0) - (s["data_wait_s"] or 0.0))
                for s in steps[-MEDIAN_WINDOW:] if s["step_time_s"]]
    if len(computes) < 4:
        return None
    quartiles = statistics.quantiles(computes, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


@pytest.mark.parametrize("seed", range(30))
def test_the_spread_is_statistics_own_to_the_bit_on_random_windows(seed: int) -> None:
    rng = random.Random(seed)
    messages = []
    for _ in range(rng.choice([1, 2, 3, MEDIAN_WINDOW - 1, MEDIAN_WINDOW, MEDIAN_WINDOW + 1, 60])):
        message: dict[str, Any] = {"step_time_s": rng.choice([1e-6, rng.uniform(0.001, 2.0)])}
        for key, high in (("comm_s", 0.8), ("data_wait_s", 0.2)):
            if rng.random() < 0.7:
                message[key] = rng.uniform(0.0, high)
        messages.append(message)
    stream = stream_of(messages)
    assert rank_summary(stream)["compute_spread_s"] == _plain_spread(list(stream.steps))
    values = [rng.choice([0.0, rng.uniform(0, 1e-6), rng.uniform(0, 2.0)]) for _ in range(rng.randint(2, 30))]
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    assert window_spread(list(values)) == quartiles[2] - quartiles[0]
    assert window_spread([]) is None and window_spread([0.7]) == 0.0
