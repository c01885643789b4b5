"""Supervised jobs on the hub (`gpumix run`): waiting re-plans, and supervisors that went silent.

A re-plan request is queued for the job's supervisor, in order and at most MAX_WAITING_PLANS
deep, or refused with the reason; the reply says which, and never says ok for a plan that is
then dropped. The supervisor takes the next plan only when it can start a restart (its poll says
`accepts_plan`), so a plan that arrives during a restart waits for it to finish.

A supervisor that has not polled for SUPERVISOR_TIMEOUT_S is shown as lost (killed, or its
machine gone); the plans still waiting for it are dropped then, and the status says how many.
A job not heard from for the hub's retention leaves the live view later (Hub._expire).
"""

from __future__ import annotations

from typing import Any

MAX_WAITING_PLANS = 4  # per job
LOST = "supervisor lost"
RESTARTING = ("stopping", "relaunching")  # a supervisor's states while a restart is under way


def refused(message: str) -> dict[str, Any]:
    return {"type": "replan_result", "ok": False, "queued": 0, "message": message}


def queued(job: str, position: int, status: dict[str, Any]) -> dict[str, Any]:
    """The reply to a plan that is now `position`-th in the job's queue."""
    if status.get("state") in RESTARTING:
        message = f"queued: a restart of {job} is in progress; this plan follows it ({position} waiting)"
    elif position > 1:
        message = f"queued behind {position - 1} earlier plan(s) for {job}"
    else:
        message = f"restart of {job} requested"
    return {"type": "replan_result", "ok": True, "queued": position, "message": message}


def full(job: str) -> dict[str, Any]:
    return refused(f"{MAX_WAITING_PLANS} re-plans of {job} already wait for its supervisor;"
                   " try again when they are done")


def mark_lost(status: dict[str, Any], dropped_plans: int) -> None:
    """A supervisor silent past the timeout: say so (unless it said its job exited)."""
    if status.get("state") in ("exited", LOST):
        return
    status["state"] = LOST
    status["message"] = (f"its supervisor (pid {status.get('pid')}) stopped answering: killed, or its"
                         " machine is gone")
    if dropped_plans:
        status["message"] += f"; {dropped_plans} waiting re-plan(s) dropped"
