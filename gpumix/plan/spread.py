"""The ranks' measured step-to-step spread in the step's compute (issue 16, session 12).

A synchronous step waits for each step's slowest rank, so its median is the median of the slowest of
the ranks' computes, later than the slowest median wherever several ranks finish close together. The
hub reports each rank's `compute_spread_s`: the interquartile range of its own per-step compute over
its window (gpumix/hub/step_window.py). Here a rank's compute is taken as normally spread, its standard
deviation the IQR / 1.349 as a share of the compute it measured now (so it scales with its count).
A rank with no spread reported is a point at its median, as before: with none reported anywhere the
step's compute is the max of the medians, exactly as without this module.

The hub's `compute_s` is median step - median comm - median wait, so ranks slowest together now read
the median of the slowest of them: their measured compute already holds that split's spread. One
factor on those ranks takes it out, so that the split running now is predicted as measured (the form
session 10 tried with a 2 % prior: docs/planner.md, "a measured spread").
Standard library only; never imports the simulated world.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpumix.plan.split_types import RankMeasure

IQR_PER_SD = 1.3490  # a normal's interquartile range in standard deviations (2 x 0.6745)
MAX_SPREAD_SD = 0.10  # a relative deviation read no further (an IQR of 13 % of the compute: no steady rank)
_REACH_SD = 6.0  # ranks further than this many deviations below the slowest never set a step's pace
_TIED_SD = 2.0  # ranks within this many deviations of the slowest now read as slowest together
_ITERATIONS = 40  # bisection steps: to ~1e-12 of the slowest compute


def relative_sd(m: RankMeasure) -> float:
    """A rank's compute deviation as a share of its compute now: 0 where no spread is reported."""
    spread_s = m.compute_spread_s
    if spread_s is None or not math.isfinite(spread_s) or spread_s <= 0 or m.current_samples <= 0:
        return 0.0
    now_s = m.current_samples / m.compute_samples_per_s
    return min(spread_s / IQR_PER_SD / now_s, MAX_SPREAD_SD) if now_s > 0 else 0.0


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def slowest_median_s(times_s: Sequence[float], sds: Sequence[float]) -> float:
    """The median over steps of the slowest rank's compute, rank r normally spread by sds[r] x its
    median times_s[r] (a point where 0): the x at which every rank is done with chance 1/2 (0 for no
    rank). Never under the max of the medians; exactly it where no rank near the slowest spreads."""
    pairs = [(t, sd) for t, sd in zip(times_s, sds, strict=True) if t > 0 and math.isfinite(t)]
    if not pairs:
        return 0.0
    slowest = max(t for t, _ in pairs)
    spread = [(t, sd) for t, sd in pairs if sd > 0 and t * (1 + _REACH_SD * sd) > slowest]
    if not spread:
        return slowest

    def all_done(x: float) -> float:
        return math.prod(_normal_cdf((x - t) / (sd * t)) for t, sd in spread)

    low, high = slowest, max(t * (1 + _REACH_SD * sd) for t, sd in spread)
    if all_done(low) >= 0.5:
        return slowest
    for _ in range(_ITERATIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if all_done(middle) < 0.5 else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class StepSpread:
    """The step's compute at a split: the median of its slowest rank, each rank spread as measured,
    with the spread the ranks slowest now already hold taken out of them (their times x `factor`)."""

    sds: Mapping[int, float] = field(default_factory=dict)  # rank -> relative deviation (0: none)
    factor: float = 1.0
    tied: frozenset[int] = frozenset()  # the ranks slowest together now

    @classmethod
    def at_current(cls, measures: Sequence[RankMeasure]) -> StepSpread:
        """From each running rank's measured compute and spread now: the factor under which the split
        running now is predicted at its slowest measured compute (bisection: the median grows with it)."""
        sds = {m.rank: relative_sd(m) for m in measures}
        now = {m.rank: m.current_samples / m.compute_samples_per_s for m in measures
               if m.current_samples > 0 and m.compute_samples_per_s > 0}
        if not now or not any(sds[r] > 0 for r in now):
            return cls(sds=sds)
        slowest = max(now.values())
        tied = frozenset(r for r, t in now.items() if t * (1 + _TIED_SD * sds[r]) >= slowest)
        low, high = 1.0 - _REACH_SD * max(sds[r] for r in tied), 1.0
        for _ in range(_ITERATIONS):
            middle = (low + high) / 2
            low, high = (middle, high) if cls(sds, middle, tied).compute_s(now) < slowest else (low, middle)
        return cls(sds, (low + high) / 2, tied)

    def compute_s(self, times_s: Mapping[int, float]) -> float:
        """The step's median compute at these ranks' (measured-curve) times, by rank."""
        ranks = list(times_s)
        return slowest_median_s([times_s[r] * (self.factor if r in self.tied else 1.0) for r in ranks],
                                [self.sds.get(r, 0.0) for r in ranks])
