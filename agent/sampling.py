"""Which steps copy their CUDA values (the loss, the loss scale) from the GPU: at most one every
DEVICE_READ_INTERVAL_S.

Copying a CUDA value without a synchronisation takes a copy to pinned memory and an event, queued on
the training thread (the sender thread cannot queue them: by then the GPU is steps ahead, past the
deferral window of agent/core.py). A step that copies cost 35.8 µs on an H200 against 3.8 µs with
the loss on the CPU (docs/benchmarks.md, the recheck rows), so a step copies its CUDA values only
when it is due: the first step with one, and then the first step ending DEVICE_READ_INTERVAL_S or
more after the last copy (so always the step after a pause: an evaluation, a checkpoint, a stalled
loader). The other steps send their plain numbers and times and leave the CUDA values out: the hub's
loss history is sampled at <= 10 Hz, the rate the sender sends at anyway. CPU values (a float, a CPU
tensor) are read every step.

A non-finite loss needs no per-step check: once the weights are NaN every later loss is NaN, so the
next sample shows it; a GradScaler's inf/NaN steps are counted from the scale's drops, which the
sampled scale still shows (AmpWatch counts each halving between two samples as one skipped step).
"""

from __future__ import annotations

DEVICE_READ_INTERVAL_S = 0.1  # about ten samples per send (the send period is 1 s)


class DeviceSampling:
    """The rule, on the step's end time (perf_counter seconds): no clock of its own."""

    def __init__(self, interval_s: float = DEVICE_READ_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.last_s = float("-inf")  # the end of the last step that copied a CUDA value
        self.copies = 0

    def due(self, end_s: float) -> bool:
        """A step ending at end_s copies its CUDA values."""
        return end_s - self.last_s >= self.interval_s

    def copied(self, end_s: float) -> None:
        """The step ending at end_s copied at least one CUDA value: the next waits interval_s."""
        self.last_s = end_s
        self.copies += 1
