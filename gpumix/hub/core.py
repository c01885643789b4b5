"""Hub core: samples the hardware on its own thread and keeps the latest snapshot
and a bounded history. Clients (the TUI, --once, remote viewers) only read
snapshots; nothing here waits on a client."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.history import GpuHistory
from gpumix.host import HostSampler
from gpumix.hw.open import Hardware
from gpumix.hw.types import P2PLink
from gpumix.snapshot import build_snapshot

log = logging.getLogger(__name__)


class Hub:
    def __init__(
        self,
        hardware: Hardware,
        interval_s: float = 1.0,
        history_s: float = 600.0,
        host_sampler: HostSampler | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        hostname: str | None = None,
    ) -> None:
        self.hardware = hardware
        self.interval_s = interval_s
        self.history = GpuHistory(max_points=max(2, int(history_s / interval_s)))
        self._host = host_sampler if host_sampler is not None else HostSampler()
        self._clock = clock
        self._wall_clock = wall_clock
        self._hostname = hostname
        self._infos = hardware.backend.gpus()
        self._driver = hardware.backend.driver_info()
        self._p2p: list[P2PLink] | None = None
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0

    # -- sampling ----------------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        """One sampling round: hardware, host, processes; returns the new snapshot."""
        machine = self.hardware.machine
        if machine is not None:
            machine.tick()
        samples = self.hardware.backend.sample()
        if self._p2p is None:  # topology does not change while we run
            self._p2p = self.hardware.backend.p2p()
        host = self._host.sample()
        pids = {proc.pid for sample in samples for proc in sample.processes}
        processes = self._host.processes(pids)
        snapshot = build_snapshot(
            timestamp_s=self._wall_clock(),
            source=self.hardware.source,
            driver=self._driver,
            infos=self._infos,
            samples=samples,
            host=host,
            processes=processes,
            p2p=self._p2p,
            hostname=self._hostname,
        )
        snapshot["power_budget_w"] = self.hardware.power_budget_w
        with self._lock:
            self.history.add(samples)
            self._snapshot = snapshot
            self.ticks += 1
        self._ready.set()
        return snapshot

    def snapshot(self) -> dict[str, Any] | None:
        with self._lock:
            return self._snapshot

    def series(self, index: int, name: str) -> list[float | None]:
        with self._lock:
            return self.history.series(index, name)

    def wait_for_snapshot(self, timeout_s: float) -> dict[str, Any] | None:
        self._ready.wait(timeout_s)
        return self.snapshot()

    # -- the sampling thread ------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumix-hub-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a sampler bug must not kill the monitor: log, go on
                log.exception("sampling failed")
            next_at += self.interval_s
            delay = next_at - self._clock()
            if delay < 0:  # fell behind (a slow tick): skip, don't pile up
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.hardware.backend.close()
