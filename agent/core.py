"""The in-rank agent: times steps and hands records to the sender thread.

Cheap by construction: on the training thread a step costs two perf_counter() calls, a small
object, its numbers made plain (a CUDA tensor: an asynchronous copy, read later) and one slot of a
preallocated ring (agent/step_ring.py). Everything else happens on the sender thread, a few times a
second: the steps' frame built (agent/step_batch.py; values a GPU synchronisation would read now, like a
CUDA loss, are read once computed), the allocator and process figures, the encoding and the writes. Each step is
collected once the next step has ended (annotate_last may still set its values), or up to
MAX_DEFERRED_STEPS later while its CUDA values are not computed yet. The step record and the fields'
sources: agent/step_record.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from gpumix.agent import identity, launcher_env, step_batch
from gpumix.agent.amp import AmpWatch
from gpumix.agent.lazy import (
    LazyScalar,
    PinnedPool,
    initialized_device,
    record_step_event,
    use_device,
)
from gpumix.agent.pinned_block import pinned_block
from gpumix.agent.process_figures import ProcessFigures
from gpumix.agent.restart import RestartControl, load_run_plan
from gpumix.agent.sampling import DeviceSampling, copy_interval_s
from gpumix.agent.sender import Sender
from gpumix.agent.step_batch import MAX_DEFERRED_STEPS  # noqa: F401  (re-exported: tests read it here)
from gpumix.agent.step_record import (  # noqa: F401  (re-exported: the agent's names, as before)
    AMP_FIELDS,
    MEASURED,
    PASSES,
    RECORD_NUMBERS,
    SETTINGS,
    STEP_HEAD,
    StepContext,
    StepRecord,
    record_numbers,
)
from gpumix.agent.step_ring import StepRing
from gpumix.agent.values import Coerced, NotANumber, Setting, coerce, on_gpu, read
from gpumix.wire.step_columns import frame_rows

log = logging.getLogger("gpumix.agent")

# (step index) -> seconds of communication in that step, or None if not known (yet)
CommProbe = Callable[[int], "float | None"]


class Agent:
    # numbers the script or an integration sets once, coerced on assignment (gradient_bytes: watch_ddp's,
    # what the planner's all-reduce moves)
    micro_batch = Setting()
    accumulation_steps = Setting()
    gradient_bytes = Setting()

    def __init__(self, address: str, job: str | None = None, cuda_device: int | None = None,
                 gpu_uuid: str | None = None, max_messages: int = 1024) -> None:
        self.rank, self.local_rank, self.world_size = launcher_env.rank_from_env()
        self.job = job or os.environ.get("GPUMIX_JOB") or os.environ.get("TORCHELASTIC_RUN_ID")
        self.cuda_device = cuda_device if cuda_device is not None else (self.local_rank or 0)
        self.nvml_index, env_uuid = launcher_env.physical_gpu(self.cuda_device)
        self.gpu_uuid = gpu_uuid or os.environ.get("GPUMIX_GPU_UUID") or env_uuid or identity.torch_uuid(self.cuda_device)
        self._amp: AmpWatch | None = None  # watch_amp: autocast's dtype and the GradScaler
        self._dp_devices: int | None = None  # watch_model: a DataParallel wrapper's device count
        self.comm_probes: list[CommProbe] = []
        self.phase_probes: list[Callable[[], dict[str, float | None]]] = []  # forward_s, backward_s, ...
        self.steps = 0
        self._last_end_s: float | None = None
        self._last: StepRecord | None = None  # the step that just ended (annotate_last)
        self._steps_device: int | None = None  # the training thread's CUDA device, once CUDA is initialized
        self._sender_on_device = False  # the sender thread's CUDA calls go to that device
        # ended steps not collected yet, oldest first: each waits for the next step (annotate_last)
        # and for its CUDA values, at most MAX_DEFERRED_STEPS steps
        self._ring = StepRing(max_messages)
        self._wall_offset_s = time.time() - time.perf_counter()  # a step's wall clock, from its perf_counter end
        self._cuda = identity.uses_cuda()
        self._torch: Any = None  # the torch module, once imported (step_end)
        self._pinned = PinnedPool()  # pinned buffers are taken only for CUDA tensors
        self._refused_fields: set[str] = set()  # fields already warned about (once each)
        self._figures = ProcessFigures(self._cuda, self.cuda_device)  # allocator and process, once a second
        # psutil, which the sender thread reads the process's figures with, imported now, before the steps:
        # imported there it held the GIL through one step of the training thread (0.1-0.25 s on a loaded box)
        with contextlib.suppress(ImportError):
            import psutil  # noqa: F401
        self._warned = False
        self.restart = RestartControl(self.rank)
        self.steps = self.restart.resume_step  # after a supervised restart the count goes on, as the supervisor's does
        self.plan = load_run_plan()
        self.sender = Sender(address, self._hello, max_messages=max_messages, collect=self._collect_frames,
                             pending=lambda: self._ring.pending, wake=self._ring.half_full,
                             prepare=self._prepare_sender)
        # which steps copy their CUDA values: COPIES_PER_SEND a send period (0.5 s apart at the default 1 s)
        self.sampling = DeviceSampling(copy_interval_s(self.sender.period_s))

    def _find_torch(self) -> Any:
        """torch once the script imported it (kept: one sys.modules look-up a step until then, none after)."""
        self._torch = sys.modules.get("torch")
        return self._torch

    def _hello(self) -> dict[str, Any]:
        return identity.hello(self.rank, self.local_rank, self.world_size, self.gpu_uuid, self.nvml_index, self.job)

    # -- what the script or an integration declares once ------------------------------

    def watch_amp(self, scaler: Any = None, dtype: Any = None) -> None:
        """Declare the step's precision: autocast's dtype (torch.float16, torch.bfloat16, or None for
        none: fp32) and the GradScaler, whose scale is sent with each step (copied without a sync) and
        whose skipped steps are counted from the scale's drops (it backs off exactly on inf/NaN)."""
        name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
        self._amp = AmpWatch(scaler, name)

    def watch_model(self, model: Any) -> None:
        """Note a torch.nn.DataParallel wrapper (one process on several GPUs): the hub says to use DDP."""
        torch = sys.modules.get("torch")
        try:
            if torch is not None and isinstance(model, torch.nn.DataParallel):
                self._dp_devices = len(model.device_ids or [])
        except Exception:
            self._dp_devices = None

    def _setting(self, name: str, value: Any) -> int | float | None:
        """Set once, not per step: a CUDA tensor may be read now (pinned=None)."""
        return read(self._number(name, value, pinned=None))

    def _number(self, name: str, value: Any, pinned: PinnedPool | None = None) -> Coerced:
        """`value` as a number for the wire; None (and one warning per field) if it is none."""
        try:
            return coerce(value, pinned, average=name == "loss")
        except NotANumber as what:
            if name not in self._refused_fields:
                self._refused_fields.add(name)
                log.warning("gpumix agent: %s was given %s, not a number; it is left out of the steps it"
                            " is given in (give a number, a numpy scalar or a one-element tensor)", name, what)
            return None

    # -- steps --------------------------------------------------------------------

    def step(self, samples: Any = None, tokens: Any = None) -> StepRecord:
        """`with agent.step(samples=len(batch)) as s: ...; s.loss = loss`: the record is its own context
        manager (leaving the `with` ends the step), one object a step."""
        record = StepRecord(self.steps, samples, tokens, self)
        if self._last_end_s is not None:
            record.data_wait_s = record.begin_s - self._last_end_s
        return record

    step_begin = step  # for integrations that end the step themselves (agent.step_end(record))

    def step_end(self, record: StepRecord, **values: Any) -> None:
        """End a step (leaving the record's `with` calls this). Never raises.

        The training thread's cost per step is the point here (issue 13): no call that is not needed,
        the script's numbers found in the record's own __dict__ (the agent's own fields are slots, and a
        number not set is a class default, never looked at), plain ints and floats passed over by their type."""
        try:
            record.end_s = end_s = time.perf_counter()
            if values:
                for name, value in values.items():
                    setattr(record, name, value)
            last_end_s = self._last_end_s
            record.step_time_s = end_s - (last_end_s if last_end_s is not None else record.begin_s)
            self._last_end_s = end_s
            if self._amp is not None and record.loss_scale is None:
                record.loss_scale = self._amp.scale_tensor()
            due = end_s >= self.sampling.next_s  # the sampling rule (agent/sampling.py), without a call
            if due:
                record.device_due = True
            copied = False
            torch = self._torch or self._find_torch()
            pool = self._pinned  # this step's pool (the sender thread swaps in the pinned block once)
            if due:
                pool.step_copies = []  # the step's copies share one event, recorded after the last
            try:
                fields = record.__dict__
                for name, value in fields.items():  # a tensor loss is replaced: the graph is not kept alive
                    kind = type(value)
                    if kind is int or kind is float or value is None or name not in RECORD_NUMBERS:
                        continue
                    if not due and torch is not None and isinstance(value, torch.Tensor) and value.is_cuda:
                        fields[name] = None  # a CUDA tensor on a step not due: left out, nothing queued on the GPU
                    else:  # anything else (and a CUDA value on a due step): made plain, a CUDA one copied
                        copied = self._plain(record, name, value, pool) or copied
            finally:
                if due:  # one event for the step's copies; a step with none (plain numbers) makes no call
                    if pool.step_copies:
                        record_step_event(pool)
                    else:
                        pool.step_copies = None
            if copied:
                self.sampling.copied(end_s)
            self.steps = record.index + 1
            self._last = record
            if self._steps_device is None and self._cuda:
                self._steps_device = initialized_device()
            self._ring.put(record)  # the sender thread takes it from here
        except Exception:
            if not self._warned:
                self._warned = True
                log.warning("gpumix agent: step bookkeeping failed; training goes on", exc_info=True)

    # -- the sender thread's side ----------------------------------------------------

    def _collect(self, final: bool = False, limit: int | None = None) -> list[dict[str, Any]]:
        """The messages of the steps ready to go, oldest first, one per step: the rows of _collect_frame's
        frame (the sender sends the frame; tests read the rows). Called on the sender thread only."""
        frame = self._collect_frame(final, limit)
        return frame_rows(frame) if frame is not None else []

    def _collect_frames(self, final: bool = False, limit: int | None = None) -> list[dict[str, Any]]:
        """The sender's collect: the ready steps as one "steps" frame (none: [])."""
        frame = self._collect_frame(final, limit)
        return [frame] if frame is not None else []

    def _collect_frame(self, final: bool = False, limit: int | None = None) -> dict[str, Any] | None:
        """The steps ready to go as one columnar "steps" frame (agent/step_batch.py), None if none; called
        on the sender thread only. final: every step, the last one too, CUDA values waited for. limit: at
        most this many (the sender builds a backlog in pieces, handing the GIL back between them)."""
        self._prepare_sender()
        ready = step_batch.ready_steps(self._ring, final, limit, RECORD_NUMBERS)
        return self._frame(*ready) if ready is not None else None

    def _prepare_sender(self) -> None:
        """On the sender thread, at each of its wake-ups (a hub or none) and each collect: once the training
        thread has initialized CUDA, move this thread to its device and swap in the pinned block, so that
        the training thread's copies allocate none, also while no hub is there to collect for (before, each
        copy of a rank without a hub pinned a buffer of its own: a cudaHostAlloc on the training thread)."""
        if self._steps_device is not None and not self._sender_on_device:
            self._sender_on_device = use_device(self._steps_device)
            self._pinned = pinned_block(sys.modules["torch"], self._pinned)

    def _frame(self, records: list[StepRecord], numbers: dict[str, list[Any]]) -> dict[str, Any]:
        """These steps' "steps" frame; numbers: the script's numbers' columns (step_batch.ready_steps)."""
        return step_batch.frame(self, records, numbers, RECORD_NUMBERS)

    def _shared_fields(self) -> dict[str, Any]:
        """The fields every step collected together carries alike, read once per collection: the
        settings (PASSES: where a step set none of its own), the drop count, the allocator's and the
        process's figures (read once a second)."""
        shared = {name: getattr(self, name) for name in (*SETTINGS, *PASSES)}
        shared["dropped"] = self.dropped
        shared.update(self._figures.gpu_memory())
        shared.update(self._figures.process())
        return {key: value for key, value in shared.items() if value is not None}

    @property
    def dropped(self) -> int:
        """Steps and messages lost on the way (the ring overwritten, the send queue full)."""
        return self._ring.dropped + self.sender.dropped

    @property
    def queued(self) -> int:
        """Steps and messages not sent yet."""
        return self._ring.pending + self.sender.queued

    # -- supervised restarts (gpumix run) --------------------------------------------

    @property
    def resume_step(self) -> int:
        """Optimizer steps already done when the supervisor relaunched us (0: a fresh start)."""
        return self.restart.resume_step

    def on_checkpoint(self, hook: Callable[[int], object]) -> None:
        """hook(steps_done) saves everything needed to resume; it runs on a restart."""
        self.restart.hook = hook

    def restart_point(self, steps_done: int) -> bool:
        """Call after each optimizer step. True: checkpointed for a restart; exit the loop."""
        try:
            return self.restart.restart_point(steps_done)
        except Exception:
            log.warning("gpumix agent: restart check failed; training goes on", exc_info=True)
            return False

    def annotate_last(self, **values: Any) -> None:
        """Set loss, lr, ... on the step that just ended (for frameworks that log after the step)."""
        record = self._last
        if record is None:
            return
        for name, value in values.items():
            if name in RECORD_NUMBERS:
                if self._plain(record, name, value):
                    self.sampling.copied(record.end_s)
            elif hasattr(record, name):
                setattr(record, name, value)

    def _plain(self, record: StepRecord, name: str, value: Any, pool: PinnedPool | None = None) -> bool:
        """Set `value` on the record as a plain number (or a LazyScalar); a CUDA value only on a step
        due to copy (agent/sampling.py), else it is left out and nothing is queued on the GPU.
        True: a CUDA copy was queued."""
        if not record.device_due and on_gpu(value):
            setattr(record, name, None)
            return False
        plain = self._number(name, value, self._pinned if pool is None else pool)
        setattr(record, name, plain)
        return isinstance(plain, LazyScalar)

    def _comm_seconds(self, index: int) -> float | None:
        total = None
        for probe in self.comm_probes:
            value = probe(index)
            if value is not None:
                total = (total or 0.0) + value
        return total

    @property
    def dp_devices(self) -> int | None:
        """Set by watch_model: the devices of a DataParallel wrapper."""
        return self._dp_devices

    def close(self, timeout_s: float = 2.0) -> None:
        """Collect every step (the last one too) and send what is queued, then stop the sender, and let go
        of the frameworks' probes: they hold the model (DDP's reducer holds the process group, which the job
        then tears down at its own point, not at interpreter exit)."""
        self.sender.close(timeout_s)
        self.comm_probes.clear()
        self.phase_probes.clear()
