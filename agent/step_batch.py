"""The sender thread's side of the steps: the ready steps taken from the ring and built into one columnar
"steps" frame (gpumix/wire/step_columns.py), column by column.

Issue 13: while the sender builds, it holds the GIL, and a training thread that wants it back waits.
Built as a message per step, a step cost 47 Python calls and ~16 µs of the sender's CPU on the 2-core
CPU box (benchmarks/agent_sender_cost.py); here each column is one C call over the records (map with
attrgetter or dict.get, list.count, set(map(type, ...))), and only what is rare walks the rows in
Python: a CUDA value (a LazyScalar, on the steps due to copy: agent/sampling.py), the comm probes of an
integration, a loss scale that changed. The frame's rows are the step messages the per-step builder made
(tests/test_agent_step_batches.py keeps that builder as the reference).
"""

from __future__ import annotations

import time
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from gpumix.agent.lazy import LazyScalar
from gpumix.agent.step_record import AMP_FIELDS
from gpumix.agent.values import read
from gpumix.wire.step_columns import STEPS_TYPE, one_or_column

if TYPE_CHECKING:
    from gpumix.agent.amp import AmpWatch
    from gpumix.agent.core import Agent
    from gpumix.agent.step_record import StepRecord
    from gpumix.agent.step_ring import StepRing

# A step whose CUDA values are not computed yet (the CPU runs ahead of the GPU) waits for them up
# to this many steps, then goes without them: its record is never read with a synchronisation.
# The sender thread collects steps once a send period (gpumix/wire/send_period.py): the DeepSpeed probe
# keeps its timings for as many steps as the ring holds, the pinned pool reads 256 values back (agent/lazy.py).
MAX_DEFERRED_STEPS = 6

# a record's fields, read for a whole batch of records at once (map: no Python call per step)
_FIELDS, _INDEX, _STEP_TIME, _END, _DATA_WAIT = (attrgetter(name) for name in (
    "__dict__", "index", "step_time_s", "end_s", "data_wait_s"))


def ready_steps(ring: StepRing, final: bool, limit: int | None,
                names: tuple[str, ...]) -> tuple[list[StepRecord], dict[str, list[Any]]] | None:
    """Take the ready steps from the ring, oldest first, at most limit: (their records, the columns of the
    numbers the script set, `names`, CUDA values read), or None if none. A step is ready once a newer one
    ended and its CUDA values are computed, or MAX_DEFERRED_STEPS newer steps ended; final: every step,
    the last one too, CUDA values waited for."""
    records = ring.peek(limit, keep=0 if final else 1)
    if not records:
        return None
    fields = list(map(_FIELDS, records))  # the numbers the script set: each record's __dict__
    present = set().union(*fields)
    numbers = {name: list(map(dict.get, fields, repeat(name, len(records)))) for name in names if name in present}
    # CUDA values (a LazyScalar: only on a step due to copy, agent/sampling.py), found column by column
    lazy = [name for name, column in numbers.items() if LazyScalar in set(map(type, column))]
    if lazy and not final:
        newest = ring.written - 1 - ring.taken  # the steps newer than the first one
        waiting = [row for name in lazy for row, value in enumerate(numbers[name])
                   if type(value) is LazyScalar and newest - row <= MAX_DEFERRED_STEPS and not value.ready()]
        if waiting:  # in order: the later steps wait behind the first one not computed
            del records[min(waiting):]
            if not records:
                return None
            numbers = {name: column[:len(records)] for name, column in numbers.items()}
    ring.take(len(records))
    for name in lazy:
        numbers[name] = [read(value, final) if type(value) is LazyScalar else value for value in numbers[name]]
    return records, numbers


def frame(agent: Agent, records: list[StepRecord], numbers: dict[str, list[Any]],
          names: tuple[str, ...]) -> dict[str, Any]:
    """These steps' "steps" frame: StepMessage's fields as columns (one value where every step holds the
    same), from the records, the script's numbers (ready_steps), the agent's probes, settings and figures."""
    count = len(records)
    columns: dict[str, Any] = {"step": list(map(_INDEX, records)), "step_time_s": list(map(_STEP_TIME, records))}
    columns.update(numbers)
    for probe in agent.phase_probes:  # the framework's own split (read once a second), where the script set none
        for name, value in probe().items():
            if name in names:
                column = columns.get(name)
                if column is None or None in column:
                    number = read(agent._number(name, value))
                    columns[name] = [number] * count if column is None else \
                        [number if old is None else old for old in column]
    if agent.comm_probes:
        column = columns.get("comm_s") or [None] * count
        if None in column:
            indices = columns["step"]
            columns["comm_s"] = [read(agent._number("comm_s", agent._comm_seconds(indices[row])))
                                 if value is None else value for row, value in enumerate(column)]
    scales = columns.pop("loss_scale", None)
    for name, value in agent._shared_fields().items():  # a step's own micro-batch (PASSES) wins
        column = columns.get(name)
        columns[name] = value if column is None else [value if own is None else own for own in column]
    ends = list(map(_END, records))
    offset_s = agent._wall_offset_s
    columns["t"] = [end + offset_s for end in ends] if None not in ends else \
        [end + offset_s if end is not None else time.time() for end in ends]
    columns["data_wait_s"] = list(map(_DATA_WAIT, records))
    if agent._amp is not None:  # the scale goes with the amp fields, after its finiteness check
        columns.update(amp_columns(agent._amp, scales or [None] * count))
    frame_columns = {}
    for name, column in columns.items():
        value = one_or_column(column) if type(column) is list else column
        if value is not None:  # a field no step has is left out, as a message leaves it out
            frame_columns[name] = value
    return {"type": STEPS_TYPE, "n": count, "columns": frame_columns}


def amp_columns(amp: AmpWatch, scales: list[Any]) -> dict[str, list[Any]]:
    """The amp fields of each step, in step order: AmpWatch.fields at the first step and at each step whose
    scale was read and differs from the last (a step without a sampled scale carries the last scale and
    count, as AmpWatch.fields gives them; a framework's own skipped count is read once a batch)."""
    rows: list[dict[str, Any]] = []
    fields: dict[str, Any] | None = None
    last = None
    for scale in scales:
        if fields is None or (scale is not None and scale != last):
            fields = amp.fields(scale)
            last = scale if scale is not None else last
        rows.append(fields)
    return {name: list(map(dict.get, rows, repeat(name, len(rows)))) for name in (*AMP_FIELDS, "loss_scale")}
