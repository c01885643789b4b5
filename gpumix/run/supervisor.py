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
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.hub.client import HubClient
from gpumix.run.auto_replan import AutoReplan
from gpumix.run.launch_command import with_process_count
from gpumix.run.process_tree import MARKER_ENV, end_job, parent_death_signal, signal_job
from gpumix.wire.paths import runtime_dir
from gpumix.wire.plan_file import (
    CONTROL_DIR_ENV,
    PLAN_ENV,
    RESUME_STEP_ENV,
    RunPlan,
    read_json,
    write_json,
)

log = logging.getLogger(__name__)
POLL_S = 0.5
STOP_MARGIN_S = 0.5  # time the ranks get to see the stop request before reaching the stop step
CHECKPOINT_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0
RANKS_WAIT_S = 120.0  # a plan taken just after a (re)launch waits this long for the ranks to report
KILL_GRACE_S = 10.0  # between SIGTERM and SIGKILL when the job is stopped
PLANS_LOGGED = 8  # outcomes of the latest plans, in the status


class Supervisor:
    def __init__(self, command: list[str], job: str, hub: str | None, plan: RunPlan | None = None,
                 control_dir: Path | None = None, say: Callable[[str], None] = print, granularity: int = 1,
                 world_from_plan: bool = False, auto_replan: AutoReplan | None = None,
                 kill_grace_s: float = KILL_GRACE_S) -> None:
        self.command = command
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
        self.process: subprocess.Popen[bytes] | None = None
        self.kill_grace_s = kill_grace_s
        self._stopping = False
        self._kill_at_s = math.inf  # when a stopping job gets SIGKILL
        self._marker = uuid.uuid4().hex  # in every process of the job's environment
        self._watchdog: subprocess.Popen[str] | None = None
        self._plans: deque[dict[str, Any]] = deque()  # taken from the hub, not started yet
        self._launched_at_s = -math.inf
        self.plan_log: deque[dict[str, str]] = deque(maxlen=PLANS_LOGGED)  # {"plan_id", "outcome"}

    # -- the child ------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ, GPUMIX_JOB=self.job, **{CONTROL_DIR_ENV: str(self.folder),
                                                         RESUME_STEP_ENV: str(self.resume_step),
                                                         MARKER_ENV: self._marker})
        if self.plan is not None:
            plan_path = self.folder / f"plan-{self.plan.plan_id or 'initial'}.json"
            write_json(plan_path, self.plan.to_json())
            env[PLAN_ENV] = str(plan_path)
        if self.client is not None:
            env["GPUMIX_HUB"] = self.client.socket_path
        if self.visible_gpus is not None:  # the kept GPUs, by UUID, in rank order
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.visible_gpus)
        return env

    def _launch(self) -> None:
        if self._stopping:  # stop() came first: start nothing that could outlive us
            return
        for stale in ("stop.json", "decision.json"):
            (self.folder / stale).unlink(missing_ok=True)
        # Its own session (a terminal's Ctrl+C reaches us, not the ranks mid-step); SIGTERM if
        # the thread that started it dies (torchrun then ends its workers; the watchdog the rest).
        self.process = subprocess.Popen(self.command, env=self._environment(), start_new_session=True,
                                        preexec_fn=parent_death_signal(signal.SIGTERM))
        self._tell_watchdog(f"leader {self.process.pid}")
        self._launched_at_s = time.monotonic()
        self.state, self.message = "running", f"pid {self.process.pid}, from step {self.resume_step}"

    def stop(self) -> None:
        """Ctrl+C or SIGTERM: end the whole job: SIGTERM now, SIGKILL after kill_grace_s.
        A second stop() (a second Ctrl+C) kills at once."""
        leader = self.process.pid if self.process is not None else None
        if self._stopping:
            self._kill_at_s = time.monotonic()
            signal_job(self._marker, leader, signal.SIGKILL)
            return
        self._stopping = True
        self._kill_at_s = time.monotonic() + self.kill_grace_s
        signal_job(self._marker, leader, signal.SIGTERM)

    def _enforce_stop(self) -> None:
        """Called while waiting on anything: a stopped job past its grace gets SIGKILL."""
        if self._stopping and time.monotonic() >= self._kill_at_s:
            signal_job(self._marker, self.process.pid if self.process else None, signal.SIGKILL)

    def _end_leftovers(self) -> None:
        """The leader exited: its other processes (a worker in a session of its own) go too,
        within the stop's grace when stopping, else within kill_grace_s."""
        grace_s = max(0.0, self._kill_at_s - time.monotonic()) if self._stopping else self.kill_grace_s
        leader = self.process.pid if self.process else None
        if end_job(self._marker, leader, grace_s):
            self.say("gpumix run: processes of the job outlived it and were killed")

    # -- the watchdog: ends the job if this process dies without stopping it -----------------

    def _start_watchdog(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "gpumix.run.process_tree", self._marker, str(self.kill_grace_s)],
            stdin=subprocess.PIPE, text=True, env=env, start_new_session=True)

    def _tell_watchdog(self, line: str) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(line + "\n")
            self._watchdog.stdin.flush()
        except OSError:  # it died: the job can still be ended by us, and by PDEATHSIG
            log.warning("gpumix run: the job's watchdog is gone", exc_info=True)
            self._watchdog = None

    def _stop_watchdog(self) -> None:
        self._tell_watchdog("done")
        if self._watchdog is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._watchdog.stdin.close()
                self._watchdog.wait(5)
            self._watchdog = None

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self._start_watchdog()
        try:
            return self._supervise()
        except BaseException:  # a bug here, or an interrupt: the job must not run on unsupervised
            grace_s = max(0.0, self._kill_at_s - time.monotonic()) if self._stopping else self.kill_grace_s
            end_job(self._marker, self.process.pid if self.process else None, grace_s)
            raise
        finally:
            self._stop_watchdog()

    def _supervise(self) -> int:
        self._launch()
        while True:
            if self.process is None:  # stopped before the job started
                return 0
            self._enforce_stop()
            code = self.process.poll()
            if code is not None:
                self._end_leftovers()
                self.state = "exited"
                self.message = f"the job exited with code {code}" + (" (stopped)" if self._stopping else "")
                while self._plans:
                    self._log_plan(self._plans.popleft(), "not used: the job exited first")
                self._report()
                self.say(f"gpumix run: {self.message}; not relaunched")
                return code
            self._report(accepts_plan=not self._plans and not self._stopping)
            request = self._next_plan()
            if request is not None and not self._stopping:
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
            self.say(f"gpumix run: auto re-plan, {plan['speedup']:.2f}x predicted")
        return plan

    # -- the restart protocol ------------------------------------------------------------

    def _ranks(self) -> list[dict[str, Any]]:
        snapshot = self.client.snapshot() if self.client else None
        return [r for r in (snapshot or {}).get("ranks", []) if r.get("job") == self.job and r.get("connected")]

    def _restart(self, plan: RunPlan) -> None:
        ranks = self._ranks()
        world = len(plan.shares)
        command = self.command
        refusal = None
        running_batch = self._running_global_batch(ranks)
        if len(ranks) != plan.world_before:
            refusal = f"the plan is for {plan.world_before} ranks, {len(ranks)} report"
        elif running_batch is not None and plan.global_batch != running_batch:
            # the ranks resume at (epoch, step) = divmod(steps done, dataset // B): another B would
            # repeat or skip samples of the epoch under way
            refusal = (f"the plan's global batch {plan.global_batch} is not the job's {running_batch}; a restart"
                       " keeps the global batch (change it with a fresh start)")
        elif world != plan.world_before and not self.world_from_plan:
            command = with_process_count(self.command, world)
            if command is None:
                refusal = (f"the plan keeps {world} of {plan.world_before} ranks, and the command names no"
                           " --nproc_per_node or --num_gpus to change")
        if refusal is not None:
            self.message = f"restart refused: {refusal}"
            self.say(f"gpumix run: {self.message}")
            return
        if self._stopping:
            self.message = "restart refused: the job is being stopped"
            return
        step_s = max((r["step_time_s"] or 0.0) for r in ranks) or 1.0
        last_reported = max(r["step"] or 0 for r in ranks)
        # A rank's last report lags its progress by a step; give every rank time to see the request.
        stop_after = last_reported + 2 + max(3, math.ceil(STOP_MARGIN_S / step_s))
        restart_id = uuid.uuid4().hex[:12]
        for old in self.folder.glob("ckpt-rank*.json"):
            old.unlink(missing_ok=True)
        write_json(self.folder / "stop.json", {"restart_id": restart_id, "stop_after_step": stop_after})
        self.state, self.message = "stopping", f"all ranks stop after step {stop_after}, then checkpoint"
        self.say(f"gpumix run: {self.message}")
        self._report()
        running = len(ranks)  # every rank running now checkpoints, also those the plan leaves out
        reports = self._await_checkpoints(restart_id, running, deadline_s=(stop_after - last_reported) * step_s + CHECKPOINT_TIMEOUT_S)
        failed = [r for r in reports.values() if not r.get("ok")]
        if len(reports) < running or failed or self._stopping:
            why = "; ".join(r.get("error") or "?" for r in failed) or f"{running - len(reports)} rank(s) did not checkpoint in time"
            why = "the job is being stopped" if self._stopping else why
            write_json(self.folder / "decision.json", {"restart_id": restart_id, "decision": "continue"})
            (self.folder / "stop.json").unlink(missing_ok=True)
            self.state, self.message = "running", f"restart aborted, the run goes on unchanged: {why}"
            self.say(f"gpumix run: {self.message}")
            return
        write_json(self.folder / "decision.json", {"restart_id": restart_id, "decision": "exit"})
        self.state, self.message = "relaunching", f"checkpointed at step {stop_after}; relaunching under plan {plan.plan_id}"
        self.say(f"gpumix run: {self.message}")
        self._report()
        self._await_exit()
        if self._stopping:  # stopped while the ranks were leaving: nothing to relaunch
            self.message = "stopped while relaunching"
            return
        self.plan, self.resume_step, self.command = plan, stop_after, command
        if plan.gpus is not None:
            self.visible_gpus = plan.gpus
        self.restarts += 1
        self.process = None
        self._launch()
        self.say(f"gpumix run: relaunched (restart {self.restarts}) from step {stop_after}")

    def _running_global_batch(self, ranks: list[dict[str, Any]]) -> int | None:
        """Samples per optimizer step of the job as it runs: its plan's, else what its ranks report
        (the job's own equal split); None when they do not all say."""
        if self.plan is not None:
            return self.plan.global_batch
        reported = [r.get("samples") for r in ranks]
        if not reported or not all(isinstance(n, (int, float)) and n > 0 for n in reported):
            return None
        return round(sum(reported))

    def _await_checkpoints(self, restart_id: str, world: int, deadline_s: float) -> dict[int, dict[str, Any]]:
        reports: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline and len(reports) < world:
            for rank in range(world):
                report = read_json(self.folder / f"ckpt-rank{rank}.json")
                if report and report.get("restart_id") == restart_id:
                    reports[rank] = report
            if self.process is not None and self.process.poll() is not None:
                break  # the job died while stopping
            if self._stopping:
                break
            self._report()
            time.sleep(POLL_S / 5)
        return reports

    def _await_exit(self) -> None:
        """The ranks agreed to exit: wait for them, then end what is left of the old job (a rank
        that does not leave, a process of its own session) before the relaunch."""
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while self.process.poll() is None and time.monotonic() < deadline:
            self._enforce_stop()
            self._report()
            time.sleep(POLL_S / 5)
        self._end_leftovers()
        self.process.wait()


def _bounded(text: object, limit: int) -> str:
    """Text for the status, ASCII (escapes for the rest) and at most `limit` characters: the hub
    takes a status of at most 4 KiB of JSON, where a non-ASCII character could take six."""
    return str(text).encode("ascii", "backslashreplace").decode()[:limit]
