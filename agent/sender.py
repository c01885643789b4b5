"""The agent's background sender: a bounded queue drained by one daemon thread.

The training thread only appends to a deque (drop-oldest when full, counted);
this thread connects, sends, and on any failure closes, backs off and
reconnects. Nothing here can raise into, block, or grow inside the training loop.
"""

from __future__ import annotations

import collections
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumix.wire import auth, protocol

QUEUE_MESSAGES = 1024
SEND_TIMEOUT_S = 1.0  # a stopped hub fills the socket buffer: give up on it, don't wait
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0


def _closed_by_hub(sock: socket.socket) -> bool:
    """The hub writes to an agent only to say why it closes the connection: readable means gone."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Sender:
    def __init__(self, address: str, hello: Callable[[], dict[str, Any]], max_messages: int = QUEUE_MESSAGES) -> None:
        self.address = address
        self._hello = hello
        self._queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_messages)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.dropped = 0  # messages lost because the queue was full
        self.sent = 0
        self.connects = 0
        self._thread = threading.Thread(target=self._run, name="gpumix-agent-sender", daemon=True)
        self._thread.start()

    def put(self, message: dict[str, Any]) -> None:
        """Called from the training thread: O(1), never blocks, never raises."""
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1  # deque drops the oldest on append
        self._queue.append(message)
        self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _connect(self) -> socket.socket:
        hello = self._hello()
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

    def _run(self) -> None:
        sock: socket.socket | None = None
        backoff = BACKOFF_START_S
        while not self._stop.is_set():
            if not self._queue:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                if sock is not None and _closed_by_hub(sock):
                    sock.close()  # idle past the hub's timeout: a send would vanish into a dead socket
                    sock = None
                if sock is None:
                    sock = self._connect()
                    backoff = BACKOFF_START_S
                message = self._queue[0]
                sock.sendall(protocol.encode(message))
                self._queue.popleft()
                self.sent += 1
            except (OSError, ValueError, IndexError):
                # hub absent, gone, stopped or slow: drop the connection, retry later
                if sock is not None:
                    sock.close()
                    sock = None
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
        if sock is not None:
            self._flush(sock)

    def _flush(self, sock: socket.socket) -> None:
        try:
            while self._queue:
                sock.sendall(protocol.encode(self._queue.popleft()))
            sock.sendall(protocol.encode({"type": "bye"}))
        except (OSError, ValueError):
            pass
        finally:
            sock.close()

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (within timeout_s) and stop."""
        deadline = time.monotonic() + timeout_s
        while self._queue and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        self._stop.set()
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 0.5)
