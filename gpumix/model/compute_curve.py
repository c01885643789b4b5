"""A rank's compute time per step as a function of its share of the batch, from measurements.

One measured point (the split running now) gives a proportional model: twice the samples,
twice the time. Real GPUs are not proportional: a step has fixed costs (the optimizer,
kernel launches, a competing process's time slices) and matrix kernels run in whole waves
of tiles, so time grows in stairs (docs/planner.md, "Measured on real GPUs"). With points
measured at several splits (the hub keeps them across re-plans), the curve interpolates
between them. Below the measured range it takes the slower of two guesses, the line through the
outermost points (the measured span's slope: a fixed cost) and proportional to the first point: a
planner that trusts an optimistic extrapolation moves work onto a rank that then paces the step. Above
it, proportional to the last point: never crediting a fixed cost there, and never carrying on a slope
steeper than proportional, which is a stair's jump between the points, not a growth that repeats (a
stair probe's points are a granule apart: one jump carried over a re-plan's move priced a BERT-base
encoder on an H100 up to 45 % over what it measured with the nearest segment's slope, and the span's
still priced it high; docs/planner.md, sessions 24 and 25). Below points that no tile fits
(NoFloorCurve) that line is bounded: their slope is noise, not a fixed cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise

_SEARCH_STEPS = 80  # bisection halvings: far below a sample


@dataclass(frozen=True)
class ComputeCurve:
    points: tuple[tuple[float, float], ...]  # (samples, seconds): samples ascending, seconds non-decreasing

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]]) -> ComputeCurve:
        """One time per sample count (the last given wins); a larger share never takes less time
        (measurement noise can say so), so each time is at least the one before it."""
        by_samples: dict[float, float] = {}
        for samples, seconds in points:
            if samples > 0 and seconds > 0 and math.isfinite(samples) and math.isfinite(seconds):
                by_samples[float(samples)] = float(seconds)
        if not by_samples:
            raise ValueError("a compute curve needs a point with samples > 0 and seconds > 0")
        monotone: list[tuple[float, float]] = []
        for samples in sorted(by_samples):
            seconds = max(by_samples[samples], monotone[-1][1] if monotone else 0.0)
            monotone.append((samples, seconds))
        return cls(tuple(monotone))

    @classmethod
    def proportional(cls, samples_per_s: float) -> ComputeCurve:
        return cls(((1.0, 1.0 / samples_per_s),))

    def time_s(self, samples: float) -> float:
        if samples <= 0:
            return 0.0
        points = self.points
        first_n, first_t = points[0]
        if len(points) == 1:
            return first_t * samples / first_n
        if samples < first_n:
            return max(_line(points[0], points[-1], samples), first_t * samples / first_n)
        last_n, last_t = points[-1]
        if samples > last_n:
            return last_t * samples / last_n
        for low, high in pairwise(points):
            if samples <= high[0]:
                return _line(low, high, samples)
        return last_t  # not reached: samples == last_n is inside the last segment

    def samples_within(self, seconds: float) -> float:
        """The (continuous) share this rank computes in `seconds`: the inverse of time_s."""
        if seconds <= 0:
            return 0.0
        if len(self.points) == 1:
            samples, time_s = self.points[0]
            return seconds * samples / time_s
        low, high = 0.0, max(1.0, self.points[-1][0])
        while self.time_s(high) < seconds:
            high *= 2
        for _ in range(_SEARCH_STEPS):
            middle = (low + high) / 2
            if self.time_s(middle) < seconds:
                low = middle
            else:
                high = middle
        return high


@dataclass(frozen=True)
class NoFloorCurve(ComputeCurve):
    """A curve whose points no tile fits (plan.stairs.consistent): below its lowest point, the line of
    its lowest segment no higher than a step whose fixed cost is `fixed_share_max` of the lowest point's
    time. Such points differ by noise or by passes the planner does not model (88 as 2 x 44 reading 4.8 %
    above 96 as 2 x 48: the same padded work), not by work, so their line's slope says nothing of a fixed
    cost: kept, a flat pair would price every smaller count at the higher reading, a floor that hides
    what moving work off the rank gains (fresh seed 59 gen-15's re-plan, predicted 3.0 % where a split
    without that floor gains more: docs/planner.md, session 13). The bound is the largest fixed share
    any consistent pair may show, so it binds only where the points say more than a pair could."""

    fixed_share_max: float = 1.0

    def time_s(self, samples: float) -> float:
        first_n, first_t = self.points[0]
        line_s = super().time_s(samples)  # the slower of the line and proportional, as any curve
        if 0 < samples < first_n and len(self.points) > 1:
            share = self.fixed_share_max
            return min(line_s, first_t * (share + (1 - share) * samples / first_n))  # never below proportional
        return line_s


def _line(a: tuple[float, float], b: tuple[float, float], samples: float) -> float:
    slope = (b[1] - a[1]) / (b[0] - a[0])
    return a[1] + slope * (samples - a[0])


@dataclass(frozen=True)
class TiledCurve(ComputeCurve):
    """A compute curve over work rather than samples: `work(n)` says how many samples' worth a
    count of n computes (its passes padded to whole tiles); `points` are the base's, in work.
    Continuous shares (and counts not whole) read the base at the least work: n in one pass."""

    base: ComputeCurve | None = None
    work: Callable[[int], float] | None = None
    least_shift: float = 0.0  # the least work a count of n can be, less n: one pass's cost

    @classmethod
    def over(cls, base: ComputeCurve, work: Callable[[int], float], least_shift: float = 0.0) -> TiledCurve:
        return cls(base.points, base, work, least_shift)

    def samples_within(self, seconds: float) -> float:
        """The continuous share, as time_s reads one (under_stairs): a bisection over time_s would meet
        whole counts, padded, and jump."""
        return self.under_stairs().samples_within(seconds)

    def under_stairs(self) -> ComputeCurve:
        """The base read at the least work any count can be: a bound no whole count beats."""
        assert self.base is not None
        return ShiftedCurve(self.base.points, self.base, self.least_shift) if self.least_shift else self.base

    def time_s(self, samples: float) -> float:
        assert self.base is not None and self.work is not None
        if samples <= 0 or samples != int(samples):  # a continuous share: in the fewest passes
            return self.under_stairs().time_s(samples)
        return self.base.time_s(self.work(int(samples)))


@dataclass(frozen=True)
class ShiftedCurve(ComputeCurve):
    """`base` read `shift` samples over: a count at its least work (n in one pass, TiledCurve)."""

    base: ComputeCurve | None = None
    shift: float = 0.0

    def time_s(self, samples: float) -> float:
        assert self.base is not None
        return self.base.time_s(max(0.0, samples + self.shift)) if samples > 0 else 0.0

    def samples_within(self, seconds: float) -> float:
        assert self.base is not None
        return max(0.0, self.base.samples_within(seconds) - self.shift)
