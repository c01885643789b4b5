"""The restart protocol, for the Supervisor (gpumix/wire/plan_file.py): refuse a plan that cannot apply,
stop every rank after the same step, wait for each checkpoint, then relaunch under the plan from
that step, or, if any checkpoint failed, tell the ranks to go on untouched.

What it may import: the standard library, gpumix.run, gpumix.wire."""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

from gpumix.run.launch_command import with_process_count
from gpumix.wire.plan_file import RunPlan, read_json, write_json

POLL_S = 0.5
STOP_MARGIN_S = 0.5  # time the ranks get to see the stop request before reaching the stop step
CHECKPOINT_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0


class RestartProtocol:
    """A part of Supervisor: uses its `command`, `plan`, `folder`, `process`, `world_from_plan`, state
    and message, `say`, `_ranks`, `_report`, `_launch`, `_enforce_stop`, `_end_leftovers`, `_stopping`."""

    def _refusal(self, plan: RunPlan, ranks: list[dict[str, Any]]) -> tuple[str | None, list[str] | None]:
        """(why the plan cannot be carried out now, or None; the command to relaunch with)."""
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
        return refusal, command

    def _restart(self, plan: RunPlan) -> None:
        ranks = self._ranks()
        refusal, command = self._refusal(plan, ranks)
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
