"""The hub's accepted TCP connections carry keepalive with short probes, so a rank whose machine
vanished is closed (and shown gone) in about a minute, not at the 30-minute idle timeout. Read on the
server's own socket (found among this process's descriptors: the hub serves from a thread here)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator

import pytest

from gpumix.hub import Hub
from gpumix.hub.keepalive import (
    KEEPALIVE_BOUND_S,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    KEEPALIVE_PROBES,
    tcp_keepalive_options,
)
from gpumix.hub.server import AGENT_IDLE_TIMEOUT_S, HubServer
from gpumix.wire import protocol
from tests.waiting import wait_until

TOKEN = "k" * 32


@pytest.fixture
def tcp_hub(demo_hub: Hub) -> Iterator[tuple[Hub, HubServer]]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    server = HubServer(demo_hub, os.path.join(folder, "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN,
                       hello_timeout_s=60.0)  # the silent client of the second test stays while it is read
    server.start()
    yield demo_hub, server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def accepted_socket(client: socket.socket) -> socket.socket | None:
    """The hub's end of `client`'s connection: the TCP socket of this process whose local address is
    the client's peer and whose peer is the client (a duplicate descriptor; the caller closes it)."""
    want_local, want_peer = client.getpeername(), client.getsockname()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
            try:
                if (sock.family == socket.AF_INET and sock.getsockname() == want_local
                        and sock.getpeername() == want_peer):
                    return sock
            except OSError:
                pass
            sock.close()
    return None


def test_an_accepted_tcp_agent_connection_carries_short_keepalive(tcp_hub: tuple[Hub, HubServer]) -> None:
    hub, server = tcp_hub
    assert server.tcp_port
    agent = socket.create_connection(("127.0.0.1", server.tcp_port), timeout=3.0)
    try:
        agent.sendall(protocol.encode({"type": "hello", "role": "agent", "token": TOKEN, "rank": 0, "world_size": 1,
                                       "job": "far", "pid": 4242, "run_id": "run-1", "hostname": "far-box"})
                      + protocol.encode({"type": "step", "step": 1, "step_time_s": 0.5, "samples": 8}))
        assert wait_until(lambda: any(r["job"] == "far" and r["connected"] for r in hub.snapshot()["ranks"]))
        served = accepted_socket(agent)
        assert served is not None, "the hub's end of the connection was not found"
        with served:
            assert served.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            options = tcp_keepalive_options()
            assert len(options) == 3  # Linux has all three: none silently left at the 2-hour default
            assert {option: served.getsockopt(socket.IPPROTO_TCP, option) for option, _ in options} == {
                socket.TCP_KEEPIDLE: KEEPALIVE_IDLE_S, socket.TCP_KEEPINTVL: KEEPALIVE_INTERVAL_S,
                socket.TCP_KEEPCNT: KEEPALIVE_PROBES}
        # the bound the docs state: about a minute, far inside the idle timeout it replaces for dead peers
        assert KEEPALIVE_BOUND_S <= 90 and KEEPALIVE_BOUND_S < AGENT_IDLE_TIMEOUT_S / 10
    finally:
        agent.close()


def test_a_connection_before_its_hello_carries_keepalive_too(tcp_hub: tuple[Hub, HubServer]) -> None:
    """Set at accept, not after the hello: a client that has said nothing yet has it as well."""
    _, server = tcp_hub
    assert server.tcp_port
    client = socket.create_connection(("127.0.0.1", server.tcp_port), timeout=3.0)
    try:
        # accepted once the hub counts it as waiting for its hello
        assert wait_until(lambda: server.tcp_waiting == 1)
        served = accepted_socket(client)
        assert served is not None
        with served:
            assert served.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_S
    finally:
        client.close()


def test_a_peer_dropped_by_keepalive_is_named_as_such_not_as_silent() -> None:
    """The kernel's keepalive ends a read with ETIMEDOUT, a TimeoutError like our own deadline's:
    the log must say the peer stopped answering, not that it was silent for the idle timeout."""
    import asyncio
    import errno

    from gpumix.hub.connections import Silent, read_within

    async def read(error: BaseException) -> str:
        reader = asyncio.StreamReader()
        reader.set_exception(error)
        try:
            await read_within(reader, {"step"}, 5.0, "silent for 1800 s")
        except Silent as silent:
            return str(silent)
        raise AssertionError("no Silent raised")

    assert "keepalive" in asyncio.run(read(TimeoutError(errno.ETIMEDOUT, "Connection timed out")))
    assert asyncio.run(read(asyncio.TimeoutError())) == "silent for 1800 s"
