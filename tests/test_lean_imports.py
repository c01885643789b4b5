"""What the dashboard, the clients and the agent leave unloaded (issue 13: the dashboard's RSS).

OpenSSL (ssl with libssl, and hashlib/hmac with libcrypto) is ~5 MB of a ~48 MB dashboard: it loads
only where TCP or TLS is used. asyncio imports ssl as it loads; gpumix-top loads asyncio with ssl
blocked (gpumix/cli/asyncio_without_ssl.py), and a tls:// hub still works through the blocking client,
which imports the real ssl when it connects. The recorder (sqlite3) loads only with --record.
Checked in fresh interpreters and in a running gpumix-top's own memory map.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.server import HubServer
from tests.conftest import FixedHostSampler
from tests.test_remote_auth import TOKEN
from tests.test_remote_tls import make_certificate, tls_hub  # noqa: F401  (tls_hub: a TLS hub's fixture)

REPO = Path(__file__).resolve().parent.parent
OPENSSL_MODULES = {"ssl", "_ssl", "_hashlib", "hashlib", "hmac"}
OPENSSL_FILES = ("libssl", "libcrypto", "/_ssl.", "/_hashlib.")


def loaded_after(code: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", f"{code}; import sys, json; print(json.dumps(sorted(sys.modules)))"],
                            capture_output=True, text=True, check=True, cwd="/")
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize("module", ["gpumix.tui.main", "gpumix.hub.client", "gpumix.wire.auth", "gpumix.cli.remote",
                                    "gpumix.agent.sender"])
def test_clients_the_tui_entry_and_the_agent_load_no_openssl(module: str) -> None:
    loaded = loaded_after(f"import {module}")
    assert not OPENSSL_MODULES & loaded, sorted(OPENSSL_MODULES & loaded)


def test_a_one_shots_client_makes_no_dataclass_or_snapshot_typeddict() -> None:
    """`gpumix-top --once` attached to a hub: dataclasses (with inspect, ast, dis) and the snapshot's TypedDicts
    were ~18 ms of its ~110 ms on the 2-core box, for a type hint and one frozen class."""
    loaded = loaded_after("import gpumix.tui.main, gpumix.hub.client")
    assert not {"dataclasses", "inspect", "gpumix.wire.snapshot_types"} & loaded


ATTACHED_ONE_SHOT = """
import json, sys
from gpumix.cli.main import main
sys.argv = ["gpumix", *json.loads(sys.argv[1])]
try:
    code = main()
except SystemExit as error:
    code = error.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("command", [["doctor"], ["power", "show"]])
def test_doctor_and_power_show_attached_load_no_dataclass_profiler_or_snapshot_typeddict(
        command: list[str], hub_socket: tuple[Hub, str]) -> None:
    """Attached to a hub, doctor builds the hub's findings and power show reads its snapshot: the dataclasses
    module (with inspect), the power profiler and the snapshot's TypedDicts were ~28 ms of their imports
    on the 2-core box, for a finding's record, the profile flags' defaults and type hints."""
    _, path = hub_socket
    result = subprocess.run([sys.executable, "-c", ATTACHED_ONE_SHOT, json.dumps([*command, "--hub", path])],
                            capture_output=True, text=True, cwd="/", timeout=60)
    *printed, last = result.stdout.strip().splitlines()
    outcome = json.loads(last)
    assert outcome["code"] in (0, 1, 2), result.stderr[-2000:]  # doctor: 1 for warnings on the demo rig
    assert any(line.startswith(("[", "healthy", "GPU")) for line in printed), printed  # findings, or the caps table
    loaded = set(outcome["modules"])
    assert not {"dataclasses", "inspect", "gpumix.wire.snapshot_types", "gpumix.power.profile"} & loaded
    assert "gpumix.hub.client" in loaded and "gpumix.hub.core" not in loaded  # attached, not a hub of its own


def test_the_record_flags_load_the_recorder_only_to_record() -> None:
    code = ("import argparse; from gpumix.cli.recording import resolve_record_flags;"
            " args = argparse.Namespace(record=None, record_max_size=None); resolve_record_flags('t', args)")
    assert not {"sqlite3", "gpumix.record.recorder"} & loaded_after(code)
    code = ("import argparse; from gpumix.cli.recording import resolve_record_flags;"
            " args = argparse.Namespace(record='x.db', record_max_size=None); resolve_record_flags('t', args);"
            " assert args.record_max_size > 0")
    assert "gpumix.record.recorder" in loaded_after(code)  # with --record the default size fills in


ASYNCIO_WITHOUT_SSL = """
import json, os, sys, tempfile
from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl

applied = import_asyncio_without_ssl()
ssl_loaded_after_asyncio = "ssl" in sys.modules
import asyncio

async def echo_once(path):
    async def serve(reader, writer):
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()
    server = await asyncio.start_unix_server(serve, path)
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"hello")
    answer = await reader.readexactly(5)
    writer.close()
    server.close()
    return answer.decode()

echo = asyncio.run(echo_once(os.path.join(tempfile.mkdtemp(), "s")))
plain = type(sys.modules["asyncio.sslproto"]).__name__  # the stand-in, after plain sockets were served
import ssl  # the real module: the block lasted only while asyncio loaded
real_ssl = hasattr(ssl, "SSLContext")

async def tls_through_asyncio():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.open_connection("127.0.0.1", port, ssl=ssl.create_default_context())
        return "connected"
    except RuntimeError as error:
        return str(error)
    finally:
        server.close()

tls = asyncio.run(tls_through_asyncio())
real = sys.modules["asyncio.sslproto"]
import asyncio.base_events, asyncio.selector_events
print(json.dumps({"applied": applied, "ssl_loaded": ssl_loaded_after_asyncio, "echo": echo, "real_ssl": real_ssl,
                  "plain": plain, "tls": tls, "after": type(real).__name__, "without_ssl": real.ssl is None,
                  "bound": asyncio.base_events.sslproto is real and asyncio.selector_events.sslproto is real}))
"""


def asyncio_without_ssl_outcome() -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", ASYNCIO_WITHOUT_SSL], capture_output=True, text=True, cwd="/",
                            timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_asyncio_without_ssl_serves_plain_sockets_and_refuses_tls_loudly() -> None:
    """The loops work on plain sockets; TLS through that asyncio raises, never sends in clear."""
    outcome = asyncio_without_ssl_outcome()
    assert (outcome["applied"], outcome["ssl_loaded"], outcome["echo"], outcome["real_ssl"]) == (True, False, "hello", True)
    assert "ssl module not available" in outcome["tls"]


def test_plain_sockets_keep_the_sslproto_stand_in_and_tls_loads_the_real_module_and_is_refused() -> None:
    """asyncio.sslproto kept out until a TLS transport is asked for (issue 13: the dashboard's RSS, ~0.1 MB):
    plain sockets are served with the stand-in in place, and a TLS connection then loads the real module,
    bound where asyncio reads it, still without ssl, and is refused as before."""
    outcome = asyncio_without_ssl_outcome()
    assert outcome["plain"] == "SslProtoStandIn"
    assert "ssl module not available" in outcome["tls"]
    assert outcome["after"] == "module" and outcome["without_ssl"] is True and outcome["bound"] is True


def test_asyncio_without_ssl_leaves_a_process_that_already_has_them_alone() -> None:
    code = ("import ssl, json; from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl;"
            " applied = import_asyncio_without_ssl(); import asyncio.base_events as b;"
            " print(json.dumps([applied, b.ssl is ssl]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert json.loads(result.stdout) == [False, True]


def test_a_tls_hub_is_read_and_controlled_after_asyncio_loaded_without_ssl(tls_hub: Any) -> None:  # noqa: F811
    """The TLS path end to end (a real TLS listener, certificate checked) from a process whose asyncio
    has no ssl: the blocking client imports ssl when it connects."""
    hub, _, address, cert = tls_hub
    code = ("import json, sys; from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl;"
            " applied = import_asyncio_without_ssl(); from gpumix.hub.client import HubClient;"
            f" client = HubClient({address!r}, token={TOKEN!r}); snapshot = client.snapshot();"
            " reply = client.control({'type': 'power', 'action': 'set', 'gpus': [2], 'watts': 150});"
            " print(json.dumps([applied, len(snapshot['gpus']), reply['ok'], client.last_error]))")
    env = {**os.environ, "GPUMIX_TLS_CA": str(cert)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env,
                            check=True, timeout=60)
    assert json.loads(result.stdout) == [True, 10, True, None]
    assert hub.tick()["gpus"][2]["power_cap_w"] == pytest.approx(150)


# -- a running gpumix-top's own memory map ----------------------------------------------------------------


@pytest.fixture
def unix_hub(demo_hardware: Any) -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="gmx", dir="/tmp"))
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.tick()
    server = HubServer(hub, str(folder / "hub.sock"))
    server.start()
    yield str(folder / "hub.sock")
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def mapped_files_of_a_running_dashboard(args: list[str], drawn: bytes, timeout_s: float = 60.0,
                                        env: dict[str, str] | None = None) -> set[str]:
    """Run gpumix-top in an 80x24 pseudo-terminal until its screen shows `drawn`, then the files mapped
    into its memory (/proc/PID/maps) while it runs; it quits with q."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "GPUMIX_HUB": "/nonexistent/hub.sock", **(env or {})}  # never a user's hub
    process = subprocess.Popen([sys.executable, "-m", "gpumix.tui.main", *args], stdin=slave, stdout=slave,
                               stderr=slave, env=env, start_new_session=True, close_fds=True, cwd="/")
    os.close(slave)
    output = bytearray()
    try:
        deadline = time.monotonic() + timeout_s
        while drawn not in output and time.monotonic() < deadline and process.poll() is None:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
        assert drawn in output, (process.poll(), bytes(output[-2000:]))
        with open(f"/proc/{process.pid}/maps") as maps:
            files = {line.split()[-1] for line in maps if "/" in line}
        os.write(master, b"q")
        process.wait(timeout=20)
        return files
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def test_the_dashboard_attached_to_a_hub_maps_no_openssl(unix_hub: str) -> None:
    files = mapped_files_of_a_running_dashboard(["--hub", unix_hub, "--interval", "1"], drawn=b"3090")
    assert not [path for path in files if any(part in path for part in OPENSSL_FILES)]
    assert any("/_asyncio." in path for path in files)  # it did run its event loop


def test_the_dashboard_with_a_hub_of_its_own_maps_no_sqlite_without_record_and_no_openssl() -> None:
    files = mapped_files_of_a_running_dashboard(["--sim", str(REPO / "benchmarks" / "rig_1gpu.toml"), "--interval", "1"],
                                                drawn=b"4090")
    assert not [path for path in files if "sqlite" in path]
    # the hub server's ssl is an annotation and the probe store hashes lazily: no OpenSSL in-process either
    assert not [path for path in files if any(part in path for part in OPENSSL_FILES)]


@pytest.mark.parametrize(("argv", "env_hub", "without_ssl"), [
    ([], None, True), (["--hub", "/tmp/x.sock"], None, True), (["--hub", "tcp://127.0.0.1:9"], None, True),
    (["--hub", "tls://127.0.0.1:9"], None, False), (["--hub", "/tmp/x.sock", "--hub", "tls://h:9"], None, False),
    ([], "tls://127.0.0.1:9", False),
])
def test_gpumix_top_keeps_ssl_in_asyncio_where_a_tls_hub_is_named(argv: list[str], env_hub: str | None,
                                                                   without_ssl: bool) -> None:
    code = ("import json; from gpumix.tui.main import build_parser, load_asyncio_without_ssl;"
            f" load_asyncio_without_ssl(build_parser().parse_args({argv!r})); import asyncio.base_events as b;"
            " print(json.dumps(b.ssl is None))")
    env = {key: value for key, value in os.environ.items() if key != "GPUMIX_HUB"}
    if env_hub:
        env["GPUMIX_HUB"] = env_hub
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env, check=True)
    assert json.loads(result.stdout) is without_ssl


@pytest.fixture
def tls_hub_process(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`gpumix hub --tcp 127.0.0.1:0 --tls-cert --tls-key` as its own process; its tls:// address and the
    environment a client needs (the CA, the token)."""
    cert, key = make_certificate(tmp_path, "hub")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    folder = Path(tempfile.mkdtemp(prefix="gmx", dir="/tmp"))
    env = {key: value for key, value in os.environ.items() if key != "GPUMIX_HUB"}
    env.update(GPUMIX_TLS_CA=str(cert), GPUMIX_TOKEN=TOKEN, XDG_RUNTIME_DIR=str(folder), XDG_CONFIG_HOME=str(tmp_path))
    hub = subprocess.Popen([sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", str(REPO / "benchmarks" / "rig_1gpu.toml"),
                            "--socket", str(folder / "hub.sock"), "--tcp", "127.0.0.1:0", "--tls-cert", str(cert),
                            "--tls-key", str(key), "--token-file", str(token_file), "--interval", "0.5"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    try:
        line = hub.stdout.readline() if hub.stdout else ""
        assert "listening on" in line and "tls://" in line, (line, hub.stderr.read() if hub.poll() is not None else "")
        yield "tls://" + line.split("tls://", 1)[1].split()[0].rstrip(";"), env
    finally:
        hub.terminate()
        hub.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def test_gpumix_hub_serves_tls_to_the_one_shot_and_the_dashboard(tls_hub_process: tuple[str, dict[str, str]]) -> None:
    """`gpumix hub --tls-cert` (ssl loaded where --tls-cert asks for it) read by `gpumix-top --once` and by the
    interactive dashboard, each its own process: TLS works end to end after ssl went lazy."""
    address, env = tls_hub_process
    once = subprocess.run([sys.executable, "-m", "gpumix.tui.main", "--once", "--json", "--hub", address],
                          capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert once.returncode == 0, once.stderr[-500:]
    assert len(json.loads(once.stdout)["gpus"]) == 1
    files = mapped_files_of_a_running_dashboard(["--hub", address, "--interval", "1"], drawn=b"4090", env=env)
    assert any("libssl" in path for path in files)  # the one dashboard that needs OpenSSL has it


def test_real_hardware_wiring_leaves_the_rig_reader_unloaded() -> None:
    """On real GPUs the dashboard and the one-shots need RigError's class only, not the rig reader."""
    loaded = loaded_after("from gpumix.cli.hardware import RigError, open_hardware")
    assert not {"gpumix.sim.rig", "gpumix.sim.gpu_models", "importlib.resources"} & loaded
