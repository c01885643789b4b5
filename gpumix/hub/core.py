"""Hub core: samples the hardware on its own thread and keeps the latest snapshot
and a bounded history. Clients (the TUI, --once, remote viewers) only read
snapshots; nothing here waits on a client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.advisor import AdvisorSettings, findings
from gpumix.history import GpuHistory
from gpumix.host import HostSampler
from gpumix.hub.ranks import (
    RankStream,
    carry_points,
    mark_stragglers,
    points_view,
    rank_summary,
    run_summary,
)
from gpumix.hw.open import Hardware
from gpumix.hw.types import P2PLink
from gpumix.power import PowerController
from gpumix.snapshot import build_snapshot
from gpumix.tiers import tier_table

RankKey = tuple[str | None, int]  # (job, rank)
MAX_RANKS = 4096  # bounded, whatever connects
SUPERVISOR_TIMEOUT_S = 5.0  # a supervisor polls every half second

log = logging.getLogger(__name__)


class Hub:
    def __init__(
        self,
        hardware: Hardware,
        interval_s: float = 1.0,
        history_s: float = 600.0,
        host_sampler: HostSampler | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        hostname: str | None = None,
    ) -> None:
        self.hardware = hardware
        self.interval_s = interval_s
        self.history = GpuHistory(max_points=max(2, int(history_s / interval_s)))
        self._host = host_sampler if host_sampler is not None else HostSampler()
        self._clock = clock
        self._wall_clock = wall_clock
        self._hostname = hostname
        self._infos = hardware.backend.gpus()
        self._driver = hardware.backend.driver_info()
        self._p2p: list[P2PLink] | None = None
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self._ranks: dict[RankKey, RankStream] = {}
        self._ranks_changed = True
        self._merged: dict[str, Any] | None = None  # hardware snapshot + current ranks
        self.on_tick: list[Callable[[], None]] = []  # e.g. the demo job pacing the simulated GPUs
        self.on_snapshot: list[Callable[[dict[str, Any]], None]] = []  # each tick's snapshot (the recorder)
        self.on_control: list[Callable[[dict[str, Any], dict[str, Any]], None]] = []  # (request, reply) of power controls
        self.power = PowerController(hardware.backend)
        self._jobs: dict[str, dict[str, Any]] = {}  # job -> the supervisor's last status
        self._pending_plans: dict[str, dict[str, Any]] = {}  # job -> a plan waiting for its supervisor
        self._control_lock = threading.Lock()  # one control at a time

    # -- sampling ----------------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        """One sampling round: hardware, host, processes; returns the new snapshot."""
        for callback in self.on_tick:
            callback()
        machine = self.hardware.machine
        if machine is not None:
            machine.tick()
        samples = self.hardware.backend.sample()
        if self._p2p is None:  # topology does not change while we run
            self._p2p = self.hardware.backend.p2p()
        host = self._host.sample()
        pids = {proc.pid for sample in samples for proc in sample.processes}
        processes = self._host.processes(pids)
        snapshot = build_snapshot(
            timestamp_s=self._wall_clock(),
            source=self.hardware.source,
            driver=self._driver,
            infos=self._infos,
            samples=samples,
            host=host,
            processes=processes,
            p2p=self._p2p,
            hostname=self._hostname,
        )
        snapshot["power_budget_w"] = self.hardware.power_budget_w
        with self._lock:
            self.history.add(samples)
            self._snapshot = snapshot
            self._merged = None
            self.ticks += 1
        self._ready.set()
        result = self.snapshot() or snapshot
        for listener in self.on_snapshot:  # cheap listeners only (the recorder queues it)
            try:
                listener(result)
            except Exception:
                log.exception("snapshot listener failed")
        return result

    def snapshot(self) -> dict[str, Any] | None:
        """The latest hardware snapshot with the ranks as of now (steps arrive between ticks)."""
        with self._lock:
            if self._snapshot is None:
                return None
            if self._merged is None or self._ranks_changed:
                self._merged = self._merge_ranks(self._snapshot)
                self._ranks_changed = False
            return self._merged

    # -- ranks (fed by the hub server from agent messages) -----------------------

    def _merge_ranks(self, hardware_snapshot: dict[str, Any]) -> dict[str, Any]:
        now_s = self._clock()
        ranks = []
        for _, stream in sorted(self._ranks.items(), key=lambda item: (item[0][0] or "", item[0][1])):
            ranks.append({**rank_summary(stream), "points": points_view(stream, now_s)})
        mark_stragglers(ranks)
        snapshot = dict(hardware_snapshot)
        snapshot["ranks"] = ranks
        snapshot["run"] = run_summary(ranks)
        gpus = []
        for gpu in hardware_snapshot["gpus"]:
            on_gpu = [r["rank"] for r in ranks if r["gpu_uuid"] == gpu["uuid"] and r["connected"]]
            gpus.append({**gpu, "ranks": on_gpu})
        snapshot["gpus"] = gpus
        snapshot["tiers"] = tier_table(snapshot)
        snapshot["jobs"] = self._supervised_jobs(now_s)
        host = snapshot.get("host") or {}
        settings = AdvisorSettings(power_budget_w=self.hardware.power_budget_w, has_infiniband=bool(host.get("infiniband")))
        snapshot["findings"] = [finding.to_json() for finding in findings(snapshot, settings)]
        return snapshot

    # -- controls ----------------------------------------------------------------

    def control(self, request: dict[str, Any], peer: str | None = None) -> dict[str, Any]:
        """A control from a client (power caps, re-plan); the reply says what changed or why not.
        `peer` is who the server knows is asking (the audit names it); None: this process itself."""
        from gpumix.hub.controls import power_control

        if request.get("type") == "replan":
            return self.request_restart(str(request.get("job")), request.get("plan") or {})
        with self._control_lock:
            reply = power_control(self.power, self.snapshot(), request, self.hardware.power_budget_w, peer=peer)
        for listener in self.on_control:
            listener(request, reply)
        if reply["ok"] and reply["changes"] and not request.get("dry_run"):
            self.tick()  # show the new caps now, not at the next tick
        return reply

    # -- supervised jobs (gpumix run) --------------------------------------------------

    def request_restart(self, job: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Queue a new plan for the supervisor of `job` (gpumix/hub/jobs.py), or refuse it; the
        reply says which, and `queued` the plan's place in line."""
        from collections import deque

        from gpumix.hub import jobs
        from gpumix.run_plan import RunPlan

        with self._lock:
            status = dict(self._jobs.get(job) or {})
        if not status or self._clock() - status["last_seen_s"] >= SUPERVISOR_TIMEOUT_S:
            return jobs.refused(f"no supervisor runs job {job!r}: start the job with `gpumix run -- ...`")
        if status.get("state") == "exited":
            return jobs.refused(f"job {job!r} has exited: {status.get('message') or 'nothing to restart'}")
        try:
            run_plan = RunPlan.from_json(plan)
        except (KeyError, TypeError, ValueError) as error:
            return jobs.refused(f"not a usable plan: {error}")
        with self._lock:
            waiting = self._pending_plans.setdefault(job, deque())
            if len(waiting) >= jobs.MAX_WAITING_PLANS:
                return jobs.full(job)
            waiting.append(run_plan.to_json())
            position = len(waiting)
            self._ranks_changed = True
        return jobs.queued(job, position, status)

    def supervisor_poll(self, job: str, status: dict[str, Any]) -> dict[str, Any]:
        """A supervisor reports its state; when it can start a restart, it takes the next plan."""
        with self._lock:
            previous = self._jobs.get(job)
            if previous is not None and previous.get("pid") != status.get("pid"):
                self._pending_plans.pop(job, None)  # asked of an earlier supervisor of this job
            self._jobs[job] = {**status, "last_seen_s": self._clock()}
            waiting = self._pending_plans.get(job)
            # a supervisor that does not say (an older one) takes a plan while its job runs
            ready = status.get("accepts_plan", status.get("state") == "running") is True
            plan = waiting.popleft() if waiting and ready else None
            if waiting is not None and not waiting:
                del self._pending_plans[job]
            self._ranks_changed = True
        return {"type": "supervisor_work", "plan": plan}

    def _supervised_jobs(self, now_s: float) -> dict[str, dict[str, Any]]:
        """The supervisors' statuses for the snapshot (under the lock). One silent past the timeout
        is marked lost and its waiting plans are dropped (a silent job leaves later, _expire)."""
        from gpumix.hub import jobs

        view = {}
        for job, status in self._jobs.items():
            if now_s - status["last_seen_s"] >= SUPERVISOR_TIMEOUT_S:
                jobs.mark_lost(status, dropped_plans=len(self._pending_plans.pop(job, ())))
            view[job] = {**status, "queued_plans": len(self._pending_plans.get(job, ()))}
        return view

    def agent_hello(self, info: dict[str, Any]) -> RankKey:
        key = (info["job"], info["rank"])
        uuid = info["gpu_uuid"]
        if uuid is None and info["nvml_index"] is not None and 0 <= info["nvml_index"] < len(self._infos):
            uuid = self._infos[info["nvml_index"]].uuid
        with self._lock:
            if key not in self._ranks and len(self._ranks) >= MAX_RANKS:
                raise OverflowError("too many ranks")
            old = self._ranks.get(key)
            stream = RankStream(
                rank=info["rank"], world_size=info["world_size"], local_rank=info["local_rank"], pid=info["pid"],
                hostname=info["hostname"], gpu_uuid=uuid, nvml_index=info["nvml_index"], job=info["job"],
                env=info["env"], versions=info["versions"], last_seen_s=self._clock(),
            )
            if old is not None and old.pid == stream.pid:
                stream.steps = old.steps  # the same process reconnected: keep its history
                stream.points = old.points
            elif old is not None:  # a new process for this rank: a restart, maybe under a new split
                carry_points(old, stream, self._clock())
            self._ranks[key] = stream
            self._ranks_changed = True
        return key

    def agent_step(self, key: RankKey, step: dict[str, Any]) -> None:
        with self._lock:
            stream = self._ranks.get(key)
            if stream is None:
                return
            stream.steps.append(step)
            stream.last_seen_s = self._clock()
            stream.connected = True
            self._ranks_changed = True

    def agent_transport(self, key: RankKey, channels: list[dict[str, Any]]) -> None:
        with self._lock:
            stream = self._ranks.get(key)
            if stream is not None:
                stream.transport = channels
                self._ranks_changed = True

    def agent_gone(self, key: RankKey, pid: int | None = None) -> None:
        with self._lock:
            stream = self._ranks.get(key)
            if stream is not None and (pid is None or stream.pid == pid):
                stream.connected = False
                self._ranks_changed = True

    def forget_rank(self, key: RankKey) -> None:
        with self._lock:
            self._ranks.pop(key, None)
            self._ranks_changed = True

    def series(self, index: int, name: str) -> list[float | None]:
        with self._lock:
            return self.history.series(index, name)

    def wait_for_snapshot(self, timeout_s: float) -> dict[str, Any] | None:
        self._ready.wait(timeout_s)
        return self.snapshot()

    # -- the sampling thread ------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumix-hub-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a sampler bug must not kill the monitor: log, go on
                log.exception("sampling failed")
            next_at += self.interval_s
            delay = next_at - self._clock()
            if delay < 0:  # fell behind (a slow tick): skip, don't pile up
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.hardware.backend.close()
