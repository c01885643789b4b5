"""The batch-split planner: samples per rank for one box of mixed GPUs.

Pure functions, no I/O. Given what each rank measured, it proposes n_r
samples per optimizer step (a micro-batch m_r that fits in memory times k_r
accumulation steps, n_r = m_r * k_r exactly) so that every rank finishes its
compute at about the same time, and predicts the step time of the current
split, the proposal and the continuous bound (design.md section 6,
docs/planner.md).

Step model: step time = max_r t_r(n_r) + the communication the step waits
for. t_r is the rank's compute time for n_r samples (gpumix.model.compute_curve):
proportional to its compute-only throughput s_r when one split was measured,
interpolated between measured splits when there are more. (A synchronous
job's whole-step rate says only how the batch is split, since every rank
waits for the slowest one.) Communication: measured at the current split when
the ranks report it (the step minus the slowest rank's compute), else a model
of an all-reduce staged through host memory, 2(R-1)/R x gradient bytes over
the slowest effective link (gpumix.model.priors).

Bounds (the TUI and auto re-plan call this too, so a plan must never stall): a request is
refused in one line (PlanError, a ValueError) when its global batch is outside 1..10**7, its
gradient size is not finite and positive, its granularity exceeds the batch, it excludes ranks
that do not exist or every rank, or a measurement is implausible (inf, nan, 1e30 samples).
A rank accumulates at most MAX_ACCUMULATION_STEPS micro-batches unless the request says
otherwise, so where memory is known it bounds the samples per rank. The search itself is
bounded in moves, scanned values and dynamic-programming work, with SEARCH_LIMIT_S as a
safety net.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.step_model import Basis, CommModel, compute_estimate

_EPS = 1e-12

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


class _Deadline:
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

    @property
    def compute_samples_per_s(self) -> float:
        """s_r: samples per second of compute alone (the step minus comm and data wait)."""
        if self.compute_share:
            return self.samples_per_s / self.compute_share
        return self.samples_per_s

    def compute_estimate(self) -> tuple[ComputeCurve, Basis]:
        """t_r(n) and what it stands on: the points measured before, and the split running now
        (measured last, so it wins)."""
        speed = self.compute_samples_per_s
        if self.current_samples > 0:
            now: tuple[float, float] | None = (self.current_samples, self.current_samples / speed)
        else:  # not running now: its speed still gives one point
            now = None if self.compute_points else (1.0, 1.0 / speed)
        ages = self.compute_point_ages_s if len(self.compute_point_ages_s) == len(self.compute_points) \
            else tuple(None for _ in self.compute_points)
        return compute_estimate(self.compute_points, ages, now)

    def compute_curve(self) -> ComputeCurve:
        return self.compute_estimate()[0]


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


@dataclass(frozen=True)
class RankPlan:
    rank: int
    gpu_uuid: str | None
    samples: int  # n_r
    micro_batch: int  # m_r
    accumulation_steps: int  # k_r, n_r = m_r * k_r
    loss_weight: float  # n_r * R / B
    limited_by: tuple[str, ...]  # "excluded", "memory", "integer rounding", "granularity"; empty: none


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

    @property
    def speedup(self) -> float:
        """Proposed over current, in samples/s (the same as step times when B is unchanged)."""
        current = self.current.samples_per_s
        return self.proposed.samples_per_s / current if current > 0 else math.inf


# -- memory -----------------------------------------------------------------------------------


def estimate_mem_per_sample(points: Sequence[tuple[int, float]]) -> float | None:
    """Bytes per sample of a micro-batch: least-squares slope of peak memory over
    micro-batch size. None with fewer than two distinct sizes or a slope <= 0."""
    if len({m for m, _ in points}) < 2:
        return None
    mean_m = sum(m for m, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    spread = sum((m - mean_m) ** 2 for m, _ in points)
    slope = sum((m - mean_m) * (b - mean_b) for m, b in points) / spread
    return slope if slope > 0 else None


def micro_batch_cap(measure: RankMeasure, request: PlanRequest) -> int | None:
    """The largest micro-batch that fits, or None when nothing limits it.

    The margin applies in both cases: torch's peak misses the CUDA context and
    fragmentation. Without a per-sample figure the whole peak is taken to grow
    with the micro-batch, which overestimates the cost of a sample: safe.
    The current micro-batch runs already, so the cap is never below it.
    """
    cap: int | None = None
    if measure.mem_total_bytes and measure.mem_peak_bytes and measure.micro_batch:
        usable = measure.mem_total_bytes * (1.0 - request.memory_safety_margin)
        per_sample = measure.mem_per_sample_bytes
        if per_sample:
            fixed = measure.mem_peak_bytes - per_sample * measure.micro_batch
            cap = math.floor((usable - fixed) / per_sample)
        else:
            cap = math.floor(usable * measure.micro_batch / measure.mem_peak_bytes)
        cap = max(cap, measure.micro_batch)
    if request.max_micro_batch is not None:
        cap = request.max_micro_batch if cap is None else min(cap, request.max_micro_batch)
    return None if cap is None else max(1, cap)


def effective_max_k(request: PlanRequest) -> int:
    """The accumulation steps a rank may take: as requested, else MAX_ACCUMULATION_STEPS."""
    return request.max_accumulation_steps or MAX_ACCUMULATION_STEPS


def factorize(samples: int, cap: int | None, max_k: int) -> tuple[int, int] | None:
    """(m, k) with m * k == samples, m <= cap, k <= max_k and k as small as possible; None if none."""
    if cap is None or samples <= cap:
        return samples, 1
    for k in range(math.ceil(samples / cap), min(max_k, samples) + 1):
        if samples % k == 0:
            return samples // k, k
    return None


def _good(samples: int, cap: int | None, max_k: int) -> bool:
    """Splits into equal micro-batches at least half the cap: accumulation, but no tiny
    micro-batches (a prime n_r above the cap would need micro-batches of one). The smallest
    k that divides gives the largest micro-batch, so only k up to 2n/cap can do."""
    if cap is None or samples <= cap:
        return True
    high_k = min(max_k, 2 * samples // cap)
    return any(samples % k == 0 for k in range(math.ceil(samples / cap), high_k + 1))


def _good_at_most(samples: int, cap: int | None, max_k: int) -> int:
    """The largest count <= samples that is _good: some m * k with cap/2 <= m <= cap, k <= max_k
    (one pass over k, not a walk down the counts)."""
    if cap is None or samples <= cap:
        return samples
    half = math.ceil(cap / 2)
    best = cap
    for k in range(2, min(max_k, samples // half) + 1):
        micro = min(cap, samples // k)
        if micro >= half:
            best = max(best, micro * k)
    return best


# -- prediction -------------------------------------------------------------------------------


def comm_model(measures: Sequence[RankMeasure], request: PlanRequest) -> CommModel:
    running = [m for m in measures if m.current_samples > 0]
    slowest = max((m.compute_curve().time_s(m.current_samples) for m in running), default=None)
    return CommModel(request.gradient_bytes, request.measured_comm_s, tuple(m.link_bytes_per_s for m in running),
                     slowest if request.measured_comm_s is not None else None)


def predict(samples: Sequence[int], measures: Sequence[RankMeasure], comm: CommModel) -> Prediction:
    taking_part = [(n, m) for n, m in zip(samples, measures, strict=True) if n > 0]
    compute = max((m.compute_curve().time_s(n) for n, m in taking_part), default=0.0)
    waits = comm.seconds([m.link_bytes_per_s for _, m in taking_part], compute)
    return Prediction(compute_s=compute, allreduce_s=waits, samples=sum(samples))


def _balanced_shares(total: int, curves: Sequence[ComputeCurve], lower: Sequence[float],
                     upper: Sequence[float]) -> tuple[list[float], float]:
    """Continuous shares that finish together: the time T at which the ranks, each held within
    [lower, upper], compute `total` samples between them (bisection on T). (shares, T)"""
    def shares_at(time_s: float) -> list[float]:
        return [min(high, max(low, c.samples_within(time_s)))
                for c, low, high in zip(curves, lower, upper, strict=True)]
    low, high = 0.0, max(c.time_s(total) for c in curves)
    for _ in range(200):
        if sum(shares_at(high)) >= total:
            break
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        if sum(shares_at(middle)) < total:
            low = middle
        else:
            high = middle
    shares = shares_at(high)
    excess = sum(shares) - total  # T is exact to rounding: give the excess back where there is room
    for i in sorted(range(len(shares)), key=lambda i: shares[i] - lower[i], reverse=True):
        give = min(excess, shares[i] - lower[i])
        shares[i] -= give
        excess -= give
    return shares, high


def ideal(global_batch: int, measures: Sequence[RankMeasure], comm: CommModel) -> Prediction:
    """The bound: a continuous split where every rank finishes together, no memory or integer limits."""
    curves = [m.compute_curve() for m in measures]
    _, time_s = _balanced_shares(global_batch, curves, [0.0] * len(curves), [float(global_batch)] * len(curves))
    waits = comm.seconds([m.link_bytes_per_s for m in measures], time_s)
    return Prediction(compute_s=time_s, allreduce_s=waits, samples=global_batch)


# -- the split --------------------------------------------------------------------------------


def _round(total: int, shares: Sequence[float], upper: Sequence[int]) -> list[int]:
    """Largest-remainder rounding: floors, then +1 to the largest fractions, sum exact."""
    counts = [min(upper[i], max(1, math.floor(x + 1e-9))) for i, x in enumerate(shares)]
    order = sorted(range(len(shares)), key=lambda i: shares[i] - counts[i], reverse=True)
    for i in order:
        if sum(counts) >= total:
            break
        if counts[i] < upper[i]:
            counts[i] += 1
    return counts


def _improve(counts: list[int], curves: Sequence[ComputeCurve], upper: Sequence[int],
             deadline: _Deadline) -> None:
    """Move single samples from the slowest rank to the one that stays fastest after
    taking it, while that lowers the slowest time (rounding leaves a few moves to make)."""
    for _ in range(min(sum(counts) * len(counts) + 1, MAX_IMPROVE_MOVES)):
        deadline.check()
        times = [c.time_s(n) for n, c in zip(counts, curves, strict=True)]
        slow = max(range(len(counts)), key=times.__getitem__)
        takers = [j for j in range(len(counts)) if j != slow and counts[j] < upper[j]]
        if counts[slow] <= 1 or not takers:
            return
        taker = min(takers, key=lambda j: curves[j].time_s(counts[j] + 1))
        if curves[taker].time_s(counts[taker] + 1) >= times[slow] - _EPS:
            return
        counts[slow] -= 1
        counts[taker] += 1


def _min_max_exact(total: int, choices: Sequence[Sequence[int]], curves: Sequence[ComputeCurve],
                   deadline: _Deadline) -> list[int] | None:
    """One value from each rank's choices, summing to total, with the least max time.
    Dynamic programming over partial sums; the choices are short windows, so it is small.
    None when no such values exist, or the search would pass MAX_DP_WORK."""
    work = 0
    lows = [min(c) if c else 0 for c in choices]
    highs = [max(c) if c else 0 for c in choices]
    layer: dict[int, float] = {0: 0.0}
    back: list[dict[int, tuple[int, int]]] = []
    for j, values in enumerate(choices):
        low_after, high_after = sum(lows[j + 1:]), sum(highs[j + 1:])
        times = {v: curves[j].time_s(v) for v in values}
        nxt: dict[int, float] = {}
        ptr: dict[int, tuple[int, int]] = {}
        work += len(layer) * len(values)
        if work > MAX_DP_WORK:
            return None
        deadline.check()
        for partial, time_s in layer.items():
            for v in values:
                reach = partial + v
                if not total - high_after <= reach <= total - low_after:
                    continue
                t = max(time_s, times[v])
                if reach not in nxt or t < nxt[reach]:
                    nxt[reach], ptr[reach] = t, (partial, v)
        if not nxt:
            return None
        layer = nxt
        back.append(ptr)
    if total not in layer:
        return None
    picked, partial = [], total
    for ptr in reversed(back):
        partial, v = ptr[partial]
        picked.append(v)
    return picked[::-1]


def _fit_micro_batches(
    counts: list[int], curves: Sequence[ComputeCurve], caps: Sequence[int | None],
    upper: Sequence[int], max_k: int, deadline: _Deadline,
) -> None:
    """Make every count split into good micro-batches (_good) at the least max time:
    an exact search over windows around the counts, wider until a split is found (while the
    windows stay within MAX_SEARCH_VALUES)."""
    if all(_good(n, cap, max_k) for n, cap in zip(counts, caps, strict=True)):
        return
    total = sum(counts)
    for width in (4, 16, 64):
        windows = [(max(1, n - reach), min(high, n + reach)) for n, cap, high in zip(counts, caps, upper, strict=True)
                   for reach in [width * (1 if cap is None else math.ceil(n / cap))]]  # gaps grow with k
        if sum(high - low + 1 for low, high in windows) > MAX_SEARCH_VALUES:
            break
        deadline.check()
        choices = [[v for v in range(low, high + 1) if _good(v, cap, max_k)]
                   for (low, high), cap in zip(windows, caps, strict=True)]
        best = _min_max_exact(total, choices, curves, deadline)
        if best is not None:
            counts[:] = best
            return
    # No good split near: snap down, and one rank takes the rest with smaller micro-batches.
    shed = 0
    for i, cap in enumerate(caps):
        snapped = _good_at_most(counts[i], cap, max_k)
        shed += counts[i] - snapped
        counts[i] = snapped
    fits = [j for j, n in enumerate(counts)
            if n + shed <= upper[j] and factorize(n + shed, caps[j], max_k) is not None]
    if not fits:
        raise ValueError("no split of the global batch fits the memory and accumulation limits")
    j = min(fits, key=lambda j: curves[j].time_s(counts[j] + shed))
    counts[j] += shed


def _snap_to_granularity(
    counts: list[int], curves: Sequence[ComputeCurve], caps: Sequence[int | None],
    upper: Sequence[int], max_k: int, granularity: int, deadline: _Deadline,
) -> bool:
    """Counts in whole multiples of `granularity`, the least max time among nearby such splits;
    then B's remainder goes to the rank it slows least. False (counts unchanged) when none fits."""
    total = sum(counts)
    rest = total % granularity
    choices = []
    for n, high in zip(counts, upper, strict=True):
        units = range(max(1, n // granularity - 3), n // granularity + 4)
        choices.append([u * granularity for u in units if u * granularity <= high])
    best = _min_max_exact(total - rest, choices, curves, deadline)
    if best is None:
        return False
    if rest:
        takers = [j for j, n in enumerate(best) if n + rest <= upper[j]]
        if not takers:
            return False
        j = min(takers, key=lambda j: curves[j].time_s(best[j] + rest))
        best[j] += rest
    if not all(_good(n, cap, max_k) for n, cap in zip(best, caps, strict=True)):
        return False  # whole tiles would need tiny micro-batches somewhere: keep the counts
    counts[:] = best
    return True


def _split(
    global_batch: int, measures: Sequence[RankMeasure], request: PlanRequest, deadline: _Deadline,
) -> tuple[list[int], list[int | None], list[float]]:
    """(counts, caps, continuous shares) for ranks that take part."""
    curves = [m.compute_curve() for m in measures]
    caps = [micro_batch_cap(m, request) for m in measures]
    max_k = effective_max_k(request)
    upper = [global_batch if c is None else min(global_batch, c * max_k) for c in caps]
    if global_batch < len(measures):
        raise ValueError(f"global batch {global_batch} is smaller than the {len(measures)} ranks")
    if sum(upper) < global_batch:
        raise ValueError(f"global batch {global_batch} does not fit: memory and at most {max_k} accumulation"
                         f" steps allow {sum(upper)} samples per step on these ranks")
    shares, _ = _balanced_shares(global_batch, curves, [1.0] * len(curves), [float(u) for u in upper])
    counts = _round(global_batch, shares, upper)
    _improve(counts, curves, upper, deadline)
    _fit_micro_batches(counts, curves, caps, upper, max_k, deadline)
    if request.granularity > 1:
        _snap_to_granularity(counts, curves, caps, upper, max_k, request.granularity, deadline)
    return counts, caps, shares


def _reasons(
    n: int, k: int, share: float, upper: int, time_s: float, pace_s: float,
    unbounded_share: float, granularity: int = 1,
) -> tuple[str, ...]:
    reasons = []
    if k > 1 or (n == upper and upper < unbounded_share - 1e-9):
        reasons.append("memory")
    # Integers matter where they set the pace: a rank above its continuous share that the
    # whole step waits for.
    if n > share + 1e-9 and time_s >= pace_s - 1e-12:
        reasons.append("granularity" if granularity > 1 else "integer rounding")
    return tuple(reasons)


def fastest_tier(measures: Sequence[RankMeasure], exclude: frozenset[int]) -> list[RankMeasure]:
    """The tier with the highest median compute speed per card; ranks without a tier
    form one group of their own."""
    tiers: dict[str | None, list[RankMeasure]] = {}
    for m in measures:
        if m.rank not in exclude:
            tiers.setdefault(m.tier, []).append(m)
    return max(tiers.values(), key=lambda group: median(m.compute_samples_per_s for m in group))


def _current_is_candidate(
    measures: Sequence[RankMeasure], request: PlanRequest, caps: Sequence[int | None]
) -> bool:
    """The current split counts as an answer only if it meets this request: same B, the
    same ranks, micro-batches within the caps."""
    if sum(m.current_samples for m in measures) != request.global_batch:
        return False
    for m, cap in zip(measures, caps, strict=True):
        if (m.rank in request.exclude) != (m.current_samples == 0):
            return False
        micro = m.micro_batch or m.current_samples
        if m.current_samples and (m.current_samples % micro or (cap is not None and micro > cap)):
            return False
    return True


def _finite(value: float | None, low: float, high: float) -> bool:
    return value is not None and math.isfinite(value) and low <= value <= high


def check_request(measures: Sequence[RankMeasure], request: PlanRequest) -> None:
    """Refuse what no search should run on, with one line (PlanError): absurd batches,
    sizes and exclusions, and measurements that cannot be (inf, nan, 1e30 samples)."""
    B = request.global_batch
    if not 1 <= B <= MAX_GLOBAL_BATCH:
        raise PlanError(f"global batch {B}: must be 1 to {MAX_GLOBAL_BATCH} samples per step")
    if not _finite(request.gradient_bytes, 1.0, 1e15):
        raise PlanError(f"gradient size {request.gradient_bytes!r} bytes: must be a finite size > 0")
    if not 1 <= request.granularity <= B:
        raise PlanError(f"granularity {request.granularity}: must be 1 to the global batch ({B})")
    if not _finite(request.memory_safety_margin, 0.0, 0.99):
        raise PlanError("the memory safety margin must be 0 to 0.99")
    for name in ("max_micro_batch", "max_accumulation_steps"):
        limit = getattr(request, name)
        if limit is not None and not 1 <= limit <= MAX_GLOBAL_BATCH:
            raise PlanError(f"{name} {limit}: must be 1 to {MAX_GLOBAL_BATCH}")
    if request.measured_comm_s is not None and not _finite(request.measured_comm_s, 0.0, 1e6):
        raise PlanError(f"measured communication {request.measured_comm_s!r} s: not a plausible time")
    ranks = {m.rank for m in measures}
    if len(ranks) != len(measures):
        raise PlanError("two measurements name the same rank")
    unknown = sorted(request.exclude - ranks)
    if unknown:
        raise PlanError(f"excluded ranks {unknown} are not in the job (ranks {sorted(ranks)})")
    if not ranks - request.exclude:
        raise PlanError("every rank is excluded")
    for m in measures:
        _check_measure(m, taking_part=m.rank not in request.exclude)


def _check_measure(m: RankMeasure, taking_part: bool) -> None:
    def refuse(what: str) -> None:
        raise PlanError(f"rank {m.rank}: {what}: not a plausible measurement")

    if not 0 <= m.current_samples <= MAX_GLOBAL_BATCH:
        refuse(f"{m.current_samples} samples per step")
    if taking_part and not _finite(m.compute_samples_per_s, 1e-9, 1e12):
        refuse(f"{m.compute_samples_per_s!r} samples/s of compute")
    if not (m.link_bytes_per_s > 0):  # inf: no link limit known; nan fails this too
        refuse(f"link {m.link_bytes_per_s!r} bytes/s")
    for name in ("mem_total_bytes", "mem_peak_bytes", "mem_per_sample_bytes"):
        value = getattr(m, name)
        if value is not None and not _finite(value, 0.0, 2.0**60):
            refuse(f"{name} {value!r}")
    if m.micro_batch is not None and not 0 <= m.micro_batch <= MAX_GLOBAL_BATCH:
        refuse(f"micro-batch {m.micro_batch}")
    for samples, seconds in m.compute_points:
        if not (0 < samples <= MAX_GLOBAL_BATCH and _finite(seconds, 0.0, 1e6)):
            refuse(f"an earlier split of {samples} samples in {seconds!r} s")


def plan(measures: Sequence[RankMeasure], request: PlanRequest, time_limit_s: float = SEARCH_LIMIT_S) -> Plan:
    """The split for `request`; PlanError (a ValueError, one line) for a request refused."""
    check_request(measures, request)
    deadline = _Deadline(time_limit_s)
    measures = sorted(measures, key=lambda m: m.rank)
    part = [m for m in measures if m.rank not in request.exclude]
    B = request.global_batch
    comm = comm_model(measures, request)
    counts, caps, shares = _split(B, part, request, deadline)
    unbounded, _ = _balanced_shares(B, [m.compute_curve() for m in part], [1.0] * len(part), [float(B)] * len(part))
    by_rank = {m.rank: i for i, m in enumerate(part)}
    proposed_counts = [counts[by_rank[m.rank]] if m.rank in by_rank else 0 for m in measures]

    current_counts = [m.current_samples for m in measures]
    current = predict(current_counts, measures, comm)
    proposed = predict(proposed_counts, measures, comm)
    all_caps = [micro_batch_cap(m, request) for m in measures]
    kept = _current_is_candidate(measures, request, all_caps) and (
        proposed.step_time_s >= current.step_time_s - 1e-12
    )
    note = None
    R = len(part)
    max_k = effective_max_k(request)
    ranks = []
    if kept:
        proposed = current
        note = "the current split is already as fast as any split found: kept"
        for m in measures:
            n = m.current_samples
            micro = m.micro_batch or n
            ranks.append(RankPlan(
                rank=m.rank, gpu_uuid=m.gpu_uuid, samples=n, micro_batch=micro,
                accumulation_steps=n // micro if n else 0, loss_weight=n * R / B,
                limited_by=() if n else ("excluded",),
            ))
    else:
        upper_of = {m.rank: (B if c is None else min(B, c * max_k)) for m, c in zip(part, caps, strict=True)}
        for m in measures:
            if m.rank not in by_rank:
                ranks.append(RankPlan(m.rank, m.gpu_uuid, 0, 0, 0, 0.0, ("excluded",)))
                continue
            i = by_rank[m.rank]
            n = counts[i]
            micro, k = factorize(n, caps[i], max_k) or (n, 1)
            ranks.append(RankPlan(
                rank=m.rank, gpu_uuid=m.gpu_uuid, samples=n, micro_batch=micro,
                accumulation_steps=k, loss_weight=n * R / B,
                limited_by=_reasons(n, k, shares[i], upper_of[m.rank],
                                    m.compute_curve().time_s(n), proposed.compute_s, unbounded[i],
                                    request.granularity),
            ))
        if proposed.step_time_s >= current.step_time_s - 1e-12:
            note = "this request (batch, ranks or limits) is no faster than the current split"

    tier = fastest_tier(measures, request.exclude)
    fast = None
    if len(tier) < len(part):
        try:
            tier_counts, _, _ = _split(B, tier, request, deadline)
        except PlanError:
            raise
        except ValueError:  # B does not fit on the tier alone
            tier_counts = None
        if tier_counts is not None:
            fast = TierAlternative(
                tier=tier[0].tier, ranks=tuple(m.rank for m in tier),
                prediction=predict(tier_counts, tier, comm),
            )
    return Plan(
        global_batch=B, ranks=tuple(ranks), current=current, proposed=proposed,
        ideal=ideal(B, part, comm), kept_current=kept, note=note, fast_tier_only=fast,
        best_without_tier=best_without_tier(part, request, comm, deadline),
        compute_basis=tuple((m.rank, m.compute_estimate()[1]) for m in part),
        comm_basis=comm.basis([m.link_bytes_per_s for m in part]),
    )


def best_without_tier(part: Sequence[RankMeasure], request: PlanRequest, comm: CommModel,
                      deadline: _Deadline) -> TierAlternative | None:
    """Leave one tier out (its cards for eval): a slow tier on slow links can pace every
    all-reduce, so the job may be faster without it. The best such option, if any tier exists
    whose absence beats nothing; `tier` names the tier left out, `ranks` the ranks kept."""
    tiers = sorted({m.tier for m in part if m.tier is not None})
    best: TierAlternative | None = None
    for tier in tiers if len(tiers) > 1 else []:
        kept = [m for m in part if m.tier != tier]
        try:
            counts, _, _ = _split(request.global_batch, kept, request, deadline)
        except PlanError:
            raise
        except ValueError:  # B does not fit on the rest
            continue
        prediction = predict(counts, kept, comm)
        if best is None or prediction.samples_per_s > best.prediction.samples_per_s:
            best = TierAlternative(tier=tier, ranks=tuple(m.rank for m in kept), prediction=prediction)
    return best


def _prediction_json(p: Prediction) -> dict[str, float]:
    return {"step_time_s": p.step_time_s, "compute_s": p.compute_s,
            "allreduce_s": p.allreduce_s, "samples_per_s": p.samples_per_s}


def plan_to_json(p: Plan) -> dict[str, Any]:
    fast = None
    if p.fast_tier_only is not None:
        alt = p.fast_tier_only
        fast = {"tier": alt.tier, "ranks": list(alt.ranks), **_prediction_json(alt.prediction),
                "speedup_over_current": (alt.prediction.samples_per_s / p.current.samples_per_s
                                         if p.current.samples_per_s > 0 else None)}
    return {
        "global_batch": p.global_batch,
        "ranks": [
            {"rank": r.rank, "gpu_uuid": r.gpu_uuid, "samples": r.samples,
             "micro_batch": r.micro_batch, "accumulation_steps": r.accumulation_steps,
             "n_r": r.samples, "m_r": r.micro_batch, "k_r": r.accumulation_steps,  # the math's names
             "loss_weight": r.loss_weight, "limited_by": list(r.limited_by) or None}
            for r in p.ranks
        ],
        "current": _prediction_json(p.current),
        "proposed": _prediction_json(p.proposed),
        "ideal": _prediction_json(p.ideal),
        "speedup": p.speedup if math.isfinite(p.speedup) else None,  # None: nothing runs now
        "kept_current": p.kept_current,
        "note": p.note,
        "fast_tier_only": fast,
        "basis": {"compute": [{"rank": rank, **basis.to_json()} for rank, basis in p.compute_basis],
                  "communication": p.comm_basis.to_json() if p.comm_basis else None},
        "without_tier": None if p.best_without_tier is None else {
            "tier_left_out": p.best_without_tier.tier, "ranks": list(p.best_without_tier.ranks),
            **_prediction_json(p.best_without_tier.prediction),
            "speedup_over_current": (p.best_without_tier.prediction.samples_per_s / p.current.samples_per_s
                                     if p.current.samples_per_s > 0 else None)},
    }
