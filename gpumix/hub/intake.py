"""What an agent's messages do to the hub's ranks: a hello claims a rank (or is refused), steps and
transport reports feed it, a closed connection leaves it gone.

A hello for a rank a live process holds is refused (gpumix.hub.rank_claims); the holder's own agent
reconnecting keeps what it sent; a relaunched rank of a named job succeeds its gone predecessor and
inherits its operating points. A run of steps at one count leaves a point when the count changes
(gpumix.hub.count_runs: a stair probe's). Each step is also filed under its GPU's cap (gpumix.hub.cap_samples).

Not thread-safe: the hub calls it under its lock. What it may import: the hub's ranks, rank table,
rank claims, count runs and cap samples; gpumix.hw.
"""

from __future__ import annotations

import logging
from typing import Any

from gpumix.hub.cap_samples import CapSamples
from gpumix.hub.count_runs import follow
from gpumix.hub.rank_claims import live_holder, same_process
from gpumix.hub.rank_table import RankKey, RankLimits, RankRefused, RankTable, StreamKey, job_name
from gpumix.hub.ranks import POINTS_KEPT, RankStream, carry_points
from gpumix.hw.types import GpuInfo

log = logging.getLogger(__name__)


class AgentIntake:
    def __init__(self, infos: list[GpuInfo], cap_samples: CapSamples) -> None:
        self.table = RankTable()
        self._infos = infos  # the machine's GPUs: an agent that names only its NVML index gets its uuid
        self._cap_samples = cap_samples
        self._connection_serial = 0  # numbers agents' connections: a closed one's late messages are ignored

    def hello(self, info: dict[str, Any], now_s: float, limits: RankLimits) -> RankKey:
        """A training rank's agent connected. Raises RankRefused (with the reason) for a rank that
        another process holds live, or when the limits are reached and no gone rank can make room."""
        job, run_id, rank = info["job"], info.get("run_id"), info["rank"]
        key: StreamKey = (job, run_id, rank)
        uuid = info["gpu_uuid"]
        if uuid is None and info["nvml_index"] is not None and 0 <= info["nvml_index"] < len(self._infos):
            uuid = self._infos[info["nvml_index"]].uuid
        old = self.table.streams.get(key)
        reconnected = old is not None and same_process(old, info)
        holder = live_holder(self.table.holders(key), info)
        if holder is not None:
            raise RankRefused(f"rank {rank} of {job_name(job, run_id)} is already connected (pid {holder.pid});"
                              " a second agent for a live rank is refused")
        predecessor = old if old is not None else self.table.predecessor(job, rank)
        if predecessor is not None and old is None:  # replaced by its successor below
            self.table.drop((predecessor.job, predecessor.run_id, predecessor.rank))
        if old is None and predecessor is None:
            self.table.make_room(job, run_id, limits)
        stream = RankStream(
            rank=rank, world_size=info["world_size"], local_rank=info["local_rank"], pid=info["pid"],
            hostname=info["hostname"], gpu_uuid=uuid, nvml_index=info["nvml_index"], job=job,
            env=info["env"], versions=info["versions"], run_id=run_id, peer_uid=info.get("peer_uid"),
            last_seen_s=now_s, send_period_s=info.get("send_period_s"),
        )
        if old is not None and reconnected:  # its agent reconnected: keep what it sent
            stream.steps, stream.losses, stream.points, stream.transport = old.steps, old.losses, old.points, old.transport
            stream.connections, stream.rejected_values = set(old.connections), old.rejected_values
            stream.amp_counted, stream.count_run = old.amp_counted, old.count_run
        elif predecessor is not None:  # a new process for this rank: a restart, maybe under a new split
            carry_points(predecessor, stream, now_s)
        self._connection_serial += 1
        stream.connections.add(self._connection_serial)
        self.table.put(key, stream)
        return (*key, self._connection_serial)

    def step(self, key: RankKey, step: dict[str, Any], now_s: float, caps_w: dict[str, float | None],
             cap_since_wall_s: dict[str, float] | None = None) -> bool:
        """One step: steps() with one."""
        return self.steps(key, [step], now_s, caps_w, cap_since_wall_s)

    def steps(self, key: RankKey, steps: list[dict[str, Any]], now_s: float, caps_w: dict[str, float | None],
              cap_since_wall_s: dict[str, float] | None = None) -> bool:
        """The steps one read of this connection brought, in order; `caps_w` the GPUs' caps at the last
        tick, and when the hub first saw each (wall clock): a step that ended before that (its "t") is not
        filed under the cap, which it may not have run under. False when the connection is closed or
        replaced (the steps are ignored). The rank and its GPU are looked up once for them all (issue 13)."""
        stream = self.table.for_connection(key)
        if stream is None or not steps:
            return False
        stream.last_seen_s = now_s
        for step in steps:
            rejected = step.pop("rejected", ())
            if rejected:
                if not stream.rejected_values:  # one line per rank, not one per bad step
                    log.warning("hub: rank %d of %s sent %s out of range: dropped (counted in rejected_values)",
                                stream.rank, job_name(stream.job, stream.run_id), ", ".join(rejected))
                stream.rejected_values += len(rejected)
        kept = [step for step in steps if step["step_time_s"] is not None]  # else out of range: it tells nothing
        uuid = stream.gpu_uuid or ""
        since_s = cap_since_wall_s.get(uuid, 0.0) if cap_since_wall_s else 0.0
        try:  # a parsed step holds every field: read by key, a list each, no call a step (issue 13)
            losses = [loss for step in kept if (loss := step["loss"]) is not None]
            amp = stream.amp_counted or [True for step in kept if step["amp_skipped_steps"] is not None] != []
            rows = [(step["samples"], step["step_time_s"] - (step["comm_s"] or 0.0) - (step["data_wait_s"] or 0.0),
                     step["step_time_s"]) for step in kept if not ((t := step["t"]) is not None and t < since_s)]
        except KeyError:  # a step made elsewhere, without every field: absent is None
            losses = [loss for step in kept if (loss := step.get("loss")) is not None]
            amp = stream.amp_counted or any(step.get("amp_skipped_steps") is not None for step in kept)
            rows = [(step.get("samples"), step["step_time_s"] - (step.get("comm_s") or 0.0) - (step.get("data_wait_s") or 0.0),
                     step["step_time_s"]) for step in kept if not (step.get("t") is not None and step["t"] < since_s)]
        stream.steps.extend(kept)
        stream.count_run = follow(stream.count_run, kept, stream.points, POINTS_KEPT, now_s)
        stream.losses.extend(losses)
        stream.amp_counted = amp  # rank_summary looks for the GradScaler's counts only once one came
        self._cap_samples.add_many(stream.gpu_uuid, caps_w.get(uuid), rows, now_s)
        return True

    def transport(self, key: RankKey, channels: list[dict[str, Any]]) -> bool:
        stream = self.table.for_connection(key)
        if stream is None:
            return False
        stream.transport = channels
        return True

    def gone(self, key: RankKey, now_s: float, max_gone: int) -> bool:
        """A connection closed; its rank shows gone once its process has no connection left. False when
        the connection was already closed or replaced."""
        stream = self.table.for_connection(key)
        if stream is None:
            return False
        stream.connections.discard(key[3])
        if not stream.connections:
            stream.connected = False
            stream.gone_since_s = now_s
            if not stream.steps and not stream.points:  # it said hello and nothing else: nothing to show
                self.table.drop(key[:3])  # type: ignore[arg-type]
            else:
                self.table.bound_gone(max_gone)
        return True
