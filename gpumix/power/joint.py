"""Split and caps chosen together under a power budget (issue 16, item 5).

Doing them one after the other leaves throughput behind: a split balanced at stock caps, then caps
cut to the budget, unbalances the split again (the card cut most becomes the slowest), and a fit
cannot move work. Here the step model chooses both: for a target compute time T, each rank's least
cap that computes its share within T (its compute curve at the cap in force, scaled by its power
curve), and a dynamic programme over whole units of `granularity` samples finds the split whose caps
add up least; the least T whose caps fit the budget is the proposal (bisection on T).

Pure functions of the step model's curves (gpumix.model): its quality is the curves' (the prior's
power curve is kind at low caps, docs/power.md). Caps stay within [min, the cap in force or the
default limit, whichever is higher]: a joint proposal never raises a card above its stock cap.
Bounded: at most MAX_UNITS units of the batch and MAX_DP_WORK programme steps, else None.

Offered (joint_offer) only within the power evidence: each card's caps within those its power curve
was measured at (no extrapolation: measured in the world, the held-out loss of 16.9 % came from two
3060s cut to 114-117 W, below the 140 W the profile reached, where the published curve has a knee),
and only where the predicted gain over split-then-fit passes the larger of MIN_OFFER_GAIN and the
curves' own error (plan.prediction). The split follows the compute curves past the splits measured,
as the planner's own proposals do: held to the measured splits as well, none of 51 rigs was offered
anything; with caps alone held, 4 of 75 were, each faster in the world (docs/power.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.step_model import PowerCurve

MAX_UNITS = 512
MIN_OFFER_GAIN = 0.03  # a proposal predicted less faster than this is not worth a restart and new caps
MAX_DP_WORK = 2_000_000  # (rank, units so far, units given) triples per target time
BISECTION_ROUNDS = 30
CAP_RESOLUTION_W = 1.0


@dataclass(frozen=True)
class JointRank:
    index: int  # the GPU's
    compute: ComputeCurve  # compute seconds over samples, at cap_w
    cap_w: float  # in force while `compute` was measured
    min_w: float
    max_w: float  # the highest cap a proposal may set
    power: PowerCurve
    upper_samples: int  # memory and accumulation allow at most this many per step
    lower_samples: int = 0  # a proposal gives this rank at least this many

    def time_s(self, samples: int, cap_w: float) -> float:
        return self.compute.time_s(samples) * self.power.time_ratio(self.cap_w, cap_w)

    def least_cap_w(self, samples: int, limit_s: float) -> float | None:
        """The least cap (to CAP_RESOLUTION_W) at which `samples` compute within limit_s; None if none."""
        if self.time_s(samples, self.max_w) > limit_s:
            return None
        low, high = self.min_w, self.max_w
        if self.time_s(samples, low) <= limit_s:
            return low
        while high - low > CAP_RESOLUTION_W:
            middle = (low + high) / 2
            low, high = (low, middle) if self.time_s(samples, middle) <= limit_s else (middle, high)
        return math.ceil(high)


@dataclass(frozen=True)
class JointProposal:
    samples: tuple[int, ...]  # per rank, in the order given
    caps_w: tuple[float, ...]
    compute_s: float  # the predicted slowest compute


def joint_plan(ranks: Sequence[JointRank], global_batch: int, granularity: int,
               budget_w: float, fixed_w: float = 0.0) -> JointProposal | None:
    """The split (whole units of `granularity`, every rank at least one) and caps under `budget_w` (less
    `fixed_w`: the caps of cards outside the job) with the least predicted slowest compute; None when
    no split fits, the batch is not whole units, or the search would pass its bounds."""
    if granularity < 1 or global_batch % granularity or not ranks:
        return None
    units = global_batch // granularity
    R = len(ranks)
    if units < R or units > MAX_UNITS or R * units * units > MAX_DP_WORK:
        return None
    most = [min(units, r.upper_samples // granularity) for r in ranks]
    least = [max(1, math.ceil(r.lower_samples / granularity)) for r in ranks]
    if sum(most) < units or sum(least) > units or any(lo > hi for lo, hi in zip(least, most, strict=True)):
        return None
    room_w = budget_w - fixed_w

    def cheapest(limit_s: float) -> tuple[float, list[int], list[float]] | None:
        caps = [[r.least_cap_w(u * granularity, limit_s) if least[i] <= u <= most[i] else None
                 for u in range(units + 1)]
                for i, r in enumerate(ranks)]
        best: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}
        for i in range(R):
            left = R - i - 1
            nxt: dict[int, tuple[float, list[int]]] = {}
            for used, (watts, picked) in best.items():
                for u in range(1, units - used - left + 1):
                    cap = caps[i][u]
                    if cap is None:
                        continue
                    total = watts + cap
                    key = used + u
                    if key not in nxt or total < nxt[key][0]:
                        nxt[key] = (total, [*picked, u])
            best = nxt
        if units not in best:
            return None
        watts, picked = best[units]
        return watts, picked, [caps[i][u] for i, u in enumerate(picked)]  # type: ignore[misc]

    low = 0.0
    high = max(r.time_s(min(most[i], units) * granularity, r.min_w) for i, r in enumerate(ranks)) * 2
    found = cheapest(high)
    if found is None or found[0] > room_w:
        return None
    for _ in range(BISECTION_ROUNDS):
        middle = (low + high) / 2
        trial = cheapest(middle)
        if trial is not None and trial[0] <= room_w:
            high, found = middle, trial
        else:
            low = middle
    _, picked, caps = found
    samples = tuple(u * granularity for u in picked)
    return JointProposal(samples, tuple(caps),
                         max(r.time_s(n, c) for r, n, c in zip(ranks, samples, caps, strict=True)))


@dataclass(frozen=True)
class JointOffer:
    offered: bool
    why: str  # one line: what the offer stands on, or why there is none
    proposal: JointProposal | None = None
    predicted_step_s: float | None = None
    predicted_gain: float | None = None  # over split-then-fit, predicted

    def to_json(self) -> dict[str, object]:
        p = self.proposal
        return {"offered": self.offered, "why": self.why, "predicted_step_s": self.predicted_step_s,
                "predicted_gain": self.predicted_gain, "samples": list(p.samples) if p else None,
                "caps_w": list(p.caps_w) if p else None}


def within_evidence(rank: JointRank) -> JointRank | None:
    """The rank held to the caps measured: from its lowest measured cap to its highest (or the cap in
    force); its samples within its own bounds (the compute curve's extrapolation is the planner's).
    None without two measured caps (a power curve that is the prior's)."""
    caps = [c for c, _ in rank.power.points]
    if len(caps) < 2:
        return None
    return replace(rank, min_w=max(rank.min_w, min(caps)), max_w=min(rank.max_w, max(max(caps), rank.cap_w)))


def joint_offer(ranks: Sequence[JointRank], global_batch: int, granularity: int, budget_w: float,
                serial_step_s: float, comm_s: float | Callable[[float], float], error: float | None,
                fixed_w: float = 0.0) -> JointOffer:
    """Split and caps together, offered where the model's own evidence says it beats split-then-fit
    (`serial_step_s`, predicted) by more than the curves' error (`error`: None when no re-plan could
    be checked yet, MIN_OFFER_GAIN then). `comm_s`: the wait the step adds past its slowest compute,
    a constant or a function of that compute (the planner's: a shorter compute hides less of the
    all-reduce; gpumix plan passes it so that the offer's step is predicted as the proposal's)."""
    bounded = [within_evidence(r) for r in ranks]
    thin = [r.index for r, b in zip(ranks, bounded, strict=True) if b is None]
    if thin:
        return JointOffer(False, f"GPUs {thin}: power curves from the prior, not measured (gpumix power profile"
                                 " measures them): no offer beyond what was measured")
    proposal = joint_plan([b for b in bounded if b is not None], global_batch, granularity, budget_w, fixed_w)
    if proposal is None:
        return JointOffer(False, "no split within the measured caps fits the budget")
    step_s = proposal.compute_s + (comm_s(proposal.compute_s) if callable(comm_s) else comm_s)
    gain = serial_step_s / step_s - 1 if step_s > 0 else 0.0
    needed = max(MIN_OFFER_GAIN, error or 0.0)
    basis = (f"the curves' own error {error:.1%}" if error is not None and error > MIN_OFFER_GAIN
             else f"the {MIN_OFFER_GAIN:.0%} threshold")  # whichever set `needed`
    if gain <= needed:
        return JointOffer(False, f"predicted {gain:+.1%} over split then fit: not past {basis}", proposal, step_s, gain)
    return JointOffer(True, f"predicted {gain:+.1%} over split then fit, past {basis}, within the measured caps",
                      proposal, step_s, gain)
