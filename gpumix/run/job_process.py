"""A supervised job's processes, for the Supervisor: launch the command in a session of its own,
stop it (SIGTERM, SIGKILL after the grace, at once on a second stop), end what outlives its leader,
and run the watchdog that ends the job if the supervisor itself dies (gpumix/run/process_tree.py).

What it may import: the standard library, gpumix.run.process_tree."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from gpumix.run.process_tree import MARKER_ENV, end_job, parent_death_signal, signal_job

log = logging.getLogger("gpumix.run.supervisor")
KILL_GRACE_S = 10.0  # between SIGTERM and SIGKILL when the job is stopped


class JobProcess:
    """The running job (its leader and every process carrying its marker) and the stop in progress."""

    def __init__(self, kill_grace_s: float = KILL_GRACE_S, say: Callable[[str], None] = print) -> None:
        self.kill_grace_s = kill_grace_s
        self.say = say
        self.leader: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.marker = uuid.uuid4().hex  # in every process of the job's environment
        self._kill_at_s = math.inf  # when a stopping job gets SIGKILL
        self._watchdog: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self.leader.pid if self.leader is not None else None

    def launch(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Its own session (a terminal's Ctrl+C reaches us, not the ranks mid-step); SIGTERM if
        # the thread that started it dies (torchrun then ends its workers; the watchdog the rest).
        self.leader = subprocess.Popen(command, env={**env, MARKER_ENV: self.marker}, start_new_session=True,
                                       preexec_fn=parent_death_signal(signal.SIGTERM))
        self._tell_watchdog(f"leader {self.leader.pid}")
        return self.leader

    def stop(self) -> None:
        """Ctrl+C or SIGTERM: end the whole job: SIGTERM now, SIGKILL after kill_grace_s.
        A second stop() (a second Ctrl+C) kills at once."""
        if self.stopping:
            self._kill_at_s = time.monotonic()
            signal_job(self.marker, self.pid, signal.SIGKILL)
            return
        self.stopping = True
        self._kill_at_s = time.monotonic() + self.kill_grace_s
        signal_job(self.marker, self.pid, signal.SIGTERM)

    def enforce_stop(self) -> None:
        """Called while waiting on anything: a stopped job past its grace gets SIGKILL."""
        if self.stopping and time.monotonic() >= self._kill_at_s:
            signal_job(self.marker, self.pid, signal.SIGKILL)

    def _grace_s(self) -> float:
        """What is left of the stop's grace when stopping, else a whole kill_grace_s."""
        return max(0.0, self._kill_at_s - time.monotonic()) if self.stopping else self.kill_grace_s

    def end_leftovers(self) -> None:
        """The leader exited: its other processes (a worker in a session of its own) go too."""
        if end_job(self.marker, self.pid, self._grace_s()):
            self.say("gpumix run: processes of the job outlived it and were killed")

    def end_all(self) -> None:
        """The supervisor fails or is interrupted: the job must not run on unsupervised."""
        end_job(self.marker, self.pid, self._grace_s())

    # -- the watchdog: ends the job if this process dies without stopping it -----------------

    def start_watchdog(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "gpumix.run.process_tree", self.marker, str(self.kill_grace_s)],
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

    def stop_watchdog(self) -> None:
        self._tell_watchdog("done")
        if self._watchdog is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._watchdog.stdin.close()
                self._watchdog.wait(5)
            self._watchdog = None
