"""The integer split: continuous shares rounded, single-sample moves, then an exact min-max
search (dynamic programming over short windows) for counts that fit memory and granularity."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpumix.model.compute_curve import ComputeCurve
from gpumix.plan.lattice import LATTICE_TOLERANCE, measured_lattice
from gpumix.plan.memory import (
    effective_max_k,
    factorize,
    good_count,
    good_count_at_most,
    least_passes,
    micro_batch_cap,
)
from gpumix.plan.prediction import balanced_shares
from gpumix.plan.split_types import (
    EPS,
    MAX_DP_WORK,
    MAX_IMPROVE_MOVES,
    MAX_SEARCH_VALUES,
    Deadline,
    PlanRequest,
    RankMeasure,
)

# Half-widths, in whole units, of the windows tried in turn around each rank's rounded count.
SNAP_WINDOWS_UNITS = (3, 16, 64)


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
             deadline: Deadline) -> None:
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
        if curves[taker].time_s(counts[taker] + 1) >= times[slow] - EPS:
            return
        counts[slow] -= 1
        counts[taker] += 1


def _min_max_exact(total: int, choices: Sequence[Sequence[int]], curves: Sequence[ComputeCurve],
                   deadline: Deadline) -> list[int] | None:
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
    upper: Sequence[int], max_k: int, deadline: Deadline,
) -> None:
    """Make every count split into good micro-batches (good_count) at the least max time:
    an exact search over windows around the counts, wider until a split is found (while the
    windows stay within MAX_SEARCH_VALUES)."""
    if all(good_count(n, cap, max_k) for n, cap in zip(counts, caps, strict=True)):
        return
    total = sum(counts)
    for width in (4, 16, 64):
        windows = [(max(1, n - reach), min(high, n + reach)) for n, cap, high in zip(counts, caps, upper, strict=True)
                   for reach in [width * least_passes(n, cap)]]  # gaps grow with k
        if sum(high - low + 1 for low, high in windows) > MAX_SEARCH_VALUES:
            break
        deadline.check()
        choices = [[v for v in range(low, high + 1) if good_count(v, cap, max_k)]
                   for (low, high), cap in zip(windows, caps, strict=True)]
        best = _min_max_exact(total, choices, curves, deadline)
        if best is not None:
            counts[:] = best
            return
    # No good split near: snap down, and one rank takes the rest with smaller micro-batches.
    shed = 0
    for i, cap in enumerate(caps):
        snapped = good_count_at_most(counts[i], cap, max_k)
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
    upper: Sequence[int], max_k: int, granularity: int, deadline: Deadline,
) -> bool:
    """Counts in whole multiples of `granularity`, the least max time among nearby such splits;
    then B's remainder goes to the rank it slows least. False (counts unchanged) when none fits."""
    total = sum(counts)
    rest = total % granularity
    best = None
    # A near window first (cheap); wider ones when whole units cannot reach the total there, as when
    # one fast rank must give up several units for many slow ranks' first whole unit each.
    for width_units in SNAP_WINDOWS_UNITS:
        choices = []
        for n, high in zip(counts, upper, strict=True):
            units = range(max(1, n // granularity - width_units), n // granularity + width_units + 1)
            choices.append([u * granularity for u in units if u * granularity <= high])
        best = _min_max_exact(total - rest, choices, curves, deadline)
        if best is not None:
            break
    if best is None:
        return False
    if rest:
        takers = [j for j, n in enumerate(best) if n + rest <= upper[j]]
        if not takers:
            return False
        j = min(takers, key=lambda j: curves[j].time_s(best[j] + rest))
        best[j] += rest
    if not all(good_count(n, cap, max_k) for n, cap in zip(best, caps, strict=True)):
        return False  # whole tiles would need tiny micro-batches somewhere: keep the counts
    counts[:] = best
    return True


def _predicted_s(counts: Sequence[int], measures: Sequence[RankMeasure]) -> float:
    """The slowest compute as the step is predicted (plan.prediction.predict): each rank's mean over
    the tiles left open where it has them (plan.padding), else its curve. The step's wait grows slower
    than its compute, so the step time ranks splits as this does."""
    return max(m.expected_time_s(n) for m, n in zip(measures, counts, strict=True))


def _prefer_measured_lattice(
    counts: list[int], curves: Sequence[ComputeCurve], measures: Sequence[RankMeasure], caps: Sequence[int | None],
    upper: Sequence[int], max_k: int, lattices: Sequence[int], granularity: int, deadline: Deadline,
) -> None:
    """Move the counts onto each rank's measured lattice (lattice.measured_lattice), as coarse as the
    line allows: the coarsest level whose best split there the curves put within LATTICE_TOLERANCE of
    these counts' slowest compute (these counts where none does). Then the best split of a coarser level
    replaces it only where the prediction puts that split's slowest compute lower by more than
    LATTICE_TOLERANCE (3 % of compute, less of the step once the wait is added; the wait falls slower
    than the compute rises, so the step ranks the two alike; coarsest first, each against the split
    held): a rank measured at one count may pay a tile one point cannot show (plan.padding), so the
    line's choice can be predicted slower than a coarser split (issue 16); the margin keeps the line's
    choice where the prediction's edge is within its own doubt (docs/planner.md, session 11). Never a
    finer level than the line's: where the prediction is the line, nothing moves. Never a count that
    needs more passes than the line's under the rank's cap: a pass more costs a pass and halves the
    micro-batch, more than the lattice's doubt about tiles is worth (docs/planner.md, session 15)."""
    total = sum(counts)
    limit_s = max(c.time_s(n) for c, n in zip(curves, counts, strict=True)) * (1 + LATTICE_TOLERANCE)
    coarser: list[list[int]] = []  # the best split of each level above the one taken, coarsest first
    level = max(lattices)
    while level > granularity:
        steps = [min(lattice, level) for lattice in lattices]
        choices = [[u * step for u in range(max(1, n // step - 3), n // step + 4)
                    if u * step <= high and good_count(u * step, cap, max_k)
                    and least_passes(u * step, cap) <= least_passes(n, cap)]
                   for n, step, high, cap in zip(counts, steps, upper, caps, strict=True)]
        found = _min_max_exact(total, choices, curves, deadline)
        if found is not None and max(c.time_s(n) for c, n in zip(curves, found, strict=True)) <= limit_s:
            counts[:] = found
            break
        if found is not None:
            coarser.append(found)
        level //= 2
    best_s = _predicted_s(counts, measures)
    for found in coarser:
        if (found_s := _predicted_s(found, measures)) * (1 + LATTICE_TOLERANCE) < best_s:
            counts[:], best_s = found, found_s


def split_counts(
    global_batch: int, measures: Sequence[RankMeasure], request: PlanRequest, deadline: Deadline,
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
    shares, _ = balanced_shares(global_batch, curves, [1.0] * len(curves), [float(u) for u in upper])
    counts = _round(global_batch, shares, upper)
    _improve(counts, curves, upper, deadline)
    _fit_micro_batches(counts, curves, caps, upper, max_k, deadline)
    if request.granularity > 1:
        _snap_to_granularity(counts, curves, caps, upper, max_k, request.granularity, deadline)
        lattices = [measured_lattice([m.current_samples, *(n for n, _ in m.compute_points)], request.granularity)
                    for m in measures]
        _prefer_measured_lattice(counts, curves, measures, caps, upper, max_k, lattices, request.granularity,
                                 deadline)
    return counts, caps, shares
