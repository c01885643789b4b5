"""Through the hub: a hello for a live rank of a named job is refused under any run id, over TCP with a
valid token too; the rank's own agent reconnects and a restarted rank takes the row once the old
process is gone (issue 10, item 4). Needs Hub.agent_hello to ask gpumix/hub/rank_claims.py."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.core import RankRefused
from gpumix.hub.ranks import parse_hello
from gpumix.hub.server import HubServer
from gpumix.wire import protocol
from tests.conftest import wait_until

TOKEN = "t" * 32


def hello(pid: int, run_id: str, peer_uid: int | None = None) -> dict[str, Any]:
    return {**parse_hello({"rank": 0, "world_size": 2, "job": "train", "pid": pid, "run_id": run_id,
                           "hostname": "box"}), "peer_uid": peer_uid}


def ranks0(hub: Hub) -> list[tuple[Any, ...]]:
    return [(r["run_id"], r["pid"], r["connected"]) for r in hub.snapshot()["ranks"]
            if r["job"] == "train" and r["rank"] == 0]


def test_a_hello_under_another_run_id_is_no_second_rank_0(demo_hub: Hub) -> None:
    owner = demo_hub.agent_hello(hello(os.getpid(), "run-1", peer_uid=os.getuid()))
    with pytest.raises(RankRefused, match="already connected"):
        demo_hub.agent_hello(hello(666, "run-2", peer_uid=os.getuid()))
    with pytest.raises(RankRefused, match="already connected"):
        demo_hub.agent_hello(hello(os.getpid(), "run-2", peer_uid=None))  # its pid, claimed over TCP
    assert ranks0(demo_hub) == [("run-1", os.getpid(), True)]
    demo_hub.agent_gone(owner)  # the old process's connection closed: a restart takes the rank
    demo_hub.agent_hello(hello(999, "run-3", peer_uid=os.getuid()))
    assert ranks0(demo_hub) == [("run-3", 999, True)]


@pytest.fixture
def tcp_hub(demo_hub: Hub) -> Iterator[tuple[Hub, HubServer]]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    server = HubServer(demo_hub, os.path.join(folder, "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN)
    server.start()
    yield demo_hub, server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def tcp_agent(port: int, pid: int, run_id: str, step: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=3.0)
    sock.sendall(protocol.encode({"type": "hello", "role": "agent", "token": TOKEN, "rank": 0, "world_size": 2,
                                  "job": "train", "pid": pid, "run_id": run_id, "hostname": "box"})
                 + protocol.encode({"type": "step", "step": step, "step_time_s": 0.5, "samples": 8}))
    return sock


def test_a_tcp_client_with_the_token_cannot_claim_a_live_rank(tcp_hub: tuple[Hub, HubServer]) -> None:
    hub, server = tcp_hub
    assert server.tcp_port
    owner = tcp_agent(server.tcp_port, 4242, "run-1", step=3)
    assert wait_until(lambda: ranks0(hub) == [("run-1", 4242, True)] and
                      [r["step"] for r in hub.snapshot()["ranks"] if r["job"] == "train"] == [3])
    intruder = tcp_agent(server.tcp_port, 4243, "run-2", step=99)
    assert wait_until(lambda: any("already connected" in reason for reason in server.closed_reasons))
    assert ranks0(hub) == [("run-1", 4242, True)]
    assert [r["step"] for r in hub.snapshot()["ranks"] if r["job"] == "train"] == [3]
    owner.close()
    assert wait_until(lambda: ranks0(hub) == [("run-1", 4242, False)])
    restarted = tcp_agent(server.tcp_port, 4244, "run-3", step=0)  # after the old connection closed
    assert wait_until(lambda: ranks0(hub) == [("run-3", 4244, True)])
    for sock in (intruder, restarted):
        sock.close()
