"""Which job a rank row of a snapshot belongs to: its name, or for a script started without one, its
run id (two such scripts are two jobs). Used by the hub, the advisor's tiers, Prometheus and the TUI."""

from __future__ import annotations

from typing import Any


def job_label(job: str | None, run_id: str | None) -> str:
    """The job a rank belongs to: its name, or for a script started without one, its run id."""
    return job if job is not None else (run_id or "")


def ranks_by_job(ranks: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A snapshot's rank rows grouped by job_label, in order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for rank in ranks:
        groups.setdefault(job_label(rank.get("job"), rank.get("run_id")), []).append(rank)
    return groups
