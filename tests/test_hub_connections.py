"""Connections that cannot exhaust the hub, over real sockets: the hello deadline, idle timeouts, the cap on
TCP connections without a token, a descriptor limit that TCP can never take from local clients, and a log
that a peer's garbage cannot flood."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.agent import Agent
from gpumix.hub import Hub, agent_stream
from gpumix.hub import server as server_module
from gpumix.hub.client import HubClient
from gpumix.hub.server import LOG_LINES_PER_INTERVAL, HubServer, RateLimitedLog
from gpumix.wire import protocol
from tests.conftest import FixedHostSampler, wait_until

TOKEN = "ef" * 32
REPO = Path(__file__).resolve().parents[1]

# A hub in a process of its own with 256 descriptors (soft and hard): cheap to exhaust with TCP.
LIMITED_HUB = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from gpumix.cli.hardware import simulated_hardware
from gpumix.sim.rig import load_builtin_rig
hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")), interval_s=0.5)
hub.tick()
hub.start()
server = HubServer(hub, sys.argv[1], tcp=("127.0.0.1", 0), token=sys.argv[2])
server.start()
print("ready", server.tcp_port, flush=True)
sys.stdin.read()  # until the test closes stdin
server.stop()
hub.stop()
"""


@pytest.fixture
def folder() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # short: Unix socket paths are limited
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_server(demo_hardware: Any, folder: str, **options: Any) -> HubServer:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.tick()
    server = HubServer(hub, os.path.join(folder, "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN, **options)
    server.start()
    return server


def read_until_closed(sock: socket.socket, timeout_s: float) -> bytes | None:
    """Everything the hub sends until it closes its end; None if it still holds the connection open."""
    sock.settimeout(timeout_s)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return received


def frames(data: bytes) -> list[dict[str, Any]]:
    import json

    messages = []
    while len(data) >= 4:
        (length,) = protocol.HEADER.unpack(data[:4])
        messages.append(json.loads(data[4:4 + length]))
        data = data[4 + length:]
    return messages


def tcp_connection(server: HubServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.tcp_port), timeout=5)


def unix_connection(server: HubServer) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(server.socket_path)
    return sock


# -- descriptors: TCP never starves local clients ---------------------------------------------------


def test_hundreds_of_idle_tcp_connections_leave_local_clients_served(folder: str) -> None:
    sock_path = os.path.join(folder, "hub.sock")
    hub = subprocess.Popen([sys.executable, "-c", LIMITED_HUB, sock_path, TOKEN], cwd=REPO, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    idle: list[socket.socket] = []
    try:
        ready = hub.stdout.readline().split()
        assert ready[:1] == ["ready"], hub.stderr.read()
        port = int(ready[1])
        for _ in range(300):  # more than the hub's 256 descriptors; no token needed to open them
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass  # the kernel's backlog is full: that costs the hub nothing
        assert len(idle) >= 256
        local = HubClient(sock_path, timeout_s=5)
        for _ in range(3):  # while every idle connection is still open on this side
            assert local.snapshot() is not None, local.last_error
        local.close()
        remote = HubClient(f"tcp://127.0.0.1:{port}", timeout_s=5, token=TOKEN)
        assert wait_until(lambda: remote.snapshot() is not None, timeout_s=30), remote.last_error
        remote.close()
    finally:
        for sock in idle:
            sock.close()
        hub.stdin.close()
        try:
            hub.wait(10)
        except subprocess.TimeoutExpired:
            hub.kill()
            hub.wait()
    log = hub.stderr.read()
    assert "Traceback" not in log and "Too many open files" not in log, log
    assert log.count("\n") <= 4 * (LOG_LINES_PER_INTERVAL + 1), log  # rate-limited, a count of the rest


def test_connections_without_a_token_are_capped(demo_hardware: Any, folder: str) -> None:
    server = start_server(demo_hardware, folder, max_unauthenticated=4)
    try:
        waiting = [tcp_connection(server) for _ in range(4)]
        assert wait_until(lambda: server.tcp_waiting == 4)
        extra = tcp_connection(server)
        busy = read_until_closed(extra, timeout_s=5)  # closed at once, not after the hello deadline
        assert busy is not None and frames(busy)[0]["message"].startswith("busy: too many connections waiting")
        client = HubClient(f"tcp://127.0.0.1:{server.tcp_port}", timeout_s=3, token=TOKEN)
        assert client.snapshot() is None and "busy" in client.last_error
        local = HubClient(server.socket_path, timeout_s=3)
        assert local.snapshot() is not None  # Unix is never capped by TCP
        for sock in waiting:
            sock.close()
        assert wait_until(lambda: client.snapshot() is not None)
        assert server.tcp_waiting == 0 and server.tcp_open == 1  # a client past its hello no longer counts
        client.close()
        local.close()
    finally:
        server.stop()


def test_out_of_descriptors_on_accept_only_delays_tcp(demo_hardware: Any, folder: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    server = start_server(demo_hardware, folder)
    loop = server._loop
    real_accept = loop.sock_accept
    failures = [0]

    async def accept_out_of_descriptors(sock: socket.socket) -> Any:
        if failures[0] < 3:  # the first three accepts find the process out of descriptors
            failures[0] += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return await real_accept(sock)

    loop.sock_accept = accept_out_of_descriptors  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="gpumix.hub.server")
    try:
        with tcp_connection(server):  # wakes the accept loop, which is waiting in the real accept
            client = HubClient(f"tcp://127.0.0.1:{server.tcp_port}", timeout_s=3, token=TOKEN)
            assert wait_until(lambda: client.snapshot() is not None), client.last_error
            client.close()
        assert failures[0] == 3
        assert any("cannot accept a TCP connection: Too many open files" in r.getMessage() for r in caplog.records)
    finally:
        server.stop()


def test_the_tcp_cap_leaves_a_reserve_of_descriptors() -> None:
    assert server_module.tcp_connection_limit(256) == 128
    assert server_module.tcp_connection_limit(1024) == 768
    assert server_module.tcp_connection_limit(1 << 20) == (1 << 20) - (1 << 18)
    assert server_module.tcp_connection_limit(64) >= 1


# -- deadlines ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tcp", "unix", "tcp half a header"])
def test_a_silent_connection_is_closed_after_the_hello_deadline(demo_hardware: Any, folder: str, kind: str) -> None:
    server = start_server(demo_hardware, folder)
    try:
        sock = unix_connection(server) if kind == "unix" else tcp_connection(server)
        if kind == "tcp half a header":
            sock.sendall(b"\x00\x00")  # a slow loris: a frame begun, never finished
        received = read_until_closed(sock, timeout_s=20)
        assert received is not None, "the hub held a silent connection open"
        assert frames(received) == [{"v": 1, "type": "error", "message": "no hello within 2 s"}]
        assert wait_until(lambda: "no hello within 2 s" in server.closed_reasons[-1])
        assert wait_until(lambda: server.tcp_waiting == 0 and server.tcp_open == 0)
    finally:
        server.stop()


def test_an_idle_client_is_closed_and_reconnects(demo_hardware: Any, folder: str) -> None:
    server = start_server(demo_hardware, folder, client_idle_timeout_s=0.3)
    try:
        for address in (server.socket_path, f"tcp://127.0.0.1:{server.tcp_port}"):
            client = HubClient(address, timeout_s=3, token=TOKEN)
            assert client.snapshot() is not None
            before = len(server.closed_reasons)
            assert wait_until(lambda b=before: len(server.closed_reasons) > b)
            assert "silent for 0.3 s" in server.closed_reasons[-1]
            assert client.snapshot() is not None, client.last_error  # the next request reconnects
            client.close()
    finally:
        server.stop()


def test_an_idle_agent_is_closed_and_comes_back(demo_hardware: Any, folder: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_server(demo_hardware, folder, agent_idle_timeout_s=0.3)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent(address=server.socket_path, job="idle")

    def rank() -> dict[str, Any] | None:
        return next((r for r in server.hub.snapshot()["ranks"] if r["job"] == "idle"), None)

    def step() -> bool:
        with agent.step(samples=4):
            pass
        return (rank() or {}).get("connected") is True

    try:
        assert wait_until(step)
        assert wait_until(lambda: rank()["connected"] is False)  # silent past the idle timeout: closed
        assert "silent for 0.3 s" in server.closed_reasons[-1]
        assert wait_until(step)  # its next steps reconnect it
    finally:
        agent.close()
        server.stop()


def test_no_step_is_lost_to_an_idle_close(demo_hardware: Any, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over TCP the first step after an idle close once went into the dead socket: the send succeeds
    locally, the hub's reset comes later, and the message is gone."""
    server = start_server(demo_hardware, folder, agent_idle_timeout_s=0.3)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    agent = Agent(address=f"tcp://127.0.0.1:{server.tcp_port}", job="idle-loss")

    def rank() -> dict[str, Any]:
        return next((r for r in server.hub.snapshot()["ranks"] if r["job"] == "idle-loss"), {})

    def steps(losses: range) -> None:
        for loss in losses:
            with agent.step(samples=4) as step:
                step.loss = float(loss)

    try:
        steps(range(3))
        assert wait_until(lambda: rank().get("step") == 1)  # each step is sent when the next one ends
        assert wait_until(lambda: rank().get("connected") is False)  # closed for silence
        steps(range(3, 5))  # sends the step held back since before the close, then the next
        assert wait_until(lambda: rank().get("step") == 3), rank()
        assert rank()["loss_history"] == [0.0, 1.0, 2.0, 3.0]  # none lost in the dead socket
        assert agent.sender.connects == 2 and agent.sender.dropped == 0
    finally:
        agent.close()
        server.stop()


# -- the log: a few lines per interval, a count of the rest, never a traceback ----------------------------


def test_garbage_logs_a_few_lines_and_a_count(demo_hardware: Any, folder: str, caplog: pytest.LogCaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_parse_step(message: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("a validation bug that a peer's frame reaches")

    monkeypatch.setattr(agent_stream, "parse_step", broken_parse_step)
    server = start_server(demo_hardware, folder)
    garbage = [protocol.HEADER.pack(7) + b"notjson", protocol.HEADER.pack(1 << 30),
               protocol.encode({"type": "hello", "role": "nobody"}),
               protocol.encode({"type": "hello", "role": "agent", "rank": 0, "job": "g", "pid": 1})
               + protocol.encode({"type": "step", "step": 1, "step_time_s": 0.1})]
    sent = 100
    caplog.set_level(logging.WARNING, logger="gpumix.hub.server")
    try:
        for i in range(sent):
            with unix_connection(server) as sock:
                sock.sendall(garbage[i % len(garbage)])
                assert read_until_closed(sock, timeout_s=5) is not None
        assert wait_until(lambda: server.log_limiter.shown_total + server.log_limiter.suppressed_total >= sent)
    finally:
        server.stop()
    lines = [record for record in caplog.records if record.name == "gpumix.hub.server"]
    assert all(record.exc_info is None for record in lines)  # no traceback, not even for the bug
    assert len(lines) <= 2 * LOG_LINES_PER_INTERVAL + 2, [record.getMessage() for record in lines]
    summaries = [record.getMessage() for record in lines if "suppressed" in record.getMessage()]
    counted = sum(int(text.split("hub: ")[1].split()[0]) for text in summaries)
    assert len(lines) - len(summaries) + counted == sent  # every closed connection is shown or counted
    assert any("internal error KeyError" in reason for reason in server.closed_reasons)


def test_the_rate_limited_log_sums_up_each_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limiter = RateLimitedLog(logging.getLogger("gpumix.test.ratelog"), lines=2, interval_s=10, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="gpumix.test.ratelog")
    for i in range(7):
        limiter.warning(f"bad frame {i}")
    now[0] = 11.0
    limiter.warning("bad frame 7")
    assert [record.getMessage() for record in caplog.records] == [
        "bad frame 0", "bad frame 1", "hub: 5 more like these suppressed (last: bad frame 6)", "bad frame 7"]


def test_raise_fd_limit_goes_up_to_the_hard_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
        assert server_module.raise_fd_limit() == (hard if hard != resource.RLIM_INFINITY else max(512, 1 << 20))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
