"""Which steps copy their CUDA values (the loss, the loss scale) from the GPU: COPIES_PER_SEND a send
period (gpumix/wire/send_period.py), at most one every MIN_INTERVAL_S.

Copying a CUDA value without a synchronisation takes a copy to pinned memory and an event, queued on
the training thread (the sender thread cannot queue them: by then the GPU is steps ahead, past the
deferral window of agent/core.py). Each of those CUDA calls hands the GIL away, and on an H200 VM a
copying step cost 467 µs (no hub) to 554 µs (live hub) on average against ~10 µs for the others
(docs/benchmarks.md, session 7): at ten copies a second they were a third of the agent's mean cost on
1 ms steps. So a step copies its CUDA values only when it is due: the first step with one, and then the
first step ending copy_interval_s() or more after the last copy (so always the step after a pause
that long: an evaluation, a checkpoint, a stalled loader). The other steps send their plain numbers
and times and leave the CUDA values out. CPU values (a float, a CPU tensor) are read every step.

Why two a send period is enough: the sender hands the hub a period's steps at once, and the hub and
the dashboard look once a second. The hub keeps the last LOSS_HISTORY_KEPT (60) losses received for
the rank's sparkline and shows the newest as the rank's loss: at two a second the sparkline spans 30 s
of the run instead of 6 s, and the loss shown is at most half a period older than the batch it came
in. A non-finite loss needs no per-step check: once the weights are NaN every later loss is NaN, so
the next sample shows it, within one interval. A GradScaler's inf/NaN steps are counted from the
scale's drops, which the sampled scale still shows (AmpWatch counts each halving between two samples
as one skipped step); a drop and a regrowth between two samples would be missed, but GradScaler grows
the scale only after 2000 steps without a skip, longer than an interval at any usual step time.
"""

from __future__ import annotations

COPIES_PER_SEND = 2  # CUDA copies a send period (the period: 1 s by default)
MIN_INTERVAL_S = 0.1  # never more often than this (GPUMIX_AGENT_SEND_PERIOD_S=0.1: ten a second, as before)
DEVICE_READ_INTERVAL_S = 0.5  # the interval at the default send period of 1 s


def copy_interval_s(send_period_s: float) -> float:
    """The least time between two copying steps for a sender that sends every send_period_s."""
    return max(MIN_INTERVAL_S, send_period_s / COPIES_PER_SEND)


class DeviceSampling:
    """The rule, on the step's end time (perf_counter seconds): no clock of its own. The training thread
    reads next_s, one comparison a step, not a call (issue 13)."""

    def __init__(self, interval_s: float = DEVICE_READ_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._last_s = float("-inf")  # the end of the last step that copied a CUDA value
        self.next_s = float("-inf")  # a step ending at or after it is due: last_s + interval_s
        self.copies = 0

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, seconds: float) -> None:
        self._interval_s = seconds
        self.next_s = self._last_s + seconds

    @property
    def last_s(self) -> float:
        return self._last_s

    @last_s.setter
    def last_s(self, end_s: float) -> None:
        self._last_s = end_s
        self.next_s = end_s + self._interval_s

    def due(self, end_s: float) -> bool:
        """A step ending at end_s copies its CUDA values."""
        return end_s >= self.next_s

    def copied(self, end_s: float) -> None:
        """The step ending at end_s copied at least one CUDA value: the next waits interval_s."""
        self.last_s = end_s
        self.copies += 1
