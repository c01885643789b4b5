"""Refusals before any search: absurd batches, sizes and exclusions, and measurements that
cannot be (inf, nan, 1e30 samples), each in one line (PlanError)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpumix.plan.split_types import MAX_GLOBAL_BATCH, PlanError, PlanRequest, RankMeasure


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
