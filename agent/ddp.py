"""Communication time of a DDP model, from a communication hook.

The hook does what DDP's default all-reduce hook does (divide by the world
size, all-reduce the bucket) and notes when each bucket's reduction starts
and ends: CUDA events on GPUs (read a step later, no synchronisation), wall
time on CPU (gloo). A step's communication time is the span from the first
bucket's start to the last bucket's end.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from gpumix.agent.core import Agent

KEPT_STEPS = 8  # spans kept for steps not yet read: bounded


class CommTimer:
    def __init__(self, agent: Agent, group: Any = None) -> None:
        self.agent = agent
        self.group = group
        self._spans: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()

    def _span(self, step: int) -> list[Any]:
        span = self._spans.get(step)
        if span is None:
            span = self._spans[step] = [None, None]  # [first start, last end]
            while len(self._spans) > KEPT_STEPS:
                self._spans.popitem(last=False)
        return span

    def seconds(self, step: int) -> float | None:
        """The comm probe the agent calls when step `step` is reported."""
        span = self._spans.pop(step, None)
        if span is None or span[0] is None or span[1] is None:
            return None
        start, end = span
        if isinstance(start, float):
            return end - start
        if not end.query():
            return None  # still running: skip rather than wait
        return start.elapsed_time(end) / 1000.0

    # No annotations on purpose: DDP rejects a hook whose annotations are not GradBucket / Future.
    def hook(self, state, bucket):  # noqa: ANN001, ANN201
        import torch
        import torch.distributed as dist

        tensor = bucket.buffer()
        on_gpu = tensor.is_cuda
        span = self._span(self.agent.steps)
        if span[0] is None:
            if on_gpu:
                span[0] = torch.cuda.Event(enable_timing=True)
                span[0].record()
            else:
                span[0] = time.perf_counter()
        tensor.div_(dist.get_world_size(self.group))
        future = dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

        def finished(done: Any) -> Any:
            if on_gpu:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                span[1] = end
            else:
                span[1] = time.perf_counter()
            return done.value()[0]

        return future.then(finished)


def watch_ddp(agent: Agent, model: Any, group: Any = None) -> CommTimer:
    """Register the timing all-reduce hook on a DistributedDataParallel model."""
    timer = CommTimer(agent, group)
    model.register_comm_hook(state=None, hook=timer.hook)
    agent.comm_probes.append(timer.seconds)
    return timer
