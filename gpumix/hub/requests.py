"""What the hub answers a client it trusts: snapshots, history series, re-plans, supervisor polls and
power controls. Who may ask (read-only connections, signed controls) is the server's to check first.

What it may import: the hub's core and history, gpumix.wire."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from gpumix.hub.core import Hub
from gpumix.hub.history import HISTORY_FIELDS
from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError

log = logging.getLogger(__name__)


async def answer(hub: Hub, request: dict[str, Any], control: Callable[[dict[str, Any], Any], dict[str, Any]],
                 peer: Any) -> dict[str, Any]:
    """The reply to one request; ProtocolError for a request that makes no sense (it closes the connection).
    `control(request, peer)` runs a power control (off the loop: NVML and the user database may be slow)."""
    if request["type"] == "snapshot":
        if request.get("view") is True:  # a dashboard: the hub reads busy GPUs' PCIe each tick while it asks
            hub.note_viewer()
        snapshot = hub.snapshot()
        if request.get("fresh") is True and carries_busy_rates(snapshot, hub.interval_s):
            # a one-shot, no dashboard viewing: busy GPUs' rates read now (a tick: 20 ms and a pair each), not
            # the slow schedule's last; a rate a tick old is fresh enough, so asking again and again costs
            # at most a tick every other interval
            try:
                snapshot = await asyncio.get_running_loop().run_in_executor(None, partial(hub.tick, viewed=True))
            except Exception:  # a reading that failed: the last snapshot, as a plain ask gets
                log.exception("a one-shot's fresh reading failed")
        reply = {"type": "snapshot", "snapshot": snapshot}
    elif request["type"] == "series":
        index, name = protocol.integer(request, "index", True), protocol.text(request, "name", 64)
        if name not in HISTORY_FIELDS:
            raise ProtocolError(f"no history named {name!r}")
        reply = {"type": "series", "values": hub.series(index, name or "")}
    elif request["type"] == "replan":
        job, plan = protocol.text(request, "job", 128), request.get("plan")
        if job is None or not isinstance(plan, dict):
            raise ProtocolError("a replan names a job and a plan")
        reply = hub.request_restart(job, plan)
    elif request["type"] == "supervisor":
        job, status = protocol.text(request, "job", 128), request.get("status") or {}
        if job is None or not isinstance(status, dict) or len(json.dumps(status)) > 4096:
            raise ProtocolError("a supervisor names its job and a small status")
        reply = hub.supervisor_poll(job, status)
    elif request["type"] == "power":
        # NVML's setter takes milliseconds; off the loop all the same, so agents keep flowing.
        # The audit names the peer the kernel (uid) or the token vouches for, never a claimed user.
        reply = await asyncio.get_running_loop().run_in_executor(None, control, request, peer)
    else:
        raise ProtocolError("hello sent twice")
    return reply


def carries_busy_rates(snapshot: dict[str, Any] | None, interval_s: float) -> bool:
    """Whether a GPU at work shows PCIe rates older than a tick: carried on the slow schedule while no
    dashboard views the hub (gpumix.hw.nvml_pcie)."""
    for gpu in (snapshot or {}).get("gpus") or []:
        working = gpu.get("processes") or (gpu.get("util_gpu_pct") or 0) > 0 or (gpu.get("util_mem_pct") or 0) > 0
        if working and (gpu.get("pcie_rates_age_s") or 0) > interval_s:
            return True
    return False
