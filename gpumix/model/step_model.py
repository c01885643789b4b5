"""The product's step model, with what each prediction stands on.

A step of synchronous data-parallel training, as the planner and the power fit predict it:

- compute per rank: a curve over its share of the batch (compute_curve.ComputeCurve), learned
  from the splits the job has run (the hub keeps their operating points, with their ages);
- communication: what the step waited for at the split running now, scaled to another set of
  ranks by the link prior (priors.allreduce_seconds_prior); the link prior alone until measured;
- power -> throughput per GPU: learned from the caps a rank has run at (relative throughput at
  each cap), the concave prior (priors.power_factor_prior) outside them or without them.

Every estimate carries a Basis: the measured points it interpolates (how many, how old) or the
prior it assumes. `gpumix plan --json`, `gpumix power fit --json` and the split and fit screens
show it, so a user can tell a measured prediction from an assumed one. Standard library only;
never imports the simulated world (gpumix.sim), which has physics of its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.priors import LINK_EFFICIENCY_PRIOR, allreduce_seconds_prior, power_factor_prior

COMPUTE_PRIOR = "proportional beyond the one split measured: twice the samples, twice the time"
LINK_PRIOR = (f"link prior: all-reduce through host memory, 2(R-1)/R x gradient bytes over the slowest link"
              f" at {LINK_EFFICIENCY_PRIOR:.0%} of its rate")
POWER_PRIOR = "power prior: throughput x (cap/default)^0.25, at most 1 (assumed, not measured)"


@dataclass(frozen=True)
class Basis:
    """What one estimate stands on: `points` measured operating points (0: none) of the given
    ages, and the prior it assumes beyond (or instead of) them, if any."""

    points: int = 0
    newest_age_s: float | None = None
    oldest_age_s: float | None = None
    prior: str | None = None
    curve: str | None = None  # a power curve's kind: "learned", "learned from GPU i (same model)", "prior"...

    @property
    def source(self) -> str:
        if self.points == 0:
            return "prior"
        return "measured" if self.prior is None else "measured+prior"

    @classmethod
    def measured(cls, ages_s: Iterable[float | None], prior: str | None = None) -> Basis:
        given = list(ages_s)
        count = len(given)  # a point of unknown age still counts
        ages = [a for a in given if a is not None and math.isfinite(a) and a >= 0]
        return cls(points=count, newest_age_s=min(ages) if ages else None, oldest_age_s=max(ages) if ages else None,
                   prior=prior if count else (prior or "no measurement"))

    def to_json(self) -> dict[str, Any]:
        data = {"source": self.source, "points": self.points, "newest_age_s": self.newest_age_s,
                "oldest_age_s": self.oldest_age_s, "prior": self.prior}
        return {**data, "curve": self.curve} if self.curve is not None else data

    def text(self) -> str:
        """One short line: 'measured: 3 points, 0 s to 12 min old' / 'prior: ...'."""
        if self.points == 0:
            return f"prior: {self.prior}"
        ages = _age(self.newest_age_s) if self.newest_age_s == self.oldest_age_s else \
            f"{_age(self.newest_age_s)} to {_age(self.oldest_age_s)}"
        line = f"measured: {self.points} point{'s' if self.points != 1 else ''}, {ages} old"
        line = line + (f"; {self.prior}" if self.prior else "")
        learned = self.curve is not None and self.curve.startswith("learned")  # the prior's kinds say so already
        return line + (f"; {self.curve} power curve" if learned else "")


def basis_text(data: Any) -> str:
    """Basis.text() for a basis as JSON (from a hub or a file): '?' for what is not one."""
    if not isinstance(data, dict):
        return "?"
    def number(value: Any) -> float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok else None
    points = number(data.get("points"))
    prior, curve = data.get("prior"), data.get("curve")
    return Basis(points=int(points) if points is not None and 0 <= points < 1e6 else 0,
                 newest_age_s=number(data.get("newest_age_s")), oldest_age_s=number(data.get("oldest_age_s")),
                 prior=str(prior)[:200] if prior is not None else None,
                 curve=str(curve)[:80] if curve is not None else None).text()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


# -- compute ---------------------------------------------------------------------------------


def compute_estimate(points: Sequence[tuple[float, float]], ages_s: Sequence[float | None],
                     current: tuple[float, float] | None) -> tuple[ComputeCurve, Basis]:
    """A rank's compute curve from earlier splits (points, ages_s) and the split running now
    (`current`, measured last so it wins; age 0), with its basis."""
    by_samples: dict[float, float | None] = {}
    for (samples, _), age in zip(points, ages_s, strict=True):
        by_samples[samples] = age
    if current is not None:
        by_samples[current[0]] = 0.0
    merged = [*points, *([current] if current is not None else [])]
    if not merged:
        raise ValueError("a compute estimate needs a measured split")
    if len(by_samples) < 2:
        samples, seconds = merged[-1]
        return ComputeCurve.proportional(samples / seconds), Basis.measured(by_samples.values(), COMPUTE_PRIOR)
    return ComputeCurve.from_points(merged), Basis.measured(by_samples.values(),
                                                            "beyond the measured splits: the slower of line and proportional")


# -- communication ---------------------------------------------------------------------------


# DDP's default gradient buckets (bucket_cap_mb=25) and a backward that takes about twice the
# forward: how much of the all-reduce a backward can hide (priors, not measured).
BUCKET_BYTES_PRIOR = 25 * 1024**2
BACKWARD_SHARE_PRIOR = 2 / 3
OVERLAP_PRIOR = ("overlap prior: 25 MB buckets reduced in order during a backward of 2/3 of the compute,"
                 " each once produced; a wait read as the last bucket's, no longer than the link prior's all-reduce")


MAX_BUCKETS = 256  # a 6.7 GB gradient; a larger one is read as this many equal buckets (the planner's
# cost stays bounded: gradient sizes reach 1e15 B through the request checks and the agents' reports)


@functools.lru_cache(maxsize=64)
def bucket_ends(gradient_bytes: float) -> tuple[float, ...]:
    """The share of the gradient produced once each bucket is full (the last: 1.0)."""
    if not gradient_bytes > BUCKET_BYTES_PRIOR:  # NaN too: one bucket
        return (1.0,)
    if gradient_bytes > MAX_BUCKETS * BUCKET_BYTES_PRIOR:
        return tuple(i / MAX_BUCKETS for i in range(1, MAX_BUCKETS + 1))
    full = math.ceil(gradient_bytes / BUCKET_BYTES_PRIOR) - 1
    return (*(i * BUCKET_BYTES_PRIOR / gradient_bytes for i in range(1, full + 1)), 1.0)


def pipeline_wait_s(allreduce_s: float, slowest_compute_s: float, ends: Sequence[float]) -> float:
    """The wait past the slowest compute of an all-reduce of `allreduce_s` whose buckets (cumulative
    shares `ends`) are reduced in order, each once the backward has produced it: for the bucket that
    sets the pace, the reduction of it and of every bucket after it, less the backward left once it
    is produced (the first bucket: the lag; the last: its own reduction, the tail; any between).
    Given the buckets before the last only (ends[:-1]), the wait those set (0 without any)."""
    backward_s = BACKWARD_SHARE_PRIOR * slowest_compute_s
    return max((allreduce_s * (1 - start) - backward_s * (1 - end)
                for start, end in zip((0.0, *ends)[:len(ends)], ends, strict=True)),
               default=0.0)


def pipeline_readings_s(wait_s: float, slowest_compute_s: float, ends: Sequence[float]) -> list[float]:
    """For each bucket, the all-reduce under which that bucket sets a wait of `wait_s`: the least of
    them is the all-reduce whose pipeline waits exactly `wait_s` (the inverse of pipeline_wait_s)."""
    backward_s = BACKWARD_SHARE_PRIOR * slowest_compute_s
    return [(wait_s + backward_s * (1 - end)) / (1 - start) for start, end in zip((0.0, *ends)[:len(ends)], ends, strict=True)]


@dataclass(frozen=True)
class CommModel:
    """Seconds a step waits for communication beyond the slowest rank's compute.

    Measured at the current split where the ranks report it (`measured_s`, at a slowest compute of
    `measured_compute_s`); another set of ranks scales it by the link prior (leaving a slow-link tier
    out shortens the all-reduce). The wait is not a constant: DDP reduces buckets while the backward
    runs, so a shorter slowest compute hides less (the bucket pipeline: pipeline_wait_s). From the one
    measurement, the all-reduce whose pipeline waits exactly that (the least of the buckets'
    readings: the first bucket's lag, any bucket between, or the last bucket's tail). A tail reading
    is taken no longer than the link prior's all-reduce, and the part of the wait it then leaves
    unexplained (the ranks' step-to-step spread)
    stays in every prediction. Without a measurement, the link prior alone, all of it waited for."""

    gradient_bytes: float
    measured_s: float | None = None
    measured_links: tuple[float, ...] = ()  # the links of the ranks running when it was measured
    measured_compute_s: float | None = None  # the slowest rank's compute at that split
    link_basis: str | None = None  # what the links stand on when not the link prior (a measured floor)

    def seconds(self, links: Sequence[float], slowest_compute_s: float | None = None) -> float:
        modelled = allreduce_seconds_prior(links, self.gradient_bytes)
        if self.measured_s is None or len(links) < 2:
            return modelled
        reference = allreduce_seconds_prior(self.measured_links, self.gradient_bytes)
        scale = modelled / reference if reference > 0 else 1.0
        if self.measured_compute_s is None or slowest_compute_s is None:
            return self.measured_s * scale
        ends = bucket_ends(self.gradient_bytes)
        # The all-reduce whose bucket pipeline waits what was measured at the measured compute: the least
        # of the buckets' readings (a bucket between the first and the last can set the wait: links
        # just slower than the backward produces them). A reading through the last bucket alone (the
        # tail: the backward hid the rest) multiplies whatever else the wait holds (the ranks'
        # step-to-step spread: the step waits for each step's slowest rank) by 1/its share, so it is
        # taken no longer than the link prior's all-reduce, and the part of the wait it then leaves
        # unexplained stays in every prediction.
        *others, tail_s = pipeline_readings_s(self.measured_s, self.measured_compute_s, ends)
        paced_s = min(others, default=math.inf)
        allreduce_s = paced_s if paced_s < tail_s else min(tail_s, reference)
        unexplained_s = self.measured_s - pipeline_wait_s(allreduce_s, self.measured_compute_s, ends)
        return max(0.0, unexplained_s) + pipeline_wait_s(allreduce_s * scale, slowest_compute_s, ends)

    def basis(self, links: Sequence[float] | None = None) -> Basis:
        link = self.link_basis or LINK_PRIOR
        if self.measured_s is None:
            return Basis(prior=link)
        same = links is None or sorted(links) == sorted(self.measured_links)
        prior = OVERLAP_PRIOR if same else f"{OVERLAP_PRIOR}; scaled to these ranks by the {link}"
        return Basis.measured([0.0], prior if self.measured_compute_s is not None else
                              (None if same else "scaled to these ranks by the " + link))


# -- power -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerCurve:
    """Throughput kept at a cap, relative to the card's default limit: learned from the caps a
    rank has run at ((cap_w, compute seconds per step at that cap), same split), the prior outside
    them. Relative to the nearest measured cap, so a learned point moves every prediction near it."""

    default_w: float
    points: tuple[tuple[float, float], ...] = ()  # (cap_w, seconds per step), caps ascending
    ages_s: tuple[float | None, ...] = ()
    learned_from: str | None = None  # the points are another card's of the same model (its name)

    @classmethod
    def learned(cls, default_w: float, points: Iterable[tuple[float, float]],
                ages_s: Iterable[float | None] = (), learned_from: str | None = None) -> PowerCurve:
        seen: dict[float, float] = {}
        for cap_w, seconds in points:
            if cap_w > 0 and seconds > 0 and math.isfinite(cap_w) and math.isfinite(seconds):
                seen[float(cap_w)] = float(seconds)
        ordered = tuple(sorted(seen.items()))
        ages = tuple(ages_s)
        return cls(default_w, ordered, ages if len(ages) == len(ordered) else tuple(None for _ in ordered),
                   learned_from)

    def time_ratio(self, from_w: float, to_w: float) -> float:
        """Compute seconds at `to_w` over compute seconds at `from_w` (>1: slower)."""
        return self._inverse_speed(to_w) / self._inverse_speed(from_w)

    def _inverse_speed(self, cap_w: float) -> float:
        """Seconds per step at cap_w, up to a constant: measured points interpolated, the prior's
        shape beyond them anchored at the nearest measured cap."""
        prior = 1.0 / power_factor_prior(cap_w, self.default_w)
        if len(self.points) == 0:
            return prior
        caps = [c for c, _ in self.points]
        if len(self.points) >= 2 and caps[0] <= cap_w <= caps[-1]:
            for (c0, t0), (c1, t1) in zip(self.points, self.points[1:], strict=False):
                if c0 <= cap_w <= c1:
                    return t0 + (t1 - t0) * (cap_w - c0) / (c1 - c0)
        anchor_w, anchor_t = min(self.points, key=lambda p: abs(p[0] - cap_w))
        anchored = anchor_t * prior * power_factor_prior(anchor_w, self.default_w)
        if len(self.points) >= 2 and cap_w < caps[0]:
            # below the lowest measured cap: the slower of the prior's shape and the lowest segment's
            # line (speed falls faster at low caps than the prior's fourth root says, on every sweep seen)
            (c0, t0), (c1, t1) = self.points[0], self.points[1]
            return max(anchored, t0 + (t1 - t0) * (cap_w - c0) / (c1 - c0))
        return anchored

    @property
    def kind(self) -> str:
        """'learned' (two caps or more measured), 'learned from ...' (another card of this model's
        caps), 'prior anchored at one cap', or 'prior'."""
        if len(self.points) >= 2:
            return "learned" if self.learned_from is None else f"learned from {self.learned_from}"
        return "prior anchored at one cap" if self.points else "prior"

    def basis(self) -> Basis:
        if not self.points:
            return Basis(prior=POWER_PRIOR, curve=self.kind)
        prior = None if len(self.points) >= 2 else "beyond the measured cap: " + POWER_PRIOR
        return replace(Basis.measured(self.ages_s, prior), curve=self.kind)
