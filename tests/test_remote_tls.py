"""The TCP channel inside TLS: `gpumix hub --tcp ... --tls-cert/--tls-key`, clients at tls://HOST:PORT
verifying the hub's certificate ($GPUMIX_TLS_CA). A certificate made with openssl for 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.cli.remote import tcp_settings
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from gpumix.wire import auth
from tests.conftest import FixedHostSampler, wait_until
from tests.test_agent_send_period import hub_step, run_steps, stepped_until
from tests.test_remote_auth import TOKEN, assert_agent_reports, tcp_args


def make_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gpumix-test",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_hub(demo_hardware: Any) -> Iterator[tuple[Hub, HubServer, str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="gmx", dir="/tmp"))
    cert, key = make_certificate(folder, "hub")
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.tick()
    server = HubServer(hub, str(folder / "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN,
                       tls=auth.server_tls_context(str(cert), str(key)))
    server.start()
    yield hub, server, f"tls://127.0.0.1:{server.tcp_port}", cert
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def test_a_client_that_trusts_the_certificate_reads_and_controls(tls_hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _, address, cert = tls_hub
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    client = HubClient(address, token=TOKEN)
    snapshot = client.snapshot()
    assert snapshot is not None and len(snapshot["gpus"]) == 10
    reply = client.control({"type": "power", "action": "set", "gpus": [1], "watts": 140})
    assert reply["ok"], reply  # signed as over plain TCP
    assert hub.tick()["gpus"][1]["power_cap_w"] == pytest.approx(140)
    client.close()


def test_an_agent_reports_over_tls(tls_hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _, address, cert = tls_hub
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    assert_agent_reports(hub, address, "tlsjob", monkeypatch)


def test_an_untrusted_certificate_or_plain_tcp_gets_nothing(tls_hub, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    hub, _, address, _ = tls_hub
    other, _ = make_certificate(tmp_path, "other")  # a different CA: the hub's certificate does not verify
    monkeypatch.setenv(auth.TLS_CA_ENV, str(other))
    client = HubClient(address, token=TOKEN, timeout_s=2)
    assert client.snapshot() is None
    reply = client.control({"type": "power", "action": "set", "gpus": [1], "watts": 140})
    assert reply["ok"] is False and "certificate" in reply["message"]
    plain = HubClient(address.replace("tls://", "tcp://"), token=TOKEN, timeout_s=2)
    assert plain.snapshot() is None  # a TLS listener does not speak plain frames
    assert hub.tick()["gpus"][1]["power_cap_w"] != pytest.approx(140)
    monkeypatch.delenv(auth.TLS_CA_ENV)
    trusted = HubClient(address, token=TOKEN)  # the system CAs do not know it either
    assert trusted.snapshot() is None


def test_tls_flags_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    cert, key = make_certificate(tmp_path, "hub")
    tcp, _, tls = tcp_settings("gpumix", tcp_args(tcp="0.0.0.0:7072", tls_cert=str(cert), tls_key=str(key)))
    assert tls is not None and "warning" not in capsys.readouterr().err  # TLS: no plaintext warning
    for given, message in (({"tcp": "7072", "tls_cert": str(cert)}, "go together"),
                           ({"tls_cert": str(cert), "tls_key": str(key)}, "needs --tcp"),
                           ({"tcp": "7072", "tls_cert": str(key), "tls_key": str(key)}, "cannot use the TLS certificate")):
        with pytest.raises(SystemExit):
            tcp_settings("gpumix", tcp_args(**given))
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert os.environ.get(auth.TLS_CA_ENV) is None


# -- what a client is told (and the hub's deadline for a handshake that never comes) -------------------------


def test_each_failure_says_what_went_wrong(tls_hub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, _, address, cert = tls_hub
    other, _ = make_certificate(tmp_path, "other")
    monkeypatch.setenv(auth.TLS_CA_ENV, str(other))
    untrusted = HubClient(address, token=TOKEN, timeout_s=2)
    assert untrusted.snapshot() is None
    assert untrusted.last_error.startswith(f"{address}: the hub's TLS certificate is not trusted (")
    assert auth.TLS_CA_ENV in untrusted.last_error
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    plain_address = address.replace("tls://", "tcp://")
    plain = HubClient(plain_address, token=TOKEN, timeout_s=2)
    assert plain.snapshot() is None
    assert plain.last_error == f"{plain_address}: the hub speaks TLS: use {address}"
    wrong = HubClient(address, token="cd" * 32, timeout_s=2)
    assert wrong.snapshot() is None
    assert wrong.last_error == f"{address}: the hub refused the connection: wrong token"
    right = HubClient(address, token=TOKEN, timeout_s=2)
    assert right.snapshot() is not None and right.last_error is None
    right.close()
    gone = HubClient("tls://127.0.0.1:1", token=TOKEN, timeout_s=2)
    assert gone.snapshot() is None and gone.last_error.startswith("no hub answered at tls://127.0.0.1:1 (")


def test_tls_against_a_plain_hub_says_use_tcp(demo_hardware: Any, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    cert, _ = make_certificate(tmp_path, "ca")
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.tick()
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    server = HubServer(hub, os.path.join(folder, "hub.sock"), tcp=("127.0.0.1", 0), token=TOKEN)
    server.start()
    try:
        client = HubClient(f"tls://127.0.0.1:{server.tcp_port}", token=TOKEN, timeout_s=3)
        assert client.snapshot() is None
        assert "the TLS handshake failed" in client.last_error
        assert f"use tcp://127.0.0.1:{server.tcp_port}" in client.last_error
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_handshake_that_never_comes_is_closed(tls_hub) -> None:
    _, server, _, _ = tls_hub
    assert server.tcp_url == f"tls://127.0.0.1:{server.tcp_port}"  # what the banner should print
    sock = socket.create_connection(("127.0.0.1", server.tcp_port), timeout=20)
    try:
        assert wait_until(lambda: server.tcp_waiting == 1)
        try:
            assert sock.recv(1) == b""  # closed by the hub's deadline, not by this side's timeout
        except ConnectionResetError:
            pass  # an aborted handshake may end in a reset: closed all the same
        assert wait_until(lambda: server.tcp_waiting == 0 and server.tcp_open == 0)
        assert wait_until(lambda: "TLS handshake failed" in server.closed_reasons[-1])
    finally:
        sock.close()


def test_an_agent_keeps_one_tls_connection(tls_hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's TLS layer writes after the handshake (TLS 1.3 session tickets): that is no close. Taken
    for one, the agent reconnected at every other write (8 connections in 200 steps here) and closed with
    the tickets unread, a reset that could drop the steps just written."""
    from gpumix.agent import Agent

    hub, _, address, cert = tls_hub
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    monkeypatch.setenv("GPUMIX_AGENT_SEND_PERIOD_S", "0.1")
    agent = Agent(address=address, job="one-tls-link")
    try:
        run_steps(agent, 200, 0.01)
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "one-tls-link") == 199, 10)
    assert agent.sender.connects == 1 and agent.sender.sent == 200


def test_an_agent_falls_back_to_step_messages_against_an_older_tls_hub(tls_hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tls:// hub from before the columnar frame refuses it and closes with its reason. Over TLS the
    reason must be read too (recv with a flag raises ValueError on a TLS socket): else the agent kept
    sending frames, and every write's steps were refused, for ever (review)."""
    from gpumix.agent import Agent
    from gpumix.wire import protocol

    hub, _, address, cert = tls_hub
    monkeypatch.setenv(auth.TLS_CA_ENV, str(cert))
    monkeypatch.setenv("GPUMIX_TOKEN", TOKEN)
    monkeypatch.setattr(protocol, "AGENT_TYPES", protocol.AGENT_TYPES - {"steps"})
    agent = Agent(address=address, job="old-tls-hub")
    try:
        run_steps(agent, 10, 0.01)  # their frame is refused: these steps are lost, the agent learns
        # the hub closes at once; the sender reads why at its next write: steps go on until it has
        steps = 10 + stepped_until(agent, lambda: not agent.sender.columns, 30.0)
        run_steps(agent, 3, 0.01)  # sent as messages
        steps += 3
    finally:
        agent.close()
    assert wait_until(lambda: hub_step(hub, "old-tls-hub") == steps - 1, 10)
    assert not agent.sender.columns, "the agent never read the hub's reason"
