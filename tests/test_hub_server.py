"""The hub's socket server over real Unix sockets: agents in, clients out, bad peers cost one connection."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumix.agent import Agent
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.history import HISTORY_FIELDS
from gpumix.hub.server import HubAlreadyRunning, HubServer
from gpumix.sim.rig import load_builtin_rig
from gpumix.wire import protocol
from tests.conftest import FixedHostSampler, wait_until


@pytest.fixture
def sock_path() -> Iterator[str]:
    # A short folder: Unix socket paths are limited to ~107 bytes, pytest's tmp_path can be longer.
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    yield os.path.join(folder, "hub.sock")
    shutil.rmtree(folder, ignore_errors=True)


def make_hub(hardware: Any = None) -> Hub:
    hub = Hub(hardware or simulated_hardware(load_builtin_rig("mixed-10")), host_sampler=FixedHostSampler(),
              hostname="rig01")
    hub.tick()  # snapshot() is None before the first sampling round
    return hub


@pytest.fixture
def served(demo_hardware: Any, sock_path: str) -> Iterator[tuple[Hub, HubServer]]:
    hub = make_hub(demo_hardware)
    server = HubServer(hub, sock_path)
    server.start()
    yield hub, server
    server.stop()


def raw_connect(path: str, timeout_s: float = 2.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.connect(path)
    return sock


def frame(body: bytes) -> bytes:
    return protocol.HEADER.pack(len(body)) + body


def closed_by_hub(sock: socket.socket, timeout_s: float = 3.0) -> bool:
    """True once the hub closed its end (EOF or reset); False if it still holds it open."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


AGENT_HELLO = {"type": "hello", "role": "agent", "rank": 0, "pid": 4242, "job": "t"}


# -- (a) agents' steps arrive ---------------------------------------------------------


def test_agent_steps_arrive_in_snapshot(served: tuple[Hub, HubServer], sock_path: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    hub, _ = served
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    agents = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        agents.append(Agent(address=sock_path, job="t"))
    try:
        for index in range(6):
            for agent in agents:
                with agent.step(samples=8) as step:
                    time.sleep(0.01)
                    step.loss = 2.0 - 0.1 * index
                    step.lr = 1e-3
        # steps 0..4 are sent when their next step ends; step 5 waits for close()
        def ranks_at(step: int) -> list[dict[str, Any]] | None:
            ranks = (hub.snapshot() or {}).get("ranks", [])
            return ranks if len(ranks) == 2 and all(r["step"] == step for r in ranks) else None

        ranks = wait_until(lambda: ranks_at(4))
        assert ranks, hub.snapshot()["ranks"]
        for agent in agents:
            agent.close()
        ranks = wait_until(lambda: (r := ranks_at(5)) and not any(x["connected"] for x in r) and r)
        assert ranks, hub.snapshot()["ranks"]
    finally:
        for agent in agents:
            agent.close()

    snapshot = hub.snapshot()
    gpu0 = snapshot["gpus"][0]["uuid"]
    for rank, summary in enumerate(snapshot["ranks"]):
        assert summary["rank"] == rank and summary["job"] == "t" and summary["world_size"] == 2
        assert summary["pid"] == os.getpid()
        # two agents step in turn, each sleeping 10 ms: ~20 ms a step, never below 10 ms
        assert 0.009 <= summary["step_time_s"] < 0.5
        assert summary["samples_per_s"] == pytest.approx(8 / summary["step_time_s"])
        assert summary["loss"] == pytest.approx(2.0 - 0.5)
        assert summary["loss_history"] == pytest.approx([2.0 - 0.1 * i for i in range(6)])
        assert summary["lr"] == pytest.approx(1e-3)
        assert summary["dropped"] == 0
    assert snapshot["ranks"][0]["gpu_uuid"] == gpu0  # LOCAL_RANK 0 -> cuda:0 -> NVML 0


# -- (b) a bad peer costs its own connection only --------------------------------------

HELLO = frame(json.dumps({"v": 1, **AGENT_HELLO}).encode())

BAD_PEERS = [
    ("bad json", frame(b"{not json"), "not JSON"),
    ("not utf-8", frame(b"\xff\xfe\xfd"), "not JSON"),
    ("not an object", frame(b"[1,2,3]"), "JSON object"),
    ("wrong version", frame(b'{"v":2,"type":"hello","role":"agent","rank":0}'), "protocol version"),
    ("no version", frame(b'{"type":"hello","role":"client"}'), "protocol version"),
    ("unknown type", frame(b'{"v":1,"type":"launch_missiles"}'), "unknown message type"),
    ("oversized header", struct.pack(">I", protocol.MAX_AGENT_FRAME_BYTES + 1), "over the"),
    ("huge header", b"\xff\xff\xff\xff", "over the"),
    ("empty frame", struct.pack(">I", 0), "empty frame"),
    ("step before hello", frame(b'{"v":1,"type":"step","step":0,"step_time_s":0.1}'), "first message"),
    ("hello without role", frame(b'{"v":1,"type":"hello"}'), "first message"),
    ("string step time", HELLO + frame(b'{"v":1,"type":"step","step":0,"step_time_s":"0.1"}'),
     "'step_time_s' must be a number"),
    ("NaN step time", HELLO + frame(b'{"v":1,"type":"step","step":0,"step_time_s":NaN}'), "finite"),
    ("infinite samples", HELLO + frame(b'{"v":1,"type":"step","step":1,"step_time_s":0.1,"samples":1e999}'),
     "finite"),
    ("huge integer", HELLO + frame(b'{"v":1,"type":"step","step":1,"step_time_s":0.1,"tokens":' + b"9" * 400 + b"}"),
     "out of range"),
    ("negative rank", frame(b'{"v":1,"type":"hello","role":"agent","rank":-1}'), "'rank' must be >= 0"),
    ("client hello twice", frame(b'{"v":1,"type":"hello","role":"client"}') * 2, "hello sent twice"),
    ("agent sends a request", HELLO + frame(b'{"v":1,"type":"snapshot"}'), "unknown message type"),
]


def test_bad_peers_close_only_their_connection(served: tuple[Hub, HubServer], sock_path: str) -> None:
    hub, server = served
    client = HubClient(sock_path, timeout_s=2.0)
    assert client.snapshot() is not None
    client_sock = client._sock  # the same connection must serve every snapshot below
    failures: list[str] = []
    served_count = 0
    stop = threading.Event()

    def poll() -> None:  # a well-behaved viewer, asking all the while
        nonlocal served_count
        while not stop.is_set():
            if client.snapshot() is None:
                failures.append("no snapshot")
            else:
                served_count += 1
            time.sleep(0.002)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        for name, payload, reason in BAD_PEERS:
            before = len(server.closed_reasons)
            with raw_connect(sock_path) as sock:
                sock.sendall(payload)
                assert closed_by_hub(sock), f"{name}: the hub kept the connection open"
            assert wait_until(lambda b=before: len(server.closed_reasons) > b), name  # noqa: B023
            assert reason in server.closed_reasons[-1], (name, server.closed_reasons[-1])
        counted = served_count
        assert wait_until(lambda: served_count > counted + 3)
    finally:
        stop.set()
        poller.join(5)
    assert not failures
    assert client._sock is client_sock, "the good client's connection was dropped"
    assert server._thread is not None and server._thread.is_alive()
    # a NaN must never have reached the snapshot: every client could encode it
    protocol.encode({"type": "snapshot", "snapshot": hub.snapshot()})
    client.close()


def test_absurd_finite_numbers_never_reach_the_snapshot(served: tuple[Hub, HubServer], sock_path: str) -> None:
    """Finite but absurd numbers (a denormal step time, 1e308 samples, -1e308 s of communication) are
    dropped at ingest, field by field, and counted; the connection and the other fields stay."""
    hub, _ = served
    with raw_connect(sock_path) as sock:
        sock.sendall(HELLO + frame(b'{"v":1,"type":"step","step":0,"step_time_s":0.5,"samples":8}')
                     + frame(b'{"v":1,"type":"step","step":1,"step_time_s":1e-308,"samples":1e308,"comm_s":-1e308}')
                     + frame(b'{"v":1,"type":"step","step":2,"step_time_s":0.5,"samples":1e308,"comm_s":-1e308,'
                             b'"loss":-1.7e308,"tokens":8}'))
        assert wait_until(lambda: any(r["step"] == 2 for r in hub.snapshot()["ranks"]))
        client = HubClient(sock_path, timeout_s=2.0)
        snapshot = client.snapshot()
        client.close()
        # bad values cost the values, not the connection: a next step still arrives
        sock.sendall(frame(b'{"v":1,"type":"step","step":3,"step_time_s":0.5,"samples":8}'))
        assert wait_until(lambda: any(r["step"] == 3 for r in hub.snapshot()["ranks"]))
    assert snapshot is not None
    (rank,) = snapshot["ranks"]
    assert rank["connected"] and rank["step_time_s"] == 0.5 and rank["rejected_values"] == 3 + 3
    assert rank["samples_per_s"] == pytest.approx(16.0) and rank["tokens_per_s"] == pytest.approx(16.0)
    assert rank["comm_share"] is None and rank["loss"] is None and rank["loss_history"] == []


# -- (c) fuzz: whatever arrives, the hub keeps serving ----------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=16))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
known_keys = st.sampled_from(["v", "type", "role", "rank", "step", "step_time_s", "samples", "loss", "pid", "job",
                              "env", "versions", "channels", "index", "name", "world_size", "nvml_index",
                              "n", "columns", "send_period_s"])
# the agent's columnar frame (gpumix/wire/step_columns.py): known and odd columns, lists of any length or one value
step_frames = st.builds(
    lambda n, columns: {"v": 1, "type": "steps", "n": n, "columns": columns},
    st.one_of(st.integers(-1, 5), st.just(1025), st.booleans(), st.floats()),
    st.dictionaries(st.sampled_from(["step", "step_time_s", "samples", "loss", "t", "amp_dtype", "odd"]),
                    st.one_of(json_scalars, st.lists(json_scalars, max_size=6)), max_size=6),
)
messages = st.builds(
    lambda base, extra: {**extra, **base},
    st.fixed_dictionaries({}, optional={
        "v": st.sampled_from([1, 1, 1, 2, 0, "1", None, 1.0, True]),
        "type": st.sampled_from(sorted(protocol.AGENT_TYPES | protocol.CLIENT_TYPES) + ["nope", ""]),
        "role": st.sampled_from(["agent", "client", "root", 1]),
    }),
    st.dictionaries(st.one_of(known_keys, st.text(max_size=8)), json_values, max_size=8),
)
payloads = st.one_of(
    st.lists(st.binary(max_size=512), min_size=1, max_size=3),  # arbitrary bytes in valid frames
    st.lists(messages.map(lambda m: json.dumps(m).encode()), min_size=1, max_size=4),  # NaN allowed
    st.tuples(st.just(HELLO), st.lists(messages.map(lambda m: json.dumps(m).encode()), max_size=4))
    .map(lambda pair: [pair[0][4:], *pair[1]]),  # a valid agent hello first, then anything
    st.lists(step_frames.map(lambda m: json.dumps(m).encode()), min_size=1, max_size=4)
    .map(lambda frames: [HELLO[4:], *frames]),  # a valid agent hello, then columnar frames
)


@pytest.fixture(scope="module")
def fuzz_hub() -> Iterator[tuple[Hub, HubServer, str]]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    path = os.path.join(folder, "hub.sock")
    hub = make_hub()
    server = HubServer(hub, path)
    server.start()
    yield hub, server, path
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(bodies=payloads)
def test_fuzz_hub_survives(fuzz_hub: tuple[Hub, HubServer, str], bodies: list[bytes]) -> None:
    hub, server, path = fuzz_hub
    with raw_connect(path) as sock:
        try:
            sock.sendall(b"".join(frame(body) for body in bodies))
            sock.shutdown(socket.SHUT_WR)  # whatever the hub waits for next will never come
        except (BrokenPipeError, ConnectionResetError):
            pass  # the hub already closed on an early frame
        assert closed_by_hub(sock)
    client = HubClient(path, timeout_s=2.0)
    try:
        snapshot = client.snapshot()
    finally:
        client.close()
    assert snapshot is not None and "ranks" in snapshot
    assert server._thread is not None and server._thread.is_alive()


# -- (d) socket file: owner-only, single hub, stale files replaced ----------------------


def test_socket_is_owner_only_and_single(served: tuple[Hub, HubServer], sock_path: str) -> None:
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    second = HubServer(make_hub(), sock_path)
    with pytest.raises(HubAlreadyRunning):
        second.start()
    # the refused second hub left the first one's socket alone
    assert HubClient(sock_path).snapshot() is not None


def test_stale_socket_file_is_replaced(sock_path: str) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock_path)  # the file of a hub that died: nobody listens
    stale.close()
    assert os.path.exists(sock_path)
    server = HubServer(make_hub(), sock_path)
    server.start()
    try:
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
        client = HubClient(sock_path, timeout_s=2.0)
        assert client.snapshot() is not None
        client.close()
    finally:
        server.stop()
    assert not os.path.exists(sock_path)


# -- (e) series ----------------------------------------------------------------------------


def test_series_and_unknown_series(served: tuple[Hub, HubServer], sock_path: str) -> None:
    hub, server = served
    hub.tick()
    hub.tick()
    client = HubClient(sock_path, timeout_s=2.0)
    try:
        for name in HISTORY_FIELDS:
            values = client.series(0, name)
            assert values == hub.series(0, name)
            assert len(values) == 3
        assert all(isinstance(v, float) and v >= 0 for v in client.series(0, "power_w"))
        assert client.series(999, "power_w") == []  # no such GPU: empty, connection kept
        kept = client._sock
        assert client.series(0, "secret_field") == []
        assert "no history named 'secret_field'" in server.closed_reasons[-1]
        assert client.snapshot() is not None  # reconnects afterwards
        assert client._sock is not kept
    finally:
        client.close()
