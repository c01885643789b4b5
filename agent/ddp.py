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

import contextlib
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def compute_apart(model: Any, record: Any) -> Iterator[None]:
    """A step whose compute is timed alone: `with compute_apart(ddp, step):` around its forwards and
    backwards. DDP's own timers sample iterations 1-10 and every 100th, so a stair probe's steps
    (gpumix.agent.probe_schedule), each at other counts than the last, would be read with another
    step's communication, and a fast rank's point would carry its slower partner's compute. Here the
    backwards run without DDP's all-reduce, the compute is timed to its end (the GPU synchronized), the
    gradients are then averaged across the ranks as DDP would, and the step's comm_s is that
    all-reduce: the hub's compute for the step is this rank's own. Costs the overlap: for probe steps only."""
    import torch
    import torch.distributed as dist

    cuda = any(p.is_cuda for p in model.parameters())
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    with model.no_sync():
        yield
    synchronize()
    computed_s = time.perf_counter()
    world = dist.get_world_size()
    by_dtype: dict[Any, list[Any]] = {}
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.grad is not None:
            by_dtype.setdefault(parameter.grad.dtype, []).append(parameter.grad)
    for grads in by_dtype.values():  # one all-reduce a dtype, as DDP's buckets are few, not one a tensor
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat)
        flat.div_(world)
        for grad, reduced in zip(grads, flat.split([grad.numel() for grad in grads]), strict=True):
            grad.copy_(reduced.view_as(grad))
    synchronize()
    record.comm_s = time.perf_counter() - computed_s
