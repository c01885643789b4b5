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

The parts, one idea each: split_types (types and bounds), request_checks (refusals), memory
(micro-batch caps and factorization), prediction (step times, the bound), split_search (the
integer search), stairs (tiles learned from the points), padding (a single count's unknown tile, in
expectation), plan_json (the JSON form). This module puts them together; every public name
stays importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from gpumix.model.step_model import CommModel
from gpumix.plan.interpolation import interpolates
from gpumix.plan.memory import (
    MAX_ALIGNED_TILE,
    effective_max_k,
    estimate_mem_per_sample,
    factorize,
    micro_batch_cap,
)
from gpumix.plan.padding import padding_basis, with_possible_stairs
from gpumix.plan.plan_json import plan_to_json
from gpumix.plan.prediction import balanced_shares, comm_model, hindsight_error, ideal, predict
from gpumix.plan.request_checks import check_request
from gpumix.plan.split_search import split_counts
from gpumix.plan.split_types import (
    MAX_ACCUMULATION_STEPS,
    MAX_DP_WORK,
    MAX_GLOBAL_BATCH,
    MAX_IMPROVE_MOVES,
    MAX_SEARCH_VALUES,
    SEARCH_LIMIT_S,
    Deadline,
    Plan,
    PlanError,
    PlanRequest,
    Prediction,
    RankMeasure,
    RankPlan,
    TierAlternative,
)
from gpumix.plan.stairs import points_pass_cost, with_stairs

# The public names, importable from here as before the split into modules.
__all__ = [
    "MAX_ACCUMULATION_STEPS", "MAX_DP_WORK", "MAX_GLOBAL_BATCH", "MAX_IMPROVE_MOVES", "MAX_SEARCH_VALUES",
    "SEARCH_LIMIT_S", "CommModel", "Plan", "PlanError", "PlanRequest", "Prediction", "RankMeasure", "RankPlan",
    "TierAlternative", "best_without_tier", "check_request", "comm_model", "effective_max_k",
    "estimate_mem_per_sample", "factorize", "fastest_tier", "ideal", "micro_batch_cap", "plan", "plan_to_json",
    "predict",
]


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


def plan(measures: Sequence[RankMeasure], request: PlanRequest, time_limit_s: float = SEARCH_LIMIT_S) -> Plan:
    """The split for `request`; PlanError (a ValueError, one line) for a request refused."""
    check_request(measures, request)
    deadline = Deadline(time_limit_s)
    measures = with_possible_stairs(with_stairs(sorted(measures, key=lambda m: m.rank), request), request)
    part = [m for m in measures if m.rank not in request.exclude]
    B = request.global_batch
    comm = comm_model(measures, request)
    counts, caps, shares = split_counts(B, part, request, deadline)
    by_rank = {m.rank: i for i, m in enumerate(part)}
    proposed_counts = [counts[by_rank[m.rank]] if m.rank in by_rank else 0 for m in measures]
    current = predict([m.current_samples for m in measures], measures, comm)
    proposed = predict(proposed_counts, measures, comm)
    kept, note = _keep_current(measures, part, request, current, proposed)
    if kept:
        proposed = current
        ranks = _current_ranks(measures, len(part), B)
    else:
        ranks = _proposed_ranks(measures, part, request, counts, caps, shares, proposed.compute_s)
        if proposed.step_time_s >= current.step_time_s - 1e-12:
            note = "this request (batch, ranks or limits) is no faster than the current split"
    return Plan(
        global_batch=B, ranks=tuple(ranks), current=current, proposed=proposed,
        ideal=ideal(B, part, comm), kept_current=kept, note=note,
        fast_tier_only=_fast_tier_only(measures, part, request, comm, deadline),
        best_without_tier=best_without_tier(part, request, comm, deadline),
        compute_basis=tuple((m.rank, padding_basis(m, m.compute_estimate()[1])) for m in part),
        comm_basis=comm.basis([m.link_bytes_per_s for m in part]),
        interpolated=not kept and len(part) == len(measures) and interpolates(part, ranks),
    )


def _keep_current(measures: Sequence[RankMeasure], part: Sequence[RankMeasure], request: PlanRequest,
                  current: Prediction, proposed: Prediction) -> tuple[bool, str | None]:
    """(keep the current split, the note saying why): it is as fast as any split found, or the gain
    is no larger than the curves' own error where it could be checked (not a gain to restart for)."""
    all_caps = [micro_batch_cap(m, request) for m in measures]
    candidate = _current_is_candidate(measures, request, all_caps)
    kept = candidate and proposed.step_time_s >= current.step_time_s - 1e-12
    error = hindsight_error(part)
    gain = current.step_time_s / proposed.step_time_s - 1 if proposed.step_time_s > 0 else 0.0
    within_error = candidate and not kept and error is not None and gain <= error
    if within_error:
        return True, (f"the predicted gain ({gain:.1%}) is within the curves' own error ({error:.1%}: what the"
                      " earlier splits predicted for the split running now): kept")
    if kept:
        return True, "the current split is already as fast as any split found: kept"
    return False, None


def _current_ranks(measures: Sequence[RankMeasure], taking_part: int, global_batch: int) -> list[RankPlan]:
    """The split running now, as a plan (kept)."""
    ranks = []
    for m in measures:
        n = m.current_samples
        micro = m.micro_batch or n
        ranks.append(RankPlan(
            rank=m.rank, gpu_uuid=m.gpu_uuid, samples=n, micro_batch=micro,
            accumulation_steps=n // micro if n else 0, loss_weight=n * taking_part / global_batch,
            limited_by=() if n else ("excluded",), compute_s=m.expected_time_s(n) if n else 0.0,
        ))
    return ranks


def _proposed_ranks(measures: Sequence[RankMeasure], part: Sequence[RankMeasure], request: PlanRequest,
                    counts: Sequence[int], caps: Sequence[int | None], shares: Sequence[float],
                    pace_s: float) -> list[RankPlan]:
    """The searched counts as ranks: micro-batches, loss weights and what limited each."""
    B = request.global_batch
    max_k = effective_max_k(request)
    unbounded, _ = balanced_shares(B, [m.compute_curve() for m in part], [1.0] * len(part), [float(B)] * len(part))
    by_rank = {m.rank: i for i, m in enumerate(part)}
    upper_of = {m.rank: (B if c is None else min(B, c * max_k)) for m, c in zip(part, caps, strict=True)}
    ranks = []
    for m in measures:
        if m.rank not in by_rank:
            ranks.append(RankPlan(m.rank, m.gpu_uuid, 0, 0, 0, 0.0, ("excluded",)))
            continue
        i = by_rank[m.rank]
        n = counts[i]
        # the pass cost its curve priced the count at (stairs.points_pass_cost), so it runs as predicted
        micro, k = factorize(n, caps[i], max_k, m.tile_samples or request.granularity,
                             points_pass_cost(m.measured_points()),
                             m.widest_tile_samples or MAX_ALIGNED_TILE, m.learned_tile_samples) or (n, 1)
        time_s = m.expected_time_s(n)  # as the step is predicted (plan.padding)
        ranks.append(RankPlan(
            rank=m.rank, gpu_uuid=m.gpu_uuid, samples=n, micro_batch=micro,
            accumulation_steps=k, loss_weight=n * len(part) / B,
            limited_by=_reasons(n, k, shares[i], upper_of[m.rank], time_s, pace_s, unbounded[i],
                                request.granularity),
            compute_s=time_s,
        ))
    return ranks


def _fast_tier_only(measures: Sequence[RankMeasure], part: Sequence[RankMeasure], request: PlanRequest,
                    comm: CommModel, deadline: Deadline) -> TierAlternative | None:
    """The field's alternative: the whole batch on the fastest tier alone, if it is not every rank
    and the batch fits on it."""
    tier = fastest_tier(measures, request.exclude)
    if len(tier) >= len(part):
        return None
    try:
        tier_counts, _, _ = split_counts(request.global_batch, tier, request, deadline)
    except PlanError:
        raise
    except ValueError:  # B does not fit on the tier alone
        return None
    return TierAlternative(tier=tier[0].tier, ranks=tuple(m.rank for m in tier),
                           prediction=predict(tier_counts, tier, comm))


def best_without_tier(part: Sequence[RankMeasure], request: PlanRequest, comm: CommModel,
                      deadline: Deadline) -> TierAlternative | None:
    """Leave one tier out (its cards for eval): a slow tier on slow links can pace every
    all-reduce, so the job may be faster without it. The best such option, if any tier exists
    whose absence beats nothing; `tier` names the tier left out, `ranks` the ranks kept."""
    tiers = sorted({m.tier for m in part if m.tier is not None})
    best: TierAlternative | None = None
    for tier in tiers if len(tiers) > 1 else []:
        kept = [m for m in part if m.tier != tier]
        try:
            counts, _, _ = split_counts(request.global_batch, kept, request, deadline)
        except PlanError:
            raise
        except ValueError:  # B does not fit on the rest
            continue
        prediction = predict(counts, kept, comm)
        if best is None or prediction.samples_per_s > best.prediction.samples_per_s:
            best = TierAlternative(tier=tier, ranks=tuple(m.rank for m in kept), prediction=prediction)
    return best
