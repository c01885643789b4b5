"""The hub's side of supervised jobs (`gpumix run`): each supervisor's last status and the re-plans
waiting for it (the replies and the rules are gpumix.hub.jobs). Statuses are bounded (MAX_JOBS,
oldest first) and leave the live view after the hub's retention.

Not thread-safe: the hub calls it under its lock. What it may import: gpumix.hub.jobs, gpumix.wire.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gpumix.hub.jobs import MAX_WAITING_PLANS, full, mark_lost, queued, refused
from gpumix.wire.plan_file import RunPlan

MAX_JOBS = 64  # supervisors' statuses held (the oldest goes first)
SUPERVISOR_TIMEOUT_S = 5.0  # a supervisor polls every half second


class UnusablePlan(ValueError):
    """A re-plan request whose plan is not one: str() is the reason."""


def usable_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as a supervisor reads it; UnusablePlan for a plan that is not one."""
    try:
        return RunPlan.from_json(plan).to_json()
    except (KeyError, TypeError, ValueError) as error:
        raise UnusablePlan(f"not a usable plan: {error}") from None


class SupervisedJobs:
    """The supervisors' last statuses (job -> status) and the plans waiting for each."""

    def __init__(self) -> None:
        self._jobs: dict[str, dict[str, Any]] = {}  # job -> the supervisor's last status
        self._pending_plans: dict[str, deque[dict[str, Any]]] = {}  # job -> plans waiting for its supervisor

    def restart_refusal(self, job: str, now_s: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(a copy of the job's status, the refusal when no running supervisor could take a plan)."""
        status = dict(self._jobs.get(job) or {})
        if not status or now_s - status["last_seen_s"] >= SUPERVISOR_TIMEOUT_S:
            return status, refused(f"no supervisor runs job {job!r}: start the job with `gpumix run -- ...`")
        if status.get("state") == "exited":
            return status, refused(f"job {job!r} has exited: {status.get('message') or 'nothing to restart'}")
        return status, None

    def enqueue(self, job: str, plan: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Queue a usable plan for the job's supervisor, or refuse it when the queue is full; `status`
        is the one restart_refusal passed."""
        waiting = self._pending_plans.setdefault(job, deque())
        if len(waiting) >= MAX_WAITING_PLANS:
            return full(job)
        waiting.append(plan)
        return queued(job, len(waiting), status)

    def poll(self, job: str, status: dict[str, Any], now_s: float) -> dict[str, Any]:
        """A supervisor reports its state; when it can start a restart, it takes the next plan."""
        previous = self._jobs.get(job)
        if previous is not None and previous.get("pid") != status.get("pid"):
            self._pending_plans.pop(job, None)  # asked of an earlier supervisor of this job
        self._jobs[job] = {**status, "last_seen_s": now_s}
        waiting = self._pending_plans.get(job)
        # a supervisor that does not say (an older one) takes a plan while its job runs
        ready = status.get("accepts_plan", status.get("state") == "running") is True
        plan = waiting.popleft() if waiting and ready else None
        if waiting is not None and not waiting:
            del self._pending_plans[job]
        return {"type": "supervisor_work", "plan": plan}

    def view(self, now_s: float) -> dict[str, dict[str, Any]]:
        """The statuses for the snapshot. One silent past the timeout is marked lost and its waiting
        plans are dropped (a silent job leaves later, expire)."""
        view = {}
        for job, status in self._jobs.items():
            if now_s - status["last_seen_s"] >= SUPERVISOR_TIMEOUT_S:
                mark_lost(status, dropped_plans=len(self._pending_plans.pop(job, ())))
            view[job] = {**status, "queued_plans": len(self._pending_plans.get(job, ()))}
        return view

    def expire(self, now_s: float, retention_s: float) -> bool:
        """Forget jobs not heard from for the retention, and the oldest beyond MAX_JOBS; whether any went."""
        by_age = sorted(self._jobs, key=lambda job: self._jobs[job].get("last_seen_s", now_s))
        over_limit = len(by_age) - MAX_JOBS
        forgotten = [job for index, job in enumerate(by_age)
                     if index < over_limit or now_s - self._jobs[job].get("last_seen_s", now_s) > retention_s]
        for job in forgotten:
            del self._jobs[job]
            self._pending_plans.pop(job, None)
        return bool(forgotten)
