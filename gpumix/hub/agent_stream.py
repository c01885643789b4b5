"""An agent's stream on the hub, after its hello: its frames read many at a time, its steps handed to
the hub in one call per read.

An agent writes its steps in batches (agent/sender.py: one write every 0.1 s). A read here takes what
the kernel holds, up to READ_BYTES, cuts every whole frame out of it (FrameCutter) and hands the steps
to the hub together (Hub.agent_steps: one lock, one clock reading), not one await, one timer and one
lock per frame (issue 13: that was most of the hub's CPU per rank). Nothing changes for the peer:
frames count in order, those before a bad frame included; the bad one closes the connection; a `bye`
ends it and what follows it is not read.

The reads may also pause after each one (GPUMIX_HUB_AGENT_READ_PAUSE_S, off by default), so the
frames written meanwhile wait in the kernel and come in one read: steps then show up to the pause late,
an exiting rank's last ones too.

What it may import: the hub's connections and ranks, gpumix.wire.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gpumix.hub.connections import bytes_within
from gpumix.hub.ranks import parse_step, parse_transport
from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError

log = logging.getLogger(__name__)

READ_BYTES = 1 << 16  # one read's most: with the one incomplete frame kept, a stream holds < 2 x 64 KiB
AGENT_READ_PAUSE_ENV = "GPUMIX_HUB_AGENT_READ_PAUSE_S"
MAX_AGENT_READ_PAUSE_S = 5.0


def agent_read_pause_s(environ: dict[str, str] | os._Environ[str] = os.environ) -> float:
    """The pause the environment asks for: 0 when unset; a value that is no number in [0, 5] s is
    refused in one line and the pause stays off."""
    raw = environ.get(AGENT_READ_PAUSE_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= MAX_AGENT_READ_PAUSE_S:  # NaN fails too
        log.warning("hub: %s must be seconds from 0 to %g, got %r: the pause stays off", AGENT_READ_PAUSE_ENV,
                    MAX_AGENT_READ_PAUSE_S, raw[:40])
        return 0.0
    return value


class FrameCutter:
    """Whole frames out of a byte stream. It keeps only the incomplete frame at the end of what it was
    fed (at most a header and `limit` bytes); a header over the limit or of length 0 is refused
    (ProtocolError) when the frames before it have been taken."""

    def __init__(self, limit: int = protocol.MAX_AGENT_FRAME_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)

    def frames(self, data: bytes) -> Iterator[bytearray]:
        """The bodies of the frames `data` completes, in order."""
        buffer, header = self._buffer, protocol.HEADER.size
        buffer += data
        start = 0
        try:
            while len(buffer) - start >= header:
                length = protocol.frame_length(bytes(buffer[start:start + header]), self._limit)
                end = start + header + length
                if end > len(buffer):
                    break
                yield buffer[start + header:end]
                start = end
        finally:  # taken frames go, also when the reader stops early (a bye, a bad frame)
            del buffer[:start]


class StepSink(Protocol):
    """What an agent's stream feeds (the Hub)."""

    def agent_steps(self, key: Any, steps: list[dict[str, Any]]) -> None: ...

    def agent_transport(self, key: Any, channels: list[dict[str, Any]]) -> None: ...


def handle_frames(hub: StepSink, key: Any, bodies: Iterator[bytearray]) -> bool:
    """Decode the frames in order; the steps go to the hub in one call, flushed before anything else
    (a transport report, a bye, an error). True when the agent said bye."""
    steps: list[dict[str, Any]] = []
    try:
        for body in bodies:
            message = protocol.decode(body, protocol.AGENT_TYPES)
            kind = message["type"]
            if kind == "step":
                steps.append(parse_step(message))
                continue
            if steps:
                hub.agent_steps(key, steps)
                steps = []
            if kind == "transport":
                hub.agent_transport(key, parse_transport(message))
            elif kind == "bye":
                return True
            else:
                raise ProtocolError(f"unexpected {kind!r} from an agent")
    finally:  # the steps before a bad frame count, as they did when each frame was read alone
        if steps:
            hub.agent_steps(key, steps)
    return False


async def serve_agent(reader: asyncio.StreamReader, hub: StepSink, key: Any, transport: asyncio.BaseTransport,
                      idle_timeout_s: float, pause_s: Callable[[], float]) -> None:
    """Feed the hub from this agent's frames until its bye, its EOF (IncompleteReadError) or an error
    (ProtocolError, Silent after idle_timeout_s without a byte). `pause_s` is read at each read."""
    idle = f"silent for {idle_timeout_s:g} s (the agent reconnects at its next step)"
    loop = asyncio.get_running_loop()
    pausable = isinstance(transport, asyncio.ReadTransport)
    cutter = FrameCutter()
    try:
        while True:
            data = await bytes_within(reader, READ_BYTES, idle_timeout_s, idle)
            pause = pause_s()
            if pause > 0 and pausable and transport.is_reading():  # type: ignore[attr-defined]
                # the frames already read are handled below; the next ones wait in the kernel's buffer
                transport.pause_reading()  # type: ignore[attr-defined]
                loop.call_later(pause, transport.resume_reading)  # type: ignore[attr-defined]
            if handle_frames(hub, key, cutter.frames(data)):
                return
    finally:  # a refusal reads the agent's last frames until it closes (tell): not after a pause
        if pausable:
            transport.resume_reading()  # type: ignore[attr-defined]
