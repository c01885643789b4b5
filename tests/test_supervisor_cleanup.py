"""`gpumix run` ends the whole job, always: SIGTERM, SIGKILL after the grace, at once on a second
Ctrl+C, and when the supervisor itself is SIGKILLed; the hub marks a supervisor that vanished.

The job is a real process tree like torchrun's: a leader that ignores SIGTERM and a child in a
session of its own (as torchrun starts its workers) that ignores SIGTERM too. Before the fix a
stopped job survived any number of SIGTERMs, and a killed supervisor left it running under
pid 1 while the hub showed it "running".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumix.hub import jobs
from gpumix.hub.core import SUPERVISOR_TIMEOUT_S
from gpumix.run.supervisor import Supervisor
from tests.conftest import ticked_hub, wait_until

ROOT = Path(__file__).resolve().parent.parent
STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], 'w').close(); time.sleep(600)"
# argv: folder. Ignores SIGTERM, starts a worker in its own session that ignores it too, then
# writes "LEADER WORKER" to FOLDER/pids once both ignore SIGTERM.
JOB = r"""
import os, signal, subprocess, sys, time
folder = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ready = os.path.join(folder, "worker-ready")
worker = subprocess.Popen([sys.executable, "-c", STUBBORN, ready], start_new_session=True)
while not os.path.exists(ready):
    time.sleep(0.01)
with open(os.path.join(folder, "pids.tmp"), "w") as out:
    out.write(f"{os.getpid()} {worker.pid}")
os.replace(os.path.join(folder, "pids.tmp"), os.path.join(folder, "pids"))
time.sleep(600)
""".replace("STUBBORN", repr(STUBBORN))
# argv: hub socket, job folder, control folder: a supervisor in its own process, to be SIGKILLed
SUPERVISOR = r"""
import sys
from gpumix.run.supervisor import Supervisor
hub, folder, control = sys.argv[1:4]
job = [sys.executable, "-c", sys.argv[4], folder]
supervisor = Supervisor(job, "cleanup", hub=hub, control_dir=__import__("pathlib").Path(control), kill_grace_s=1.0)
sys.exit(supervisor.run())
"""


def alive(pid: int) -> bool:
    """Running, not a zombie (one whose parent died is reaped by pid 1, or not, in a container)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.fixture
def job_pids() -> Iterator[list[int]]:
    """The job's pids, as the test learns them; whatever is left is killed, by pid, at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read_pids(folder: Path, job_pids: list[int]) -> list[int]:
    assert wait_until(lambda: (folder / "pids").exists(), timeout_s=60), "the job did not start"
    pids = [int(word) for word in (folder / "pids").read_text().split()]
    job_pids.extend(pids)
    assert all(alive(pid) for pid in pids)
    return pids


def supervise_in_thread(tmp_path: Path, kill_grace_s: float) -> tuple[Supervisor, dict, threading.Thread]:
    supervisor = Supervisor([sys.executable, "-c", JOB, str(tmp_path)], "cleanup", hub=None,
                            control_dir=tmp_path / "control", say=lambda _: None, kill_grace_s=kill_grace_s)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("code", supervisor.run()), daemon=True)
    thread.start()
    return supervisor, outcome, thread


def test_a_job_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path, job_pids: list[int]) -> None:
    supervisor, outcome, thread = supervise_in_thread(tmp_path, kill_grace_s=1.0)
    pids = read_pids(tmp_path, job_pids)
    supervisor.stop()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the supervisor still waits on a job that ignores SIGTERM"
    assert outcome["code"] == -signal.SIGKILL and "(stopped)" in supervisor.message
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=10), "the worker of its own session survived"


def test_a_second_stop_kills_at_once(tmp_path: Path, job_pids: list[int]) -> None:
    supervisor, outcome, thread = supervise_in_thread(tmp_path, kill_grace_s=3600.0)
    pids = read_pids(tmp_path, job_pids)
    supervisor.stop()
    assert all(alive(pid) for pid in pids)  # SIGTERM is ignored, and the grace is an hour
    supervisor.stop()  # the second Ctrl+C
    thread.join(timeout=30)
    assert not thread.is_alive() and outcome["code"] == -signal.SIGKILL
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=10)


def test_the_job_dies_with_a_killed_supervisor_and_the_hub_says_so(tmp_path: Path, hub_socket,
                                                                    job_pids: list[int]) -> None:
    hub, socket_path = hub_socket
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, socket_path, str(tmp_path),
                                   str(tmp_path / "control"), JOB], cwd=ROOT)
    job_pids.append(supervisor.pid)
    pids = read_pids(tmp_path, job_pids)
    assert wait_until(lambda: (hub.snapshot()["jobs"].get("cleanup") or {}).get("state") == "running")
    supervisor.kill()
    supervisor.wait(10)
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=30), \
        [pid for pid in pids if alive(pid)]

    def lost() -> bool:
        hub.tick()  # the hub's own sampling thread is not running here
        return hub.snapshot()["jobs"]["cleanup"]["state"] == jobs.LOST

    assert wait_until(lost, timeout_s=SUPERVISOR_TIMEOUT_S + 10)
    assert "stopped answering" in hub.snapshot()["jobs"]["cleanup"]["message"]


def test_a_silent_supervisor_is_marked_lost_and_its_waiting_plans_dropped(demo_hardware, clock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    hub.supervisor_poll("llm", {"state": "stopping", "pid": 4242, "message": "all ranks stop after step 9"})
    plan = {"plan_id": "p", "global_batch": 8, "ranks": [
        {"rank": 0, "samples": 8, "micro_batch": 8, "accumulation_steps": 1, "loss_weight": 1.0}]}
    assert hub.request_restart("llm", plan)["queued"] == 1
    clock.advance(SUPERVISOR_TIMEOUT_S - 1)
    hub.tick()
    assert hub.snapshot()["jobs"]["llm"]["state"] == "stopping"
    clock.advance(2)
    hub.tick()
    status = hub.snapshot()["jobs"]["llm"]
    assert status["state"] == jobs.LOST and "pid 4242" in status["message"]
    assert "1 waiting re-plan(s) dropped" in status["message"] and status["queued_plans"] == 0
    assert not hub.request_restart("llm", plan)["ok"]  # nobody to take it
    clock.advance(hub.rank_retention_s)
    hub.tick()
    assert "llm" not in hub.snapshot()["jobs"]  # a lost job ages out of the live view
    hub.supervisor_poll("llm", {"state": "exited", "pid": 4242, "message": "the job exited with code 0"})
    clock.advance(SUPERVISOR_TIMEOUT_S + 1)
    hub.tick()
    assert hub.snapshot()["jobs"]["llm"]["state"] == "exited"  # it said goodbye: not lost


# A torchrun worker that will not stop: ignores SIGTERM (torchrun's own way of ending it), and
# writes its pid to FOLDER/worker-RANK. torchrun starts each worker in a session of its own.
TORCHRUN_WORKER = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
folder = sys.argv[1]
with open(os.path.join(folder, "w.tmp" + os.environ["RANK"]), "w") as out:
    out.write(str(os.getpid()))
os.replace(os.path.join(folder, "w.tmp" + os.environ["RANK"]), os.path.join(folder, "worker-" + os.environ["RANK"]))
time.sleep(600)
"""


@pytest.mark.slow
def test_torchrun_and_its_workers_die_with_a_killed_supervisor(tmp_path: Path, job_pids: list[int]) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(TORCHRUN_WORKER)
    job = (f"import os, sys; os.execv(sys.executable, [sys.executable, '-m', 'torch.distributed.run', '--standalone',"
           f" '--nproc_per_node=2', {str(worker)!r}, {str(tmp_path)!r}])")
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, "", str(tmp_path), str(tmp_path / "control"), job],
                                  cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    job_pids.append(supervisor.pid)
    assert wait_until(lambda: all((tmp_path / f"worker-{rank}").exists() for rank in (0, 1)), timeout_s=120)
    workers = [int((tmp_path / f"worker-{rank}").read_text()) for rank in (0, 1)]
    with open(f"/proc/{workers[0]}/stat", "rb") as stat:
        torchrun = int(stat.read().rsplit(b")", 1)[1].split()[1])  # the workers' parent
    pids = [torchrun, *workers]
    job_pids.extend(pids)
    assert all(alive(pid) for pid in pids) and os.getsid(workers[0]) != os.getsid(torchrun)
    supervisor.kill()
    supervisor.wait(10)
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=60), [pid for pid in pids if alive(pid)]
