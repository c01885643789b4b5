"""The hub's rank state over weeks: it forgets gone ranks and jobs, stays bounded whatever connects,
keeps jobs and launches apart, and lets no hello take over a live rank (issue 10, items 3, 4, 10)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub import core as hub_core
from gpumix.hub.client import HubClient
from gpumix.hub.ranks import (
    ENV_ENTRIES,
    ENV_NAME_CHARS,
    GPU_UUID_CHARS,
    HOSTNAME_CHARS,
    JOB_CHARS,
    MAX_PID,
    MAX_WORLD,
    MEDIAN_WINDOW,
    POINTS_KEPT,
    STEP_RANGES,
    STEPS_KEPT,
    TRANSPORT_CHANNELS,
    TRANSPORT_CHARS,
    VERSION_ENTRIES,
    VERSION_NAME_CHARS,
    parse_hello,
    parse_step,
    parse_transport,
)
from gpumix.hub.server import HubServer
from gpumix.wire import protocol
from tests.conftest import FixedHostSampler, ManualClock, wait_until

# -- helpers ---------------------------------------------------------------------------------------


def hello(rank: int, job: str | None = "train", pid: int = 100, run_id: str | None = None,
          gpu: str | None = None, **extra: Any) -> dict[str, Any]:
    return parse_hello({"rank": rank, "world_size": 4, "job": job, "pid": pid, "run_id": run_id,
                        "gpu_uuid": gpu, "hostname": "box", **extra})


def steps(hub: Hub, key: Any, count: int = MEDIAN_WINDOW, step_s: float = 0.5, comm_s: float = 0.1,
          samples: float = 32) -> None:
    for step in range(count):
        hub.agent_step(key, parse_step({"step": step, "step_time_s": step_s, "samples": samples,
                                        "comm_s": comm_s, "data_wait_s": 0.0, "loss": 1.0 / (step + 1)}))


def rows(hub: Hub, **match: Any) -> list[dict[str, Any]]:
    return [r for r in hub.snapshot()["ranks"] if all(r.get(k) == v for k, v in match.items())]


@pytest.fixture
def sock_path() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # Unix socket paths are short
    yield os.path.join(folder, "hub.sock")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(demo_hub: Hub, sock_path: str) -> Iterator[tuple[Hub, HubServer]]:
    server = HubServer(demo_hub, sock_path)
    server.start()
    yield demo_hub, server
    server.stop()


def send(path: str, *messages: dict[str, Any]) -> Any:
    """A raw agent connection (a real socket) that has sent `messages`; the caller closes it."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(3.0)
    sock.connect(path)
    sock.sendall(b"".join(protocol.encode(m) for m in messages))
    return sock


def closed_by_hub(sock: Any) -> bool:
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


# -- item 3: a hub that forgets ---------------------------------------------------------------------


def test_gone_ranks_and_jobs_are_forgotten_after_the_retention(demo_hardware, clock: ManualClock) -> None:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), clock=clock, hostname="rig01", rank_retention_s=600.0)
    hub.tick()
    for run in range(3):  # three torchrun launches, one after another: three run ids
        keys = [hub.agent_hello(hello(rank, job=f"run-{run}", pid=10 * run + rank)) for rank in range(2)]
        for key in keys:
            steps(hub, key)
            hub.agent_gone(key)
        clock.advance(100.0)
    hub.supervisor_poll("old-job", {"state": "running", "message": "running"})
    live = hub.agent_hello(hello(0, job="live", pid=99))
    assert len(hub.snapshot()["ranks"]) == 7 and "old-job" in hub.snapshot()["jobs"]
    clock.advance(400.0)  # run-0 went 700 s ago, run-1 600 s, run-2 500 s
    hub.tick()
    assert sorted({r["job"] for r in hub.snapshot()["ranks"]}) == ["live", "run-1", "run-2"]
    clock.advance(501.0)
    hub.tick()
    ranks = hub.snapshot()["ranks"]
    assert [(r["job"], r["connected"]) for r in ranks] == [("live", True)]  # a live rank never ages out
    assert "old-job" not in hub.snapshot()["jobs"]  # its supervisor stopped reporting 901 s ago
    steps(hub, live, count=1)
    assert rows(hub, job="live")[0]["step"] == 0


def test_a_full_hub_makes_room_from_its_oldest_gone_ranks(demo_hub: Hub, clock: ManualClock,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_core, "MAX_RANKS", 8)
    monkeypatch.setattr(hub_core, "MAX_RANKS_PER_JOB", 4)
    for run in range(2):  # two finished jobs fill the hub with gone ranks
        for rank in range(4):
            key = demo_hub.agent_hello(hello(rank, job=f"done-{run}", pid=10 * run + rank))
            steps(demo_hub, key, count=1)  # a rank that reported nothing is forgotten at once
            demo_hub.agent_gone(key)
            clock.advance(1.0)
    assert len(demo_hub.snapshot()["ranks"]) == 8
    # a new job is taken: the oldest gone ranks (done-0's first) make room
    for rank in range(4):
        demo_hub.agent_hello(hello(rank, job="new", pid=50 + rank))
    assert {(r["job"], r["rank"]) for r in demo_hub.snapshot()["ranks"] if r["job"] != "new"} == {
        ("done-1", rank) for rank in range(4)}
    # the job's own limit, with all its ranks live: refused with the reason, nothing changed
    with pytest.raises(hub_core.RankRefused, match="job 'new' already has 4 ranks connected"):
        demo_hub.agent_hello(hello(4, job="new", pid=60))
    for rank in range(4):  # every slot live: a job can only wait for one to go
        demo_hub.agent_hello(hello(rank, job="other", pid=70 + rank))
    with pytest.raises(hub_core.RankRefused, match="holds 8 connected ranks"):
        demo_hub.agent_hello(hello(0, job="third", pid=80))
    assert len(demo_hub.snapshot()["ranks"]) == 8


def test_a_refused_agent_is_told_why(served: tuple[Hub, HubServer], sock_path: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hub, server = served
    monkeypatch.setattr(hub_core, "MAX_RANKS_PER_JOB", 1)
    first = send(sock_path, {"type": "hello", "role": "agent", "rank": 0, "pid": 1, "job": "j"})
    assert wait_until(lambda: rows(hub, job="j"))
    second = send(sock_path, {"type": "hello", "role": "agent", "rank": 1, "pid": 2, "job": "j"})
    assert closed_by_hub(second)
    assert wait_until(lambda: any("limit per job" in reason for reason in server.closed_reasons))
    second.close()
    first.close()


def fill_to_limits(hub: Hub, clock: ManualClock, ranks: int, per_job: int, detail_ranks: int) -> None:
    """`ranks` ranks with every string, map and number at its bound; the first `detail_ranks`
    (those a snapshot carries in full) also with POINTS_KEPT operating points and STEPS_KEPT steps."""
    gpus = hub.snapshot()["gpus"]
    for index in range(ranks):
        info = {
            "rank": MAX_WORLD - 1 - index % per_job, "world_size": MAX_WORLD, "local_rank": MAX_WORLD - 1,
            "pid": MAX_PID, "hostname": "h" * HOSTNAME_CHARS, "gpu_uuid": gpus[index % len(gpus)]["uuid"],
            "nvml_index": 1023, "job": "j" * (JOB_CHARS - 4) + f"{index // per_job:04d}", "run_id": "r" * JOB_CHARS,
            # more entries and longer values than kept; values differ per rank (the advisor quotes them)
            "env": {f"NCCL_{k:03d}".ljust(ENV_NAME_CHARS, "N"): f"{index:06d}" + "v" * 999 for k in range(99)},
            "versions": {f"v{k:03d}".ljust(VERSION_NAME_CHARS, "V"): "9" * 999 for k in range(99)},
        }
        full = index < detail_ranks
        for restart in range(POINTS_KEPT if full else 0):  # earlier processes at other splits: points
            key = hub.agent_hello(parse_hello({**info, "pid": 1000 + restart}))
            for step in range(MEDIAN_WINDOW):
                hub.agent_step(key, parse_step({"step": step, "step_time_s": 86_399.123456789, "samples": 1e9 - restart - 0.123456789,
                                                "micro_batch": 1e9 - restart, "mem_peak_bytes": 2.0**50 - 1.123456789}))
            hub.agent_gone(key)
            clock.advance(1.0)
        key = hub.agent_hello(parse_hello(info))
        hub.agent_transport(key, parse_transport({"channels": [
            {"src": MAX_WORLD - 1 - k, "dst": MAX_WORLD - 1, "transport": "T" * TRANSPORT_CHARS} for k in range(999)]}))
        for step in range(STEPS_KEPT if full else 1):
            hub.agent_step(key, parse_step({
                "step": 2**53 - step, "step_time_s": 86_399.123456789 - step * 1e-3, "t": 1e11 - 0.123456789,
                **{name: high * (1 - 1.23456789e-9 * (step + 1)) for name, (_, high) in STEP_RANGES.items() if name != "t"},
                "loss": -1e30 * (1 - 1.23456789e-9 * (step + 1))}))


def test_a_snapshot_of_64_ranks_filled_to_every_limit_stays_below_1_mb(demo_hub: Hub, clock: ManualClock) -> None:
    fill_to_limits(demo_hub, clock, ranks=64, per_job=64, detail_ranks=64)
    snapshot = demo_hub.snapshot()
    rank = snapshot["ranks"][0]
    assert len(rank["env"]) == ENV_ENTRIES and len(rank["versions"]) == VERSION_ENTRIES
    assert len(rank["transport"]) == TRANSPORT_CHANNELS and len(rank["points"]) == POINTS_KEPT
    assert len(rank["loss_history"]) == 60 and not rank["detail_dropped"]
    assert any(f["id"] == "nccl-env-disagree" for f in snapshot["findings"])
    assert len(protocol.encode({"type": "snapshot", "snapshot": snapshot})) < 1_000_000


@pytest.mark.slow
def test_the_fullest_hub_still_answers_its_own_clients(demo_hub: Hub, clock: ManualClock, sock_path: str) -> None:
    """4096 ranks (4 jobs at the per-job limit), every field at its bound: the snapshot frame stays
    under what a client accepts, and a real client reads it."""
    assert hub_core.MAX_RANKS == 4 * hub_core.MAX_RANKS_PER_JOB
    fill_to_limits(demo_hub, clock, ranks=hub_core.MAX_RANKS, per_job=hub_core.MAX_RANKS_PER_JOB,
                   detail_ranks=hub_core.DETAIL_RANKS)
    for status in range(hub_core.MAX_JOBS):  # supervisors' statuses at their bound too
        demo_hub.supervisor_poll(f"{status:04d}".ljust(128, "s"), {"message": "m" * 4000})
    snapshot = demo_hub.snapshot()
    assert len(snapshot["ranks"]) == hub_core.MAX_RANKS
    assert sum(not r["detail_dropped"] for r in snapshot["ranks"]) == hub_core.DETAIL_RANKS
    size = len(protocol.encode({"type": "snapshot", "snapshot": snapshot}))
    assert size < protocol.MAX_SNAPSHOT_FRAME_BYTES, size
    server = HubServer(demo_hub, sock_path)
    server.start()
    try:
        client = HubClient(sock_path, timeout_s=30.0)
        read = client.snapshot()
        client.close()
    finally:
        server.stop()
    assert read is not None and len(read["ranks"]) == hub_core.MAX_RANKS, client.last_error


def test_hello_strings_and_maps_are_bounded_at_ingest() -> None:
    info = parse_hello({"rank": 0, "env": {f"NCCL_{k:03d}": "v" * 5000 for k in range(500)} | {"N" * 999: "x"},
                        "versions": {f"lib{k}": "1" * 5000 for k in range(500)}})
    assert len(info["env"]) == ENV_ENTRIES and all(len(v) <= 128 for v in info["env"].values())
    assert "N" * 999 not in info["env"]
    assert len(info["versions"]) == VERSION_ENTRIES and all(len(v) <= 64 for v in info["versions"].values())
    channels = parse_transport({"channels": [{"src": k, "dst": 0, "transport": "SHM"} for k in range(4096)]})
    assert len(channels) == TRANSPORT_CHANNELS
    refused = [
        {"rank": MAX_WORLD}, {"rank": 0, "job": "j" * (JOB_CHARS + 1)}, {"rank": 0, "run_id": "r" * (JOB_CHARS + 1)},
        {"rank": 0, "gpu_uuid": "G" * (GPU_UUID_CHARS + 1)}, {"rank": 0, "hostname": "h" * (HOSTNAME_CHARS + 1)},
        {"rank": 0, "env": ["NCCL_X"]}, {"rank": 0, "env": {"NCCL_X": 1}},
    ]
    for message in refused:
        with pytest.raises(protocol.ProtocolError):
            parse_hello(message)
    with pytest.raises(protocol.ProtocolError):
        parse_transport({"channels": [{"src": -1, "dst": 0, "transport": "SHM"}]})
    # labels out of range are left out, not kept
    assert parse_hello({"rank": 0, "world_size": 10**30, "pid": -5, "nvml_index": 10**6})["world_size"] is None


# -- item 4: jobs apart, no take-over ---------------------------------------------------------------


def test_a_second_job_does_not_make_the_first_one_straggle(demo_hub: Hub) -> None:
    gpus = demo_hub.snapshot()["gpus"]
    for rank in range(10):  # the demo job: rank 0 is its straggler
        key = demo_hub.agent_hello(hello(rank, job="demo", pid=100 + rank, gpu=gpus[rank]["uuid"]))
        steps(demo_hub, key, step_s=0.5, comm_s=0.1 if rank == 0 else 0.3)
    for rank in range(30):  # another job's fast ranks on the same box
        key = demo_hub.agent_hello(hello(rank, job="fast", pid=200 + rank, gpu=gpus[rank % 10]["uuid"]))
        steps(demo_hub, key, step_s=0.05, comm_s=0.01)
    snapshot = demo_hub.snapshot()
    assert [r["rank"] for r in snapshot["ranks"] if r["straggler"]] == [0]
    assert snapshot["runs"]["demo"]["ranks"] == 10 and snapshot["runs"]["demo"]["stragglers"] == [0]
    assert snapshot["runs"]["fast"]["ranks"] == 30 and snapshot["runs"]["fast"]["stragglers"] == []
    assert snapshot["runs"]["demo"]["step_time_s"] == 0.5 and snapshot["runs"]["fast"]["step_time_s"] == 0.05
    assert snapshot["run"] == snapshot["runs"]["fast"]  # the job with most live ranks
    assert snapshot["runs"]["fast"]["samples_per_s"] == pytest.approx(30 * 32 / 0.05)
    # each rank's wait is for its own job's slowest rank: the fast job's ranks wait for nothing
    waits = {tier["tier"]: tier["wait_share"] for tier in snapshot["tiers"]}
    assert all(0.0 <= share <= 1.0 for share in waits.values())


def test_a_hello_for_a_live_rank_is_refused_not_a_take_over(served: tuple[Hub, HubServer], sock_path: str) -> None:
    hub, server = served
    gpus = hub.snapshot()["gpus"]
    owner = send(sock_path, {"type": "hello", "role": "agent", "rank": 0, "pid": 4242, "job": "demo",
                             "gpu_uuid": gpus[0]["uuid"]},
                 {"type": "step", "step": 0, "step_time_s": 0.5, "samples": 8})
    assert wait_until(lambda: rows(hub, job="demo", step=0))
    intruder = send(sock_path, {"type": "hello", "role": "agent", "rank": 0, "pid": 666, "job": "demo",
                                "gpu_uuid": gpus[9]["uuid"]},
                    {"type": "step", "step": 7, "step_time_s": 5.0, "samples": 1})
    assert closed_by_hub(intruder)
    assert wait_until(lambda: any("already connected" in reason for reason in server.closed_reasons))
    (rank0,) = rows(hub, job="demo")
    assert (rank0["pid"], rank0["gpu_uuid"], rank0["step"], rank0["connected"]) == (4242, gpus[0]["uuid"], 0, True)
    # the owner's own agent reconnecting (same pid, host and uid) is not an intruder
    again = send(sock_path, {"type": "hello", "role": "agent", "rank": 0, "pid": 4242, "job": "demo",
                             "gpu_uuid": gpus[0]["uuid"]}, {"type": "step", "step": 1, "step_time_s": 0.5, "samples": 8})
    assert wait_until(lambda: rows(hub, job="demo", step=1))
    owner.close()  # the old connection closing does not make the reconnected agent gone
    assert wait_until(lambda: len(hub._ranks[("demo", None, 0)].connections) == 1)
    assert rows(hub, job="demo", step=1, connected=True)
    again.close()
    assert wait_until(lambda: rows(hub, job="demo", connected=False))
    intruder.close()


SCRIPT = """
import sys, time
from gpumix.agent import Agent
agent = Agent(address=sys.argv[1])
for index in range(3):
    with agent.step(samples=8):
        time.sleep(0.001)
print("stepped", flush=True)
sys.stdin.readline()
agent.close()
"""


def test_two_scripts_without_launcher_or_job_are_two_rows_both_gone_after_exit(served: tuple[Hub, HubServer],
                                                                                sock_path: str) -> None:
    hub, _ = served
    env = {k: v for k, v in os.environ.items() if k not in (
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "GPUMIX_JOB", "GPUMIX_RUN_ID", "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES")}
    env["PYTHONPATH"] = os.getcwd()
    scripts = [subprocess.Popen([sys.executable, "-c", SCRIPT, sock_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=env, text=True) for _ in range(2)]
    try:
        for script in scripts:
            assert script.stdout is not None and script.stdout.readline().strip() == "stepped"
        both = wait_until(lambda: len(r := rows(hub, rank=0, connected=True)) == 2 and all(x["step"] == 1 for x in r) and r,
                          timeout_s=10.0)
        assert both, hub.snapshot()["ranks"]
        assert {r["pid"] for r in both} == {s.pid for s in scripts} and {r["job"] for r in both} == {None}
        assert len({r["run_id"] for r in both}) == 2
        for script in scripts:
            script.communicate("\n", timeout=20)
        gone = wait_until(lambda: len(r := rows(hub, rank=0)) == 2 and not any(x["connected"] for x in r) and r)
        assert gone and all(r["step"] == 2 for r in gone), hub.snapshot()["ranks"]
    finally:
        for script in scripts:
            script.kill()
            script.wait()


def test_a_supervised_restart_carries_points_to_the_successor_under_a_new_run_id(demo_hub: Hub,
                                                                                 clock: ManualClock) -> None:
    """gpumix run relaunches the job's processes (new pids, new run ids): the successor of a gone rank
    takes its row and its operating points; an unnamed script never inherits another's."""
    gpu = demo_hub.snapshot()["gpus"][0]["uuid"]
    old = demo_hub.agent_hello(hello(0, pid=100, run_id="pid-100@box", gpu=gpu))
    steps(demo_hub, old, samples=64)
    demo_hub.agent_gone(old)
    new = demo_hub.agent_hello(hello(0, pid=101, run_id="pid-101@box", gpu=gpu))
    steps(demo_hub, new, samples=40)
    (row,) = rows(demo_hub, job="train")
    assert row["pid"] == 101 and [p["samples"] for p in row["points"]] == [64]
    nameless = demo_hub.agent_hello(hello(0, job=None, pid=300, run_id="pid-300@box", gpu=gpu))
    steps(demo_hub, nameless)
    demo_hub.agent_gone(nameless)
    other = demo_hub.agent_hello(hello(0, job=None, pid=301, run_id="pid-301@box", gpu=gpu))
    assert len(rows(demo_hub, job=None)) == 2 and rows(demo_hub, pid=301)[0]["points"] == []
    demo_hub.agent_gone(other)


def test_a_gone_rank_does_not_change_from_tick_to_tick(demo_hub: Hub, clock: ManualClock) -> None:
    gpu = demo_hub.snapshot()["gpus"][0]["uuid"]
    for pid in (100, 101):  # a restart: the second process carries a point, then exits
        key = demo_hub.agent_hello(hello(0, pid=pid, gpu=gpu))
        steps(demo_hub, key, samples=64 if pid == 100 else 40)
        demo_hub.agent_gone(key)
    before = json.dumps(demo_hub.tick()["ranks"])
    clock.advance(30.0)
    assert json.dumps(demo_hub.tick()["ranks"]) == before


# -- item 10: absurd finite numbers -------------------------------------------------------------------


def test_absurd_numbers_are_dropped_field_by_field_and_counted(demo_hub: Hub) -> None:
    gpus = demo_hub.snapshot()["gpus"]
    keys = [demo_hub.agent_hello(hello(rank, pid=100 + rank, gpu=gpus[rank]["uuid"])) for rank in range(3)]
    for key in keys[:2]:
        steps(demo_hub, key, step_s=0.5, comm_s=0.2)
    steps(demo_hub, keys[2], step_s=0.5, comm_s=0.2, count=3)
    demo_hub.agent_step(keys[2], parse_step({"step": 3, "step_time_s": 1e-308, "samples": 1e308, "comm_s": -1e308}))
    demo_hub.agent_step(keys[2], parse_step({"step": 4, "step_time_s": 0.5, "samples": 1e308, "comm_s": -1e308,
                                             "loss": 1.7e308, "mem_peak_bytes": 1e300, "cpu_pct": -1.0, "lr": 1e300}))
    snapshot = demo_hub.snapshot()
    fake = snapshot["ranks"][2]
    assert fake["step"] == 4 and fake["step_time_s"] == 0.5  # the step with a good step time is kept
    assert fake["rejected_values"] == 3 + 6  # every field out of range, and the step dropped for its time
    assert fake["mem_peak_bytes"] is None and fake["cpu_pct"] is None
    # the absurd loss is dropped: the row shows the newest loss received, an earlier step's
    assert 1.7e308 not in fake["loss_history"] and fake["loss"] == fake["loss_history"][-1] != 1.7e308
    assert fake["samples_per_s"] == pytest.approx(32 / 0.5) and not fake["straggler"]
    assert snapshot["run"]["samples_per_s"] == pytest.approx(3 * 32 / 0.5)
    assert snapshot["run"]["stragglers"] == []


def test_a_rank_that_said_only_hello_is_forgotten_when_it_goes(demo_hub: Hub) -> None:
    """A stream of hello-and-close connections (a fuzzer, a crashing script) must not pile up rows."""
    key = demo_hub.agent_hello(hello(0, job="silent", pid=7))
    assert rows(demo_hub, job="silent")
    demo_hub.agent_gone(key)
    assert not rows(demo_hub, job="silent")
    spoke = demo_hub.agent_hello(hello(0, job="spoke", pid=8))
    steps(demo_hub, spoke, count=1)
    demo_hub.agent_gone(spoke)
    assert rows(demo_hub, job="spoke")[0]["connected"] is False  # it reported: shown gone


def test_gone_ranks_in_view_are_bounded_oldest_first(demo_hub: Hub, clock: ManualClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_core, "MAX_GONE_RANKS", 3)
    for run in range(5):
        key = demo_hub.agent_hello(hello(0, job=f"short-{run}", pid=100 + run))
        steps(demo_hub, key, count=1)
        demo_hub.agent_gone(key)
        clock.advance(1.0)
    assert sorted(r["job"] for r in demo_hub.snapshot()["ranks"]) == ["short-2", "short-3", "short-4"]


def test_a_ratio_of_tiny_compute_times_is_no_straggler() -> None:
    """On 2xH200 over NVLink one rank reported 0.001 s of compute against 0 s: no one waits for a millisecond."""
    from gpumix.hub.ranks import mark_stragglers

    def row(rank: int, compute_s: float, step_s: float = 0.015) -> dict[str, Any]:
        return {"rank": rank, "job": "j", "run_id": "r", "connected": True, "compute_s": compute_s,
                "step_time_s": step_s}

    tiny = [row(0, 0.001), row(1, 0.0)]
    mark_stragglers(tiny)
    assert [r["straggler"] for r in tiny] == [False, False]
    real = [row(0, 0.5, 0.6), row(1, 0.2, 0.6), row(2, 0.2, 0.6)]
    mark_stragglers(real)
    assert [r["straggler"] for r in real] == [True, False, False]
