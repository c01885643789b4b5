"""Fit the GPUs' power caps under a machine budget at the least cost in throughput.

Pure functions. Cards give up watts in steps, each step taken from the card
whose cut costs the job least: in synchronous data-parallel training a card
that waits for the slowest rank loses nothing until it becomes the slowest
itself, so the fast tier of a mixed box usually gives up watts first.
Throughput under a cap follows the step model's power curve (gpumix.model.step_model.PowerCurve):
learned from the caps a card has run at where the hub has such points, else the prior
min(1, (cap/default)^0.25); each proposal says which (its basis). Below a learned curve's lowest
measured cap the fit takes speed at most in proportion to the watts above static draw (the step model's
extrapolation there is kinder than published sweeps), and a card cut there must still wait for the slowest.
A card in the running job may be raised above its stock (default) limit, up to its maximum settable
limit, where the budget leaves room and it paces the job. The step model's curve is flat there (the
prior is at most 1, and nothing above stock is measured), so the fit assumes the prior's shape,
(cap/top)^ABOVE_STOCK_EXPONENT, beyond top = the higher of the default limit and the highest measured
cap. Such a fit is kept only where every card in the job has a learned curve (the watts a raise takes
come from cuts whose cost is then measured) and it is predicted RAISE_MIN_GAIN faster than the fit
that only cuts; else the fit only cuts (docs/power.md, "Caps above stock").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpumix.model.step_model import Basis, PowerCurve

STEP_W = 5.0
MAX_POWER_POINTS = 32  # caps per card the fit reads (the hub keeps at most as many)
ABOVE_STOCK_EXPONENT = 0.25  # assumed speed ~ cap^this above stock: the prior's shape (half of it gained less)
# a fit that raises a card is kept only where it is predicted this much faster than the one that
# does not, and only where every card in the job has a learned curve (its cuts' costs are measured)
RAISE_MIN_GAIN = 0.01
# the draw that buys no speed, as a share of the default limit (a GeForce card idles at ~20-35 W: the
# split-draw idle prior); below a learned curve's measured caps speed is taken at most in proportion to
# the watts above it
STATIC_SHARE_PRIOR = 0.08
ABOVE_STOCK_CURVE = f"above stock: assumed throughput x (cap/stock)^{ABOVE_STOCK_EXPONENT:g}, not measured"


CAP_MATCH_W = 0.5  # caps are set in whole watts: two within half a watt are the same cap


def same_cap(a_w: float, b_w: float) -> bool:
    """Whether two caps are the same one (a point at the cap in force is that cap's live figure)."""
    return abs(a_w - b_w) < CAP_MATCH_W


class BudgetError(ValueError):
    """The budget cannot be met; str() is the one line shown."""


@dataclass(frozen=True)
class GpuPower:
    index: int
    uuid: str
    tier: str
    cap_w: float
    default_w: float
    min_w: float
    max_w: float
    compute_s: float | None = None  # its rank's compute time per step at cap_w, when a job runs
    comm_s: float = 0.0  # the job's all-reduce time (does not depend on power)
    # (cap_w, compute seconds per step at the same split) measured at other caps, and their ages
    power_points: tuple[tuple[float, float], ...] = ()
    power_point_ages_s: tuple[float | None, ...] = ()
    learned_from: str | None = None  # power_points are scaled from another card of this model (its name)

    def power_curve(self) -> PowerCurve:
        points = list(self.power_points)
        ages = list(self.power_point_ages_s) if len(self.power_point_ages_s) == len(points) else [None] * len(points)
        if self.compute_s is not None:  # the cap in force, measured now: it replaces an older point there
            kept = [(p, a) for p, a in zip(points, ages, strict=True) if not same_cap(p[0], self.cap_w)]
            points, ages = [p for p, _ in kept], [a for _, a in kept]
            points.append((self.cap_w, self.compute_s))
            ages.append(0.0)
        return PowerCurve.learned(self.default_w, points, ages, self.learned_from)


@dataclass(frozen=True)
class CapProposal:
    index: int
    uuid: str
    tier: str
    old_w: float
    new_w: float
    reason: str
    basis: Basis = Basis()
    above_stock: bool = False  # new_w is above the card's default limit (the fit raised it there)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "tier": self.tier, "old_w": self.old_w,
                "new_w": self.new_w, "reason": self.reason, "basis": self.basis.to_json(),
                "above_stock": self.above_stock, **({"above_stock_curve": ABOVE_STOCK_CURVE} if self.above_stock else {})}


@dataclass(frozen=True)
class BudgetFit:
    budget_w: float
    caps_before_w: float
    caps_after_w: float
    step_before_s: float | None
    step_after_s: float | None
    throughput_kept: float  # predicted, 1.0 = nothing lost
    proposals: list[CapProposal]

    def to_json(self) -> dict[str, Any]:
        return {
            "budget_w": self.budget_w, "caps_before_w": self.caps_before_w, "caps_after_w": self.caps_after_w,
            "step_before_s": self.step_before_s, "step_after_s": self.step_after_s,
            "throughput_kept": self.throughput_kept,
            "gpus": [proposal.to_json() for proposal in self.proposals],
        }


def _relative_time(gpu: GpuPower, cap_w: float) -> float:
    """Compute time at cap_w over that at top (the higher of the default limit and the highest
    measured cap): the step model's curve up to top, the assumed shape above it; below a learned
    curve's lowest measured cap, no faster than the static-power bound (_below_measured_bound)."""
    curve = gpu.power_curve()
    top_w = max([gpu.default_w, *(c for c, _ in curve.points)])
    if cap_w <= top_w:
        ratio = curve.time_ratio(top_w, cap_w)
        if len(curve.points) >= 2 and cap_w < curve.points[0][0]:
            low_w = curve.points[0][0]
            ratio = max(ratio, curve.time_ratio(top_w, low_w) * _below_measured_bound(gpu.default_w, low_w, cap_w))
        return ratio
    return (top_w / cap_w) ** ABOVE_STOCK_EXPONENT


def _below_measured_bound(default_w: float, low_w: float, cap_w: float) -> float:
    """Time at cap_w over time at low_w (a lower cap than the lowest measured) when speed is at most in
    proportion to the watts above static draw: at low caps the voltage is at its floor and the clock
    follows dynamic power alone; a part of the step that does not slow (fixed costs) only makes the
    true ratio smaller. The step model's extrapolation there (the prior's fourth root, or the lowest
    segment's line) is kinder than every published sweep below ~70 % of the default limit."""
    static_w = STATIC_SHARE_PRIOR * default_w
    floor_w = max(0.01 * default_w, 1.0)  # a cap at or under the static draw (or a 0 W default): slow, finite
    return max(1.0, (low_w - static_w) / max(cap_w - static_w, floor_w))


def _time_ratio(gpu: GpuPower, from_w: float, to_w: float) -> float:
    """Compute seconds at to_w over those at from_w (>1: slower)."""
    return _relative_time(gpu, to_w) / _relative_time(gpu, from_w)


def time_ratio(gpu: GpuPower, from_w: float, to_w: float) -> float:
    """The fit's compute seconds at to_w over those at from_w: the step model's curve, the static-power
    bound below a learned curve's measured caps, the assumed shape above the top (for other fits' figures)."""
    return _time_ratio(gpu, from_w, to_w)


def _compute_at(gpu: GpuPower, cap_w: float) -> float | None:
    if gpu.compute_s is None:
        return None
    return gpu.compute_s * _time_ratio(gpu, gpu.cap_w, cap_w)


def _kept_at(gpu: GpuPower, from_w: float, to_w: float) -> float:
    """Throughput kept going from one cap to another (1: nothing lost)."""
    return 1.0 / _time_ratio(gpu, from_w, to_w)


def _upper_w(gpu: GpuPower, raise_above_stock: bool) -> float:
    """Where the fit starts a card: its cap in force (at most its maximum), or, for a card in the job
    when raising is allowed, its maximum settable limit (only where that is known)."""
    stock = min(gpu.cap_w, gpu.max_w) if math.isfinite(gpu.max_w) else gpu.cap_w
    if raise_above_stock and gpu.compute_s is not None and math.isfinite(gpu.max_w) and gpu.max_w > stock:
        return gpu.max_w
    return stock


def _lower_idle_raises(in_job: list[GpuPower], caps: dict[int, float], step_w: float) -> None:
    """A card left above its cap in force that does not pace the job gains nothing there: back down
    toward that cap while the job's step stays as it is."""
    for gpu in in_job:
        while caps[gpu.index] > gpu.cap_w + 1e-9:
            trial = dict(caps)
            trial[gpu.index] = max(gpu.cap_w, caps[gpu.index] - step_w)
            if (_job_step(in_job, trial) or 0.0) > (_job_step(in_job, caps) or 0.0) + 1e-12:
                break
            caps[gpu.index] = trial[gpu.index]


def _job_step(gpus: list[GpuPower], caps: dict[int, float]) -> float | None:
    times = [_compute_at(gpu, caps[gpu.index]) for gpu in gpus]
    known = [t for t in times if t is not None]
    if not known:
        return None
    return max(known) + max(gpu.comm_s for gpu in gpus)


def _standalone_loss(gpu: GpuPower, caps: dict[int, float], cut_w: float, weight: float) -> float:
    """Without a job: a card's share of the box's throughput (by its default power) times its loss."""
    return weight * (1.0 - _kept_at(gpu, caps[gpu.index], caps[gpu.index] - cut_w))


def fit_to_budget(gpus: list[GpuPower], budget_w: float, step_w: float = STEP_W,
                  raise_above_stock: bool = True) -> BudgetFit:
    """Caps whose sum is within budget_w at the least predicted cost; with raise_above_stock, cards in
    the job start at their maximum limit and are cut from there (never above budget_w or the maximum)."""
    if budget_w <= 0:
        raise BudgetError(f"the budget must be positive, got {budget_w:g} W")
    floor = sum(gpu.min_w for gpu in gpus)
    if budget_w < floor:
        raise BudgetError(f"a {budget_w:.0f} W budget is below the sum of the cards' minimum caps ({floor:.0f} W)")
    if raise_above_stock:
        return _fit_raising(gpus, budget_w, step_w)
    return _fit(gpus, budget_w, step_w, raise_above_stock=False)


def _fit(gpus: list[GpuPower], budget_w: float, step_w: float, raise_above_stock: bool) -> BudgetFit:
    """Cards give up watts in steps, each from the card whose cut costs least, from their caps in force
    (or, raising, from their maximum limits) until the budget holds."""
    caps = {gpu.index: min(gpu.cap_w, gpu.max_w) for gpu in gpus}
    in_job = [gpu for gpu in gpus if gpu.compute_s is not None]
    step_before = _job_step(in_job, caps) if in_job else None
    caps = {gpu.index: _upper_w(gpu, raise_above_stock and bool(in_job)) for gpu in gpus}
    total_default = sum(gpu.default_w for gpu in gpus) or 1.0
    lowest_w = {gpu.index: _lowest_measured_w(gpu) for gpu in gpus}
    while sum(caps.values()) > budget_w + 1e-9:
        best: tuple[tuple[bool, float, bool, float], GpuPower] | None = None
        for gpu in gpus:
            cut = min(step_w, caps[gpu.index] - gpu.min_w, sum(caps.values()) - budget_w)
            if cut <= 1e-9:
                continue
            if gpu.compute_s is not None:
                trial = dict(caps)
                trial[gpu.index] -= cut
                cost = (_job_step(in_job, trial) or 0.0) - (_job_step(in_job, caps) or 0.0)
            elif in_job:
                cost = 0.0  # not in the running job: its watts cost the job nothing
            else:
                cost = _standalone_loss(gpu, caps, cut, gpu.default_w / total_default)
            # watts that cost something below a learned curve's measured caps come last (extrapolated,
            # and speed falls fastest there); a card that still waits under the static-power bound gives
            # them for free, after the free measured ones. Then least cost per watt; on a tie, the
            # card furthest above its minimum
            below = caps[gpu.index] - cut < lowest_w[gpu.index] - 1e-9
            key = (below and cost > 1e-12, cost / cut, below, -(caps[gpu.index] - gpu.min_w))
            if best is None or key < best[0]:
                best = (key, gpu)
        if best is None:
            break
        gpu = best[1]
        caps[gpu.index] -= min(step_w, caps[gpu.index] - gpu.min_w, sum(caps.values()) - budget_w)
    _lower_idle_raises(in_job, caps, step_w)
    # Cut caps are proposed in 0.1 W: rounded down, never up, so they still fit the budget (and stay >= the minimum).
    caps = {g.index: caps[g.index] if caps[g.index] == min(g.cap_w, g.max_w)
            else min(caps[g.index], max(g.min_w, math.floor(round(caps[g.index] * 10, 6)) / 10)) for g in gpus}
    step_after = _job_step(in_job, caps) if in_job else None
    if step_before and step_after:
        kept = step_before / step_after
    else:
        kept = sum(_kept_at(g, g.cap_w, caps[g.index]) * g.default_w for g in gpus) / total_default
    proposals = [CapProposal(g.index, g.uuid, g.tier, g.cap_w, caps[g.index], _reason(g, caps, in_job),
                             g.power_curve().basis(), _above_stock(g, caps[g.index])) for g in gpus]
    return BudgetFit(budget_w, sum(g.cap_w for g in gpus), sum(caps.values()), step_before, step_after, kept, proposals)


def _fit_raising(gpus: list[GpuPower], budget_w: float, step_w: float) -> BudgetFit:
    """The fit that may raise cards in the job, where it is worth it: else the one that only cuts."""
    kept = fit_to_budget(gpus, budget_w, step_w, raise_above_stock=False)
    in_job = [g for g in gpus if g.compute_s is not None]
    if not in_job or kept.step_after_s is None or any(len(g.power_curve().points) < 2 for g in in_job):
        return kept
    raised = _fit(gpus, budget_w, step_w, raise_above_stock=True)
    if raised.step_after_s is not None and raised.step_after_s < kept.step_after_s * (1.0 - RAISE_MIN_GAIN):
        return raised
    return kept


def _lowest_measured_w(gpu: GpuPower) -> float:
    """The lowest cap of a learned curve (two caps or more measured); -inf for the prior."""
    points = gpu.power_curve().points
    return points[0][0] if len(points) >= 2 else -math.inf


def _above_stock(gpu: GpuPower, cap_w: float) -> bool:
    """A cap above the card's default limit: the fit raised it there (the proposal and its reason say so)."""
    return cap_w > gpu.default_w + 1e-9


def _reason(gpu: GpuPower, caps: dict[int, float], in_job: list[GpuPower]) -> str:
    new = caps[gpu.index]
    if abs(new - gpu.cap_w) < 1e-9:
        return "unchanged: every watt it would give up costs more than another card's"
    if new > gpu.cap_w:
        stock = (f", above its {gpu.default_w:.0f} W stock cap (the gain there is assumed, not measured)"
                 if _above_stock(gpu, new) else "")
        return (f"raised {new - gpu.cap_w:.0f} W (at most its {gpu.max_w:.0f} W maximum){stock}: it paces the job"
                " and the budget has room")
    if gpu.compute_s is None:
        return "not in the running job: its watts cost the job nothing" if in_job else (
            f"gives up {gpu.cap_w - new:.0f} W at a {100 * (1 - _kept_at(gpu, gpu.cap_w, new)):.1f} % throughput cost")
    slowest = max(_compute_at(g, caps[g.index]) or 0.0 for g in in_job)
    mine = _compute_at(gpu, new) or 0.0
    if mine < slowest - 1e-9:
        wait = (slowest - mine) / (slowest + gpu.comm_s) if slowest + gpu.comm_s > 0 else 0.0
        return f"still waits {100 * wait:.0f} % of each step for the slowest rank: its watts were idle"
    return "now paces the job: cut until that cost the least among the cards"
