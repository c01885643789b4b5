"""Hub core: the Hub puts the parts together under one lock. It samples the hardware on its own
thread and keeps the latest snapshot and a bounded history; clients (the TUI, --once, remote viewers)
only read snapshots, and nothing here waits on a client.

Its parts, one idea each: agents' hellos, steps and goodbyes (`intake.py`, ranks kept in
`rank_table.py`), supervised jobs and their re-plans (`supervised.py`), the snapshot merged with the
ranks (`merge.py`), power controls (`controls.py`). None of them is thread-safe: the Hub calls them
under its lock. Their public names stay importable from here."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.hub.cap_samples import CapSamples
from gpumix.hub.history import GpuHistory
from gpumix.hub.intake import AgentIntake
from gpumix.hub.jobs import refused
from gpumix.hub.merge import DETAIL_RANKS, merge_ranks
from gpumix.hub.plan_in_force import PlansInForce
from gpumix.hub.rank_table import RankKey, RankLimits, RankRefused, StreamKey
from gpumix.hub.snapshot import build_snapshot, link_rows
from gpumix.hub.supervised import (
    MAX_JOBS,
    SUPERVISOR_TIMEOUT_S,
    SupervisedJobs,
    UnusablePlan,
    usable_plan,
)
from gpumix.hw.hardware import Hardware
from gpumix.hw.host import HostSampler
from gpumix.hw.types import P2PLink
from gpumix.power.budget import same_cap
from gpumix.power.caps import PowerController

__all__ = [  # the hub's public names, wherever their part now lives
    "DETAIL_RANKS", "MAX_GONE_RANKS", "MAX_JOBS", "MAX_RANKS", "MAX_RANKS_PER_JOB", "RANK_RETENTION_S",
    "SUPERVISOR_TIMEOUT_S", "Hub", "RankKey", "RankRefused", "StreamKey",
]

RANK_RETENTION_S = 600.0  # a gone rank or job stays in view this long (the recorder keeps it for good)
# The rank limits, read at each hello and each closed connection (so a test may lower them):
MAX_RANKS = 4096  # ranks held, live and gone: gone ones make room first
MAX_RANKS_PER_JOB = 1024
# Gone ranks kept in the live view at most (oldest forgotten first): a stream of short-lived connections
# must not grow every snapshot's merge; the recording keeps them all.
MAX_GONE_RANKS = 256
# A dashboard's ask for a snapshot ("view") holds this long; with none, busy GPUs' PCIe counters are read on
# the slow schedule too (gpumix/hw/nvml_pcie.py: a busy fast link's pair is ~1 ms of CPU a tick, issue 13)
VIEWER_HOLD_S = 10.0

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
        rank_retention_s: float = RANK_RETENTION_S,
    ) -> None:
        self.hardware = hardware
        self.rank_retention_s = rank_retention_s
        self.interval_s = interval_s
        self.history = GpuHistory(max_points=max(2, int(history_s / interval_s)))
        self._host = host_sampler if host_sampler is not None else HostSampler()
        self._clock = clock
        self._wall_clock = wall_clock
        self._hostname = hostname
        self._infos = hardware.backend.gpus()
        self._driver = hardware.backend.driver_info()
        self._p2p: list[P2PLink] | None = None
        self._p2p_rows: list[dict[str, Any]] = []  # the snapshot's rows of self._p2p, made with it
        self._lock = threading.Lock()  # guards everything below: the parts are not thread-safe themselves
        self._snapshot: dict[str, Any] | None = None
        self._ready = threading.Event()
        # one tick at a time: a control's tick (the new caps shown at once) waits for the sampler's, so a
        # reading taken before a change is never published after the one taken since (a stale cap for a tick)
        self._tick_lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.viewing = False  # a dashboard in this process views every snapshot (gpumix-top with its own hub)
        self._viewed_until_s = -float("inf")  # a remote viewer's last ask + VIEWER_HOLD_S
        self._ranks_changed = True
        # a rank came or went since the last tick: its process may too, which the backend's process list
        # (read every few seconds and when a GPU's memory moves: gpumix/hw/nvml_settled.py) then reads at once
        self._ranks_came_or_went = False
        self._merged: dict[str, Any] | None = None  # hardware snapshot + current ranks
        self.on_tick: list[Callable[[], None]] = []  # e.g. the demo job pacing the simulated GPUs
        self.on_snapshot: list[Callable[[dict[str, Any]], None]] = []  # each tick's snapshot (the recorder)
        self.on_control: list[Callable[[dict[str, Any], dict[str, Any]], None]] = []  # (request, reply) of power controls
        self.power = PowerController(hardware.backend)
        self._supervised = SupervisedJobs()  # supervisors' statuses and their waiting re-plans
        self._control_lock = threading.Lock()  # one control at a time
        self.plans_in_force = PlansInForce()  # the snapshot's plan
        # each step filed under its GPU's cap at the last tick: the power fit's learned curves
        self.cap_samples = CapSamples()
        self._caps_w: dict[str, float | None] = {}  # uuid -> cap at the last tick
        # uuid -> wall time of the tick that first saw that cap: a step that ended before it may have run
        # under the cap before (the agents send once a second), so it is not filed under this one
        self._cap_since_wall_s: dict[str, float] = {}
        self._learned_points: dict[str, list[dict[str, Any]]] = {}  # the snapshot's power_points, made each tick
        self._intake = AgentIntake(self._infos, self.cap_samples)  # agents' hellos, steps and goodbyes
        self._ranks = self._intake.table.streams  # (job, run id, rank) -> its stream; read-only here

    # -- sampling ----------------------------------------------------------------

    def tick_with_rates(self) -> dict[str, Any] | None:
        """On real GPUs, one tick whose PCIe rates come from a 20 ms pair of counter reads on all GPUs at once
        (NVML's window where the counters cannot): a one-shot needs no second reading (issue 13: the 0.5 s
        between two was most of `doctor`'s wall time). None for a simulated world (moves only when ticked)."""
        if self.hardware.machine is not None:
            return None
        self.hardware.backend.instant_first_pcie = True
        return self.tick()

    def tick(self, viewed: bool = False, merge: bool = True) -> dict[str, Any]:
        """One sampling round: hardware, host, processes; returns the new snapshot. `viewed`: busy GPUs'
        PCIe read this tick whether or not a dashboard views the hub (a one-shot's fresh snapshot).
        `merge=False` (the sampling thread, whose caller reads no result): the ranks are merged in when a
        client or a listener asks, not each tick; the hardware snapshot alone is returned where none listens."""
        with self._tick_lock:
            return self._tick(viewed, merge)

    def _tick(self, viewed: bool = False, merge: bool = True) -> dict[str, Any]:
        for callback in self.on_tick:
            callback()
        machine = self.hardware.machine
        if machine is not None:
            machine.tick()
        with self._lock:
            came_or_went, self._ranks_came_or_went = self._ranks_came_or_went, False
        forget = getattr(self.hardware.backend, "forget_settled_readings", None)
        if came_or_went and forget is not None:
            forget()
        if hasattr(self.hardware.backend, "busy_on_slow_schedule"):
            self.hardware.backend.busy_on_slow_schedule = not (viewed or self.viewed())
        samples = self.hardware.backend.sample()
        if self._p2p is None:  # topology does not change while we run
            self._p2p = self.hardware.backend.p2p()
            self._p2p_rows = link_rows(self._p2p)
        host = self._host.sample()
        pids = {proc.pid for sample in samples for proc in sample.processes}
        processes = self._host.processes(pids)
        snapshot = build_snapshot(
            timestamp_s=self._wall_clock(), source=self.hardware.source, driver=self._driver, infos=self._infos,
            samples=samples, host=host, processes=processes, p2p=self._p2p, hostname=self._hostname,
            p2p_rows=self._p2p_rows)
        snapshot["power_budget_w"] = self.hardware.power_budget_w
        snapshot["power_layout"] = self.hardware.power_layout
        with self._lock:
            self._expire(self._clock())
            self.cap_samples.expire(self._clock())
            self.history.add(samples)
            self._snapshot = snapshot
            caps_w = {gpu["uuid"]: gpu.get("power_cap_w") for gpu in snapshot["gpus"]}
            self._cap_since_wall_s = {
                uuid: self._cap_since_wall_s.get(uuid, 0.0) if _same_or_unknown(self._caps_w.get(uuid), cap_w)
                else snapshot["timestamp_s"] for uuid, cap_w in caps_w.items()}
            self._caps_w = caps_w
            # the learned points at caps other than each GPU's cap now: all a learned curve needs besides the
            # rank's live figure (gpumix.power.budget reads no point at the cap in force). A box whose caps
            # never changed has none, so its snapshots stay as small as before.
            self._learned_points = self.cap_samples.view(self._clock(), off_caps_w=self._caps_w)
            self._merged = None
            self.ticks += 1
        self._ready.set()
        if not (merge or self.on_snapshot):
            # issue 13: the merge (ranks, findings, tiers: 0.6 ms of 1.4 for 10 GPUs and 10 ranks on the
            # 2-core box) was redone by the next client's ask anyway, as steps arrive between ticks
            return snapshot
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
                now_s = self._clock()
                self._merged = merge_ranks(self._snapshot, self._intake.table.ordered(), now_s,
                                           self._supervised.view(now_s), self.plans_in_force, self._wall_clock(),
                                           self.hardware.power_budget_w)
                if self._learned_points:  # what `gpumix plan`'s joint offer learns from (a fit asks afresh)
                    self._merged["power_points"] = self._learned_points
                self._ranks_changed = False
            return self._merged

    def note_viewer(self) -> None:
        """A dashboard asked for a snapshot to show: fresh PCIe rates each tick for VIEWER_HOLD_S."""
        self._viewed_until_s = self._clock() + VIEWER_HOLD_S

    def viewed(self) -> bool:
        return self.viewing or self._clock() < self._viewed_until_s

    def _expire(self, now_s: float) -> None:
        """Forget ranks and supervised jobs gone for longer than the retention (under the lock)."""
        ranks_went = self._intake.table.expire(now_s, self.rank_retention_s)
        if self._supervised.expire(now_s, self.rank_retention_s) or ranks_went:
            self._ranks_changed = True

    # -- controls ----------------------------------------------------------------

    def control(self, request: dict[str, Any], peer: str | None = None) -> dict[str, Any]:
        """A control from a client (power caps, re-plan); the reply says what changed or why not.
        `peer` is who the server knows is asking (the audit names it); None: this process itself."""
        from gpumix.hub.controls import power_control

        if request.get("type") == "replan":
            return self.request_restart(str(request.get("job")), request.get("plan") or {})
        snapshot = self.snapshot()
        if snapshot is not None and request.get("action") == "fit":  # the fit learns from the caps seen
            snapshot = {**snapshot, "power_points": self.power_points()}
        with self._control_lock:
            reply = power_control(self.power, snapshot, request, self.hardware.power_budget_w, peer=peer)
        for listener in self.on_control:
            listener(request, reply)
        if reply["ok"] and reply["changes"] and not request.get("dry_run"):
            self.tick(merge=False)  # show the new caps now, not at the next tick (merged when asked)
        return reply

    # -- supervised jobs (gpumix run; gpumix.hub.supervised) ----------------------------

    def request_restart(self, job: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Queue a new plan for the supervisor of `job` (gpumix/hub/jobs.py), or refuse it; the
        reply says which, and `queued` the plan's place in line."""
        with self._lock:
            status, refusal = self._supervised.restart_refusal(job, self._clock())
        if refusal is not None:
            return refusal
        try:
            run_plan = usable_plan(plan)  # parsed outside the lock
        except UnusablePlan as error:
            return refused(str(error))
        with self._lock:
            reply = self._supervised.enqueue(job, run_plan, status)
            if reply["ok"]:
                self.plans_in_force.requested(job, plan)  # its predicted speedup, shown once it is in force
                self._ranks_changed = True
        return reply

    def supervisor_poll(self, job: str, status: dict[str, Any]) -> dict[str, Any]:
        """A supervisor reports its state; when it can start a restart, it takes the next plan."""
        with self._lock:
            work = self._supervised.poll(job, status, self._clock())
            self._ranks_changed = True
        return work

    # -- ranks (fed by the hub server from agent messages; gpumix.hub.intake) -----------

    def agent_hello(self, info: dict[str, Any]) -> RankKey:
        """A training rank's agent connected. Raises RankRefused (with the reason) for a rank that
        another process holds live, or when the limits are reached and no gone rank can make room."""
        with self._lock:
            key = self._intake.hello(info, self._clock(), _limits())
            self._ranks_changed = self._ranks_came_or_went = True
            return key

    def agent_step(self, key: RankKey, step: dict[str, Any]) -> None:
        self.agent_steps(key, [step])

    def agent_steps(self, key: RankKey, steps: list[dict[str, Any]]) -> None:
        """The steps one read of the agent's socket brought (gpumix.hub.agent_stream), in order: one
        lock and one clock reading for them all."""
        with self._lock:
            now_s = self._clock()
            if self._intake.steps(key, steps, now_s, self._caps_w, self._cap_since_wall_s):
                self._ranks_changed = True

    def agent_transport(self, key: RankKey, channels: list[dict[str, Any]]) -> None:
        with self._lock:
            if self._intake.transport(key, channels):
                self._ranks_changed = True

    def agent_gone(self, key: RankKey, pid: int | None = None) -> None:
        """A connection closed; its rank shows gone once its process has no connection left."""
        with self._lock:
            if self._intake.gone(key, self._clock(), _limits().gone):
                self._ranks_changed = self._ranks_came_or_went = True

    def forget_rank(self, key: RankKey) -> None:
        with self._lock:
            self._intake.table.drop(key[:3])  # type: ignore[arg-type]
            self._ranks_changed = True

    def power_points(self) -> dict[str, list[dict[str, Any]]]:
        """Per GPU, the compute measured at each cap seen (gpumix.hub.cap_samples): the fit's learned curves."""
        with self._lock:
            return self.cap_samples.view(self._clock())

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
                self.tick(merge=False)
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


def _same_or_unknown(before_w: float | None, now_w: float | None) -> bool:
    """No cap change to date steps against: the same cap, or no reading on either side."""
    return before_w is None or now_w is None or same_cap(before_w, now_w)


def _limits() -> RankLimits:
    """The rank limits as this module's constants say now."""
    return RankLimits(ranks=MAX_RANKS, per_job=MAX_RANKS_PER_JOB, gone=MAX_GONE_RANKS)
