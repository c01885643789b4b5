"""A supervised job's whole process tree: find it, end it, and end it when the supervisor dies.

A job is more than its first process: torchrun starts each worker in a session of its own, so
neither the job's process group nor PR_SET_PDEATHSIG (which reaches only the direct child)
finds the workers once torchrun is gone. Every process of a job carries MARKER_ENV in its
environment (inherited through fork and exec, as Jenkins finds a build's processes), so the
tree is: processes carrying the marker, plus the leader's group and descendants (for a child
that cleared its environment).

Ending it: SIGTERM to all, SIGKILL to what is left after a grace period. A watchdog process
(`python -m gpumix.run.process_tree MARKER GRACE_S`, started by the supervisor in a session of its
own) reads the supervisor's pipe: at EOF without "done" (the supervisor was SIGKILLed or
crashed) it ends the tree itself. Linux only, like the rest of the supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable

MARKER_ENV = "GPUMIX_JOB_MARKER"
PR_SET_PDEATHSIG = 1
POLL_S = 0.05


def _processes() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, ppid, pgrp) of every process now (vanishing ones skipped)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(name)] = (fields[0].decode(), int(fields[1]), int(fields[2]))
    return table


def _carries(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return entry in b"\0" + environ.read()
    except OSError:  # gone, or another user's
        return False


def job_processes(marker: str, leader_pid: int | None = None) -> set[int]:
    """The live (not zombie) processes of the job: marked, or in the leader's group or subtree."""
    table = _processes()
    entry = f"\0{MARKER_ENV}={marker}\0".encode()
    members = set()
    for pid, (state, ppid, pgrp) in table.items():
        if state == "Z" or pid == os.getpid():
            continue
        ancestor, hops = ppid, 0
        while leader_pid is not None and ancestor > 1 and ancestor != leader_pid and hops < 64:
            ancestor, hops = table.get(ancestor, ("", 0, 0))[1], hops + 1
        if (leader_pid is not None and leader_pid in (pid, pgrp, ancestor)) or _carries(pid, entry):
            members.add(pid)
    return members


def signal_job(marker: str, leader_pid: int | None, signum: int) -> int:
    """Send `signum` to every process of the job; how many there were."""
    members = job_processes(marker, leader_pid)
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    return len(members)


def end_job(marker: str, leader_pid: int | None, grace_s: float,
            waiting: Callable[[], None] = lambda: time.sleep(POLL_S)) -> int:
    """SIGTERM the job, SIGKILL what is left after grace_s; how many were killed."""
    if not signal_job(marker, leader_pid, signal.SIGTERM):
        return 0
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and job_processes(marker, leader_pid):
        waiting()
    return signal_job(marker, leader_pid, signal.SIGKILL)


def parent_death_signal(signum: int) -> Callable[[], None]:
    """A preexec_fn: the child gets `signum` when the thread that started it dies. Resolved
    here, in the parent: the child between fork and exec should do as little as possible."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return preexec


def watch(marker: str, grace_s: float) -> None:
    """The watchdog: stdin lines are `leader PID` and `done`; EOF before `done` ends the job."""
    leader: int | None = None
    for line in sys.stdin:
        word, _, value = line.strip().partition(" ")
        if word == "done":
            return
        if word == "leader" and value.isdigit():
            leader = int(value)
    end_job(marker, leader, grace_s)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C is the supervisor's to handle
    watch(sys.argv[1], float(sys.argv[2]))
