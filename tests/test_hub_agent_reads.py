"""The hub reads an agent's socket in batches (issue 13): after a message it leaves the socket alone
until the next round of agent_read_pause_s (a multiple of it on the loop's clock), so the frames
written meanwhile reach it in few reads, not one read a write; every step still arrives, in order,
and a bye still ends the rank. tests/test_hub_read_rounds.py drives the rounds by hand."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.agent_stream import AGENT_READ_PAUSE_ENV, AgentProtocol, agent_read_pause_s
from gpumix.hub.server import HubServer
from gpumix.hw.hardware import Hardware
from gpumix.wire import protocol
from tests.conftest import FixedHostSampler
from tests.waiting import wait_until

WRITES = 20
SOCKET_PATH = f"/tmp/gmx-reads-{os.getpid()}.sock"


@pytest.fixture
def served(demo_hardware: Hardware) -> Iterator[tuple[Hub, HubServer]]:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01")
    hub.tick()
    server = HubServer(hub, SOCKET_PATH)
    server.start()
    yield hub, server
    server.stop()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the hub's event loop handed received bytes to a connection (a real read each)."""
    counted: list[int] = []
    # the hello comes through the stream's protocol, the agent's frames through AgentProtocol
    for kind in (asyncio.StreamReaderProtocol, AgentProtocol):
        def counting(self: Any, data: bytes, original: Any = kind.data_received) -> None:
            counted.append(len(data))
            original(self, data)

        monkeypatch.setattr(kind, "data_received", counting)
    return counted


def steps_seen(hub: Hub) -> list[int]:
    ranks = (hub.snapshot() or {}).get("ranks") or []
    return [step["step"] for rank in ranks for step in hub._intake.table.streams[(rank["job"], rank["run_id"], rank["rank"])].steps]


def send_steps_one_write_each(hub: Hub, server: HubServer) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(SOCKET_PATH)
    sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(), "job": "reads"}))
    wait_until(lambda: bool((hub.snapshot() or {}).get("ranks")), 10, what="the rank's hello")
    for index in range(WRITES):  # one write a step, spaced: without the pause each would be its own read
        sock.sendall(protocol.encode({"type": "step", "step": index, "step_time_s": 0.1, "samples": 8}))
        time.sleep(0.01)
    return sock


def test_frames_written_during_the_pause_arrive_in_few_reads(served: tuple[Hub, HubServer], reads: list[int]) -> None:
    hub, server = served
    server.agent_read_pause_s = 5.0  # far longer than the writes take (0.2 s and a little)
    # start early in a round (the loop's clock is time.monotonic): the next one is >= 3 s away
    while not 0.2 <= time.monotonic() % 5.0 <= 2.0:
        time.sleep(0.05)
    sock = send_steps_one_write_each(hub, server)
    reads_before = len(reads)
    server.agent_read_pause_s = 0.0  # the next pause (if any) is the last one that holds frames back
    # the first step is read at once; the other 19 wait out the pause and come in one read
    wait_until(lambda: steps_seen(hub) == list(range(WRITES)), 60, what="every step, in order")
    assert len(reads) <= 3, reads  # the hello, the first step, the rest: not one read per write
    assert reads_before <= 2
    sock.sendall(protocol.encode({"type": "bye"}))
    sock.close()
    wait_until(lambda: not any(r["connected"] for r in (hub.snapshot() or {}).get("ranks") or []), 60,
               what="the rank gone after its bye")


def test_without_the_pause_each_write_is_read_as_it_comes(served: tuple[Hub, HubServer], reads: list[int]) -> None:
    """The counter above can tell: with the pause off, the spaced writes come in many reads."""
    hub, server = served
    server.agent_read_pause_s = 0.0
    sock = send_steps_one_write_each(hub, server)
    wait_until(lambda: steps_seen(hub) == list(range(WRITES)), 30, what="every step, in order")
    sock.close()
    assert len(reads) > 3, reads


@pytest.mark.parametrize(("raw", "expected"), [(None, 0.0), ("", 0.0), ("0.5", 0.5), (" 2 ", 2.0), ("0", 0.0), ("0.001", 0.001)])
def test_the_pause_is_off_unless_the_environment_asks(raw: str | None, expected: float) -> None:
    environ = {} if raw is None else {AGENT_READ_PAUSE_ENV: raw}
    assert agent_read_pause_s(environ) == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "-1", "9", "half", "\x1b[31m1", "1e-320", "0.0005"])
def test_a_bad_pause_is_refused_in_one_line(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    assert agent_read_pause_s({AGENT_READ_PAUSE_ENV: raw}) == 0.0
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and AGENT_READ_PAUSE_ENV in lines[0] and "\n" not in lines[0]
    assert "\x1b" not in lines[0]  # the value is quoted (repr), never written raw
