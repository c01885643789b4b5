"""Communication and compute time of a DDP model, from DDP's own timers.

DDP already times itself with CUDA events (CPU timers under gloo) on a sample
of iterations (`_get_ddp_logging_data()`: forward, backward compute, backward
communication and their overlap, running averages in ns). Reading them costs
~7 us and is done at most once a second, so watching a DDP model adds nothing
to its step: no hook replaces DDP's C++ all-reduce, no event is recorded.
(A Python communication hook with CUDA events cost ~20 % of an 8 ms step on
two H200s: docs/benchmarks.md.)

Communication time reported = backward communication not hidden behind
backward compute: a fast rank's wait for the slowest one shows up there.
"""

from __future__ import annotations

import time
from typing import Any

from gpumix.agent.core import Agent

READ_PERIOD_S = 1.0
NS = 1e-9


class DdpTimes:
    def __init__(self, model: Any) -> None:
        self.model = model
        self._read_at = 0.0
        self._times: dict[str, float] = {}

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < READ_PERIOD_S:
            return
        self._read_at = now
        try:
            data = self.model._get_ddp_logging_data()
        except Exception:  # an older or newer DDP without it: no figures rather than a failure
            self._times = {}
            return
        # The latest sampled iteration, not the averages: those keep the slow first steps for long.
        comm = data.get("backward_comm_time")
        overlap = data.get("backward_compute_comm_overlap_time") or 0
        self._times = {
            "comm_s": max(0.0, (comm - overlap) * NS) if comm else None,
            "forward_s": data["forward_compute_time"] * NS if data.get("forward_compute_time") else None,
            "backward_s": data["backward_compute_time"] * NS if data.get("backward_compute_time") else None,
        }

    def comm_seconds(self, step: int) -> float | None:
        """The agent's comm probe: the running average, for any step."""
        self._refresh()
        return self._times.get("comm_s")

    def phases(self) -> dict[str, float | None]:
        self._refresh()
        return {key: self._times.get(key) for key in ("forward_s", "backward_s")}


def watch_ddp(agent: Agent, model: Any) -> DdpTimes:
    """Report a DistributedDataParallel model's communication and compute split, and its gradient size."""
    times = DdpTimes(model)
    agent.comm_probes.append(times.comm_seconds)
    agent.phase_probes.append(times.phases)
    agent.gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return times
