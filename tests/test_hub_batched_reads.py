"""The hub reads an agent's frames many at a time (issue 13): FrameCutter, handle_frames and
Hub.agent_steps give what the frame-by-frame reading gave (the old path is kept here as the reference),
on random and hostile streams; the cutter's buffer stays bounded; a real socket's burst of frames goes
to the hub in few calls, every step in order."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.hub.agent_stream import READ_BYTES, AgentProtocol, FrameCutter, handle_frames
from gpumix.hub.connections import Silent, read_message
from gpumix.hub.ranks import parse_step, parse_transport
from gpumix.hub.server import HubServer
from gpumix.hub.step_frames import parse_steps
from gpumix.hw.hardware import Hardware
from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError
from tests.conftest import FixedHostSampler, ManualClock
from tests.test_agent_send_period import counted_reads
from tests.waiting import wait_until

SOCKET_PATH = f"/tmp/gmx-batched-{os.getpid()}.sock"
LIMIT = protocol.MAX_AGENT_FRAME_BYTES


def random_frame(rng: random.Random) -> bytes:
    """One frame an agent, a sloppy agent or a hostile peer might send."""
    roll = rng.random()
    if roll < 0.55:
        return protocol.encode({"type": "step", "step": rng.choice([0, 5, -1, 2**54]),
                                "step_time_s": rng.choice([0.1, 0.0, 2, "x", None]),
                                "samples": rng.choice([32, None, -4, 1e12, True]), "loss": rng.choice([2.5, None])})
    if roll < 0.62:  # the agent's columnar frame, well made or not
        n = rng.choice([1, 3, 0])
        return protocol.encode({"type": "steps", "n": n, "columns": {
            "step": rng.choice([list(range(5, 5 + n)), 7, [1, 2], None]), "step_time_s": rng.choice([0.1, [0.1] * n, "x"]),
            "samples": rng.choice([32, [None] * n, -4])}})
    if roll < 0.65:
        return protocol.encode({"type": "transport", "channels": rng.choice([
            [{"src": 0, "dst": 1, "transport": "SHM"}], "none", [{"src": -1, "dst": 0}]])})
    if roll < 0.7:
        return protocol.encode({"type": rng.choice(["bye", "hello", "snapshot", "nope"])})
    if roll < 0.8:  # not JSON, or JSON of the wrong shape or version
        body = rng.choice([b"{", b"\xff\xfe", b"[1,2]", b'{"v":9,"type":"step"}', json.dumps("x").encode()])
        return protocol.HEADER.pack(len(body)) + body
    if roll < 0.85:
        return protocol.HEADER.pack(rng.choice([0, LIMIT + 1, 2**32 - 1])) + b"{}"
    return protocol.encode({"type": "step", "step": 1, "step_time_s": 0.1, "note": "x" * rng.randint(0, 3000)})


def random_stream(rng: random.Random) -> bytes:
    return b"".join(random_frame(rng) for _ in range(rng.randint(0, 12))) + rng.choice([b"", b"\x00\x00", b"\x00\x00\x01\x00{"])


def random_chunks(data: bytes, rng: random.Random) -> Iterator[bytes]:
    start = 0
    while start < len(data):
        end = start + rng.choice([1, 3, 7, 100, 4096, READ_BYTES])
        yield data[start:end]
        start = end


# -- the reference: one frame at a time, as the server read before ----------------------------------


def frames_one_by_one(data: bytes) -> tuple[list[dict[str, Any]], str]:
    """Messages read_message gives from this stream, then how it ended: 'eof' or the error's text."""
    async def read_all() -> tuple[list[dict[str, Any]], str]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        messages = []
        while True:
            try:
                messages.append(await read_message(reader, protocol.AGENT_TYPES))
            except asyncio.IncompleteReadError:
                return messages, "eof"
            except ProtocolError as error:
                return messages, str(error)

    return asyncio.run(read_all())


def frames_cut(data: bytes, rng: random.Random) -> tuple[list[dict[str, Any]], str]:
    cutter = FrameCutter()
    messages = []
    try:
        for chunk in random_chunks(data, rng):
            for body in cutter.frames(chunk):
                messages.append(protocol.decode(body, protocol.AGENT_TYPES))
    except ProtocolError as error:
        return messages, str(error)
    return messages, "eof"


class Recorder:
    """A hub that writes down what it is fed, one entry per step."""

    def __init__(self) -> None:
        self.fed: list[tuple[str, Any]] = []
        self.calls = 0

    def agent_steps(self, key: Any, steps: list[dict[str, Any]]) -> None:
        self.calls += 1
        self.fed.extend(("step", dict(step)) for step in steps)

    def agent_step(self, key: Any, step: dict[str, Any]) -> None:
        self.fed.append(("step", dict(step)))

    def agent_transport(self, key: Any, channels: list[dict[str, Any]]) -> None:
        self.fed.append(("transport", channels))


def served_one_by_one(messages: list[dict[str, Any]], sink: Recorder) -> str:
    """The server's loop before: each message handled as it was read."""
    try:
        for message in messages:
            kind = message["type"]
            if kind == "step":
                sink.agent_step(None, parse_step(message))
            elif kind == "steps":  # a frame's steps, each as one message was
                for step in parse_steps(message):
                    sink.agent_step(None, step)
            elif kind == "transport":
                sink.agent_transport(None, parse_transport(message))
            elif kind == "bye":
                return "bye"
            else:
                raise ProtocolError(f"unexpected {kind!r} from an agent")
    except ProtocolError as error:
        return str(error)
    return "more"


def served_batched(bodies: list[bytes], sink: Recorder) -> str:
    try:
        return "bye" if handle_frames(sink, None, iter(bytearray(body) for body in bodies)) else "more"
    except ProtocolError as error:
        return str(error)


# -- the tests -------------------------------------------------------------------------------------


def test_cut_frames_are_the_frames_read_one_by_one_on_random_and_hostile_streams() -> None:
    rng = random.Random(11)
    endings: set[str] = set()
    for _ in range(1500):
        data = random_stream(rng)
        old = frames_one_by_one(data)
        assert frames_cut(data, rng) == old, data[:200]
        endings.add(old[1].split(":")[0][:20])
    assert "eof" in endings and len(endings) >= 4  # clean ends, and several kinds of refusal


def test_batched_handling_feeds_the_hub_what_one_by_one_handling_fed() -> None:
    rng = random.Random(12)
    outcomes: set[str] = set()
    for _ in range(1500):
        messages = []
        for _ in range(rng.randint(0, 15)):
            frame = random_frame(rng)
            try:
                messages.append(protocol.decode(frame[4:], protocol.AGENT_TYPES))
            except ProtocolError:
                continue
        bodies = [protocol.encode(message)[4:] for message in messages]
        old_sink, new_sink = Recorder(), Recorder()
        old, new = served_one_by_one(messages, old_sink), served_batched(bodies, new_sink)
        assert (new, new_sink.fed) == (old, old_sink.fed), messages
        assert new_sink.calls <= 1 + sum(m["type"] == "transport" for m in messages)
        outcomes.add(old.split(" ")[0])
    assert {"bye", "more", "unexpected"} <= outcomes and len(outcomes) >= 4


def test_the_cutter_keeps_at_most_one_incomplete_frame() -> None:
    cutter = FrameCutter()
    big = protocol.encode({"type": "step", "step": 1, "step_time_s": 0.1, "pad": "y" * (LIMIT - 100)})
    assert len(big) <= protocol.HEADER.size + LIMIT
    taken = []
    for start in range(0, len(big) * 3, 1000):  # three of the largest frames, a trickle of 1000 bytes
        taken.extend(cutter.frames((big * 3)[start:start + 1000]))
        assert cutter.pending_bytes <= protocol.HEADER.size + LIMIT
    assert len(taken) == 3 and cutter.pending_bytes == 0
    with pytest.raises(ProtocolError, match="over the"):
        list(cutter.frames(protocol.HEADER.pack(LIMIT + 1)))


def test_steps_before_a_bad_frame_count_and_a_bye_stops_the_reading() -> None:
    sink = Recorder()
    step = protocol.encode({"type": "step", "step": 3, "step_time_s": 0.1})[4:]
    with pytest.raises(ProtocolError, match="unexpected 'hello'"):
        handle_frames(sink, None, iter([bytearray(step), bytearray(step), bytearray(b'{"v":1,"type":"hello"}')]))
    assert [entry[1]["step"] for entry in sink.fed] == [3, 3] and sink.calls == 1
    cutter = FrameCutter()
    stream = protocol.encode({"type": "bye"}) + protocol.encode({"type": "step", "step": 4, "step_time_s": 0.1})
    assert handle_frames(sink, None, cutter.frames(stream)) is True
    assert len(sink.fed) == 2  # nothing after the bye


def test_agent_steps_is_agent_step_for_each(demo_hardware: Hardware) -> None:
    snapshots = []
    for batched in (False, True):
        hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01", clock=ManualClock(),
                  wall_clock=ManualClock(1.7e9))
        hub.tick()
        key = hub.agent_hello({"rank": 0, "world_size": 1, "local_rank": 0, "pid": 42, "hostname": "rig01",
                               "gpu_uuid": None, "nvml_index": 0, "job": "j", "run_id": None, "env": {},
                               "versions": {}})
        steps = [parse_step({"step": i, "step_time_s": 0.1 + i / 100, "samples": 32, "loss": 3 - i / 10,
                             "comm_s": 1e9 if i == 4 else 0.01}) for i in range(30)]
        if batched:
            hub.agent_steps(key, steps)
        else:
            for step in steps:
                hub.agent_step(key, step)
        snapshots.append((hub.snapshot(), hub.power_points()))
    assert snapshots[0] == snapshots[1]


def test_a_burst_of_frames_reaches_the_hub_in_few_calls(demo_hardware: Hardware) -> None:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01")
    hub.tick()
    calls = counted_reads(hub)
    server = HubServer(hub, SOCKET_PATH)
    server.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(SOCKET_PATH)
            sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(),
                                          "job": "burst"}))
            sock.sendall(b"".join(protocol.encode({"type": "step", "step": i, "step_time_s": 0.1, "samples": 8})
                                  for i in range(200)))  # one write: what the sender does every 0.1 s
            wait_until(lambda: sum(calls) == 200, 30, what="the 200 steps")
            stream = next(iter(hub._intake.table.streams.values()))
            assert [step["step"] for step in stream.steps] == list(range(80, 200))  # STEPS_KEPT, in order
            assert len(calls) <= 10, calls  # a read's frames together, not one call a frame
            sock.sendall(protocol.encode({"type": "bye"}))
            wait_until(lambda: not any(r["connected"] for r in (hub.snapshot() or {}).get("ranks") or []), 30,
                       what="the rank gone after its bye")
    finally:
        server.stop()


def test_a_bad_frame_after_good_ones_is_refused_with_its_reason_and_the_good_ones_count(
        demo_hardware: Hardware) -> None:
    """The agent's own protocol hands the connection back to its stream for the refusal (tell)."""
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler(), hostname="rig01")
    hub.tick()
    server = HubServer(hub, SOCKET_PATH)
    server.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(SOCKET_PATH)
            steps = b"".join(protocol.encode({"type": "step", "step": i, "step_time_s": 0.1}) for i in range(3))
            sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": os.getpid(),
                                          "job": "bad"}) + steps + protocol.HEADER.pack(7) + b"notjson")
            header = sock.recv(protocol.HEADER.size, socket.MSG_WAITALL)
            reply = json.loads(sock.recv(protocol.HEADER.unpack(header)[0], socket.MSG_WAITALL))
            assert reply["type"] == "error" and "not JSON" in reply["message"]
        stream = next(iter(hub._intake.table.streams.values()))
        assert [step["step"] for step in stream.steps] == [0, 1, 2]
        wait_until(lambda: "not JSON" in (server.closed_reasons or [""])[-1], 10, what="the reason logged")
    finally:
        server.stop()


@pytest.mark.parametrize(("lost", "ending"), [
    (None, asyncio.IncompleteReadError), (TimeoutError(errno.ETIMEDOUT, "Connection timed out"), Silent),
    (ConnectionResetError(), ConnectionResetError)])
def test_how_an_agent_connection_ended_is_what_the_stream_reader_said(lost: Exception | None, ending: type) -> None:
    """EOF and a reset are quiet ends for the handler; the kernel's keepalive is named as such."""
    async def end() -> BaseException | None:
        ours, theirs = socket.socketpair()
        reader = asyncio.StreamReader()
        transport, original = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: asyncio.StreamReaderProtocol(reader), ours)
        stream = AgentProtocol(Recorder(), None, transport, original, 5.0, lambda: 0.0)
        stream.connection_lost(lost)
        transport.close()
        theirs.close()
        return stream.done.exception()

    error = asyncio.run(end())
    assert isinstance(error, ending)
    assert "keepalive" in str(error) or ending is not Silent


def test_a_connection_lost_after_its_handler_ended_leaves_no_unretrieved_error() -> None:
    """At shutdown the handler is cancelled first; the loss that follows must not log 'Future exception
    was never retrieved' through the loop's handler."""
    async def end() -> asyncio.Future[None]:
        ours, theirs = socket.socketpair()
        reader = asyncio.StreamReader()
        transport, original = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: asyncio.StreamReaderProtocol(reader), ours)
        stream = AgentProtocol(Recorder(), None, transport, original, 5.0, lambda: 0.0)
        stream.close()
        stream.connection_lost(ConnectionResetError())
        transport.close()
        theirs.close()
        return stream.done

    done = asyncio.run(end())
    assert done.cancelled()
