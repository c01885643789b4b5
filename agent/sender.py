"""The agent's background sender: one daemon thread that builds and sends the messages.

The training thread never wakes it: it puts each ended step in the agent's ring (agent/step_ring.py)
and goes on. Once a period, while a hub is connected, this thread takes the ready steps through
`collect` (which builds their messages: CUDA values read, allocator and process figures), queues them
(bounded, drop-oldest, counted) and sends them in batches of one write, piece by piece (_pump).
With no hub it backs off and reconnects, and builds nothing: steps wait in the ring, the oldest overwritten once it is full.
Nothing here can raise into, block, or grow inside the training loop.

The period is 1 s by default (gpumix/wire/send_period.py: why, and its override). The sends are aligned
across processes: at multiples of the period on CLOCK_MONOTONIC (system-wide on Linux), so that the
ranks of a machine write together and cost the hub one or a few wake-ups a period, not one each. Steps
faster than the ring can hold over a period go early: the ring sets the sender's wake-up Event when its
unsent steps reach half of it (agent/step_ring.py, once per crossing), and the sender, waiting on that
Event until its next send, sends then. It does not poll: each wake-up takes the GIL from the training
thread. close() still sends the last steps at once.

The steps of a write go as one columnar frame (gpumix/wire/step_columns.py: one decode and one check
per column on the hub, not one message per step); the hello says the period (the supervisor's stop
margin follows the slowest rank's). A hub from before the frame refuses it: the sender then sends one
message per step, as before, for as long as it runs.
"""

from __future__ import annotations

import collections
import math
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.wire import auth, protocol
from gpumix.wire.send_period import PERIOD_S, send_period_s  # noqa: F401  (PERIOD_S: tests read it here)
from gpumix.wire.step_columns import (
    MAX_FRAME_STEPS,
    REFUSED_BY_OLD_HUB,
    STEPS_TYPE,
    frame_rows,
    frame_slice,
    step_columns,
)

QUEUE_MESSAGES = 1024
SEND_TIMEOUT_S = 1.0  # a stopped hub fills the socket buffer: give up on it, don't wait
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
# Sends land this long before each multiple of the period: the hub's optional read rounds
# (gpumix/hub/agent_stream.py ReadRounds) resume the sockets at the multiples, and read them then.
ALIGN_LEAD_S = 0.01
BATCH_MESSAGES = 64  # messages per write
# The ready steps are built, encoded and written in pieces, with a pause between two pieces: while this
# thread holds the GIL, a training thread that released it (a torch call, the CUDA copy of a step)
# waits to get it back, up to sys.getswitchinterval() (5 ms) when the work is long. A pause of a real
# length hands it over (time.sleep(0) mostly takes it straight back); the training thread then waits
# for one piece at most (64 steps built as one frame, encoded and written: ~0.4 ms on the 2-core CPU box,
# where a piece of 32 steps built a message each took ~0.5 ms; each piece's fixed cost is ~1 µs a step at 32).
# At most PIECES_PER_WAKE pieces a wake-up: fast steps make larger pieces, not more pauses (at most 32
# pauses of 0.2 ms: well within a period).
PIECE_MESSAGES = 64
PIECES_PER_WAKE = 32  # a full ring (1024 steps) goes in 16 pieces of 64
PIECE_PAUSE_S = 0.0002

# collect(final, limit) -> the messages of the steps ready now, at most limit (None: all);
# final: every step, the last one included. pending() -> the steps not collected yet (the newest among them).
Collect = Callable[[bool, "int | None"], list[dict[str, Any]]]


def next_send_s(now_s: float, period_s: float) -> float:
    """The next send time after now_s: ALIGN_LEAD_S before a multiple of the period, the same moments in
    every process of the machine (a lead of at most a quarter of a short period)."""
    lead = min(ALIGN_LEAD_S, period_s / 4)
    return (math.floor((now_s + lead) / period_s + 1e-9) + 1) * period_s - lead


def _closed_by_hub(sock: socket.socket) -> bytes | None:
    """None while the connection stands; else what the hub wrote before closing it (its reason, b"" if
    nothing). The hub writes to an agent only to say why it closes, so readable means gone, except over
    TLS, whose layer writes too (TLS 1.3 session tickets after the handshake): taken for a close, they
    made the agent reconnect at every other write, and close with them unread, a reset that could drop
    the steps just written."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return b""
    return _read_now(sock) if readable else None


def _read_now(sock: socket.socket) -> bytes | None:
    """What can be read without waiting: the hub's words (b"" at its close), or None when a TLS record
    held nothing for us. A TLS socket refuses recv flags (ValueError), so it is read non-blocking."""
    ssl = sys.modules.get("ssl")  # loaded only where TLS is used
    if ssl is None or not isinstance(sock, ssl.SSLSocket):
        try:
            return sock.recv(4096, socket.MSG_DONTWAIT)
        except OSError:
            return b""
    timeout_s = sock.gettimeout()
    try:
        sock.settimeout(0.0)
        return sock.recv(4096)
    except ssl.SSLWantReadError:
        return None
    except (OSError, ValueError):
        return b""
    finally:
        try:
            sock.settimeout(timeout_s)
        except OSError:
            pass


def steps_frames(steps: list[dict[str, Any]]) -> bytes:
    """These step messages as columnar frames: one, unless it would pass the hub's frame limit (then
    halves; a single step over it goes as it is, and the hub refuses it as it refused the message)."""
    if len(steps) == 1:
        return protocol.encode(steps[0])
    return frame_bytes(step_columns(steps))


def frame_bytes(frame: dict[str, Any]) -> bytes:
    """A "steps" frame's bytes: one frame, unless it would pass the hub's frame limit (then halves); a
    frame of one step goes as that step's message."""
    if frame["n"] == 1:
        return protocol.encode(frame_rows(frame)[0])
    data = protocol.encode(frame)
    count = frame["n"]
    if len(data) - protocol.HEADER.size <= protocol.MAX_AGENT_FRAME_BYTES and count <= MAX_FRAME_STEPS:
        return data
    half = count // 2
    return frame_bytes(frame_slice(frame, 0, half)) + frame_bytes(frame_slice(frame, half, count))


def messages_in(message: dict[str, Any]) -> int:
    """The step messages a queued message stands for: a "steps" frame its n, any other one."""
    return message["n"] if message.get("type") == STEPS_TYPE else 1


def encode_batch(batch: list[dict[str, Any]], columns: bool) -> bytes:
    """The bytes of one write: each run of step messages as columnar frames and each "steps" frame as it
    is (columns), or every step as its own message (a hub from before the frame); the others as they
    are, in order."""
    if not columns:
        return b"".join(protocol.encode(row) for message in batch
                        for row in (frame_rows(message) if message.get("type") == STEPS_TYPE else (message,)))
    parts: list[bytes] = []
    run: list[dict[str, Any]] = []
    for message in batch:
        kind = message.get("type")
        if kind == "step":
            run.append(message)
            continue
        if run:
            parts.append(steps_frames(run))
            run = []
        parts.append(frame_bytes(message) if kind == STEPS_TYPE else protocol.encode(message))
    if run:
        parts.append(steps_frames(run))
    return b"".join(parts)


class Sender:
    def __init__(self, address: str, hello: Callable[[], dict[str, Any]], max_messages: int = QUEUE_MESSAGES,
                 collect: Collect | None = None, pending: Callable[[], int] | None = None,
                 period_s: float | None = None, wake: threading.Event | None = None,
                 prepare: Callable[[], None] | None = None) -> None:
        self.address = address
        self._prepare = prepare or (lambda: None)  # called on this thread at each wake-up, hub or none
        self._hello = hello
        self._collect_steps = collect or (lambda final, limit: [])
        self._steps_pending = pending or (lambda: 0)
        self.period_s = send_period_s() if period_s is None else period_s
        # steps this many pending wake the sender before its period ends (the ring is max_messages long)
        self._early_steps = max(1, max_messages // 2)
        # messages to send, oldest first: a "steps" frame stands for its n step messages (messages_in);
        # at most max_messages step messages in all, the oldest dropped and counted. Its length in messages
        # is counted when needed (a few frames: a counter kept by two threads could drift)
        self._max_messages = max(1, max_messages)
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        # set by put(), close(), and the ring when its unsent steps reach _early_steps (wake)
        self._wake = threading.Event() if wake is None else wake
        self._closing = threading.Event()
        self._deadline = float("inf")  # set by close()
        self.dropped = 0  # messages lost because the queue was full
        self.sent = 0
        self.connects = 0
        self.columns = True  # steps as columnar frames; False once a hub from before them refused one
        self._thread = threading.Thread(target=self._run, name="gpumix-agent-sender", daemon=True)
        self._thread.start()

    def put(self, message: dict[str, Any]) -> None:
        """A message besides the steps (a transport report): O(1), never blocks, never raises."""
        self._enqueue(message)
        self._wake.set()

    def _enqueue(self, message: dict[str, Any]) -> None:
        """Queue a message; the oldest go (counted in dropped) while the queue would hold more than its
        max_messages step messages."""
        queued = self.queued + messages_in(message)
        while queued > self._max_messages:
            try:
                oldest = messages_in(self._queue.popleft())
            except IndexError:  # emptied meanwhile by the other thread
                break
            queued -= oldest
            self.dropped += oldest
        self._queue.append(message)

    @property
    def queued(self) -> int:
        """Step messages (and others) queued and not sent yet."""
        return sum(map(messages_in, list(self._queue)))  # a copy: the deque may grow meanwhile

    def _connect(self) -> socket.socket:
        hello = {**self._hello(), "send_period_s": self.period_s}  # the supervisor's stop margin allows for it
        if auth.is_tcp(self.address):  # GPUMIX_HUB=tcp://HOST:PORT: the token file or $GPUMIX_TOKEN
            hello = {**hello, "token": auth.read_token()}  # TokenError is an OSError: back off, retry
        sock = auth.open_socket(self.address, SEND_TIMEOUT_S)
        try:
            sock.sendall(protocol.encode(hello))
        except BaseException:
            sock.close()
            raise
        self.connects += 1
        return sock

    def _collect(self, final: bool, limit: int | None = None) -> int:
        """Queue the ready steps' messages (at most limit); how many there were."""
        collected = 0
        for message in self._collect_steps(final, limit):
            self._enqueue(message)
            collected += messages_in(message)
        return collected

    def _pump(self, sock: socket.socket, closing: bool) -> None:
        """Collect and send the ready steps piece by piece, pausing between pieces (PIECE_MESSAGES)."""
        piece = max(PIECE_MESSAGES, -(-self._steps_pending() // PIECES_PER_WAKE))
        pieces = 0
        while True:
            pieces += 1
            collected = self._collect(final=closing, limit=piece)
            while self._queue and not self._past_deadline():
                self._send_batch(sock)
            if collected < piece or self._past_deadline():
                return
            if pieces >= PIECES_PER_WAKE and not closing:
                return  # steps that came meanwhile wait for the next wake-up (the loop checks its link then)
            time.sleep(PIECE_PAUSE_S)

    def _past_deadline(self) -> bool:
        return self._closing.is_set() and time.monotonic() >= self._deadline

    def _send_batch(self, sock: socket.socket) -> None:
        batch, count = [], 0
        for message in list(self._queue):  # at least one message, then up to BATCH_MESSAGES step messages
            if batch and count + messages_in(message) > BATCH_MESSAGES:
                break
            batch.append(message)
            count += messages_in(message)
        sock.sendall(encode_batch(batch, self.columns))
        for _ in batch:  # sent: only now off the queue (a failed write sends them again)
            self._queue.popleft()
        self.sent += count

    def _run(self) -> None:
        sock: socket.socket | None = None
        backoff = BACKOFF_START_S
        retry_at = 0.0
        while True:
            self._prepare()
            closing = self._closing.is_set()
            if closing and time.monotonic() >= self._deadline:
                break
            # the newest step waits for the next one (annotate_last): alone, it is no reason to connect
            if not self._queue and self._steps_pending() <= (0 if closing else 1):
                if closing:
                    break
                self._wait_for_send()
                continue
            if sock is None and time.monotonic() < retry_at:  # no hub: steps wait in the ring
                if closing:
                    break
                self._wait(min(next_send_s(time.monotonic(), self.period_s), retry_at) - time.monotonic())
                continue
            try:
                said = None if sock is None else _closed_by_hub(sock)
                if sock is not None and said is not None:  # idle past the hub's timeout, or refused
                    if self.columns and REFUSED_BY_OLD_HUB in said:  # the steps of that write were lost
                        self.columns = False
                    sock.close()  # a send would vanish into a dead socket
                    sock = None
                if sock is None:
                    sock = self._connect()
                    backoff = BACKOFF_START_S
                self._pump(sock, closing)
            except (OSError, ValueError, IndexError):
                # hub absent, gone, stopped or slow: drop the connection, retry later
                if sock is not None:
                    sock.close()
                    sock = None
                retry_at = time.monotonic() + backoff
                backoff = min(BACKOFF_MAX_S, backoff * 2)
                continue
            if closing:
                break
            self._wait_for_send()
        if sock is not None:
            self._bye(sock)

    def _wait_for_send(self) -> None:
        """Until the next aligned send, or close(); sooner once half the ring is full: the ring sets the
        wake-up Event as it crosses half, so a sudden run of fast steps (after a compile, an eval, a
        checkpoint) is sent, not overwritten, whatever the rate before it. The count is looked at after
        each wake-up (after the Event is cleared): a crossing while this thread was busy is not missed."""
        due_s = next_send_s(time.monotonic(), self.period_s)
        while not self._closing.is_set() and self._steps_pending() < self._early_steps:
            left_s = due_s - time.monotonic()
            if left_s <= 0:
                return
            self._wait(left_s)

    def _wait(self, seconds: float) -> None:
        self._wake.wait(max(0.0, seconds))
        self._wake.clear()

    def _bye(self, sock: socket.socket) -> None:
        try:
            sock.sendall(protocol.encode({"type": "bye"}))
        except (OSError, ValueError):
            pass
        finally:
            sock.close()

    def close(self, timeout_s: float = 2.0) -> None:
        """Collect every step (the last included), send what is queued within timeout_s, and stop."""
        self._deadline = time.monotonic() + timeout_s
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout_s + 0.5)
