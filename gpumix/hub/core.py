"""Hub core: samples the hardware on its own thread and keeps the latest snapshot
and a bounded history. Clients (the TUI, --once, remote viewers) only read
snapshots; nothing here waits on a client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.advice.advisor import AdvisorSettings, findings
from gpumix.hub.cap_samples import CapSamples
from gpumix.hub.efficiency import add_efficiency
from gpumix.hub.history import GpuHistory
from gpumix.hub.plan_in_force import PlansInForce
from gpumix.hub.rank_claims import live_holder, same_process
from gpumix.hub.ranks import (
    RankStream,
    bound_detail,
    carry_points,
    mark_stragglers,
    points_view,
    rank_summary,
    runs_summary,
)
from gpumix.hub.snapshot import build_snapshot
from gpumix.hw.hardware import Hardware
from gpumix.hw.host import HostSampler
from gpumix.hw.types import P2PLink
from gpumix.power.caps import PowerController
from gpumix.power.tiers import tier_table
from gpumix.wire.jobs import job_label
from gpumix.wire.protocol import ProtocolError

StreamKey = tuple[str | None, str | None, int]  # (job, run id, rank): one rank of one launch
RankKey = tuple[str | None, str | None, int, int]  # an agent's connection: its stream's key and a serial
RANK_RETENTION_S = 600.0  # a gone rank or job stays in view this long (the recorder keeps it for good)
MAX_RANKS = 4096  # ranks held, live and gone: gone ones make room first
MAX_RANKS_PER_JOB = 1024
# Gone ranks kept in the live view at most (oldest forgotten first): a stream of short-lived connections
# must not grow every snapshot's merge; the recording keeps them all.
MAX_GONE_RANKS = 256
MAX_JOBS = 64  # supervisors' statuses held (the oldest goes first)
DETAIL_RANKS = 256  # ranks whose env, versions, transport, losses and points a snapshot carries
SUPERVISOR_TIMEOUT_S = 5.0  # a supervisor polls every half second


class RankRefused(ProtocolError):
    """A hello the hub will not take (a limit, or a rank that is live): str() is the reason."""


def _job_name(job: str | None, run_id: str | None) -> str:
    return f"job {job!r}" if job is not None else f"the unnamed run {run_id!r}"

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
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self._ranks: dict[StreamKey, RankStream] = {}  # change it through _put and _drop only
        self._job_sizes: dict[str, int] = {}  # streams per job (job_label): the per-job limit
        self._by_job_rank: dict[tuple[str, int], set[StreamKey]] = {}  # a named job's rank -> its streams
        self._connection_serial = 0  # numbers agents' connections: a closed one's late messages are ignored
        self._ranks_changed = True
        self._merged: dict[str, Any] | None = None  # hardware snapshot + current ranks
        self.on_tick: list[Callable[[], None]] = []  # e.g. the demo job pacing the simulated GPUs
        self.on_snapshot: list[Callable[[dict[str, Any]], None]] = []  # each tick's snapshot (the recorder)
        self.on_control: list[Callable[[dict[str, Any], dict[str, Any]], None]] = []  # (request, reply) of power controls
        self.power = PowerController(hardware.backend)
        self._jobs: dict[str, dict[str, Any]] = {}  # job -> the supervisor's last status
        self._pending_plans: dict[str, dict[str, Any]] = {}  # job -> a plan waiting for its supervisor
        self._control_lock = threading.Lock()  # one control at a time
        self.plans_in_force = PlansInForce()  # the snapshot's plan
        # each step filed under its GPU's cap at the last tick: the power fit's learned curves
        self.cap_samples = CapSamples()
        self._caps_w: dict[str, float | None] = {}  # uuid -> cap at the last tick

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
        snapshot["power_layout"] = self.hardware.power_layout
        with self._lock:
            self._expire(self._clock())
            self.history.add(samples)
            self._snapshot = snapshot
            self._caps_w = {gpu["uuid"]: gpu.get("power_cap_w") for gpu in snapshot["gpus"]}
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
        ranks = [self._rank_row(stream, now_s) for _, stream in
                 sorted(self._ranks.items(), key=lambda item: (job_label(item[0][0], item[0][1]), item[0][2],
                                                               item[0][1] or ""))]
        mark_stragglers(ranks)
        snapshot = dict(hardware_snapshot)
        snapshot["ranks"] = ranks
        snapshot["run"], snapshot["runs"] = runs_summary(ranks)
        add_efficiency(snapshot["runs"], ranks, hardware_snapshot["gpus"])
        gpus = []
        for gpu in hardware_snapshot["gpus"]:
            on_gpu = [r["rank"] for r in ranks if r["gpu_uuid"] == gpu["uuid"] and r["connected"]]
            gpus.append({**gpu, "ranks": on_gpu})
        snapshot["gpus"] = gpus
        snapshot["tiers"] = tier_table(snapshot)
        snapshot["jobs"] = self._supervised_jobs(now_s)
        snapshot["plan"] = self.plans_in_force.view(snapshot, self._wall_clock())
        host = snapshot.get("host") or {}
        settings = AdvisorSettings(power_budget_w=self.hardware.power_budget_w, has_infiniband=bool(host.get("infiniband")))
        snapshot["findings"] = [finding.to_json() for finding in findings(snapshot, settings)]
        bound_detail(ranks, DETAIL_RANKS)  # after the advisor, which reads every rank's env
        return snapshot

    @staticmethod
    def _rank_row(stream: RankStream, now_s: float) -> dict[str, Any]:
        if stream.connected:
            return {**rank_summary(stream), "points": points_view(stream, now_s)}
        if stream.gone_summary is None:  # a gone rank's row stays the same: the recorder sees no change
            stream.gone_summary = {**rank_summary(stream), "points": points_view(stream, stream.gone_since_s or now_s)}
        return dict(stream.gone_summary)

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
            self.tick()  # show the new caps now, not at the next tick
        return reply

    # -- supervised jobs (gpumix run) --------------------------------------------------

    def request_restart(self, job: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Queue a new plan for the supervisor of `job` (gpumix/hub/jobs.py), or refuse it; the
        reply says which, and `queued` the plan's place in line."""
        from collections import deque

        from gpumix.hub import jobs
        from gpumix.wire.plan_file import RunPlan

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
            self.plans_in_force.requested(job, plan)  # its predicted speedup, shown once it is in force
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
        """A training rank's agent connected. Raises RankRefused (with the reason) for a rank that
        another process holds live, or when the limits are reached and no gone rank can make room."""
        job, run_id, rank = info["job"], info.get("run_id"), info["rank"]
        key: StreamKey = (job, run_id, rank)
        uuid = info["gpu_uuid"]
        if uuid is None and info["nvml_index"] is not None and 0 <= info["nvml_index"] < len(self._infos):
            uuid = self._infos[info["nvml_index"]].uuid
        with self._lock:
            now_s = self._clock()
            old = self._ranks.get(key)
            reconnected = old is not None and same_process(old, info)
            # a named job's rank under every run id: a hello under another one is no second rank 0
            holders = [self._ranks[k] for k in {key, *self._by_job_rank.get((job, rank), ())} if k in self._ranks]
            holder = live_holder(holders, info)
            if holder is not None:
                raise RankRefused(f"rank {rank} of {_job_name(job, run_id)} is already connected (pid {holder.pid});"
                                  " a second agent for a live rank is refused")
            predecessor = old if old is not None else self._predecessor(job, rank)
            if predecessor is not None and old is None:  # replaced by its successor below
                self._drop((predecessor.job, predecessor.run_id, predecessor.rank))
            if old is None and predecessor is None:
                self._make_room(job_label(job, run_id), job, run_id)
            stream = RankStream(
                rank=rank, world_size=info["world_size"], local_rank=info["local_rank"], pid=info["pid"],
                hostname=info["hostname"], gpu_uuid=uuid, nvml_index=info["nvml_index"], job=job,
                env=info["env"], versions=info["versions"], run_id=run_id, peer_uid=info.get("peer_uid"),
                last_seen_s=now_s,
            )
            if old is not None and reconnected:  # its agent reconnected: keep what it sent
                stream.steps, stream.points, stream.transport = old.steps, old.points, old.transport
                stream.connections, stream.rejected_values = set(old.connections), old.rejected_values
            elif predecessor is not None:  # a new process for this rank: a restart, maybe under a new split
                carry_points(predecessor, stream, now_s)
            self._connection_serial += 1
            stream.connections.add(self._connection_serial)
            self._put(key, stream)
            self._ranks_changed = True
            return (*key, self._connection_serial)

    def _put(self, key: StreamKey, stream: RankStream) -> None:
        if key not in self._ranks:
            self._job_sizes[stream.group] = self._job_sizes.get(stream.group, 0) + 1
            if stream.job is not None:
                self._by_job_rank.setdefault((stream.job, stream.rank), set()).add(key)
        self._ranks[key] = stream

    def _drop(self, key: StreamKey) -> None:
        stream = self._ranks.pop(key, None)
        if stream is None:
            return
        self._job_sizes[stream.group] -= 1
        if not self._job_sizes[stream.group]:
            del self._job_sizes[stream.group]
        if stream.job is not None:
            same_rank = self._by_job_rank[(stream.job, stream.rank)]
            same_rank.discard(key)
            if not same_rank:
                del self._by_job_rank[(stream.job, stream.rank)]

    def _predecessor(self, job: str | None, rank: int) -> RankStream | None:
        """The gone process of this rank of a named job under another run id (`gpumix run` relaunched
        the job: torchrun's run id, or each process's own id, changed): its successor inherits it."""
        if job is None:  # unnamed scripts are separate runs, never one another's restart
            return None
        streams = (self._ranks[key] for key in self._by_job_rank.get((job, rank), ()))
        gone = [s for s in streams if not s.connected]
        return max(gone, key=lambda s: s.gone_since_s or 0.0, default=None)

    def _make_room(self, label: str, job: str | None, run_id: str | None) -> None:
        """Room for one more rank: the oldest gone rank goes first; with none gone, refuse."""
        if self._job_sizes.get(label, 0) >= MAX_RANKS_PER_JOB and not self._evict_oldest_gone(
                [s for s in self._ranks.values() if s.group == label]):
            raise RankRefused(f"{_job_name(job, run_id)} already has {MAX_RANKS_PER_JOB} ranks connected,"
                              " the hub's limit per job")
        if len(self._ranks) >= MAX_RANKS and not self._evict_oldest_gone(list(self._ranks.values())):
            raise RankRefused(f"the hub already holds {MAX_RANKS} connected ranks, its limit")

    def _evict_oldest_gone(self, streams: list[RankStream]) -> bool:
        gone = [s for s in streams if not s.connected]
        if not gone:
            return False
        oldest = min(gone, key=lambda s: s.gone_since_s or 0.0)
        self._drop((oldest.job, oldest.run_id, oldest.rank))
        return True

    def _expire(self, now_s: float) -> None:
        """Forget ranks and supervised jobs gone for longer than the retention (under the lock)."""
        retention_s = self.rank_retention_s
        expired = [key for key, s in self._ranks.items()
                   if not s.connected and now_s - (s.gone_since_s or now_s) > retention_s]
        for key in expired:
            self._drop(key)
        by_age = sorted(self._jobs, key=lambda job: self._jobs[job].get("last_seen_s", now_s))
        over_limit = len(by_age) - MAX_JOBS
        forgotten = [job for index, job in enumerate(by_age)
                     if index < over_limit or now_s - self._jobs[job].get("last_seen_s", now_s) > retention_s]
        for job in forgotten:
            del self._jobs[job]
            self._pending_plans.pop(job, None)
        if expired or forgotten:
            self._ranks_changed = True

    def _stream(self, key: RankKey) -> RankStream | None:
        """The rank this connection feeds, or None once the connection is closed or replaced."""
        stream = self._ranks.get(key[:3])  # type: ignore[arg-type]
        return stream if stream is not None and key[3] in stream.connections else None

    def agent_step(self, key: RankKey, step: dict[str, Any]) -> None:
        rejected = step.pop("rejected", ())
        with self._lock:
            stream = self._stream(key)
            if stream is None:
                return
            stream.last_seen_s = self._clock()
            self._ranks_changed = True
            if rejected:
                if not stream.rejected_values:  # one line per rank, not one per bad step
                    log.warning("hub: rank %d of %s sent %s out of range: dropped (counted in rejected_values)",
                                stream.rank, _job_name(stream.job, stream.run_id), ", ".join(rejected))
                stream.rejected_values += len(rejected)
            if step["step_time_s"] is None:
                return  # a step time out of range: the step tells nothing
            stream.steps.append(step)
            compute_s = step["step_time_s"] - (step.get("comm_s") or 0.0) - (step.get("data_wait_s") or 0.0)
            self.cap_samples.add(stream.gpu_uuid, self._caps_w.get(stream.gpu_uuid or ""), step.get("samples"),
                                 compute_s, step["step_time_s"], stream.last_seen_s)

    def power_points(self) -> dict[str, list[dict[str, Any]]]:
        """Per GPU, the compute measured at each cap seen (gpumix.hub.cap_samples): the fit's learned curves."""
        with self._lock:
            return self.cap_samples.view(self._clock())

    def agent_transport(self, key: RankKey, channels: list[dict[str, Any]]) -> None:
        with self._lock:
            stream = self._stream(key)
            if stream is not None:
                stream.transport = channels
                self._ranks_changed = True

    def agent_gone(self, key: RankKey, pid: int | None = None) -> None:
        """A connection closed; its rank shows gone once its process has no connection left."""
        with self._lock:
            stream = self._stream(key)
            if stream is None:
                return
            stream.connections.discard(key[3])
            if not stream.connections:
                stream.connected = False
                stream.gone_since_s = self._clock()
                if not stream.steps and not stream.points:  # it said hello and nothing else: nothing to show
                    self._drop(key[:3])  # type: ignore[arg-type]
                else:
                    self._bound_gone()
            self._ranks_changed = True

    def _bound_gone(self) -> None:
        gone = [stream for stream in self._ranks.values() if not stream.connected]
        for _ in range(len(gone) - MAX_GONE_RANKS):
            self._evict_oldest_gone(gone)
            gone = [stream for stream in gone if (stream.job, stream.run_id, stream.rank) in self._ranks]

    def forget_rank(self, key: RankKey) -> None:
        with self._lock:
            self._drop(key[:3])  # type: ignore[arg-type]
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
