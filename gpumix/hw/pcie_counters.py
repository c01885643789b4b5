"""Cumulative PCIe byte counters (NVML fields 197/198), unwrapped.

On an H200 (driver 580) the counters come back as 32-bit values: they wrap
every 4.29 GB, i.e. every 72 ms at gen5 x16 speed. A tick of one second
would then see nonsense. So each reading is folded into a 64-bit total
modulo the counter's width, and while a GPU moves data fast enough to wrap
before the next tick, a guard thread reads its counters often enough
(at least twice per wrap) for the total to stay exact.

Reads spaced less than modulus / link rate apart can never miss a wrap, so
the read period follows the link as it is now (gen x width): a GeForce card
idling at gen1 x16 (4 GB/s) needs no read between 1 s ticks, a gen4 x16 card under
load one every 0.12 s, an H200 at gen5 x16 one every 61 ms. (A period from the
measured rate instead fails: once aliased, the measured rate is wrong too, as
the first H200 run showed.) A link that rises from gen1 under a sudden burst
can be under-read for one interval, until the next tick sees the new link.

The guard reads only GPUs that may be moving data (`guarded`, set each tick by the
sampler: a compute process, nonzero utilization, or traffic seen): an H200 keeps its
gen5 x16 link at idle, and reading an idle one 15 times a second cost 1.1 % of a core
(issue 13). A GPU that wakes between two ticks was not guarded over that interval: its
tick gives no rate (None, not an aliased number), and the guard runs from then on.

The guard runs only with `NvmlBackend.exact_pcie`. By default a GPU that may be moving data on a
link that can wrap within a tick is `windowed` instead: its next tick reads the counters twice, 20 ms
apart, far inside a wrap period (a 20 ms sample, not the tick's average, as nvitop's
nvmlDeviceGetPcieThroughput window is): two counter reads a tick, no guard reads (issue 13: the guard
was 1.4 % of a core per busy H200, the throughput window's two calls 3.4 ms of CPU a tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

PCIE_GUARD_MIN_WAIT_S = 0.02
PCIE_GUARD_MAX_WAIT_S = 1.0
# The theoretical link rate already has a ~20 % margin over what a link carries (24-27 of 31.5 GB/s
# measured on gen4 x16), so reads one full wrap-at-link-rate apart are safe.
SAFETY = 1.0
# Faster than any PCIe link (gen6 x16 is ~121 GB/s per direction): a step that implies more
# is a counter reset (driver reload), not traffic.
MAX_PLAUSIBLE_BYTES_PER_S = 256e9

_WIDTH_BITS = {
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: 32,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: 64,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: 64,
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: 63,
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: 31,
}
_MEMBER = {
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
}


def field_value(value: Any) -> tuple[int, int]:
    """(raw value, modulus) of one nvmlFieldValue_t, read by its declared type."""
    kind = getattr(value, "valueType", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)
    member = _MEMBER.get(kind, "ullVal")
    return int(getattr(value.value, member)), 1 << _WIDTH_BITS.get(kind, 64)


@dataclass
class PcieCounters:
    """Unwrapped totals of one GPU's TX/RX counters, and where the last tick left them."""

    modulus: int = 1 << 64
    timestamp_us: int | None = None
    raw_tx: int = 0
    raw_rx: int = 0
    total_tx: int = 0
    total_rx: int = 0
    sampled_us: int | None = None  # totals at the last tick, for its rate
    sampled_tx: int = 0
    sampled_rx: int = 0
    rate_bytes_per_s: float = 0.0  # the busier direction, last measured
    link_bytes_per_s: float | None = None  # the fastest the counters can move now (the link's rate)
    read_at_s: float | None = None  # our own (monotonic) clock at the last read: NVML's stamps are wall time
    reset: bool = False  # the counters restarted since the last tick: its rate is unknown
    guarded: bool = False  # the wrap guard keeps these exact (the GPU may be moving data; exact_pcie)
    windowed: bool = False  # busy on a link that wraps within a tick: the next tick takes a 20 ms pair of reads
    last_rates: tuple[float, float] | None = None  # (tx, rx) bytes/s the last read tick published, carried while quiet
    carried: bool = False  # the last tick carried last_rates unread: the next read's step may hide wraps
    quiet_reads: int = 0  # reads in a row that found the GPU quiet: each doubles the wait for the next
    busy_reads: int = 0  # reads in a row that found the same processes at work: each doubles an unviewed wait
    pids_at_read: frozenset[int] | None = None  # the processes on the GPU at the last read
    signs_at_read: tuple[int | None, ...] | None = None  # the GPU's link gen and clocks at the tick's last read
    power_at_read_w: float | None = None

    def update(self, timestamp_us: int, tx_value: Any, rx_value: Any) -> None:
        tx, self.modulus = field_value(tx_value)
        rx, _ = field_value(rx_value)
        if self.timestamp_us is not None and timestamp_us > self.timestamp_us:
            step_tx = (tx - self.raw_tx) % self.modulus
            step_rx = (rx - self.raw_rx) % self.modulus
            elapsed_s = (timestamp_us - self.timestamp_us) / 1e6
            if max(step_tx, step_rx) / elapsed_s > MAX_PLAUSIBLE_BYTES_PER_S:
                self.reset = True
            else:
                self.total_tx += step_tx
                self.total_rx += step_rx
                self.rate_bytes_per_s = max(step_tx, step_rx) / elapsed_s
        if self.timestamp_us is None or timestamp_us > self.timestamp_us:
            self.timestamp_us, self.raw_tx, self.raw_rx = timestamp_us, tx, rx

    def rates_since_sample(self) -> tuple[float, float] | None:
        """(tx, rx) bytes/s since the previous tick; None on the first."""
        if self.timestamp_us is None:
            return None
        previous = self.sampled_us
        rates = None
        if self.reset:
            self.reset = False
        elif previous is not None and self.timestamp_us > previous:
            elapsed_s = (self.timestamp_us - previous) / 1e6
            rates = ((self.total_tx - self.sampled_tx) / elapsed_s, (self.total_rx - self.sampled_rx) / elapsed_s)
        if previous is None or self.timestamp_us > previous:
            self.sampled_us, self.sampled_tx, self.sampled_rx = self.timestamp_us, self.total_tx, self.total_rx
        return rates

    def totals(self) -> tuple[int | None, int, int]:
        """(timestamp_us, total_tx, total_rx) now: one end of a pair of reads."""
        return self.timestamp_us, self.total_tx, self.total_rx

    def rates_over_pair(self, before: tuple[int | None, int, int]) -> tuple[float, float] | None:
        """(tx, rx) bytes/s from `before` (an earlier `totals()`) to the read just made, which becomes the
        tick's sample; None where the pair cannot be exact: no later timestamp (the driver had nothing newer),
        a counter reset, or a gap in which the link could have wrapped the counters."""
        before_us, before_tx, before_rx = before
        if before_us is None or self.timestamp_us is None or self.timestamp_us <= before_us or self.reset:
            return None
        elapsed_s = (self.timestamp_us - before_us) / 1e6
        period = self.safe_period_s()
        if period is not None and elapsed_s > period:
            return None
        self.sampled_us, self.sampled_tx, self.sampled_rx = self.timestamp_us, self.total_tx, self.total_rx
        return (self.total_tx - before_tx) / elapsed_s, (self.total_rx - before_rx) / elapsed_s

    def safe_period_s(self) -> float | None:
        """The longest gap between reads that cannot miss a wrap at the link's rate."""
        bound = max(self.link_bytes_per_s or 0.0, self.rate_bytes_per_s)
        if bound <= 0:
            return None
        return SAFETY * self.modulus / bound

    def wraps_soon(self, tick_s: float = PCIE_GUARD_MAX_WAIT_S) -> bool:
        period = self.safe_period_s()
        return period is not None and period < tick_s

    def next_read_due_s(self, now_s: float) -> float | None:
        """Seconds until the counters must be read again to stay exact; None: no hurry."""
        period = self.safe_period_s()
        if not self.guarded or period is None or self.read_at_s is None or period >= PCIE_GUARD_MAX_WAIT_S:
            return None
        return period - (now_s - self.read_at_s)

    def could_have_wrapped_unseen(self, interval_s: float) -> bool:
        """Unguarded for `interval_s`: could the link have wrapped the counters in that time?"""
        period = self.safe_period_s()
        return not self.guarded and period is not None and interval_s > period
