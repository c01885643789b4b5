"""Rank streams: what each training rank reported, bounded, and what follows from it."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpumix.protocol import ProtocolError, integer, number, text

STEPS_KEPT = 120  # per rank, for medians and the loss sparkline
MEDIAN_WINDOW = 10  # steps behind each figure, smooths jitter
STRAGGLER_RATIO = 1.25  # compute time this far above the median marks a straggler
POINTS_KEPT = 8  # operating points of a rank's earlier processes (its splits before re-plans)
POINT_MAX_AGE_S = 900.0  # an older point may be from another load on the GPU: the planner skips it

STEP_NUMBERS = (
    "t", "step_time_s", "samples", "tokens", "loss", "lr", "data_wait_s", "forward_s", "backward_s",
    "optimizer_s", "comm_s", "mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes",
    "micro_batch", "accumulation_steps", "cpu_pct", "rss_bytes", "dropped", "gradient_bytes",
)


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
    connected: bool = True
    last_seen_s: float = 0.0
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=STEPS_KEPT))
    transport: list[dict[str, Any]] = field(default_factory=list)
    # what earlier processes of this rank measured at their splits, oldest first (operating_point)
    points: list[dict[str, Any]] = field(default_factory=list)


def parse_hello(message: dict[str, Any]) -> dict[str, Any]:
    rank = integer(message, "rank", required=True)
    if rank < 0:
        raise ProtocolError("'rank' must be >= 0")
    env = message.get("env") or {}
    versions = message.get("versions") or {}
    for name, table in (("env", env), ("versions", versions)):
        if not isinstance(table, dict) or len(table) > 64 or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) < 512 for k, v in table.items()
        ):
            raise ProtocolError(f"'{name}' must map at most 64 names to strings")
    return {
        "rank": rank,
        "world_size": integer(message, "world_size"),
        "local_rank": integer(message, "local_rank"),
        "pid": integer(message, "pid"),
        "hostname": text(message, "hostname"),
        "gpu_uuid": text(message, "gpu_uuid"),
        "nvml_index": integer(message, "nvml_index"),
        "job": text(message, "job"),
        "env": env,
        "versions": versions,
    }


def parse_step(message: dict[str, Any]) -> dict[str, Any]:
    step = {"step": integer(message, "step", required=True)}
    for key in STEP_NUMBERS:
        step[key] = number(message, key)
    if step["step_time_s"] is None or step["step_time_s"] < 0:
        raise ProtocolError("'step_time_s' must be a number >= 0")
    return step


def parse_transport(message: dict[str, Any]) -> list[dict[str, Any]]:
    channels = message.get("channels")
    if not isinstance(channels, list) or len(channels) > 4096:
        raise ProtocolError("'channels' must be a list of at most 4096 entries")
    parsed = []
    for channel in channels:
        if not isinstance(channel, dict):
            raise ProtocolError("each channel must be an object")
        parsed.append({"src": integer(channel, "src", True), "dst": integer(channel, "dst", True),
                       "transport": text(channel, "transport", 64)})
    return parsed


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def rank_summary(stream: RankStream) -> dict[str, Any]:
    """Per-rank figures over the last few steps (medians: robust to one slow step)."""
    recent = list(stream.steps)[-MEDIAN_WINDOW:]
    step_times = [s["step_time_s"] for s in recent if s["step_time_s"]]
    step_time = _median(step_times)
    samples = _median([s["samples"] for s in recent if s["samples"] is not None])
    comm = _median([s["comm_s"] for s in recent if s["comm_s"] is not None])
    data_wait = _median([s["data_wait_s"] for s in recent if s["data_wait_s"] is not None])
    last = recent[-1] if recent else {}
    compute = None
    if step_time is not None:
        compute = max(0.0, step_time - (comm or 0.0) - (data_wait or 0.0))
    tokens = _median([s["tokens"] for s in recent if s["tokens"] is not None])
    return {
        "rank": stream.rank,
        "world_size": stream.world_size,
        "local_rank": stream.local_rank,
        "pid": stream.pid,
        "hostname": stream.hostname,
        "job": stream.job,
        "gpu_uuid": stream.gpu_uuid,
        "connected": stream.connected,
        "last_seen_s": stream.last_seen_s,
        "step": last.get("step"),
        "step_time_s": step_time,
        "compute_s": compute,
        "samples_per_s": samples / step_time if samples is not None and step_time else None,
        "tokens_per_s": tokens / step_time if tokens is not None and step_time else None,
        # shares of the step, at most all of it (a framework's timers and our wall clock differ a little)
        "comm_share": min(1.0, comm / step_time) if comm is not None and step_time else None,
        "data_wait_share": min(1.0, data_wait / step_time) if data_wait is not None and step_time else None,
        # the framework's split of the step, where it gives one (DDP's own timers, or the script)
        "forward_s": _median([s["forward_s"] for s in recent if s["forward_s"] is not None]),
        "backward_s": _median([s["backward_s"] for s in recent if s["backward_s"] is not None]),
        "optimizer_s": _median([s["optimizer_s"] for s in recent if s["optimizer_s"] is not None]),
        "loss": last.get("loss"),
        "loss_history": [s["loss"] for s in stream.steps if s["loss"] is not None][-60:],
        "lr": last.get("lr"),
        "mem_peak_bytes": last.get("mem_peak_bytes"),
        "mem_allocated_bytes": last.get("mem_allocated_bytes"),
        "micro_batch": last.get("micro_batch"),
        "samples": samples,
        "gradient_bytes": last.get("gradient_bytes"),
        "accumulation_steps": last.get("accumulation_steps"),
        "cpu_pct": last.get("cpu_pct"),
        "rss_bytes": last.get("rss_bytes"),
        "dropped": last.get("dropped"),
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
    return {"samples": summary["samples"], "compute_s": summary["compute_s"], "micro_batch": summary["micro_batch"],
            "mem_peak_bytes": summary["mem_peak_bytes"], "t": now_s}


def carry_points(old: RankStream, new: RankStream, now_s: float) -> None:
    """A rank's new process (after a restart) inherits its predecessor's points, if on the same GPU.
    A point at the same split replaces the older one."""
    if old.gpu_uuid != new.gpu_uuid:
        return
    point = operating_point(old, now_s)
    kept = [p for p in old.points if now_s - p["t"] <= POINT_MAX_AGE_S
            and (point is None or p["samples"] != point["samples"])]
    new.points = ([*kept, point] if point else kept)[-POINTS_KEPT:]


def points_view(stream: RankStream, now_s: float) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "t"} | {"age_s": now_s - p["t"]}
            for p in stream.points if now_s - p["t"] <= POINT_MAX_AGE_S]


def mark_stragglers(ranks: list[dict[str, Any]]) -> None:
    """A rank whose compute time is well above the median makes every other rank wait."""
    computes = [r["compute_s"] for r in ranks if r["compute_s"] is not None and r["connected"]]
    if len(computes) < 2:
        return
    median = statistics.median(computes)
    for rank in ranks:
        rank["straggler"] = bool(rank["compute_s"] is not None and median > 0 and rank["compute_s"] > STRAGGLER_RATIO * median)


def run_summary(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    live = [r for r in ranks if r["connected"] and r["step_time_s"]]
    if not live:
        return None
    rates = [r["samples_per_s"] for r in live if r["samples_per_s"] is not None]
    return {
        "ranks": len(live),
        "step_time_s": max(r["step_time_s"] for r in live),  # the job moves at its slowest rank
        "samples_per_s": sum(rates) if rates else None,
        "stragglers": [r["rank"] for r in live if r["straggler"]],
    }
