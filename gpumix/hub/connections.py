"""The hub's connections, apart from serving them: limits, who a peer is, framing with deadlines,
the TCP listener, the socket folder's reachability, and a log a peer's garbage cannot flood.

What it may import: the standard library and gpumix.wire (frames, auth)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpumix.wire import auth, protocol
from gpumix.wire.paths import hub_answers  # noqa: F401  (its users import it from here too)
from gpumix.wire.protocol import ProtocolError

HELLO_TIMEOUT_S = 2.0  # connect, (TLS handshake,) hello: a real client does it in milliseconds
AGENT_IDLE_TIMEOUT_S = 30 * 60.0  # a rank may be silent for an eval or a checkpoint; it reconnects after
CLIENT_IDLE_TIMEOUT_S = 5 * 60.0  # clients poll every second or two (the TUI, a supervisor)
MAX_UNAUTHENTICATED_TCP = 64  # TCP connections that have not yet shown the token
LOCAL_FD_RESERVE = 128  # descriptors TCP may never take: local clients, files, NVML
ACCEPT_RETRY_S = 0.1  # out of descriptors: wait this long before accepting TCP again
LOG_LINES_PER_INTERVAL = 5
LOG_INTERVAL_S = 10.0
MAX_ERROR_TEXT = 200  # characters of a reason sent back to a peer
LINGER_S = 0.5  # after a refusal, how long the peer's unread frames are drained so the refusal arrives
T = TypeVar("T")


async def read_message(reader: asyncio.StreamReader, allowed: set[str]) -> dict[str, Any]:
    header = await reader.readexactly(protocol.HEADER.size)
    length = protocol.frame_length(header, protocol.MAX_AGENT_FRAME_BYTES)
    return protocol.decode(await reader.readexactly(length), allowed)


class HubAlreadyRunning(RuntimeError):
    """Another hub answers on this socket: attach to it instead."""


class Silent(ProtocolError):
    """A connection sent nothing within its deadline or idle timeout."""


async def read_within(reader: asyncio.StreamReader, allowed: set[str], timeout_s: float, why: str) -> dict[str, Any]:
    """The next message, or Silent(why) after timeout_s."""
    return await _within(read_message(reader, allowed), timeout_s, why)


async def _within(awaitable: Awaitable[T], timeout_s: float, why: str) -> T:
    try:
        if hasattr(asyncio, "timeout"):  # 3.11: no task per message (wait_for makes one)
            async with asyncio.timeout(timeout_s):
                return await awaitable
        return await asyncio.wait_for(awaitable, timeout_s)
    except (asyncio.TimeoutError, TimeoutError) as error:
        if getattr(error, "errno", None) == errno.ETIMEDOUT:  # the kernel's keepalive gave up, not our timer
            raise Silent("the peer stopped answering (TCP keepalive)") from None
        raise Silent(why) from None


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one (a hub holds a socket per rank and client);
    returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def tcp_connection_limit(fd_limit: int) -> int:
    """TCP connections allowed at once: the descriptor limit less a reserve for everything local."""
    return max(MAX_UNAUTHENTICATED_TCP // 4, fd_limit - max(LOCAL_FD_RESERVE, fd_limit // 4))


class RateLimitedLog:
    """At most `lines` warnings per `interval_s`; the rest are counted and summed up in one line
    at the next warning after the interval (or at stop). A peer's garbage never floods the log."""

    def __init__(self, logger: logging.Logger, lines: int = LOG_LINES_PER_INTERVAL,
                 interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger, self._lines, self._interval_s, self._clock = logger, lines, interval_s, clock
        self._window_start = clock()
        self._shown = 0
        self.shown_total = 0
        self.suppressed = 0  # since the last summary
        self.suppressed_total = 0
        self._last_suppressed = ""

    def warning(self, text: str) -> None:
        if self._clock() - self._window_start >= self._interval_s:
            self.flush()
            self._window_start, self._shown = self._clock(), 0
        if self._shown < self._lines:
            self._shown += 1
            self.shown_total += 1
            self._logger.warning("%s", text)
        else:
            self.suppressed += 1
            self.suppressed_total += 1
            self._last_suppressed = text

    def flush(self) -> None:
        if self.suppressed:
            self._logger.warning("hub: %d more like these suppressed (last: %s)", self.suppressed,
                                 self._last_suppressed)
            self.suppressed = 0


def one_line(error: BaseException) -> str:
    """An unexpected error as one line: its type, message and innermost frame (no traceback)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = f" at {Path(frame.tb_frame.f_code.co_filename).name}:{frame.tb_lineno}" if frame is not None else ""
    return f"internal error {type(error).__name__}: {str(error)[:MAX_ERROR_TEXT]}{where}"


@dataclass
class Peer:
    """Who is at the other end of one connection, as the kernel or the token says (never as it claims)."""

    over_tcp: bool
    tcp_label: str | None = None  # token@HOST:PORT
    uid: int | None = None  # SO_PEERCRED, Unix only
    gid: int | None = None
    waiting_for_hello: bool = True  # counted against MAX_UNAUTHENTICATED_TCP while True
    hello_by: float | None = None  # loop time by which the hello must have come (TCP: from the accept)

    def label(self) -> str:
        return self.tcp_label if self.over_tcp and self.tcp_label else auth.uid_label(self.uid)


@dataclass
class TcpListener:
    """The TCP listening socket and the task accepting on it."""

    sockets: list[socket.socket]
    task: asyncio.Task[None] | None = None

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        for sock in self.sockets:
            sock.close()


def open_tcp_listener(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def check_reachable(socket_path: str, access: auth.UnixAccess) -> None:
    """The socket's folder must let the allowed peers through, or they could never connect: the
    folder is created if missing (0750 with the allowed group, else 0755); an existing folder that
    shuts them out is refused with the reason."""
    folder = Path(socket_path).parent
    gid = access.socket_gid
    if not folder.exists():
        folder.mkdir(mode=0o755, parents=True)
        if gid is not None and access.socket_mode == 0o660:
            os.chown(folder, -1, gid)
            os.chmod(folder, 0o750)
        else:
            os.chmod(folder, 0o755)
    for part in [folder, *folder.parents]:
        info = part.stat()
        if info.st_mode & stat.S_IXOTH:
            continue
        if access.socket_mode == 0o660 and info.st_mode & stat.S_IXGRP and info.st_gid == gid:
            continue
        raise PermissionError(f"{part} (mode {stat.S_IMODE(info.st_mode):o}) keeps the allowed users out:"
                              " put the socket where they can reach it, e.g. --socket /run/gpumix/hub.sock")


async def tell(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str) -> None:
    """One `error` frame before closing, so a client can say what went wrong (best effort). Closing
    with the peer's frames unread would reset the connection and lose the frame: the hub ends its
    side, then reads and drops what the peer still sends, for LINGER_S at most."""
    with contextlib.suppress(Exception):
        if writer.is_closing():
            return
        writer.write(protocol.encode({"type": "error", "message": reason[:MAX_ERROR_TEXT]}))
        if writer.can_write_eof():
            writer.write_eof()

        async def drop_until_eof() -> None:
            while await reader.read(1 << 16):
                pass

        await asyncio.wait_for(drop_until_eof(), LINGER_S)


async def welcome(hello: dict[str, Any], writer: asyncio.StreamWriter, over_tcp: bool,
                  token: str | None) -> auth.ControlVerifier | None:
    """A client that sent a nonce gets the hub's in a `welcome`; over TCP the nonce is required."""
    nonce = hello.get("nonce")
    if nonce is None and not over_tcp:
        return None  # a plain local client: no welcome, as before
    if not isinstance(nonce, str) or not 16 <= len(nonce) <= 128:
        raise ProtocolError("a TCP client's hello needs a nonce of 16 to 128 characters")
    server_nonce = auth.new_nonce()
    writer.write(protocol.encode({"type": "welcome", "nonce": server_nonce}))
    await writer.drain()
    return auth.ControlVerifier(token, nonce, server_nonce) if over_tcp and token else None
