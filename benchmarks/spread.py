"""A list of figures' median, 90th percentile and largest, as the error summaries here report them.
Imported by sibling scripts run as `python benchmarks/NAME.py` (their folder is then on sys.path)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def median_p90_worst(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, the value at 0.9 x (n - 1) of the sorted values, no interpolation, the largest)."""
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))], ordered[-1]
