"""DeepSpeed: micro-batch and accumulation from the engine, communication time from
its `bwd_allreduce` timer.

    engine, optimizer, _, _ = deepspeed.initialize(...)
    watch_deepspeed(agent, engine)
    for batches in loader:                       # one optimizer step
        with agent.step(samples=micro * accumulation):
            for batch in batches:                # accumulation micro-steps
                loss = engine(batch); engine.backward(loss); engine.step()

DeepSpeed times the gradient all-reduce only with "wall_clock_breakdown": true
(its own option, which synchronises at each step to print its timers). We
keep references to its timer's events and read them one step later: no
further synchronisation from us. Without that option, comm time is not known.

Under an unequal split (gpumix plan --deepspeed-config) each rank's config says
train_batch_size = m_r * k * R, because DeepSpeed checks exactly that at start;
its sample count (engine.global_samples, the x axis of its monitors and of
sample-based schedules) would then add the wrong amount each step. Given the
true global batch B (the plan's, by default), watch_deepspeed sets the
engine's train_batch_size to B once the check has passed, so each step counts
B samples: the samples every rank trained together.

Mixed precision from the engine's config (`fp16_enabled()`, `bfloat16_enabled()`,
`torch_autocast_enabled()`/`torch_autocast_dtype()`; DeepSpeed 0.19): under fp16 the loss scale is its
optimizer's `loss_scale` (a Python float: no sync) and the skipped steps are the engine's own
`skipped_steps` (exact: with its hysteresis a step may overflow without the scale backing off).
"""

from __future__ import annotations

import collections
from typing import Any

from gpumix.agent.amp import ScaleSource, declare
from gpumix.agent.core import Agent

ALLREDUCE_TIMER = "bwd_allreduce"  # deepspeed.utils.timer.BACKWARD_REDUCE_GLOBAL_TIMER
KEPT_STEPS = 1024  # the sender collects a step's comm time up to a send period (1 s) later: the step ring's length


class DeepSpeedCommTimer:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._records: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()

    def note(self, record: Any) -> None:
        self._records.setdefault(self.agent.steps, []).append(record)
        while len(self._records) > KEPT_STEPS:
            self._records.popitem(last=False)

    def seconds(self, step: int) -> float | None:
        records = self._records.pop(step, None)
        if not records:
            return None
        total = 0.0
        for record in records:
            if isinstance(record, float):  # host timer: seconds
                total += record
                continue
            start, end = getattr(record, "start_event", None), getattr(record, "end_event", None)
            if start is None or end is None or not end.query():
                return None  # not finished: skip rather than synchronise
            total += start.elapsed_time(end) / 1000.0
        return total


def count_global_batch(engine: Any, global_batch: int) -> None:
    """engine.global_samples grows by train_batch_size() per optimizer step (and by
    train_batch_size() // k per micro-step when the caller owns the boundary): make that the
    true global batch B, which DeepSpeed's start-up check (m * k * world) cannot express per rank.
    B must be divisible by k, as the DeepSpeed split makes it."""
    engine._config.train_batch_size = global_batch


def precision(engine: Any) -> tuple[str | None, Any]:
    """(dtype, loss scale source) as the engine trains (amp.declare)."""
    def enabled(name: str) -> bool:
        return getattr(engine, name, lambda: False)() is True

    if enabled("fp16_enabled"):
        return "float16", ScaleSource(lambda: getattr(engine.optimizer, "loss_scale", None),
                                      lambda: getattr(engine, "skipped_steps", None))
    if enabled("bfloat16_enabled"):
        return "bfloat16", None
    if enabled("torch_autocast_enabled"):
        return str(engine.torch_autocast_dtype()).removeprefix("torch."), None
    return "float32", None


def watch_deepspeed(agent: Agent, engine: Any, global_batch: int | None = None) -> DeepSpeedCommTimer | None:
    agent.micro_batch = engine.train_micro_batch_size_per_gpu()
    agent.accumulation_steps = engine.gradient_accumulation_steps()
    if global_batch is None and agent.plan is not None:
        global_batch = agent.plan.global_batch
    if global_batch is not None and global_batch > 0:
        count_global_batch(engine, global_batch)
    declare(agent, lambda: precision(engine), model=getattr(engine, "module", None))
    if not engine.wall_clock_breakdown():
        return None
    timer = engine.timers(ALLREDUCE_TIMER)
    comm = DeepSpeedCommTimer(agent)
    original_stop = timer.stop

    def stop(*args: Any, **kwargs: Any) -> Any:
        result = original_stop(*args, **kwargs)
        if timer.event_timers:
            comm.note(timer.event_timers[-1])
        return result

    timer.stop = stop
    agent.comm_probes.append(comm.seconds)
    return comm
