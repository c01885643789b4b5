"""An agent's stream on the hub, after its hello: its frames read many at a time, its steps handed to
the hub in one call per read.

An agent writes its steps in batches (agent/sender.py: one write a period, 1 s by default, at the same
moments for every rank; older agents every 0.1 s). After the hello, the connection's protocol is
AgentProtocol: in the event loop's read callback, each read (what the kernel holds) is cut into whole frames (FrameCutter) and its steps go to the hub together (Hub.agent_steps:
one lock, one clock reading). Before, each frame took two awaits of the stream reader, a task wake-up,
a timer set and cancelled, and a lock (issue 13: the hub's CPU per rank was mostly that, per read).
Nothing changes for the peer: frames count in order, those before a bad frame included; the bad one
closes the connection (with its reason, through the stream put back); a `bye` ends it and what
follows it is not read.

The reads may also come in rounds (GPUMIX_HUB_AGENT_READ_PAUSE_S = P seconds, off by default): after a
read an agent's socket is left alone until the next multiple of P on the loop's clock (ReadRounds), when
every socket held meanwhile is read again. The frames written in between wait in the kernel and come in
one read, and the rounds are the same for every agent, so ten ranks' writes cost the loop one wake-up a
round, not one each (issue 13: the wake-up was most of the hub's CPU per rank). Steps then show up to P
late, an exiting rank's last ones too.

What it may import: the hub's connections and ranks, gpumix.wire.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gpumix.hub.connections import Silent
from gpumix.hub.ranks import parse_step, parse_transport
from gpumix.hub.step_frames import parse_steps
from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError

log = logging.getLogger(__name__)

READ_BYTES = 1 << 16  # the most one read takes; the cutter holds at most one incomplete frame besides a read
AGENT_READ_PAUSE_ENV = "GPUMIX_HUB_AGENT_READ_PAUSE_S"
MAX_AGENT_READ_PAUSE_S = 5.0
MIN_AGENT_READ_PAUSE_S = 0.001
IDLE_ROUNDS = 10  # empty rounds in a row before an agent's socket is left reading (ReadRounds)


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
    # NaN fails too; a period under a millisecond is no round (1e-320 made the round's number infinite)
    if not (value == 0.0 or MIN_AGENT_READ_PAUSE_S <= value <= MAX_AGENT_READ_PAUSE_S):
        log.warning("hub: %s must be 0 or seconds from %g to %g, got %r: the pause stays off", AGENT_READ_PAUSE_ENV,
                    MIN_AGENT_READ_PAUSE_S, MAX_AGENT_READ_PAUSE_S, raw[:40])
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


class ReadRounds:
    """Agents' sockets read in shared rounds. `hold` pauses a socket after a read until the next
    multiple of the period on the loop's clock; then one timer resumes every held socket, the loop's
    next pass reads those with frames waiting (all in one wake-up), and the pass after pauses again
    those that had none: an agent writing every period (agent/sender.py) would otherwise write just
    after its round and wake the loop alone. A socket empty for IDLE_ROUNDS rounds in a row is left
    reading, so an idle agent costs no work per round. One per event loop (HubServer)."""

    def __init__(self, idle_rounds: int = IDLE_ROUNDS) -> None:
        self.idle_rounds = idle_rounds
        # where every agent connection on this loop reads into (AgentProtocol.get_buffer): one read at a
        # time on a loop, each handled before the next
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self._held: dict[asyncio.ReadTransport, int] = {}  # -> empty rounds in a row
        self._checking: dict[asyncio.ReadTransport, int] = {}  # resumed this round, to pause if still empty
        self._timer: asyncio.TimerHandle | None = None
        self._due_s = math.inf
        self._period_s = 0.0

    @property
    def held(self) -> int:
        return len(self._held)

    def hold(self, transport: asyncio.ReadTransport, period_s: float, loop: asyncio.AbstractEventLoop) -> None:
        """Pause `transport`, just read, until the next round of `period_s` (> 0): at most that long."""
        transport.pause_reading()
        self._held[transport] = 0
        self._schedule(period_s, loop)

    def forget(self, transport: asyncio.BaseTransport) -> None:
        """The agent's stream ended: its transport is no longer paused or resumed by the rounds."""
        self._held.pop(transport, None)  # type: ignore[call-overload]
        self._checking.pop(transport, None)  # type: ignore[call-overload]

    def _schedule(self, period_s: float, loop: asyncio.AbstractEventLoop) -> None:
        self._period_s = period_s
        # a read just after a round (its timer may fire a clock tick early) waits for the next one
        due_s = (math.floor(loop.time() / period_s + 1e-6) + 1) * period_s
        if due_s < self._due_s:  # none due yet, or the period was made shorter
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._due_s = loop.call_at(due_s, self._release, loop), due_s

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._due_s = None, math.inf
        self._checking, self._held = self._held, {}
        for transport in self._checking:
            if not transport.is_closing():
                transport.resume_reading()
        # two passes on: after the next pass's reads (its ready sockets are queued behind this callback)
        loop.call_soon(loop.call_soon, self._close_round, loop)

    def _close_round(self, loop: asyncio.AbstractEventLoop) -> None:
        checking, self._checking = self._checking, {}
        for transport, empty in checking.items():
            # closed; read this round (and held again); or idle long enough to wake the loop itself
            if transport.is_closing() or not transport.is_reading() or empty + 1 >= self.idle_rounds:
                continue
            transport.pause_reading()
            self._held[transport] = empty + 1
        if self._held:
            self._schedule(self._period_s, loop)


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
            if kind == "steps":  # an agent's columnar frame: its steps all count, or none (a bad frame)
                steps.extend(parse_steps(message))
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


class AgentProtocol(asyncio.BufferedProtocol):
    """Installed on an agent's transport after its hello: each read's frames are handled in the loop's
    read callback. `done` ends with None (a bye) or the connection's end: IncompleteReadError (EOF),
    Silent (idle, or the kernel's keepalive gave up), ProtocolError, or whatever handling raised.

    A buffered protocol: the transport reads into the loop's one buffer (ReadRounds.read_buffer). A
    plain protocol is handed a new bytes object each read, and asyncio's selector transport allocates
    256 KiB for it (recv(max_size)): about 80 us a read on the 2-core box, measured, against 10 us for
    recv_into a buffer kept; it was most of the hub's CPU per step (issue 13)."""

    def __init__(self, hub: StepSink, key: Any, transport: asyncio.BaseTransport, original: asyncio.BaseProtocol,
                 idle_timeout_s: float, pause_s: Callable[[], float], rounds: ReadRounds | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._hub, self._key, self._transport, self._original = hub, key, transport, original
        self._idle_timeout_s, self._pause_s = idle_timeout_s, pause_s
        self._rounds = rounds if rounds is not None else ReadRounds()  # the server shares one among agents
        self._pausable = isinstance(transport, asyncio.ReadTransport)
        self._cutter = FrameCutter()
        self.done: asyncio.Future[None] = self._loop.create_future()
        self._last_read_s = self._loop.time()
        # one timer for the idle timeout, moved on only when it fires: none set and cancelled per read
        self._timer = self._loop.call_at(self._last_read_s + idle_timeout_s, self._check_idle)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rounds.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._rounds.read_buffer[:nbytes]))  # the cutter keeps what it needs

    def data_received(self, data: bytes) -> None:
        """A read's bytes (also the frames that came with the hello, and tests' bytes)."""
        if self.done.done():
            return  # after a bye or an error: what follows is not read (the old reader stopped there)
        self._last_read_s = self._loop.time()
        pause = self._pause_s()
        if pause > 0 and self._pausable and self._transport.is_reading():  # type: ignore[attr-defined]
            # the frames of this read are handled below; the next ones wait in the kernel until the round
            self._rounds.hold(self._transport, pause, self._loop)  # type: ignore[arg-type]
        try:
            if handle_frames(self._hub, self._key, self._cutter.frames(data)):
                self._end(None)
        except Exception as error:  # the connection's end, reported by its handler (never the loop's log)
            self._end(error)

    def eof_received(self) -> bool | None:
        self._end(asyncio.IncompleteReadError(b"", None))
        return self._original.eof_received()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self._end(asyncio.IncompleteReadError(b"", None))
        elif getattr(exc, "errno", None) == errno.ETIMEDOUT:
            self._end(Silent("the peer stopped answering (TCP keepalive)"))
        else:
            self._end(exc)
        self._timer.cancel()
        self._original.connection_lost(exc)  # the stream's own bookkeeping (its reader, its closed future)

    def _check_idle(self) -> None:
        idle_until = self._last_read_s + self._idle_timeout_s
        if self._loop.time() < idle_until:
            self._timer = self._loop.call_at(idle_until, self._check_idle)
            return
        self._end(Silent(f"silent for {self._idle_timeout_s:g} s (the agent reconnects at its next step)"))

    def _end(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)

    def close(self) -> None:
        self._timer.cancel()
        self._rounds.forget(self._transport)  # a refusal may still read it (serve_agent), unpaused
        self.done.cancel()  # a connection lost after its handler ended (shutdown): no unretrieved error


async def serve_agent(reader: asyncio.StreamReader, hub: StepSink, key: Any, transport: asyncio.BaseTransport,
                      idle_timeout_s: float, pause_s: Callable[[], float], rounds: ReadRounds | None = None) -> None:
    """Feed the hub from this agent's frames until its bye, or raise how the connection ended (see
    AgentProtocol). `pause_s` is read at each read; `rounds` the server's ReadRounds. The stream's own
    protocol is put back before returning, so a refusal can still be told through `reader` (connections.tell)."""
    original = transport.get_protocol()
    stream = AgentProtocol(hub, key, transport, original, idle_timeout_s, pause_s, rounds)
    # the frames that came with the hello wait in the stream's buffer (asyncio has no public call for it)
    leftover = bytes(reader._buffer)
    reader._buffer.clear()
    transport.set_protocol(stream)
    pausable = isinstance(transport, asyncio.ReadTransport)
    try:
        if pausable and not transport.is_reading():  # the stream paused it for a full buffer, now empty
            transport.resume_reading()
        if leftover:
            stream.data_received(leftover)
        # the agent closed (or reset) before the swap: the stream heard it, the new protocol never will
        if reader.exception() is not None:
            stream._end(reader.exception())
        elif reader.at_eof():
            stream._end(asyncio.IncompleteReadError(b"", None))
        await stream.done
    finally:
        stream.close()
        if not transport.is_closing():
            transport.set_protocol(original)
            if pausable:  # not after a pause: a refusal reads the agent's last frames until it closes
                transport.resume_reading()
