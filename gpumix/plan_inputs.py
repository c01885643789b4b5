"""The planner's inputs from a hub snapshot: what each rank of a job measured."""

from __future__ import annotations

import statistics
from typing import Any

from gpumix.planner import Plan, PlanRequest, RankMeasure, plan
from gpumix.sim.job_model import LINK_EFFICIENCY


class PlanInputError(ValueError):
    """Not enough measured to plan; str() is the one line shown."""


def jobs(snapshot: dict[str, Any]) -> list[str]:
    return sorted({r["job"] or "" for r in snapshot.get("ranks", []) if r.get("connected")})


def pick_job(snapshot: dict[str, Any], job: str | None) -> str:
    names = jobs(snapshot)
    if job is not None:
        if job not in names:
            raise PlanInputError(f"no ranks of job {job!r} report (jobs: {', '.join(names) or 'none'})")
        return job
    if len(names) != 1:
        raise PlanInputError("name the job with --job: " + (", ".join(names) if names else "no ranks report"))
    return names[0]


def measures(snapshot: dict[str, Any], job: str) -> list[RankMeasure]:
    gpus = {gpu["uuid"]: gpu for gpu in snapshot["gpus"]}
    result = []
    for rank in snapshot.get("ranks", []):
        if rank.get("job") != job or not rank.get("connected"):
            continue
        if not rank.get("samples_per_s") or not rank.get("samples"):
            raise PlanInputError(f"rank {rank['rank']} has not reported samples per step yet")
        gpu = gpus.get(rank.get("gpu_uuid") or "", {})
        link = (gpu.get("pcie_link_bytes_per_s_max") or 0.0) * LINK_EFFICIENCY
        compute_share = (rank["compute_s"] / rank["step_time_s"]) if rank.get("compute_s") and rank.get("step_time_s") else None
        result.append(RankMeasure(
            rank=rank["rank"], samples_per_s=rank["samples_per_s"], current_samples=round(rank["samples"]),
            link_bytes_per_s=link or float("inf"), gpu_uuid=rank.get("gpu_uuid"),
            micro_batch=round(rank["micro_batch"]) if rank.get("micro_batch") else None,
            compute_share=compute_share, mem_total_bytes=gpu.get("mem_total_bytes"),
            mem_peak_bytes=rank.get("mem_peak_bytes"), tier=gpu.get("tier"),
        ))
    ranks = sorted(m.rank for m in result)
    if ranks != list(range(len(ranks))):
        raise PlanInputError(f"job {job!r}: ranks {ranks} report, not 0..R-1")
    return result


def plan_from_snapshot(snapshot: dict[str, Any], job: str | None = None, global_batch: int | None = None,
                       gradient_bytes: float | None = None) -> tuple[str, Plan]:
    """(job, plan) for the running job; the global batch stays what it is unless given."""
    job = pick_job(snapshot, job)
    found = measures(snapshot, job)
    batch = global_batch or sum(m.current_samples for m in found)
    reported = [r.get("gradient_bytes") for r in snapshot["ranks"] if r.get("job") == job and r.get("gradient_bytes")]
    grad = gradient_bytes or (statistics.median(reported) if reported else None)
    if grad is None:
        raise PlanInputError("the ranks do not report their gradient size: pass --gradient-mb")
    return job, plan(found, PlanRequest(global_batch=batch, gradient_bytes=grad))
