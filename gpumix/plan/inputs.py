"""The planner's inputs from a hub snapshot: what each rank of a job measured."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from gpumix.model.priors import LINK_EFFICIENCY_PRIOR
from gpumix.plan.planner import (
    MAX_GLOBAL_BATCH,
    Plan,
    PlanRequest,
    RankMeasure,
    estimate_mem_per_sample,
    plan,
)
from gpumix.wire.snapshot_types import Snapshot

MIN_COMPUTE_SHARE = 0.01


class PlanInputError(ValueError):
    """Not enough measured to plan; str() is the one line shown."""


def jobs(snapshot: Snapshot) -> list[str]:
    return sorted({r["job"] or "" for r in snapshot.get("ranks", []) if r.get("connected")})


def pick_job(snapshot: Snapshot, job: str | None) -> str:
    names = jobs(snapshot)
    if job is not None:
        if job not in names:
            raise PlanInputError(f"no ranks of job {job!r} report (jobs: {', '.join(names) or 'none'})")
        return job
    if len(names) != 1:
        raise PlanInputError("name the job with --job: " + (", ".join(names) if names else "no ranks report"))
    return names[0]


def _plausible(value: Any, low: float, high: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and low <= value <= high


# What a rank reports, in range: a measurement outside is refused (a rank saying 1e30 samples
# per step would otherwise be planned for), with the rank and the field named.
_RANK_RANGES = {"samples": (0.0, MAX_GLOBAL_BATCH), "samples_per_s": (0.0, 1e12), "micro_batch": (0.0, MAX_GLOBAL_BATCH),
                "compute_s": (0.0, 1e6), "step_time_s": (0.0, 1e6), "mem_peak_bytes": (0.0, 2.0**60),
                "gradient_bytes": (0.0, 1e15)}
_POINT_RANGES = {"samples": (0.0, MAX_GLOBAL_BATCH), "compute_s": (0.0, 1e6), "micro_batch": (0.0, MAX_GLOBAL_BATCH),
                 "mem_peak_bytes": (0.0, 2.0**60)}


def _check_rank(rank: dict[str, Any]) -> None:
    for table, ranges in ((rank, _RANK_RANGES), *((p, _POINT_RANGES) for p in rank.get("points") or [])):
        for key, (low, high) in ranges.items():
            value = table.get(key)
            if value is not None and not _plausible(value, low, high):
                raise PlanInputError(f"rank {rank.get('rank')} reports {key} = {value!r}: not a plausible measurement")


def _measured_points(rank: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in rank.get("points") or [] if p.get("samples") and p.get("compute_s")]


def _compute_points(rank: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    return tuple((round(p["samples"]), p["compute_s"]) for p in _measured_points(rank))


def _point_micro_batches(rank: dict[str, Any]) -> tuple[int | None, ...]:
    return tuple(round(p["micro_batch"]) if p.get("micro_batch") else None for p in _measured_points(rank))


def _point_probed(rank: dict[str, Any]) -> tuple[bool, ...]:
    return tuple(p.get("probe") is True for p in _measured_points(rank))


def _point_ages_s(rank: dict[str, Any]) -> tuple[float | None, ...]:
    """Each point's age as the hub gives it (age_s); None where missing or not a plausible age."""
    return tuple(p["age_s"] if _plausible(p.get("age_s"), 0.0, 1e9) else None for p in _measured_points(rank))


def _mem_per_sample(rank: dict[str, Any]) -> float | None:
    """From the peaks measured at two or more micro-batch sizes (earlier splits and now)."""
    seen = [*(rank.get("points") or []), rank]
    return estimate_mem_per_sample([(round(p["micro_batch"]), p["mem_peak_bytes"]) for p in seen
                                    if p.get("micro_batch") and p.get("mem_peak_bytes")])


def measures(snapshot: Snapshot, job: str) -> list[RankMeasure]:
    gpus = {gpu["uuid"]: gpu for gpu in snapshot["gpus"]}
    result = []
    for rank in snapshot.get("ranks", []):
        if rank.get("job") != job or not rank.get("connected"):
            continue
        _check_rank(rank)
        if not rank.get("samples_per_s") or not rank.get("samples"):
            raise PlanInputError(f"rank {rank['rank']} has not reported samples per step yet")
        gpu = gpus.get(rank.get("gpu_uuid") or "", {})
        link = (gpu.get("pcie_link_bytes_per_s_max") or 0.0) * LINK_EFFICIENCY_PRIOR
        compute_share = None
        if rank.get("compute_s") is not None and rank.get("step_time_s"):
            # a rank that spends the whole step waiting is far faster than the step says, but not infinitely
            compute_share = max(rank["compute_s"] / rank["step_time_s"], MIN_COMPUTE_SHARE)
        result.append(RankMeasure(
            rank=rank["rank"], samples_per_s=rank["samples_per_s"], current_samples=round(rank["samples"]),
            link_bytes_per_s=link or float("inf"), gpu_uuid=rank.get("gpu_uuid"),
            micro_batch=round(rank["micro_batch"]) if rank.get("micro_batch") else None,
            compute_share=compute_share, mem_total_bytes=gpu.get("mem_total_bytes"),
            mem_peak_bytes=rank.get("mem_peak_bytes"), mem_per_sample_bytes=_mem_per_sample(rank),
            tier=gpu.get("tier"), compute_points=_compute_points(rank), compute_point_ages_s=_point_ages_s(rank),
            compute_point_micro_batches=_point_micro_batches(rank), compute_point_probed=_point_probed(rank),
        ))
    ranks = sorted(m.rank for m in result)
    if ranks != list(range(len(ranks))):
        raise PlanInputError(f"job {job!r}: ranks {ranks} report, not 0..R-1")
    return result


def measured_comm_s(snapshot: Snapshot, job: str) -> float | None:
    """The step's time beyond the slowest rank's compute: the communication (and data wait) the
    step waits for, at the split running now. None unless every rank reports its communication."""
    ranks = [r for r in snapshot.get("ranks", []) if r.get("job") == job and r.get("connected")]
    if len(ranks) < 2 or any(r.get("comm_share") is None or not r.get("compute_s") for r in ranks):
        return None
    step_s = statistics.median(r["step_time_s"] for r in ranks)
    return max(0.0, step_s - max(r["compute_s"] for r in ranks))


def plan_from_snapshot(snapshot: Snapshot, job: str | None = None, global_batch: int | None = None,
                       gradient_bytes: float | None = None, granularity: int | None = None,
                       exclude: frozenset[int] = frozenset(),
                       allreduce_floor: tuple[float, str] | None = None) -> tuple[str, Plan]:
    """(job, plan) for the running job; the global batch stays what it is unless given. The
    granularity: as given, else what `gpumix run --granularity` said for the job, else 1. Excluded
    ranks get no samples: applied, the job restarts without them. `allreduce_floor`: (bus bytes/s,
    what it is) of an all-reduce measured over the job's GPUs (`gpumix probe`), in place of the link
    prior: the ring's 2(R-1)/R x gradient bytes over it (pessimistic for a subset of the GPUs)."""
    job = pick_job(snapshot, job)
    return job, plan(*planner_inputs(snapshot, job, global_batch, gradient_bytes, granularity, exclude,
                                     allreduce_floor))


def planner_inputs(snapshot: Snapshot, job: str, global_batch: int | None = None,
                   gradient_bytes: float | None = None, granularity: int | None = None,
                   exclude: frozenset[int] = frozenset(),
                   allreduce_floor: tuple[float, str] | None = None) -> tuple[list[RankMeasure], PlanRequest]:
    """The ranks and the request the planner is given for `job` (plan_from_snapshot's arguments), also
    for whatever predicts as the proposal does (`gpumix plan --json`'s joint offer)."""
    found = measures(snapshot, job)
    link_basis = None
    if allreduce_floor is not None and _plausible(allreduce_floor[0], 1.0, 1e13):
        found = [replace(m, link_bytes_per_s=float(allreduce_floor[0])) for m in found]
        link_basis = allreduce_floor[1][:200]
    batch = sum(m.current_samples for m in found) if global_batch is None else global_batch
    reported = [r["gradient_bytes"] for r in snapshot["ranks"] if r.get("job") == job and r.get("connected")
                and r.get("gradient_bytes")]
    grad = gradient_bytes or (statistics.median(reported) if reported else None)
    if grad is None:
        raise PlanInputError("the ranks do not report their gradient size: pass --gradient-mb")
    if granularity is None:
        granularity = ((snapshot.get("jobs") or {}).get(job) or {}).get("granularity") or 1
        if not _plausible(granularity, 1, MAX_GLOBAL_BATCH):
            raise PlanInputError(f"job {job!r}: the hub says granularity {granularity!r}: not 1 to {MAX_GLOBAL_BATCH}")
    request = PlanRequest(global_batch=batch, gradient_bytes=grad, granularity=int(granularity),
                          measured_comm_s=measured_comm_s(snapshot, job), exclude=exclude, link_basis=link_basis)
    return found, request
