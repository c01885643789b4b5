"""What a step is on the training thread: the record `with agent.step(...) as step:` hands out, and
who fills each field of the step message.

The message follows the step contract (gpumix/wire/snapshot_types.py): every number of
STEP_NUMBER_RANGES that the agent does not measure or hold itself is one the script sets on its step
record, so a number added to the contract is taken from the record and sent with no change here.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Protocol

from gpumix.wire.snapshot_types import STEP_NUMBER_RANGES

# Who fills each field of the step message (StepMessage, gpumix/wire/snapshot_types.py):
STEP_HEAD = ("type", "step", "step_time_s")  # the agent, from its clock
MEASURED = ("t", "data_wait_s", "dropped", "cpu_pct", "rss_bytes",  # the agent, from its clock and counters,
            "mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes")  # the process and the allocator
SETTINGS = ("gradient_bytes", "dp_devices")  # set once on the agent
# Set on the agent, and on a step whose passes differ (a stair probe's count runs in other passes than the
# split's: agent/probe_schedule.py): the step's own wins. The agent's were read once a send, so a probe's
# points carried the split's micro-batch, not the passes they ran (issue 16, session 25).
PASSES = ("micro_batch", "accumulation_steps")
AMP_FIELDS = ("amp_autocast", "amp_dtype", "amp_skipped_steps")  # watch_amp (AmpWatch.fields)


def record_numbers(ranges: dict[str, tuple[float, float]]) -> tuple[str, ...]:
    """The contract's numbers the script sets on its step record (a Python number, numpy scalar or
    tensor): all but those the agent measures or holds (PASSES among them: the agent's where a step sets none)."""
    return tuple(name for name in ranges if name not in MEASURED + SETTINGS + AMP_FIELDS)


RECORD_NUMBERS = record_numbers(STEP_NUMBER_RANGES)  # samples, tokens, loss, lr, forward_s, ..., loss_scale


class _EndsSteps(Protocol):
    def step_end(self, record: StepRecord) -> None: ...


class StepRecord:
    """What `with agent.step(...) as step:` hands out: set loss, lr, tokens, phase times on it.

    The script may set numbers, numpy scalars or tensors (a CUDA tensor is read once computed,
    no sync now); when the step ends each becomes a plain number (gpumix/agent/values.py).
    The record is its own context manager (one object a step, not two): leaving the `with` ends it."""

    # What the agent itself holds lives in slots, out of __dict__: the step's end looks through __dict__
    # for the numbers the script set, so only those are walked there (issue 13: the training thread's
    # cost per step). Every slot is set in __init__ (a slot has no class default).
    __slots__ = ("_agent", "index", "begin_s", "end_s", "step_time_s", "data_wait_s", "device_due",
                 "__dict__", "__weakref__")

    # Every number of RECORD_NUMBERS is an attribute, None until set (class defaults below: nothing
    # per step; a number the script sets is in the instance's __dict__, where the step's end looks).
    # comm_s: set by an integration, else from the comm probes; loss_scale: the GradScaler's
    # scale after this step (watch_amp), read once computed.
    loss: Any
    lr: Any
    forward_s: Any
    backward_s: Any
    optimizer_s: Any
    comm_s: Any
    loss_scale: Any
    micro_batch: Any  # this step's own, where its passes differ from the agent's (a stair probe's)
    accumulation_steps: Any
    samples: Any
    tokens: Any
    end_s: float | None  # when the step ended (perf_counter s)
    step_time_s: float | None  # previous step's end to this one's end
    data_wait_s: float | None  # previous step's end to this one's begin
    device_due: bool  # its CUDA values are copied (agent/sampling.py), decided when it ends

    def __init__(self, index: int, samples: Any, tokens: Any, agent: _EndsSteps | None = None) -> None:
        self._agent = agent  # who ends it when the `with` is left
        self.index = index
        if samples is not None:  # else the class default: one entry fewer for the step's end to walk
            self.samples = samples
        if tokens is not None:
            self.tokens = tokens
        self.end_s = self.step_time_s = self.data_wait_s = None
        self.device_due = False
        self.begin_s = time.perf_counter()

    def __enter__(self) -> StepRecord:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if kind is None and self._agent is not None:  # a step that raised is the script's business
            self._agent.step_end(self)


for _name in RECORD_NUMBERS:
    setattr(StepRecord, _name, None)


class StepContext:
    """A record's step as a context manager, for a record made without its agent."""

    __slots__ = ("agent", "record")

    def __init__(self, agent: _EndsSteps, record: StepRecord) -> None:
        self.agent = agent
        self.record = record

    def __enter__(self) -> StepRecord:
        return self.record

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if kind is None:  # a step that raised is the script's business, not a step to report
            self.agent.step_end(self.record)
