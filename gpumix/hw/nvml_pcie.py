"""PCIe throughput from NVML, for NvmlBackend: the cumulative byte counters (fields 197/198) as
Δbytes/Δtimestamp between reads.

A busy GPU whose link can wrap the 32-bit counters within a tick, and a one-shot's first tick, read the
counters twice 20 ms apart: a 20 ms sample, like nvitop's nvmlDeviceGetPcieThroughput window, for one
more field read (0.6-0.8 ms of CPU on an H200) instead of the window's two calls (1.8 ms each; issue 13).
The window (its calls in parallel on a small pool) answers where the counters cannot: no field values,
or a pair whose second read brought no newer timestamp. The guard thread that read a busy GPU's counters
before every wrap cost ~14 reads/s per gen5 GPU, 1.4 % of a core on the H200: it runs only with
`exact_pcie = True` (exact totals, more CPU).

A quiet GPU (no process, no utilization, no traffic at its last read) is read on the slow schedule
(the backend's slow interval, 5 s) and carries its last rates between reads: on an idle H200 the read was 0.78 ms
of the hub's 1.4 ms a tick to learn that nothing moved. Each read in a row that finds it quiet doubles the
wait for the next, up to QUIET_READ_MAX_S (5, 10, 20, then every 30 s): a fast link's slow read is a pair,
0.31-0.33 ms a tick at one per 5 s on an H100 (session 13), the largest part of an idle GPU's reading. A GPU
that wakes is read on its next tick; a slow read whose step could hide wraps takes a pair (a steady stream
can alias to a quiet-looking step).

While no one views the hub (`busy_on_slow_schedule`, set by the hub each tick), a busy GPU is read on the
slow schedule too and carries its last rates between reads: a busy fast link's pair is about 1 ms of CPU
a tick on an H100, most of a busy GPU's reading, for rates no one looks at. Each read in a row that finds
the same processes at work doubles the wait, as for a quiet GPU (5, 10, 20, then every 30 s). It is read
again the tick its work stops, its processes change or its link retrains, and every tick once a viewer
comes.

What it may import: pynvml, gpumix.hw."""

from __future__ import annotations

import threading

import pynvml

from gpumix.hw.call_pool import CallPool
from gpumix.hw.pcie import link_bytes_per_s
from gpumix.hw.pcie_counters import PCIE_GUARD_MAX_WAIT_S, PCIE_GUARD_MIN_WAIT_S, PcieCounters
from gpumix.hw.types import GpuInfo, GpuSample

FIELD_PCIE_TX_BYTES = 197  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES, cumulative
FIELD_PCIE_RX_BYTES = 198  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES, cumulative
# Traffic at or above this marks a GPU as moving data even with no process listed (a process in
# another PID namespace is not listed): far above an idle card's housekeeping, and an aliased
# reading of fast traffic lands below it only 1 time in 40 (50 MB of a 4.29 GB counter per second).
MOVING_BYTES_PER_S = 50e6
# The two reads of a pair: nvitop's window is 20 ms, and a gen5 x16 link wraps the counters in 61 ms.
PAIR_GAP_S = 0.02
# The longest a GPU that stays quiet goes unread: the rare readings' interval (nvml_backend). Traffic that
# moves none of its waking signs (utilization, processes, link generation, clocks, power) shows this late.
QUIET_READ_MAX_S = 30.0
# A busy GPU read on the slow schedule is due this early: its reads drift by milliseconds from tick to tick
# (a pair's second one is 20 ms in), and a 5 s wait must not become six ticks.
DUE_SLACK_S = 0.1


def may_move_data(sample: GpuSample, rates: tuple[float, float] | None) -> bool:
    """Whether a GPU's PCIe counters need the wrap guard: something runs on it, or traffic was seen.
    Unknown counts as busy (guard as before): no utilization reading, or no rate yet (the first
    reading, a counter reset)."""
    if sample.processes or sample.util_gpu_pct is None or sample.util_gpu_pct > 0:
        return True
    if sample.util_mem_pct is not None and sample.util_mem_pct > 0:
        return True
    return rates is None or max(rates) >= MOVING_BYTES_PER_S


def _signs(sample: GpuSample) -> tuple[int | None, int | None, int | None]:
    """What a GPU that starts to work changes even with no kernel running: link generation, clocks."""
    return sample.pcie_link_gen_current, sample.clock_sm_mhz, sample.clock_mem_mhz


def _working(sample: GpuSample) -> bool:
    return bool(sample.processes) or (sample.util_gpu_pct or 0) > 0 or (sample.util_mem_pct or 0) > 0


def _pids(sample: GpuSample) -> frozenset[int]:
    return frozenset(process.pid for process in sample.processes)


def _same_power(then_w: float | None, now_w: float | None) -> bool:
    """Within an idle card's wander (10 %, at least 5 W): more is work starting."""
    if then_w is None or now_w is None:
        return then_w is None and now_w is None
    return abs(now_w - then_w) <= max(5.0, 0.1 * then_w)


def quiet_read_wait_s(slow_interval_s: float, quiet_reads: int) -> float:
    """How long a GPU carries its rates unread after `quiet_reads` reads in a row found it as before (quiet;
    or, unviewed, the same processes at work): the slow interval, doubled for each read after the first,
    at most QUIET_READ_MAX_S."""
    return min(QUIET_READ_MAX_S, slow_interval_s * 2 ** min(max(0, quiet_reads - 1), 8))


def _link_bound(sample: GpuSample, info: GpuInfo) -> float | None:
    """How fast the PCIe counters can move now: the link as negotiated, or its max if unknown."""
    now = link_bytes_per_s(sample.pcie_link_gen_current, sample.pcie_link_width_current)
    return now if now is not None else link_bytes_per_s(info.pcie_gen_max, info.pcie_width_max)


class NvmlPcie:
    """PCIe readings, a part of NvmlBackend (uses its `_call`, `_clock`, `_sleep`, `_slow_interval_s`, `_infos`,
    `_lost`, `unsupported` and the `_pcie*` and `_guard_stop` state it sets up).

    `instant_first_pcie`: a tick whose counters give no rate yet (the first reading) takes a 20 ms pair
    of reads instead: a one-shot (`gpumix-top --once`, `gpumix doctor`) then needs one tick, not two
    ticks and a wait."""

    instant_first_pcie: bool = False
    exact_pcie: bool = False  # the wrap guard instead of a pair of reads for busy fast links
    busy_on_slow_schedule: bool = False  # busy GPUs read every slow interval too (the hub: while no one views it)

    def _fill_pcie(self, samples: list[GpuSample]) -> None:
        fallback: list[GpuSample] = []  # no counters: the 20 ms throughput window
        windowed: list[GpuSample] = []  # counters cannot be exact over the tick: a 20 ms pair of reads
        instant: list[GpuSample] = []  # no counter rate this tick (a first reading): instant_first_pcie
        read: list[GpuSample] = []  # counters read this tick: what they publish, a quiet GPU carries
        for sample in samples:
            if sample.lost:
                continue
            if (sample.index, "pcie_counters") in self.unsupported:
                fallback.append(sample)
                continue
            carried = self._quiet_rates(sample)
            if carried is None and self.busy_on_slow_schedule:
                carried = self._busy_rates(sample)
            if carried is not None:
                sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s = carried
                continue
            read.append(sample)
            rates, window = self._pcie_from_counters(sample, _link_bound(sample, self._infos[sample.index]))
            if rates is None and (sample.index, "pcie_counters") in self.unsupported:
                fallback.append(sample)
            elif rates is not None:
                sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s = rates
            elif window:
                windowed.append(sample)
            elif self.instant_first_pcie:
                instant.append(sample)
        if windowed or instant:
            fallback += self._pcie_from_pairs(windowed + instant)
        if fallback:
            self._pcie_from_throughput(fallback)
        for sample in windowed:
            self._after_window(sample)
        self._keep_published(read)
        for sample in read + fallback:
            if sample.pcie_tx_bytes_per_s is not None and sample.pcie_rx_bytes_per_s is not None:
                sample.pcie_rates_age_s = 0.0

    def _keep_published(self, samples: list[GpuSample]) -> None:
        """What each GPU read this tick showed, for `_quiet_rates`: its rates (counters, pair or window;
        never a step the tick threw away as possibly wrapped), to carry while quiet, and its waking signs."""
        with self._pcie_lock:
            for sample in samples:
                counters = self._pcie.get(sample.index)
                if counters is not None:
                    tx, rx = sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s
                    counters.last_rates = (tx, rx) if tx is not None and rx is not None else None
                    counters.signs_at_read, counters.power_at_read_w = _signs(sample), sample.power_w
                    quiet = not may_move_data(sample, counters.last_rates)
                    counters.quiet_reads = counters.quiet_reads + 1 if quiet else 0
                    pids = _pids(sample)
                    same_work = _working(sample) and pids == counters.pids_at_read
                    counters.busy_reads = counters.busy_reads + 1 if same_work else 0
                    counters.pids_at_read = pids

    def _quiet_rates(self, sample: GpuSample) -> tuple[float, float] | None:
        """The last counter rates of a GPU that stays quiet, while its last read is younger than
        quiet_read_wait_s (the slow interval, longer as it stays quiet); None: read its counters this
        tick. Quiet: no process, no utilization, traffic under MOVING_BYTES_PER_S at the last read, and
        the signs of a waking GPU as they were then (link generation, clocks, power): a copy with no
        kernel and no process listed (another PID namespace) moves at least one of them. What moves none
        is seen at the next slow read."""
        if sample.processes or sample.util_gpu_pct != 0 or sample.util_mem_pct != 0:
            return None  # something runs, or utilization unknown
        with self._pcie_lock:
            counters = self._pcie.get(sample.index)
            if counters is None or counters.last_rates is None or counters.read_at_s is None:
                return None
            if counters.windowed or counters.guarded or max(counters.last_rates) >= MOVING_BYTES_PER_S:
                return None
            if self._clock() - counters.read_at_s >= quiet_read_wait_s(self._slow_interval_s, counters.quiet_reads):
                return None
            if counters.signs_at_read != _signs(sample) or not _same_power(counters.power_at_read_w, sample.power_w):
                return None
            return self._carry(sample, counters)

    def _busy_rates(self, sample: GpuSample) -> tuple[float, float] | None:
        """The last rates of a GPU that still works, while its last read is younger than quiet_read_wait_s
        of its busy_reads (the slow interval, longer while the same processes keep working); None: read
        its counters this tick. A GPU with no process and no utilization (its work may have stopped), whose
        processes changed (other work, other traffic), or whose link generation moved, is read at once; so
        is one on the wrap guard (exact totals asked for). A read after carried ticks takes a pair where the
        counters may have wrapped meanwhile."""
        if not _working(sample):
            return None
        with self._pcie_lock:
            counters = self._pcie.get(sample.index)
            if counters is None or counters.last_rates is None or counters.read_at_s is None or counters.guarded:
                return None
            wait_s = quiet_read_wait_s(self._slow_interval_s, counters.busy_reads) - DUE_SLACK_S
            if self._clock() - counters.read_at_s >= wait_s:
                return None
            if counters.signs_at_read is None or counters.signs_at_read[0] != sample.pcie_link_gen_current:
                return None
            if _pids(sample) != counters.pids_at_read:
                return None
            return self._carry(sample, counters)

    def _carry(self, sample: GpuSample, counters: PcieCounters) -> tuple[float, float] | None:
        """The last read's rates, carried this tick unread (under the PCIe lock); the sample says how old."""
        counters.carried = True
        sample.pcie_rates_age_s = round(max(0.0, self._clock() - (counters.read_at_s or 0.0)), 3)
        return counters.last_rates

    def _pcie_from_pairs(self, samples: list[GpuSample]) -> list[GpuSample]:
        """Each GPU's counters read again PAIR_GAP_S after this tick's read; its rate over the pair.
        Returns the samples the pair could not answer (for the throughput window)."""
        with self._pcie_lock:  # a GPU whose first read failed (a transient error) has no counters yet
            before = {s.index: self._pcie[s.index].totals() for s in samples if s.index in self._pcie}
        unanswered = [sample for sample in samples if sample.index not in before]
        if before:
            self._sleep(PAIR_GAP_S)
        for sample in samples:
            if sample.index not in before:
                continue
            counters = self._read_counters(sample.index)
            rates = None
            if counters is not None:
                with self._pcie_lock:
                    rates = counters.rates_over_pair(before[sample.index])
            if rates is None:
                unanswered.append(sample)
            else:
                sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s = rates
        return unanswered

    def _after_window(self, sample: GpuSample) -> None:
        """Whether the next interval needs a pair too, judged by this tick's pair (or window) rates
        (the counters' own step spanned traffic that may have wrapped them)."""
        tx, rx = sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s
        rates = (tx, rx) if tx is not None and rx is not None else None
        with self._pcie_lock:
            counters = self._pcie[sample.index]
            counters.windowed = may_move_data(sample, rates) and counters.wraps_soon()

    def _read_counters(self, index: int) -> PcieCounters | None:
        """Read fields 197/198 and fold them into the GPU's unwrapped totals."""
        values = self._call(index, "nvmlDeviceGetFieldValues", [FIELD_PCIE_TX_BYTES, FIELD_PCIE_RX_BYTES])
        if values is None:
            if (index, "nvmlDeviceGetFieldValues") in self.unsupported:
                self.unsupported[(index, "pcie_counters")] = "field values not supported"
            return None
        if any(value.nvmlReturn != pynvml.NVML_SUCCESS for value in values):
            self.unsupported[(index, "pcie_counters")] = "PCIe byte counters not supported"
            return None
        with self._pcie_lock:
            counters = self._pcie.get(index)
            if counters is None:
                counters = self._pcie[index] = PcieCounters()
            counters.update(int(values[0].timestamp), values[0], values[1])
            counters.read_at_s = self._clock()
            return counters

    def _pcie_from_counters(
        self, sample: GpuSample, link_bytes_per_s: float | None = None
    ) -> tuple[tuple[float, float] | None, bool]:
        """(rates, window): rate = delta of the (unwrapped) cumulative byte counters / delta of their
        timestamps, or None with window True where the counters may have wrapped unseen since the
        last tick and a 20 ms pair must answer. Also decides how the next interval is watched."""
        counters = self._read_counters(sample.index)
        if counters is None:
            return None, False
        # the guard where the 20 ms window cannot answer (a GPU without nvmlDeviceGetPcieThroughput)
        exact = self.exact_pcie or (sample.index, "nvmlDeviceGetPcieThroughput") in self.unsupported
        with self._pcie_lock:
            counters.link_bytes_per_s = link_bytes_per_s
            previous_us = counters.sampled_us
            rates = counters.rates_since_sample()
            unseen = previous_us is not None and counters.timestamp_us is not None and (
                counters.could_have_wrapped_unseen((counters.timestamp_us - previous_us) / 1e6))
            # a busy interval, or a quiet GPU's first read after ticks it carried unread (its long step can
            # alias to a quiet-looking rate, the same way at every slow read): a pair decides, not the step
            if unseen and (counters.windowed or counters.carried) and not exact:
                counters.carried = False
                return None, True
            counters.carried = False
            moving = may_move_data(sample, rates)
            if moving and unseen:
                # woke up while unwatched: the counters may have wrapped unseen, so no counter rate this tick
                rates = None
            counters.guarded = moving and exact
            counters.windowed = moving and not exact and counters.wraps_soon()
            if counters.guarded and counters.wraps_soon():
                self._start_pcie_guard()
        return rates, rates is None and unseen and not exact

    def poll_pcie_counters(self) -> float:
        """One pass of the wrap guard: read the counters of GPUs whose 32-bit counters
        would wrap before the next tick. Returns seconds until the next read is due."""
        wait_s = PCIE_GUARD_MAX_WAIT_S
        for index in list(self._pcie):
            counters = self._pcie[index]
            if index in self._lost or (index, "pcie_counters") in self.unsupported:
                continue
            due_s = counters.next_read_due_s(self._clock())
            if due_s is not None and due_s <= 0:
                self._read_counters(index)
                due_s = self._pcie[index].next_read_due_s(self._clock())
            if due_s is not None:
                wait_s = min(wait_s, max(PCIE_GUARD_MIN_WAIT_S, due_s))
        return wait_s

    def _start_pcie_guard(self) -> None:
        if self._pcie_guard is not None or self._guard_stop.is_set():
            return
        self._pcie_guard = threading.Thread(target=self._guard_pcie, name="gpumix-pcie-guard", daemon=True)
        self._pcie_guard.start()

    def _guard_pcie(self) -> None:
        while not self._guard_stop.is_set():
            try:
                wait_s = self.poll_pcie_counters()
            except Exception:  # never let the guard die on a driver hiccup
                wait_s = PCIE_GUARD_MAX_WAIT_S
            self._guard_stop.wait(wait_s)

    def _pcie_from_throughput(self, samples: list[GpuSample]) -> None:
        """nvmlDeviceGetPcieThroughput blocks ~21 ms per call: run them all in parallel."""
        if self._pcie_fallback_pool is None:
            self._pcie_fallback_pool = CallPool(max_workers=16, thread_name_prefix="pcie")
        call, tx, rx = self._call, pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES
        values = self._pcie_fallback_pool.run([
            (call, (sample.index, "nvmlDeviceGetPcieThroughput", counter)) for sample in samples for counter in (tx, rx)])
        for slot, sample in enumerate(samples):
            tx_kb_per_s, rx_kb_per_s = values[2 * slot], values[2 * slot + 1]
            sample.pcie_tx_bytes_per_s = tx_kb_per_s * 1000.0 if tx_kb_per_s is not None else None
            sample.pcie_rx_bytes_per_s = rx_kb_per_s * 1000.0 if rx_kb_per_s is not None else None
