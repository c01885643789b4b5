"""`gpumix run`: supervise a training job and restart it under a new plan on request.

The supervisor launches the command (torchrun, the deepspeed launcher, or a
plain script) with the plan in its environment, polls the hub for a re-plan
request, and carries out the restart protocol (gpumix/wire/plan_file.py):
stop every rank after the same step, let each run its checkpoint hook,
then either relaunch under the new plan from that step, or, if any
checkpoint failed, tell the ranks to go on untouched. A job that exits on
its own is reported and not relaunched.

Plans are taken from the hub one at a time, only when a restart can start (the poll says
`accepts_plan`); one that still arrives mid-restart waits its turn here, and each plan's outcome
is in the status's `plans`. Stopping ends the job's whole process tree (gpumix/run/process_tree.py):
SIGTERM, SIGKILL after kill_grace_s, at once on a second stop(); a watchdog ends it if the
supervisor itself is killed.

This module holds the launch, the loop, the hub polling and the order of a restart; the job's
processes (stopping, leftovers, the watchdog) are gpumix/run/job_process.py, the restart
protocol's steps on the control folder gpumix/run/restart.py.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.hub.client import HubClient
from gpumix.run import restart
from gpumix.run.auto_replan import AutoReplan, announcement
from gpumix.run.job_process import KILL_GRACE_S, JobProcess
from gpumix.wire.paths import runtime_dir
from gpumix.wire.plan_file import (
    CONTROL_DIR_ENV,
    PLAN_ENV,
    RESUME_STEP_ENV,
    STAIR_PROBE_ENV,
    RunPlan,
    write_json,
)

log = logging.getLogger(__name__)
POLL_S = 0.5
EXIT_TIMEOUT_S = 60.0
RANKS_WAIT_S = 120.0  # a plan taken just after a (re)launch waits this long for the ranks to report
PLANS_LOGGED = 8  # outcomes of the latest plans, in the status


class Supervisor:
    def __init__(self, command: list[str], job: str, hub: str | None, plan: RunPlan | None = None,
                 control_dir: Path | None = None, say: Callable[[str], None] = print, granularity: int = 1,
                 world_from_plan: bool = False, auto_replan: AutoReplan | None = None,
                 kill_grace_s: float = KILL_GRACE_S, stair_probe: bool = False) -> None:
        self.command = command
        self.stair_probe = stair_probe  # `--stair-probe`: the first launch probes counts near its split
        self.auto_replan = auto_replan  # `--auto-replan`: restart into a plan that pays, unasked
        # the job reads its rank count from the plan (the demo), so a plan with fewer ranks needs no new command
        self.world_from_plan = world_from_plan
        self.visible_gpus: tuple[str, ...] | None = None  # set by a plan that left GPUs out
        self.granularity = granularity  # re-plans give ranks multiples of this many samples
        self.job = job
        self.client = HubClient(hub) if hub else None
        self.plan = plan
        self.folder = control_dir or runtime_dir() / f"run-{job}-{os.getpid()}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.resume_step = 0
        self.restarts = 0
        self.state = "starting"
        self.message = ""
        self.job_process = JobProcess(kill_grace_s, say)
        self._plans: deque[dict[str, Any]] = deque()  # taken from the hub, not started yet
        self._launched_at_s = -math.inf
        self.plan_log: deque[dict[str, str]] = deque(maxlen=PLANS_LOGGED)  # {"plan_id", "outcome"}

    # -- the child ------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ, GPUMIX_JOB=self.job, **{CONTROL_DIR_ENV: str(self.folder),
                                                         RESUME_STEP_ENV: str(self.resume_step)})
        if self.plan is not None:
            plan_path = self.folder / f"plan-{self.plan.plan_id or 'initial'}.json"
            write_json(plan_path, self.plan.to_json())
            env[PLAN_ENV] = str(plan_path)
        env.pop(STAIR_PROBE_ENV, None)  # ours alone: a relaunch never probes again
        if self.stair_probe and self.restarts == 0:
            env[STAIR_PROBE_ENV] = str(self.granularity)
        if self.client is not None:
            env["GPUMIX_HUB"] = self.client.socket_path
        if self.visible_gpus is not None:  # the kept GPUs, by UUID, in rank order
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.visible_gpus)
        return env

    def _launch(self) -> None:
        if self.job_process.stopping:  # stop() came first: start nothing that could outlive us
            return
        for stale in ("stop.json", "decision.json"):
            (self.folder / stale).unlink(missing_ok=True)
        leader = self.job_process.launch(self.command, self._environment())
        self._launched_at_s = time.monotonic()
        self.state, self.message = "running", f"pid {leader.pid}, from step {self.resume_step}"

    def stop(self) -> None:
        """Ctrl+C or SIGTERM: end the whole job: SIGTERM now, SIGKILL after the kill grace.
        A second stop() (a second Ctrl+C) kills at once."""
        self.job_process.stop()

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self.job_process.start_watchdog()
        try:
            return self._supervise()
        except BaseException:  # a bug here, or an interrupt: the job must not run on unsupervised
            self.job_process.end_all()
            raise
        finally:
            self.job_process.stop_watchdog()

    def _supervise(self) -> int:
        self._launch()
        job = self.job_process
        while True:
            if job.leader is None:  # stopped before the job started
                return 0
            job.enforce_stop()
            code = job.leader.poll()
            if code is not None:
                job.end_leftovers()
                self.state = "exited"
                self.message = f"the job exited with code {code}" + (" (stopped)" if job.stopping else "")
                while self._plans:
                    self._log_plan(self._plans.popleft(), "not used: the job exited first")
                self._report()
                self.say(f"gpumix run: {self.message}; not relaunched")
                return code
            self._report(accepts_plan=not self._plans and not job.stopping)
            request = self._next_plan()
            if request is not None and not job.stopping:
                self._start_restart(request)
            time.sleep(POLL_S)

    def _next_plan(self) -> dict[str, Any] | None:
        """The next plan to restart into, once all the ranks it was made for report (one taken
        just after a relaunch waits for them, up to RANKS_WAIT_S); else an --auto-replan one."""
        if not self._plans:
            return self._auto_plan()
        try:
            world = RunPlan.from_json(self._plans[0]).world_before
        except (KeyError, TypeError, ValueError):
            return self._plans.popleft()  # refused, with the reason, by _start_restart
        if time.monotonic() - self._launched_at_s < RANKS_WAIT_S and len(self._ranks()) != world:
            return None
        return self._plans.popleft()

    def _start_restart(self, request: dict[str, Any]) -> None:
        try:
            plan = RunPlan.from_json(request)
        except (KeyError, TypeError, ValueError) as error:
            self._log_plan(request, f"refused: not a usable plan: {error}")
            return
        restarts_before = self.restarts
        self._restart(plan)
        restarted = self.restarts > restarts_before
        self._log_plan(request, f"restarted from step {self.resume_step}" if restarted else self.message)

    def _log_plan(self, request: dict[str, Any], outcome: str) -> None:
        self.plan_log.append({"plan_id": _bounded(request.get("plan_id") or "", 32),
                              "outcome": _bounded(outcome, 120)})

    def _report(self, accepts_plan: bool = False) -> None:
        """Tell the hub where we are. `accepts_plan`: a restart could start now, so the hub hands
        over the next waiting plan; one handed over anyway is kept for later, never dropped."""
        if self.client is None:
            return
        status = {"state": self.state, "message": _bounded(self.message, 300), "restarts": self.restarts,
                  "plan_id": _bounded(self.plan.plan_id, 32) if self.plan else None, "resume_step": self.resume_step,
                  "pid": os.getpid(), "granularity": self.granularity, "accepts_plan": accepts_plan,
                  "plans": list(self.plan_log)}
        reply = self.client.control({"type": "supervisor", "job": self.job, "status": status})
        if reply.get("type") == "supervisor_work" and isinstance(reply.get("plan"), dict):
            self._plans.append(reply["plan"])

    def _auto_plan(self) -> dict[str, Any] | None:
        if self.auto_replan is None or self.client is None or self.state != "running":
            return None
        if not self.auto_replan.due(time.monotonic()):  # no snapshot to fetch between checks
            return None
        snapshot = self.client.snapshot()
        if snapshot is None:
            return None
        plan = self.auto_replan.propose(snapshot, self.job, self.resume_step, self.granularity, time.monotonic())
        if plan is not None:
            self.say(f"gpumix run: auto re-plan, {announcement(plan)}")
        return plan

    # -- a restart, in order (the steps are gpumix/run/restart.py) ------------------------

    def _ranks(self) -> list[dict[str, Any]]:
        snapshot = self.client.snapshot() if self.client else None
        return [r for r in (snapshot or {}).get("ranks", []) if r.get("job") == self.job and r.get("connected")]

    def _restart(self, plan: RunPlan) -> None:
        ranks = self._ranks()
        running_batch = restart.running_global_batch(self.plan, ranks)
        refusal, command = restart.refusal(plan, ranks, running_batch, self.command, self.world_from_plan)
        if refusal is not None:
            self.message = f"restart refused: {refusal}"
            self.say(f"gpumix run: {self.message}")
            return
        if self.job_process.stopping:
            self.message = "restart refused: the job is being stopped"
            return
        stop_after, checkpoints_s = restart.stop_step(ranks)
        restart_id = restart.request_stop(self.folder, stop_after)
        self.state, self.message = "stopping", f"all ranks stop after step {stop_after}, then checkpoint"
        self.say(f"gpumix run: {self.message}")
        self._report()
        running = len(ranks)  # every rank running now checkpoints, also those the plan leaves out
        reports = restart.await_checkpoints(self.folder, restart_id, running, checkpoints_s, self._checkpointing)
        why = "the job is being stopped" if self.job_process.stopping else restart.failure(reports, running)
        if why is not None:
            restart.decide(self.folder, restart_id, "continue")
            self.state, self.message = "running", f"restart aborted, the run goes on unchanged: {why}"
            self.say(f"gpumix run: {self.message}")
            return
        restart.decide(self.folder, restart_id, "exit")
        self.state, self.message = "relaunching", f"checkpointed at step {stop_after}; relaunching under plan {plan.plan_id}"
        self.say(f"gpumix run: {self.message}")
        self._report()
        self._await_exit()
        if self.job_process.stopping:  # stopped while the ranks were leaving: nothing to relaunch
            self.message = "stopped while relaunching"
            return
        self.plan, self.resume_step, self.command = plan, stop_after, command
        if plan.gpus is not None:
            self.visible_gpus = plan.gpus
        self.restarts += 1
        self.job_process.leader = None
        self._launch()
        self.say(f"gpumix run: relaunched (restart {self.restarts}) from step {stop_after}")

    def _checkpointing(self) -> bool:
        """Between looks for checkpoint reports: go on waiting unless the job died or is being
        stopped; the hub hears from us meanwhile."""
        leader = self.job_process.leader
        if (leader is not None and leader.poll() is not None) or self.job_process.stopping:
            return False
        self._report()
        return True

    def _await_exit(self) -> None:
        """The ranks agreed to exit: wait for them, then end what is left of the old job (a rank
        that does not leave, a process of its own session) before the relaunch."""
        leader = self.job_process.leader
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while leader.poll() is None and time.monotonic() < deadline:
            self.job_process.enforce_stop()
            self._report()
            time.sleep(POLL_S / 5)
        self.job_process.end_leftovers()
        leader.wait()


def _bounded(text: object, limit: int) -> str:
    """Text for the status, ASCII (escapes for the rest) and at most `limit` characters: the hub
    takes a status of at most 4 KiB of JSON, where a non-ASCII character could take six."""
    return str(text).encode("ascii", "backslashreplace").decode()[:limit]
