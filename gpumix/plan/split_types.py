"""The planner's types and bounds: what it is given (RankMeasure, PlanRequest), what it answers
(Plan, RankPlan, Prediction, TierAlternative), what it refuses (PlanError) and the limits that keep
one plan a fraction of a second (the TUI and auto re-plan call it too)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.step_model import Basis, compute_estimate

EPS = 1e-12

# Bounds that keep one plan a fraction of a second however absurd its inputs (the TUI and
# auto re-plan call it too): a request past them is refused with one line, never searched.
MAX_GLOBAL_BATCH = 10**7  # samples per optimizer step: far beyond any real job on one box
MAX_ACCUMULATION_STEPS = 1024  # k_r when the request sets none: memory then bounds n_r to cap * k
MAX_IMPROVE_MOVES = 2048  # single-sample moves after rounding (rounding leaves few to make)
MAX_SEARCH_VALUES = 8192  # candidate counts the exact micro-batch search may scan, all ranks
MAX_DP_WORK = 1_000_000  # (partial sum, choice) pairs the exact search may visit
SEARCH_LIMIT_S = 10.0  # the safety net: a search that runs longer is stopped and refused


class PlanError(ValueError):
    """A request the planner refuses (absurd, or unsearchable); str() is the one line shown."""


class Deadline:
    """The time safety net: check() raises PlanError once `limit_s` has passed."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.at = time.monotonic() + limit_s

    def check(self) -> None:
        if time.monotonic() >= self.at:
            raise PlanError(f"the split search ran past {self.limit_s:g} s and was stopped:"
                            " try a smaller global batch or granularity")


@dataclass(frozen=True)
class RankMeasure:
    """What the hub knows of one rank (gpumix/hub/ranks.py) and its GPU (snapshot)."""

    rank: int
    samples_per_s: float  # measured at current_samples per step
    current_samples: int  # n_r now
    link_bytes_per_s: float  # effective host link, one direction
    gpu_uuid: str | None = None
    micro_batch: int | None = None  # now; None: the whole n_r in one pass
    compute_share: float | None = None  # compute_s / step_time_s; None: samples_per_s is compute-only
    mem_total_bytes: int | None = None
    mem_peak_bytes: int | None = None  # at micro_batch
    mem_per_sample_bytes: float | None = None  # see estimate_mem_per_sample
    tier: str | None = None
    # compute seconds at other splits measured before (samples, seconds): the curve's other points
    compute_points: tuple[tuple[int, float], ...] = ()
    compute_point_ages_s: tuple[float | None, ...] = ()  # the points' ages (the hub's age_s); () unknown
    compute_point_micro_batches: tuple[int | None, ...] = ()  # the points' micro-batches; () unknown
    # the points a probe made (a few steps at another count within one process), not a split that ran:
    # they shape the curve but never judge it (prediction.hindsight_error); () none
    compute_point_probed: tuple[bool, ...] = ()
    tiled_curve: ComputeCurve | None = None  # set by the planner where stairs were learned (plan.stairs)
    tile_samples: int | None = None  # the tile learned with it, where wider than the granularity
    learned_tile_samples: int = 1  # the tile its points (or its tier's) show, whatever the granularity; 1: none
    widest_tile_samples: int | None = None  # the widest tile its points (or its tier's) leave open (plan.stairs)
    # where no tile was learned and one count measured: the curves under each wider tile the tier's
    # points do not rule out (plan.padding); a prediction takes their mean with the plain curve's
    possible_curves: tuple[ComputeCurve, ...] = ()
    possible_tiles: tuple[int, ...] = ()  # their tiles

    @property
    def compute_samples_per_s(self) -> float:
        """s_r: samples per second of compute alone (the step minus comm and data wait)."""
        if self.compute_share:
            return self.samples_per_s / self.compute_share
        return self.samples_per_s

    @property
    def current_compute_s(self) -> float:
        """A step's compute at the split running now, in seconds (0 where the rank runs none)."""
        return self.current_samples / self.compute_samples_per_s if self.current_samples > 0 else 0.0

    def compute_estimate(self) -> tuple[ComputeCurve, Basis]:
        """t_r(n) and what it stands on: the points measured before, and the split running now
        (measured last, so it wins)."""
        if self.current_samples > 0:
            now: tuple[float, float] | None = (self.current_samples, self.current_compute_s)
        else:  # not running now: its speed still gives one point
            now = None if self.compute_points else (1.0, 1.0 / self.compute_samples_per_s)
        ages = self.compute_point_ages_s if len(self.compute_point_ages_s) == len(self.compute_points) \
            else tuple(None for _ in self.compute_points)
        return compute_estimate(self.compute_points, ages, now)

    def compute_curve(self) -> ComputeCurve:
        """t_r(n): over whole-tile work where the planner learned stairs, else compute_estimate's."""
        return self.tiled_curve or self.compute_estimate()[0]

    def expected_time_s(self, samples: int) -> float:
        """t_r(n) where the tile is unknown: the mean over the tiles the points leave open (the plain
        curve among them), a tile's padding never faster than the plain curve."""
        plain_s = self.compute_curve().time_s(samples)
        if not self.possible_curves:
            return plain_s
        return (plain_s + sum(max(plain_s, c.time_s(samples)) for c in self.possible_curves)) / \
            (1 + len(self.possible_curves))

    def measured_points(self) -> list[tuple[int, int | None, float]]:
        """(samples, micro-batch, compute s) of each split measured, the one running now last."""
        micros = self.compute_point_micro_batches if len(self.compute_point_micro_batches) == \
            len(self.compute_points) else tuple(None for _ in self.compute_points)
        points = [(n, m, t) for (n, t), m in zip(self.compute_points, micros, strict=True)]
        if self.current_samples > 0:
            points.append((self.current_samples, self.micro_batch, self.current_compute_s))
        return points


@dataclass(frozen=True)
class PlanRequest:
    global_batch: int  # B, samples per optimizer step over all ranks
    gradient_bytes: float
    memory_safety_margin: float = 0.10  # share of a GPU's memory never planned for
    exclude: frozenset[int] = field(default_factory=frozenset)
    max_micro_batch: int | None = None
    max_accumulation_steps: int | None = None  # 1: no accumulation, memory caps n_r itself
    granularity: int = 1  # n_r a multiple of this (one rank takes B's remainder): GPUs compute whole tiles
    # the step's time beyond the slowest rank's compute, measured at the current split; None: the link model
    measured_comm_s: float | None = None
    link_basis: str | None = None  # the ranks' link rates are a measured all-reduce floor: which (None: the link prior)


@dataclass(frozen=True)
class RankPlan:
    rank: int
    gpu_uuid: str | None
    samples: int  # n_r
    micro_batch: int  # m_r
    accumulation_steps: int  # k_r, n_r = m_r * k_r
    loss_weight: float  # n_r * R / B
    limited_by: tuple[str, ...]  # "excluded", "memory", "integer rounding", "granularity"; empty: none
    compute_s: float = 0.0  # predicted compute per step at n_r (its busy share sets its power draw)


@dataclass(frozen=True)
class Prediction:
    compute_s: float
    allreduce_s: float
    samples: int

    @property
    def step_time_s(self) -> float:
        return self.compute_s + self.allreduce_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_time_s if self.step_time_s > 0 else 0.0


@dataclass(frozen=True)
class TierAlternative:
    """The field's usual answer: train on the fastest homogeneous tier only."""

    tier: str | None
    ranks: tuple[int, ...]
    prediction: Prediction


@dataclass(frozen=True)
class Plan:
    global_batch: int
    ranks: tuple[RankPlan, ...]
    current: Prediction
    proposed: Prediction
    ideal: Prediction
    kept_current: bool  # the proposal was no faster, so the current split stands
    note: str | None
    fast_tier_only: TierAlternative | None
    best_without_tier: TierAlternative | None = None  # the fastest job with one tier left out (its name)
    # what the predictions stand on: each rank's compute curve, and the communication
    compute_basis: tuple[tuple[int, Basis], ...] = ()
    comm_basis: Basis | None = None
    # every count within what its rank measured, the pacing rank's padding in no doubt (plan.interpolation)
    interpolated: bool = False

    @property
    def speedup(self) -> float:
        """Proposed over current, in samples/s (the same as step times when B is unchanged)."""
        current = self.current.samples_per_s
        return self.proposed.samples_per_s / current if current > 0 else math.inf
