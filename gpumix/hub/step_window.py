"""Figures over a rank's window of recent steps: the medians of a rank row and the AMP skip share."""

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
