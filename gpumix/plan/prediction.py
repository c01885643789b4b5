"""Predicted step times: max_r t_r(n_r) plus the communication the step waits for, and the
continuous bound where every rank finishes together."""

from __future__ import annotations

from collections.abc import Sequence

from gpumix.model.compute_curve import ComputeCurve, TiledCurve
from gpumix.model.step_model import CommModel, compute_estimate
from gpumix.plan.split_types import PlanRequest, Prediction, RankMeasure


def comm_model(measures: Sequence[RankMeasure], request: PlanRequest) -> CommModel:
    running = [m for m in measures if m.current_samples > 0]
    slowest = max((m.compute_curve().time_s(m.current_samples) for m in running), default=None)
    return CommModel(request.gradient_bytes, request.measured_comm_s, tuple(m.link_bytes_per_s for m in running),
                     slowest if request.measured_comm_s is not None else None, request.link_basis)


def predict(samples: Sequence[int], measures: Sequence[RankMeasure], comm: CommModel) -> Prediction:
    taking_part = [(n, m) for n, m in zip(samples, measures, strict=True) if n > 0]
    # where a rank's tile is unknown, what its count costs on average over the tiles left open (plan.padding)
    compute = max((m.expected_time_s(n) for n, m in taking_part), default=0.0)
    return Prediction(compute_s=compute, allreduce_s=step_wait_s(comm, [m for _, m in taking_part], compute),
                      samples=sum(samples))


def step_wait_s(comm: CommModel, taking_part: Sequence[RankMeasure], slowest_compute_s: float) -> float:
    """The wait a step adds past its slowest compute, as every predicted step adds it: the ranks' links
    and the pipeline at that compute (a shorter compute hides less of the all-reduce). One function for
    the proposal and the joint offer (gpumix/cli/plan_joint.py), which added a constant before."""
    return comm.seconds([m.link_bytes_per_s for m in taking_part], slowest_compute_s)


def hindsight_error(measures: Sequence[RankMeasure]) -> float | None:
    """How far off a prediction can be, from what was checked: for each rank now running a split it
    had not run, with a curve through two or more earlier splits, that curve's time for the split
    against what it measured (relative): the largest, plus the largest difference between two
    measurements of the same split (a rank running a count it ran before: the noise of a median).
    None when no curve can be checked (a one-point proportional guess's error says how wrong
    proportionality was, which the point measured since has corrected). A probe's points are left
    out: a line through a few counts near one split crosses its stairs, and its error there said
    "within error" of gains the oracle's rigs had (docs/planner.md, session 23)."""
    errors, repeats = [], [0.0]
    for m in measures:
        if m.current_samples <= 0:
            continue
        measured_s = m.current_compute_s
        probed = m.compute_point_probed if len(m.compute_point_probed) == len(m.compute_points) \
            else (False,) * len(m.compute_points)
        splits = [point for point, by_probe in zip(m.compute_points, probed, strict=True) if not by_probe]
        earlier = [(n, t) for n, t in splits if n != m.current_samples]
        repeats += [abs(t - measured_s) / measured_s for n, t in splits if n == m.current_samples]
        if len({n for n, _ in earlier}) >= 2:
            curve, _ = compute_estimate(earlier, [None] * len(earlier), None)
            errors.append(abs(curve.time_s(m.current_samples) - measured_s) / measured_s)
    return max(errors) + max(repeats) if errors else None


def balanced_shares(total: int, curves: Sequence[ComputeCurve], lower: Sequence[float],
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
    """The bound: a continuous split where every rank finishes together, no memory or integer limits.
    Over learned stairs it reads the curve under them (work not padded to whole tiles), which no
    whole count beats: a count's padded work is never less than the count in one pass."""
    curves = [_without_stairs(m.compute_curve()) for m in measures]
    _, time_s = balanced_shares(global_batch, curves, [0.0] * len(curves), [float(global_batch)] * len(curves))
    waits = comm.seconds([m.link_bytes_per_s for m in measures], time_s)
    return Prediction(compute_s=time_s, allreduce_s=waits, samples=global_batch)


def _without_stairs(curve: ComputeCurve) -> ComputeCurve:
    return curve.under_stairs() if isinstance(curve, TiledCurve) and curve.base is not None else curve
