"""Who may hold a rank (gpumix/hub/rank_claims.py): a live process keeps it against a hello from any
other, under any run id; its own agent reconnecting and a restarted rank whose old process is gone
may take it (issue 10, item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from gpumix.hub.rank_claims import live_holder, same_process
from gpumix.hub.ranks import RankStream, parse_hello


def stream(pid: int, peer_uid: int | None = 1000, run_id: str = "run-a", connected: bool = True) -> RankStream:
    return RankStream(rank=0, world_size=4, local_rank=0, pid=pid, hostname="box", gpu_uuid="GPU-0", nvml_index=0,
                      job="train", env={}, versions={}, run_id=run_id, peer_uid=peer_uid, connected=connected)


def hello(pid: int, peer_uid: int | None = 1000, run_id: str = "run-b", hostname: str = "box") -> dict[str, Any]:
    info = parse_hello({"rank": 0, "world_size": 4, "job": "train", "pid": pid, "run_id": run_id,
                        "hostname": hostname})
    return {**info, "peer_uid": peer_uid}


def exited_pid() -> int:
    """The pid of a process that has exited and been reaped (nothing has it now, barring reuse)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_a_live_local_rank_is_held_against_another_pid_under_another_run_id() -> None:
    owner = stream(pid=os.getpid())  # this test's process: alive
    assert live_holder([owner], hello(pid=666)) is owner
    assert live_holder([owner], hello(pid=666, peer_uid=None)) is owner  # over TCP, with the token


def test_its_own_agent_reconnecting_is_not_refused() -> None:
    owner = stream(pid=os.getpid())
    assert same_process(owner, hello(pid=owner.pid, run_id="run-a"))
    assert live_holder([owner], hello(pid=owner.pid, run_id="run-a")) is None
    # the same pid claimed from another host or another uid is not the same process
    assert live_holder([owner], hello(pid=owner.pid, hostname="elsewhere")) is owner
    assert live_holder([owner], hello(pid=owner.pid, peer_uid=4242)) is owner


def test_a_restarted_rank_takes_it_once_the_old_connection_closed() -> None:
    closed = stream(pid=os.getpid(), connected=False)
    assert live_holder([closed], hello(pid=777)) is None


def test_a_pid_that_no_longer_runs_frees_nothing() -> None:
    """The pid is the agent's word: an intruder claiming a pid nobody has must not free a live rank."""
    held = stream(pid=exited_pid())  # connected, with a pid no process has now
    assert live_holder([held], hello(pid=777)) is held
    assert live_holder([held], hello(pid=777, peer_uid=None)) is held


def test_any_live_holder_among_the_ranks_streams_refuses() -> None:
    gone = stream(pid=exited_pid(), run_id="run-0", connected=False)
    owner = stream(pid=os.getpid(), run_id="run-1")
    assert live_holder([gone, owner], hello(pid=888, run_id="run-2")) is owner
