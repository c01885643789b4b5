"""The TCP channel inside TLS: `gpumix hub --tcp ... --tls-cert/--tls-key`, clients at tls://HOST:PORT
verifying the hub's certificate ($GPUMIX_TLS_CA). A certificate made with openssl for 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix import auth
from gpumix.cli_remote import tcp_settings
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from tests.conftest import FixedHostSampler
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
