"""Hub security over real sockets: TCP with a token, signed controls, read-only clients, peer uids."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.agent import Agent
from gpumix.cli.remote import tcp_settings
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from gpumix.wire import auth, protocol
from tests.conftest import FixedHostSampler, wait_until

TOKEN = "ab" * 32


def tcp_args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"tcp": None, "token_file": None, "tls_cert": None, "tls_key": None, **given})


@pytest.fixture
def folder() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # short: Unix socket paths are limited
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def tcp_hub(demo_hardware: Any, folder: str) -> Iterator[tuple[Hub, HubServer, str]]:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01")
    hub.tick()
    server = HubServer(hub, os.path.join(folder, "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN)
    server.start()
    yield hub, server, f"tcp://127.0.0.1:{server.tcp_port}"
    server.stop()


def caps(hub: Hub) -> list[float]:
    return [gpu["power_cap_w"] for gpu in hub.tick()["gpus"]]


class RawClient:
    """A hand-driven TCP client: hello, welcome, then frames exactly as the test builds them."""

    def __init__(self, address: str, hello: dict[str, Any]) -> None:
        self.sock = socket.create_connection(auth.tcp_address(address), timeout=3)
        self.sock.sendall(protocol.encode(hello))

    def receive(self) -> dict[str, Any]:
        header = self._exactly(4)
        return json.loads(self._exactly(protocol.HEADER.unpack(header)[0]))

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sock.sendall(protocol.encode(request))
        return self.receive()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True


def signed_client(address: str) -> tuple[RawClient, auth.ControlSigner]:
    nonce = auth.new_nonce()
    client = RawClient(address, auth.client_hello(TOKEN, nonce, readonly=False))
    welcome = client.receive()
    assert welcome["type"] == "welcome" and len(welcome["nonce"]) >= 16
    return client, auth.ControlSigner(TOKEN, nonce, welcome["nonce"])


# -- TCP is off unless asked; loopback unless an address is given ---------------------------


def test_tcp_off_by_default(demo_hardware: Any, folder: str) -> None:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.tick()
    server = HubServer(hub, os.path.join(folder, "hub.sock"))
    server.start()
    try:
        assert server.tcp_port is None and server._tcp_server is None
        assert stat.S_IMODE(os.stat(server.socket_path).st_mode) == 0o600
    finally:
        server.stop()
    with pytest.raises(ValueError):
        HubServer(hub, os.path.join(folder, "x.sock"), tcp=("127.0.0.1", 0))  # no token, no TCP


def test_tcp_flag_defaults_to_loopback_and_creates_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    tcp, token, tls = tcp_settings("gpumix", tcp_args(tcp="7070"))
    assert tcp == ("127.0.0.1", 7070) and tls is None
    token_path = tmp_path / "config" / "gpumix" / "token"
    assert token == token_path.read_text().strip() and len(bytes.fromhex(token)) == 32
    assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_path.parent.stat().st_mode) == 0o700
    assert "warning" not in capsys.readouterr().err
    # the same token on the next start; an explicit address is allowed, with a warning
    tcp, again, _ = tcp_settings("gpumix", tcp_args(tcp="0.0.0.0:7071"))
    assert tcp == ("0.0.0.0", 7071) and again == token
    err = capsys.readouterr().err
    assert "the token is the only protection" in err and err.count("\n") == 1


def test_tcp_server_binds_loopback(tcp_hub: tuple[Hub, HubServer, str]) -> None:
    _, server, _ = tcp_hub
    assert server._tcp_server is not None
    assert {sock.getsockname()[0] for sock in server._tcp_server.sockets} == {"127.0.0.1"}


def test_token_file_readable_by_others_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    with pytest.raises(auth.TokenError, match="readable by group/others"):
        auth.read_token(token_file)
    with pytest.raises(SystemExit):
        tcp_settings("gpumix", tcp_args(tcp="0", token_file=str(token_file)))
    err = capsys.readouterr().err
    assert "readable by group/others" in err and err.count("\n") == 1
    token_file.chmod(0o600)
    assert auth.read_token(token_file) == TOKEN


# -- tokens ----------------------------------------------------------------------------------


def test_right_token_works_and_controls_are_signed(tcp_hub: tuple[Hub, HubServer, str]) -> None:
    hub, server, address = tcp_hub
    client = HubClient(address, timeout_s=3, token=TOKEN)
    try:
        assert client.snapshot()["hostname"] == "rig01"
        reply = client.control({"type": "power", "action": "set", "gpus": [0], "watts": 150})
        assert reply["ok"], reply
        assert caps(hub)[0] == pytest.approx(150)
        assert client._signer is not None and client._signer.counter == 1
    finally:
        client.close()
    assert not server.refused_reasons


@pytest.mark.parametrize(("token", "reason"), [("cd" * 32, "wrong token"), (None, "no token")])
def test_wrong_or_missing_token_closes(tcp_hub: tuple[Hub, HubServer, str], token: str | None, reason: str) -> None:
    _, server, address = tcp_hub
    raw = RawClient(address, auth.client_hello(token, auth.new_nonce(), readonly=False))
    refusal = raw.receive()  # one line saying why, then the close
    assert refusal["type"] == "error" and reason in refusal["message"], refusal
    assert raw.closed()
    assert wait_until(lambda: server.closed_reasons and reason in server.closed_reasons[-1])
    if token is not None:
        client = HubClient(address, timeout_s=3, token=token)
        assert client.snapshot() is None
        assert client.last_error == f"{address}: the hub refused the connection: wrong token"
        reply = client.control({"type": "power", "action": "reset", "gpus": [0]})
        assert reply["ok"] is False and "refused the connection: wrong token" in reply["message"]
        client.close()


def test_agent_hello_needs_the_token_over_tcp(tcp_hub: tuple[Hub, HubServer, str]) -> None:
    _, server, address = tcp_hub
    raw = RawClient(address, {"type": "hello", "role": "agent", "rank": 0, "job": "t"})
    assert "no token" in raw.receive()["message"]
    assert raw.closed()
    assert wait_until(lambda: "no token" in server.closed_reasons[-1])


def assert_agent_reports(hub: Hub, address: str, job: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real agent at `address` (with the token in $GPUMIX_TOKEN) takes three steps; the hub sees them."""
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent(address=address, job=job)
    try:
        for _ in range(3):
            with agent.step(samples=4):
                time.sleep(0.005)
        assert wait_until(lambda: any(r["job"] == job and r["step"] is not None for r in hub.snapshot()["ranks"]))
    finally:
        agent.close()


def test_agent_reports_over_tcp_with_token(tcp_hub: tuple[Hub, HubServer, str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _, address = tcp_hub
    assert_agent_reports(hub, address, "tcpjob", monkeypatch)


def test_replayed_and_altered_controls_are_refused(tcp_hub: tuple[Hub, HubServer, str]) -> None:
    hub, server, address = tcp_hub
    raw, signer = signed_client(address)
    first = signer.sign({"type": "power", "action": "set", "gpus": [1], "watts": 140})
    assert raw.ask(first)["ok"]
    second = signer.sign({"type": "power", "action": "set", "gpus": [1], "watts": 160})
    assert raw.ask(second)["ok"]
    assert caps(hub)[1] == pytest.approx(160)
    replay = raw.ask(first)  # the same bytes again: counter 1 is used up
    assert replay["ok"] is False and "replayed" in replay["message"]
    assert caps(hub)[1] == pytest.approx(160)
    altered = dict(signer.sign({"type": "power", "action": "set", "gpus": [1], "watts": 150}), watts=100)
    reply = raw.ask(altered)
    assert reply["ok"] is False and "bad mac" in reply["message"]
    unsigned = raw.ask({"type": "power", "action": "reset", "gpus": [1]})
    assert unsigned["ok"] is False and "counter and a mac" in unsigned["message"]
    replan = raw.ask(dict(signer.sign({"type": "replan", "job": "x", "plan": {}}), job="y"))
    assert replan["type"] == "replan_result" and replan["ok"] is False and "bad mac" in replan["message"]
    assert caps(hub)[1] == pytest.approx(160)
    assert raw.ask({"type": "snapshot"})["type"] == "snapshot"  # the connection stays usable
    assert len(server.refused_reasons) == 4
    # a MAC from another connection (other nonces) is refused too
    other, _ = signed_client(address)
    assert other.ask(second)["ok"] is False


# -- read-only clients -------------------------------------------------------------------------


@pytest.mark.parametrize("over_tcp", [True, False])
def test_readonly_client_cannot_control(tcp_hub: tuple[Hub, HubServer, str], over_tcp: bool) -> None:
    hub, server, address = tcp_hub
    before = caps(hub)
    client = HubClient(address if over_tcp else server.socket_path, timeout_s=3, readonly=True, token=TOKEN)
    try:
        assert client.snapshot() is not None
        for request in ({"type": "power", "action": "set", "gpus": [0, 1], "watts": 120},
                        {"type": "power", "action": "fit", "budget_w": 1000},
                        {"type": "replan", "job": "demo", "plan": {"shares": []}}):
            reply = client.control(request)
            assert reply["ok"] is False and "read-only" in reply["message"], reply
        work = client.control({"type": "supervisor", "job": "demo", "status": {"state": "running"}})
        assert work["ok"] is False and work["plan"] is None
    finally:
        client.close()
    assert caps(hub) == before
    assert "demo" not in hub.snapshot()["jobs"]


def test_gpumix_top_readonly_says_so_in_its_hello(tcp_hub: tuple[Hub, HubServer, str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumix.tui import main as top
    from gpumix.tui.remote import open_source

    _, _, address = tcp_hub
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    args = top.build_parser().parse_args(["--readonly", "--hub", address])
    source = open_source("gpumix-top", args)
    assert isinstance(source, HubClient) and source.readonly
    assert source.control({"type": "power", "action": "reset", "gpus": [0]})["ok"] is False
    source.close()


# -- the Unix socket: owner-only, and peers of another uid refused --------------------------------


def test_peer_refusal_by_uid() -> None:
    assert auth.peer_refusal(None) is None  # no SO_PEERCRED: the 0600 socket is the guard
    assert auth.peer_refusal(os.getuid()) is None
    assert "not the hub's owner" in auth.peer_refusal(os.getuid() + 4242)
    assert auth.peer_refusal(65534, own_uid=0) == "peer uid 65534 is not the hub's owner (uid 0)"


def test_unix_peer_of_another_user_is_refused(tcp_hub: tuple[Hub, HubServer, str], folder: str) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another user")
    _, server, _ = tcp_hub
    assert stat.S_IMODE(os.stat(server.socket_path).st_mode) == 0o600
    # open the doors the file modes keep shut, to reach the SO_PEERCRED check behind them
    os.chmod(folder, 0o755)
    os.chmod(server.socket_path, 0o666)
    hello = protocol.encode({"type": "hello", "role": "client"})
    snapshot = protocol.encode({"type": "snapshot"})
    before = len(server.closed_reasons)
    pid = os.fork()
    if pid == 0:  # the child: nobody, asking for a snapshot
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(3)
            sock.connect(server.socket_path)
            received = b""
            try:
                sock.sendall(hello + snapshot)
                while chunk := sock.recv(4096):
                    received += chunk
            except ConnectionError:
                pass
            # 0: the hub closed with its one-line refusal and no snapshot
            code = 0 if b'"snapshot"' not in received and b"not the hub's owner" in received else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "a peer of another uid got an answer"
    assert wait_until(lambda: len(server.closed_reasons) > before)
    assert "peer uid 65534 is not the hub's owner" in server.closed_reasons[-1]
    # the owner still gets in
    client = HubClient(server.socket_path, timeout_s=3)
    assert client.snapshot() is not None
    client.close()


# -- what `gpumix-top --once --hub` says when it cannot read a hub ------------------------------------------


def test_once_says_why_no_snapshot_came(tcp_hub: tuple[Hub, HubServer, str], monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], folder: str) -> None:
    from gpumix.tui import main as top

    _, _, address = tcp_hub
    monkeypatch.setenv("GPUMIX_TOKEN", "cd" * 32)
    assert top.main(["--once", "--hub", address]) == 1
    assert capsys.readouterr().err == f"{address}: the hub refused the connection: wrong token\n"
    missing = os.path.join(folder, "none.sock")
    assert top.main(["--once", "--hub", missing]) == 1
    assert capsys.readouterr().err.startswith(f"no hub answered at {missing} (")
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    assert top.main(["--once", "--json", "--hub", address]) == 0
    assert json.loads(capsys.readouterr().out)["hostname"] == "rig01"
