"""Figures over a rank's window of recent steps: the medians of a rank row, its compute's spread and the
AMP skip share."""

from __future__ import annotations

from typing import Any


def skipped_share(steps: list[dict[str, Any]]) -> tuple[float | None, int]:
    """(share of the steps in this window the GradScaler skipped, the steps the window spans):
    the skipped-step counter's rise over the steps' indices. None without two counts."""
    counted = [s for s in steps if s.get("amp_skipped_steps") is not None]
    if len(counted) < 2:
        return None, 0
    first, last = counted[0], counted[-1]
    span = last["step"] - first["step"]
    if span <= 0:
        return None, 0
    return min(1.0, max(0.0, (last["amp_skipped_steps"] - first["amp_skipped_steps"]) / span)), span


def window_median(values: list[float]) -> float | None:
    """statistics.median, None for no values: one sort, without its checks and calls (issue 13: eight a
    rank row)."""
    if not values:
        return None
    values.sort()
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def window_spread(values: list[float]) -> float | None:
    """The interquartile range of the values (one sort, as window_median), None for none. The quartiles
    interpolate between neighbours (numpy's default, statistics.quantiles' "inclusive"): over a window of
    10 steps p90 - p10 would be almost max - min, one slow step's, where the IQR spans 5 steps."""
    if not values:
        return None
    values.sort()
    last = len(values) - 1  # (the only len: issue 13 counts calls)
    # the quartiles at 1/4 and 3/4 of the last index, in whole steps and quarters, without a call (issue 13)
    # and in statistics.quantiles' own arithmetic, so its figures to the bit
    low, low_quarters = last // 4, last % 4
    high, high_quarters = 3 * last // 4, 3 * last % 4
    first = (values[low] * (4 - low_quarters) + values[low + 1] * low_quarters) / 4 if low_quarters else values[low]
    third = (values[high] * (4 - high_quarters) + values[high + 1] * high_quarters) / 4 if high_quarters \
        else values[high]
    return third - first


MIN_SPREAD_STEPS = 4  # a rank's compute spread (an interquartile range) needs four steps at least


def compute_spread_s(steps: list[dict[str, Any]]) -> float | None:
    """The interquartile range of each step's own compute: its time less its waits where sent, at least 0.
    None under MIN_SPREAD_STEPS steps: no quartiles to speak of, unknown rather than steady. (A rank's
    compute_s stays the medians' difference: the median of these per-step computes lost gain share in
    the planner's sets, docs/hub.md, session 12.)"""
    computes = [part if (part := s["step_time_s"] - (s["comm_s"] or 0.0) - (s["data_wait_s"] or 0.0)) > 0.0 else 0.0
                for s in steps if s["step_time_s"]]
    return window_spread(computes) if len(computes) >= MIN_SPREAD_STEPS else None
