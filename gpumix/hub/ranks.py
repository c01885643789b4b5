"""Rank streams: what each training rank reported, bounded, and what follows from it."""

from __future__ import annotations

import operator
import statistics
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from gpumix.hub.count_runs import CountRun, put_point
from gpumix.hub.step_window import compute_spread_s, skipped_share, window_median
from gpumix.wire.jobs import job_label, ranks_by_job
from gpumix.wire.protocol import ProtocolError, integer, number, text
from gpumix.wire.send_period import MAX_PERIOD_S, MIN_PERIOD_S
from gpumix.wire.snapshot_types import (
    AMP_DTYPES,
    MAX_STEP_INDEX,
    RANK_LAST_STEP_FIELDS,
    STEP_NUMBER_RANGES,
    STEP_TIME_RANGE_S,
)

STEPS_KEPT = 120  # per rank, for medians and the AMP window (the losses have their own deque)
MEDIAN_WINDOW = 10  # steps behind each figure, smooths jitter
STRAGGLER_RATIO = 1.25  # compute time this far above the median marks a straggler...
STRAGGLER_MIN_STEP_SHARE = 0.05  # ...and above it by this share of its step (1 ms against 0 is noise)
POINTS_KEPT = 8  # operating points of a rank's earlier processes (its splits before re-plans) and a probe's
POINT_MAX_AGE_S = 900.0  # an older point may be from another load on the GPU: the planner skips it
LOSS_HISTORY_KEPT = 60  # loss values in a rank's summary (the sparkline)

# Bounds on what a hello and a transport report may hold (the snapshot carries them to every client).
MAX_WORLD = 1 << 20  # ranks, world sizes, local ranks and channel ends are below this
MAX_PID = 1 << 22  # Linux's pid_max ceiling
MAX_NVML_INDEX = 1024
JOB_CHARS = 128  # a job name or run id: identity, so a longer one is refused, not cut
HOSTNAME_CHARS = 255
GPU_UUID_CHARS = 128
ENV_ENTRIES = 24  # NCCL_* variables of a rank; more are left out (first by name kept)
ENV_NAME_CHARS = 64
ENV_VALUE_CHARS = 128  # a longer value is cut
VERSION_ENTRIES = 16
VERSION_NAME_CHARS = 32
VERSION_VALUE_CHARS = 64
TRANSPORT_CHANNELS = 32  # unique (src, dst, transport) of a rank; more are left out
TRANSPORT_CHARS = 32  # "SHM/direct/direct", "NET/Socket/0", ...: a longer one is refused

# Physical ranges of step fields, declared with the step message (gpumix/wire/snapshot_types.py):
# a value outside is dropped (None) and counted, the step kept; a step time outside drops the step.
STEP_RANGES = STEP_NUMBER_RANGES


@dataclass
class RankStream:
    rank: int
    world_size: int | None
    local_rank: int | None
    pid: int | None
    hostname: str | None
    gpu_uuid: str | None
    nvml_index: int | None
    job: str | None
    env: dict[str, str]
    versions: dict[str, str]
    run_id: str | None = None  # the launch this process belongs to (torchrun's run id, or its own)
    peer_uid: int | None = None  # the connection's uid, when the socket tells (Unix sockets)
    send_period_s: float | None = None  # how often its agent sends, as its hello says (None: an older agent)
    connected: bool = True
    last_seen_s: float = 0.0
    gone_since_s: float | None = None  # when its last connection closed: the retention counts from here
    connections: set[int] = field(default_factory=set)  # serials of this process's open connections
    rejected_values: int = 0  # step fields out of range (dropped), and steps dropped for their step time
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=STEPS_KEPT))
    # the losses received, newest last: an agent copies a CUDA loss on sampled steps only (at most ten a
    # second), so at a fast step rate few of the last STEPS_KEPT steps carry one
    losses: deque[float] = field(default_factory=lambda: deque(maxlen=LOSS_HISTORY_KEPT))
    transport: list[dict[str, Any]] = field(default_factory=list)
    # what earlier processes of this rank measured at their splits, oldest first (operating_point)
    points: list[dict[str, Any]] = field(default_factory=list)
    count_run: CountRun | None = None  # the steps in a row at this process's latest count (a probe's points)
    gone_summary: dict[str, Any] | None = None  # a gone rank's figures no longer change: computed once
    amp_counted: bool = False  # a step carried the GradScaler's skipped count: rank_summary looks for them

    @property
    def group(self) -> str:
        """The job this rank is compared within: its name, or for an unnamed script its run."""
        return job_label(self.job, self.run_id)


def _bounded_int(message: dict[str, Any], key: str, low: int, high: int) -> int | None:
    """An optional integer field; None when absent or outside [low, high) (it is a label, not identity)."""
    value = integer(message, key)
    return value if value is not None and low <= value < high else None


def _string_map(message: dict[str, Any], key: str, entries: int, name_chars: int,
                value_chars: int) -> dict[str, str]:
    """A map of short strings, cut to its bounds: the first `entries` names in order, long values cut."""
    table = message.get(key)
    if table is None:
        return {}
    if not isinstance(table, dict) or len(table) > 4096 or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise ProtocolError(f"'{key}' must map names to strings")
    kept = sorted((k, v) for k, v in table.items() if 0 < len(k) <= name_chars)[:entries]
    return {k: v[:value_chars] for k, v in kept}


def parse_hello(message: dict[str, Any]) -> dict[str, Any]:
    rank = integer(message, "rank", required=True)
    if not 0 <= rank < MAX_WORLD:
        raise ProtocolError(f"'rank' must be >= 0 and below {MAX_WORLD}")
    return {
        "rank": rank,
        "world_size": _bounded_int(message, "world_size", 1, MAX_WORLD + 1),
        "local_rank": _bounded_int(message, "local_rank", 0, MAX_WORLD),
        "pid": _bounded_int(message, "pid", 1, MAX_PID + 1),
        "hostname": text(message, "hostname", HOSTNAME_CHARS),
        "gpu_uuid": text(message, "gpu_uuid", GPU_UUID_CHARS),
        "nvml_index": _bounded_int(message, "nvml_index", 0, MAX_NVML_INDEX),
        "job": text(message, "job", JOB_CHARS),
        "run_id": text(message, "run_id", JOB_CHARS),
        "env": _string_map(message, "env", ENV_ENTRIES, ENV_NAME_CHARS, ENV_VALUE_CHARS),
        "versions": _string_map(message, "versions", VERSION_ENTRIES, VERSION_NAME_CHARS, VERSION_VALUE_CHARS),
        "send_period_s": _send_period_s(message),
    }


def _send_period_s(message: dict[str, Any]) -> float | None:
    """The agent's send period (gpumix/wire/send_period.py); None when absent or outside the periods an
    agent may use (a label: the supervisor then assumes its own)."""
    value = number(message, "send_period_s")
    return value if value is not None and MIN_PERIOD_S <= value <= MAX_PERIOD_S else None


def parse_step(message: dict[str, Any]) -> dict[str, Any]:
    """A step's fields, each finite and within its physical range. A field outside is set to None
    and named in step["rejected"]; a step time outside sets step_time_s None: the hub drops that step.
    A missing or mistyped field is a protocol error."""
    step_index = integer(message, "step", required=True)
    step_time_s = number(message, "step_time_s", required=True)
    rejected = []
    step: dict[str, Any] = {"step": step_index, "step_time_s": step_time_s}
    if not 0 <= step_index <= MAX_STEP_INDEX:
        rejected.append("step")
        step["step_time_s"] = None  # a step that cannot be placed is dropped whole
    if not STEP_TIME_RANGE_S[0] <= step_time_s <= STEP_TIME_RANGE_S[1]:
        rejected.append("step_time_s")
        step["step_time_s"] = None
    for key, (low, high) in STEP_RANGES.items():
        value = message.get(key)
        if value is not None:  # most fields are absent: only a present one pays a check
            kind = type(value)
            # the usual value, a float or int in range, in one test: the bounds are finite, so NaN and
            # inf fail it (and bool is no int here); anything else takes number()'s full check
            if (kind is float or kind is int) and low <= value <= high:
                value = value if kind is float else float(value)
            else:
                value = number(message, key)
                if not low <= value <= high:  # type: ignore[operator]
                    rejected.append(key)
                    value = None
        step[key] = value
    dtype = message.get("amp_dtype")
    if dtype is not None and dtype not in AMP_DTYPES:
        rejected.append("amp_dtype")
        dtype = None
    step["amp_dtype"] = dtype
    step["rejected"] = rejected
    return step


def parse_transport(message: dict[str, Any]) -> list[dict[str, Any]]:
    channels = message.get("channels")
    if not isinstance(channels, list) or len(channels) > 4096:
        raise ProtocolError("'channels' must be a list of at most 4096 entries")
    kept: dict[tuple[int, int, str | None], None] = {}
    for channel in channels:
        if not isinstance(channel, dict):
            raise ProtocolError("each channel must be an object")
        src, dst = integer(channel, "src", True), integer(channel, "dst", True)
        transport = text(channel, "transport", TRANSPORT_CHARS)
        if not (0 <= src < MAX_WORLD and 0 <= dst < MAX_WORLD):
            raise ProtocolError(f"a channel's 'src' and 'dst' must be ranks (0 to {MAX_WORLD - 1})")
        if len(kept) < TRANSPORT_CHANNELS:
            kept[(src, dst, transport)] = None
    return [{"src": src, "dst": dst, "transport": transport} for src, dst, transport in kept]


_last_step_fields = operator.itemgetter(*RANK_LAST_STEP_FIELDS)


def rank_summary(stream: RankStream) -> dict[str, Any]:
    """Per-rank figures over the last few steps (medians: robust to one slow step)."""
    # the window without copying the whole deque (only the AMP share reads it all)
    recent = list(islice(reversed(stream.steps), MEDIAN_WINDOW))[::-1]
    step_time = window_median([s["step_time_s"] for s in recent if s["step_time_s"]])
    samples = window_median([s["samples"] for s in recent if s["samples"] is not None])
    comm = window_median([s["comm_s"] for s in recent if s["comm_s"] is not None])
    data_wait = window_median([s["data_wait_s"] for s in recent if s["data_wait_s"] is not None])
    tokens = window_median([s["tokens"] for s in recent if s["tokens"] is not None])
    forward = window_median([s["forward_s"] for s in recent if s["forward_s"] is not None])
    backward = window_median([s["backward_s"] for s in recent if s["backward_s"] is not None])
    optimizer = window_median([s["optimizer_s"] for s in recent if s["optimizer_s"] is not None])
    last = recent[-1] if recent else {}
    compute = None
    if step_time is not None:
        compute = max(0.0, step_time - (comm or 0.0) - (data_wait or 0.0))
    compute_spread = compute_spread_s(recent)
    try:
        last_fields = dict(zip(RANK_LAST_STEP_FIELDS, _last_step_fields(last), strict=True))
    except KeyError:
        last_fields = {name: last.get(name) for name in RANK_LAST_STEP_FIELDS}
    # (the window's scan for counts, most of a row's cost, only where a count ever came: issue 13)
    amp_skipped_share, amp_window_steps = skipped_share(list(stream.steps)) if stream.amp_counted else (None, 0)
    return {
        "rank": stream.rank,
        "world_size": stream.world_size,
        "local_rank": stream.local_rank,
        "pid": stream.pid,
        "hostname": stream.hostname,
        "job": stream.job,
        "run_id": stream.run_id,
        "gpu_uuid": stream.gpu_uuid,
        "connected": stream.connected,
        "last_seen_s": stream.last_seen_s,
        "send_period_s": stream.send_period_s,
        # the last step's own figures, every field the step contract shares with the rank row
        **last_fields,
        "step_time_s": step_time,
        "compute_s": compute,
        "compute_spread_s": compute_spread,  # the steps' own computes' interquartile range (step_window)
        "samples_per_s": samples / step_time if samples is not None and step_time else None,
        "tokens_per_s": tokens / step_time if tokens is not None and step_time else None,
        # shares of the step, at most all of it (a framework's timers and our wall clock differ a little)
        "comm_share": min(1.0, comm / step_time) if comm is not None and step_time else None,
        "data_wait_share": min(1.0, data_wait / step_time) if data_wait is not None and step_time else None,
        # the framework's split of the step, where it gives one (DDP's own timers, or the script)
        "forward_s": forward,
        "backward_s": backward,
        "optimizer_s": optimizer,
        "loss": stream.losses[-1] if stream.losses else None,  # the newest received, not only the last step's
        "loss_history": list(stream.losses),
        "samples": samples,
        "amp_skipped_share": amp_skipped_share,
        "amp_window_steps": amp_window_steps,
        "rejected_values": stream.rejected_values,
        "env": stream.env,
        "versions": stream.versions,
        "transport": stream.transport,
        "straggler": False,
    }


def operating_point(stream: RankStream, now_s: float) -> dict[str, Any] | None:
    """What this rank measured at its split, kept when it restarts under another one: the
    planner interpolates compute time and memory between such points. None before a full
    window of steps (the first steps of a process are warm-up)."""
    if len(stream.steps) < MEDIAN_WINDOW:
        return None
    summary = rank_summary(stream)
    if not summary["samples"] or not summary["compute_s"]:
        return None
    return {"samples": summary["samples"], "compute_s": summary["compute_s"],
            "compute_spread_s": summary["compute_spread_s"], "micro_batch": summary["micro_batch"],
            "mem_peak_bytes": summary["mem_peak_bytes"], "t": now_s}


def carry_points(old: RankStream, new: RankStream, now_s: float) -> None:
    """A rank's new process (after a restart) inherits its predecessor's points, if on the same GPU.
    A point at the same split replaces the older one."""
    if old.gpu_uuid != new.gpu_uuid:
        return
    new.points = [p for p in old.points if now_s - p["t"] <= POINT_MAX_AGE_S]
    point = operating_point(old, now_s)
    if point:
        put_point(new.points, point, POINTS_KEPT)


def points_view(stream: RankStream, now_s: float) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "t"} | {"age_s": now_s - p["t"]}
            for p in stream.points if now_s - p["t"] <= POINT_MAX_AGE_S]


def mark_stragglers(ranks: list[dict[str, Any]], groups: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """A rank whose compute time is well above its job's median makes every other rank of the job wait.
    `groups`: ranks_by_job(ranks), where the caller has it (the merge makes it once for all its parts)."""
    for members in (ranks_by_job(ranks) if groups is None else groups).values():
        computes = [r["compute_s"] for r in members if r["compute_s"] is not None and r["connected"]]
        median = statistics.median(computes) if len(computes) >= 2 else None
        for rank in members:
            rank["straggler"] = bool(median is not None and rank["connected"] and rank["compute_s"] is not None
                                     and rank["compute_s"] > STRAGGLER_RATIO * median
                                     # a ratio of tiny times is noise: the excess must cost a share of the step
                                     and rank["compute_s"] - median > STRAGGLER_MIN_STEP_SHARE * (rank["step_time_s"] or 0))


def run_summary(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One job's pace: the ranks given are of one job (see runs_summary)."""
    live = [r for r in ranks if r["connected"] and r["step_time_s"]]
    if not live:
        return None
    rates = [r["samples_per_s"] for r in live if r["samples_per_s"] is not None]
    return {
        "job": live[0].get("job"),
        "run_id": live[0].get("run_id") if live[0].get("job") is None else None,
        "ranks": len(live),
        "step_time_s": max(r["step_time_s"] for r in live),  # the job moves at its slowest rank
        "samples_per_s": sum(rates) if rates else None,
        "stragglers": [r["rank"] for r in live if r["straggler"]],
    }


def runs_summary(ranks: list[dict[str, Any]], groups: dict[str, list[dict[str, Any]]] | None = None
                 ) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """(the run shown first: the job with most live ranks, ties by name; every job's run by name).
    `groups`: ranks_by_job(ranks), where the caller has it."""
    runs = {}
    for label, members in sorted((ranks_by_job(ranks) if groups is None else groups).items()):
        summary = run_summary(members)
        if summary is not None:
            runs[label] = summary
    shown = min(runs.items(), key=lambda item: (-item[1]["ranks"], item[0]), default=None)
    return (shown[1] if shown else None), runs


def bound_detail(ranks: list[dict[str, Any]], detail_ranks: int) -> None:
    """Keep the snapshot's size bounded whatever connects: a gone rank keeps its figures, loss history
    and points (their ages as when it went) but not its env, versions or transport; past the first
    `detail_ranks` ranks (live first, in order) ranks keep their figures only, flagged `detail_dropped`."""
    left = detail_ranks
    for rank in sorted(ranks, key=lambda r: not r["connected"]):  # stable: live first, in order
        if not rank["connected"]:
            rank.update(env={}, versions={}, transport=[])
        rank["detail_dropped"] = left <= 0
        if left <= 0:
            rank.update(env={}, versions={}, transport=[], points=[], loss_history=[])
        left -= 1
