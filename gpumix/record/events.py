"""The events that follow from two snapshots in a row, for the recording.

Findings appearing or clearing, a new plan in force, a supervised job's restarts and state changes.

What it may import: the standard library, gpumix.wire."""

from __future__ import annotations

from typing import Any

from gpumix.wire.snapshot_types import Snapshot


class SnapshotEvents:
    """Remembers what the last snapshot showed; `diff` gives the events the next one makes."""

    def __init__(self) -> None:
        self._findings: dict[tuple[str, tuple[int, ...]], dict[str, Any]] | None = None
        self._plan: Any = None
        self._jobs: dict[str, dict[str, Any]] = {}

    def diff(self, snapshot: Snapshot) -> list[tuple[str, dict[str, Any]]]:
        """(kind, payload) of each event since the last snapshot, in the order they are recorded."""
        return [*self._findings_diff(snapshot), *self._plan_diff(snapshot), *self._jobs_diff(snapshot)]

    def _findings_diff(self, snapshot: Snapshot) -> list[tuple[str, dict[str, Any]]]:
        events = []
        findings = {(f["id"], tuple(f.get("gpus") or ())): f for f in snapshot.get("findings") or []}
        if self._findings is not None:
            for key in findings.keys() - self._findings.keys():
                f = findings[key]
                events.append(("finding_appeared", {k: f.get(k) for k in ("id", "severity", "title", "evidence", "gpus")}))
            for key in self._findings.keys() - findings.keys():
                f = self._findings[key]
                events.append(("finding_cleared", {k: f.get(k) for k in ("id", "severity", "title", "gpus")}))
        self._findings = findings
        return events

    def _plan_diff(self, snapshot: Snapshot) -> list[tuple[str, dict[str, Any]]]:
        plan = snapshot.get("plan")
        if plan is None or not plan.get("ranks"):  # no split in force, or a job still starting up
            return []
        changed = plan != self._plan  # the hub's plan row is the same dict until the plan changes
        self._plan = plan
        return [("plan", {"plan": plan})] if changed else []

    def _jobs_diff(self, snapshot: Snapshot) -> list[tuple[str, dict[str, Any]]]:
        events = []
        jobs = snapshot.get("jobs") or {}
        for job, status in jobs.items():
            before = self._jobs.get(job)
            if before is not None and status.get("restarts") != before.get("restarts"):
                events.append(("restart", {"job": job, "restarts": status.get("restarts"),
                                           "state": status.get("state"), "message": status.get("message")}))
            elif before is not None and status.get("state") != before.get("state"):
                events.append(("job_state", {"job": job, "state": status.get("state"), "message": status.get("message")}))
        self._jobs = {job: {"restarts": status.get("restarts"), "state": status.get("state")}
                      for job, status in jobs.items()}  # jobs the hub forgot are forgotten here too
        return events
