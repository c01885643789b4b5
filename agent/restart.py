"""The rank's side of a supervised restart: checkpoint at an agreed step, then exit or go on.

    agent.on_checkpoint(lambda step: save(model, optimizer, step))
    for step in range(agent.resume_step, total_steps):
        with agent.step(samples=n_r):
            ...
        if agent.restart_point(step + 1):   # optimizer steps done so far
            break                           # the supervisor relaunches with the new plan

restart_point costs one os.stat() per step until a restart is asked for. All
ranks stop after the same step; each runs the checkpoint hook, reports, and
waits for the supervisor's verdict: exit (every rank checkpointed) or continue
(a hook failed: nothing is lost, the run goes on under its old plan).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from gpumix.agent.launcher_env import ascii_count
from gpumix.wire.plan_file import (
    CONTROL_DIR_ENV,
    PLAN_ENV,
    RESUME_STEP_ENV,
    RunPlan,
    load_plan,
    read_json,
    write_json,
)

log = logging.getLogger("gpumix.agent")
DECISION_TIMEOUT_S = 300.0
POLL_S = 0.05


class RestartControl:
    def __init__(self, rank: int, control_dir: str | None = None) -> None:
        folder = control_dir or os.environ.get(CONTROL_DIR_ENV)
        self.folder = Path(folder) if folder else None
        self.rank = rank
        self.hook: Callable[[int], object] | None = None
        self._stop_mtime_ns: int | None = None
        self._stop: dict | None = None
        self._handled: set[str] = set()  # restart ids already answered

    @property
    def resume_step(self) -> int:
        value = os.environ.get(RESUME_STEP_ENV, "0")
        return ascii_count(value) or 0

    def _stop_request(self) -> dict | None:
        if self.folder is None:
            return None
        try:
            mtime = os.stat(self.folder / "stop.json").st_mtime_ns
        except OSError:
            return None
        if mtime != self._stop_mtime_ns:
            self._stop_mtime_ns = mtime
            self._stop = read_json(self.folder / "stop.json")
        return self._stop

    def restart_point(self, steps_done: int) -> bool:
        """True: the checkpoint is written and every rank agreed: exit now."""
        request = self._stop_request()
        if not request or request.get("restart_id") in self._handled:
            return False
        restart_id, stop_after = request.get("restart_id"), request.get("stop_after_step")
        if not isinstance(stop_after, int) or steps_done < stop_after:
            return False
        self._handled.add(restart_id)
        ok, error = True, None
        if steps_done > stop_after:  # asked too late: this rank already went past
            ok, error = False, f"rank {self.rank} was already at step {steps_done}"
        elif self.hook is not None:
            try:
                self.hook(steps_done)
            except Exception as failure:  # a failed checkpoint aborts the restart, not training
                ok, error = False, f"checkpoint hook failed: {failure!r}"
                log.warning("gpumix: checkpoint at step %d failed; the run goes on", steps_done, exc_info=True)
        write_json(self.folder / f"ckpt-rank{self.rank}.json",
                   {"restart_id": restart_id, "step": steps_done, "ok": ok, "error": error})
        return self._await_decision(restart_id)

    def _await_decision(self, restart_id: str) -> bool:
        deadline = time.monotonic() + DECISION_TIMEOUT_S
        while time.monotonic() < deadline:
            decision = read_json(self.folder / "decision.json")
            if decision and decision.get("restart_id") == restart_id:
                return decision.get("decision") == "exit"
            time.sleep(POLL_S)
        log.warning("gpumix: no decision from the supervisor; the run goes on")
        return False


def load_run_plan() -> RunPlan | None:
    """This run's plan (GPUMIX_PLAN), when a supervisor gave one."""
    path = os.environ.get(PLAN_ENV)
    if not path:
        return None
    try:
        return load_plan(path)
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("gpumix agent: cannot read the plan %s; running without one", path, exc_info=True)
        return None
