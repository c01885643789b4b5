"""The restart protocol's steps, on the control folder the ranks watch (gpumix/wire/plan_file.py):
whether a plan can be carried out now, the step every rank stops after, the stop request, each
rank's checkpoint report, and the decision: exit (every rank checkpointed; the supervisor relaunches
under the plan from that step) or continue untouched. The Supervisor runs them in that order.

What it may import: the standard library, gpumix.run.launch_command, gpumix.wire."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.run.launch_command import with_process_count
from gpumix.wire.plan_file import RunPlan, read_json, write_json
from gpumix.wire.send_period import MAX_PERIOD_S, send_period_s

STOP_MARGIN_S = 0.5  # time the ranks get to see the stop request before reaching the stop step
CHECKPOINT_TIMEOUT_S = 120.0
CHECK_S = 0.1  # how often the checkpoint reports are looked for


def running_global_batch(plan: RunPlan | None, ranks: list[dict[str, Any]]) -> int | None:
    """Samples per optimizer step of the job as it runs: its plan's, else what its ranks report
    (the job's own equal split); None when they do not all say."""
    if plan is not None:
        return plan.global_batch
    reported = [r.get("samples") for r in ranks]
    if not reported or not all(isinstance(n, (int, float)) and n > 0 for n in reported):
        return None
    return round(sum(reported))


def refusal(plan: RunPlan, ranks: list[dict[str, Any]], running_batch: int | None, command: list[str],
            world_from_plan: bool) -> tuple[str | None, list[str]]:
    """(why the plan cannot be carried out now, or None; the command to relaunch with)."""
    world = len(plan.shares)
    if len(ranks) != plan.world_before:
        return f"the plan is for {plan.world_before} ranks, {len(ranks)} report", command
    if running_batch is not None and plan.global_batch != running_batch:
        # the ranks resume at (epoch, step) = divmod(steps done, dataset // B): another B would
        # repeat or skip samples of the epoch under way
        return (f"the plan's global batch {plan.global_batch} is not the job's {running_batch}; a restart"
                " keeps the global batch (change it with a fresh start)"), command
    if world != plan.world_before and not world_from_plan:
        changed = with_process_count(command, world)
        if changed is None:
            return (f"the plan keeps {world} of {plan.world_before} ranks, and the command names no"
                    " --nproc_per_node or --num_gpus to change"), command
        return None, changed
    return None, command


def stop_step(ranks: list[dict[str, Any]]) -> tuple[int, float]:
    """(the step every rank stops after, how long to wait for their checkpoints in seconds)."""
    step_s = max((r["step_time_s"] or 0.0) for r in ranks) or 1.0
    last_reported = max(r["step"] or 0 for r in ranks)
    # A rank's last report lags its progress by a step and up to its agent's send period; give every
    # rank time to see the request.
    margin_s = STOP_MARGIN_S + slowest_send_period_s(ranks)
    stop_after = last_reported + 2 + max(3, math.ceil(margin_s / step_s))
    return stop_after, (stop_after - last_reported) * step_s + CHECKPOINT_TIMEOUT_S


def slowest_send_period_s(ranks: list[dict[str, Any]]) -> float:
    """The longest send period among the ranks, as their agents' hellos said (the rank rows'
    send_period_s); a rank that does not say (an older agent) is taken to use this process's own
    (the ranks inherit its environment, unless the launch command sets the period itself)."""
    own_s = send_period_s()
    periods = [period if isinstance(period, int | float) and not isinstance(period, bool) and 0 < period <= MAX_PERIOD_S
               else own_s for period in (rank.get("send_period_s") for rank in ranks)]
    return max(periods, default=own_s)


def request_stop(folder: Path, stop_after: int) -> str:
    """Ask every rank to stop after `stop_after` and checkpoint; the restart's id."""
    restart_id = uuid.uuid4().hex[:12]
    for old in folder.glob("ckpt-rank*.json"):
        old.unlink(missing_ok=True)
    write_json(folder / "stop.json", {"restart_id": restart_id, "stop_after_step": stop_after})
    return restart_id


def await_checkpoints(folder: Path, restart_id: str, world: int, deadline_s: float,
                      keep_waiting: Callable[[], bool]) -> dict[int, dict[str, Any]]:
    """Each rank's checkpoint report, until all `world` are in, the deadline passes, or
    `keep_waiting()` (called between looks) says no (the job died, or is being stopped)."""
    reports: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and len(reports) < world:
        for rank in range(world):
            report = read_json(folder / f"ckpt-rank{rank}.json")
            if report and report.get("restart_id") == restart_id:
                reports[rank] = report
        if not keep_waiting():
            break
        time.sleep(CHECK_S)
    return reports


def failure(reports: dict[int, dict[str, Any]], world: int) -> str | None:
    """Why the restart cannot go on from these reports, or None when every rank checkpointed."""
    failed = [r for r in reports.values() if not r.get("ok")]
    if failed:
        return "; ".join(r.get("error") or "?" for r in failed)
    if len(reports) < world:
        return f"{world - len(reports)} rank(s) did not checkpoint in time"
    return None


def decide(folder: Path, restart_id: str, decision: str) -> None:
    """Tell the waiting ranks: "exit" (relaunch) or "continue" (the stop request is withdrawn)."""
    write_json(folder / "decision.json", {"restart_id": restart_id, "decision": decision})
    if decision == "continue":
        (folder / "stop.json").unlink(missing_ok=True)
