"""`gpumix run`: supervise a training job and restart it under a new plan on request.

The supervisor launches the command (torchrun, the deepspeed launcher, or a
plain script) with the plan in its environment, polls the hub for a re-plan
request, and carries out the restart protocol (gpumix/run_plan.py):
stop every rank after the same step, let each run its checkpoint hook,
then either relaunch under the new plan from that step, or, if any
checkpoint failed, tell the ranks to go on untouched. A job that exits on
its own is reported and not relaunched.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.auto_replan import AutoReplan
from gpumix.hub.client import HubClient
from gpumix.launch_command import with_process_count
from gpumix.paths import runtime_dir
from gpumix.run_plan import (
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


class Supervisor:
    def __init__(self, command: list[str], job: str, hub: str | None, plan: RunPlan | None = None,
                 control_dir: Path | None = None, say: Callable[[str], None] = print, granularity: int = 1,
                 world_from_plan: bool = False, auto_replan: AutoReplan | None = None) -> None:
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
        self._stopping = False

    # -- the child ------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ, GPUMIX_JOB=self.job, **{CONTROL_DIR_ENV: str(self.folder),
                                                         RESUME_STEP_ENV: str(self.resume_step)})
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
        self.process = subprocess.Popen(self.command, env=self._environment(), start_new_session=True)
        self.state, self.message = "running", f"pid {self.process.pid}, from step {self.resume_step}"

    def stop(self) -> None:
        """Ctrl+C: end the whole job (its process group)."""
        self._stopping = True
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self._launch()
        while True:
            if self.process is None:  # stopped before the job started
                return 0
            code = self.process.poll()
            if code is not None:
                self.state = "exited"
                self.message = f"the job exited with code {code}" + (" (stopped)" if self._stopping else "")
                self._report()
                self.say(f"gpumix run: {self.message}; not relaunched")
                return code
            request = self._report()
            if request is None:
                request = self._auto_plan()
            if request is not None:
                self._restart(RunPlan.from_json(request))
            time.sleep(POLL_S)

    def _report(self) -> dict[str, Any] | None:
        """Tell the hub where we are; take a re-plan waiting for us."""
        if self.client is None:
            return None
        status = {"state": self.state, "message": self.message[:300], "restarts": self.restarts,
                  "plan_id": self.plan.plan_id if self.plan else None, "resume_step": self.resume_step,
                  "pid": os.getpid(), "granularity": self.granularity}
        reply = self.client.control({"type": "supervisor", "job": self.job, "status": status})
        return reply.get("plan") if reply.get("type") == "supervisor_work" else None

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
        if len(ranks) != plan.world_before:
            refusal = f"the plan is for {plan.world_before} ranks, {len(ranks)} report"
        elif world != plan.world_before and not self.world_from_plan:
            command = with_process_count(self.command, world)
            if command is None:
                refusal = (f"the plan keeps {world} of {plan.world_before} ranks, and the command names no"
                           " --nproc_per_node or --num_gpus to change")
        if refusal is not None:
            self.message = f"restart refused: {refusal}"
            self.say(f"gpumix run: {self.message}")
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
        if len(reports) < running or failed:
            why = "; ".join(r.get("error") or "?" for r in failed) or f"{running - len(reports)} rank(s) did not checkpoint in time"
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
        self.plan, self.resume_step, self.command = plan, stop_after, command
        if plan.gpus is not None:
            self.visible_gpus = plan.gpus
        self.restarts += 1
        self.process = None
        self._launch()
        self.say(f"gpumix run: relaunched (restart {self.restarts}) from step {stop_after}")

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
            self._report()
            time.sleep(POLL_S / 5)
        return reports

    def _await_exit(self) -> None:
        try:
            self.process.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # a rank that does not leave after agreeing to
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
