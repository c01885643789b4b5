"""The job's lifetime, for the Supervisor: stopping it (SIGTERM, SIGKILL after the grace, at once on a
second stop), ending what outlives its leader, and the watchdog process that ends the job if the
supervisor itself dies without stopping it (gpumix/run/process_tree.py).

What it may import: the standard library, gpumix.run.process_tree."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time

from gpumix.run.process_tree import MARKER_ENV, end_job, signal_job

log = logging.getLogger("gpumix.run.supervisor")


class JobLifetime:
    """A part of Supervisor: uses its `process`, `kill_grace_s`, `say`, `_marker`, `_stopping`,
    `_kill_at_s` and `_watchdog`."""

    def stop(self) -> None:
        """Ctrl+C or SIGTERM: end the whole job: SIGTERM now, SIGKILL after kill_grace_s.
        A second stop() (a second Ctrl+C) kills at once."""
        leader = self.process.pid if self.process is not None else None
        if self._stopping:
            self._kill_at_s = time.monotonic()
            signal_job(self._marker, leader, signal.SIGKILL)
            return
        self._stopping = True
        self._kill_at_s = time.monotonic() + self.kill_grace_s
        signal_job(self._marker, leader, signal.SIGTERM)

    def _enforce_stop(self) -> None:
        """Called while waiting on anything: a stopped job past its grace gets SIGKILL."""
        if self._stopping and time.monotonic() >= self._kill_at_s:
            signal_job(self._marker, self.process.pid if self.process else None, signal.SIGKILL)

    def _end_leftovers(self) -> None:
        """The leader exited: its other processes (a worker in a session of its own) go too,
        within the stop's grace when stopping, else within kill_grace_s."""
        grace_s = max(0.0, self._kill_at_s - time.monotonic()) if self._stopping else self.kill_grace_s
        leader = self.process.pid if self.process else None
        if end_job(self._marker, leader, grace_s):
            self.say("gpumix run: processes of the job outlived it and were killed")

    # -- the watchdog: ends the job if this process dies without stopping it -----------------

    def _start_watchdog(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "gpumix.run.process_tree", self._marker, str(self.kill_grace_s)],
            stdin=subprocess.PIPE, text=True, env=env, start_new_session=True)

    def _tell_watchdog(self, line: str) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(line + "\n")
            self._watchdog.stdin.flush()
        except OSError:  # it died: the job can still be ended by us, and by PDEATHSIG
            log.warning("gpumix run: the job's watchdog is gone", exc_info=True)
            self._watchdog = None

    def _stop_watchdog(self) -> None:
        self._tell_watchdog("done")
        if self._watchdog is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._watchdog.stdin.close()
                self._watchdog.wait(5)
            self._watchdog = None
