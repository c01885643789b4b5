"""The hub's socket server: agents stream steps in, clients ask for snapshots.

An asyncio loop on its own thread. Each connection starts with a `hello`
naming its role, within HELLO_TIMEOUT_S (the TLS handshake included). A
malformed, oversized or unknown message closes that one connection with a
one-line `error` frame to the peer and a rate-limited log line; the hub and its
other clients go on. A connection silent for longer than its idle timeout is
closed (the agent and the client reconnect on their next message).

The Unix socket is owner-only (and peers of another uid are refused) unless
`access` lets named uids/groups in (gpumix.wire.auth.UnixAccess). TCP, when asked
for, needs the token in every hello and signed controls from clients
(gpumix.wire.auth); a read-only client can never send a control. TCP can never take
the descriptors local clients need: at most MAX_UNAUTHENTICATED_TCP
connections may wait for their hello, and all TCP connections together stay
LOCAL_FD_RESERVE below the process's descriptor limit; further ones are closed
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumix.hub.core import Hub, RankKey
from gpumix.hub.history import HISTORY_FIELDS
from gpumix.hub.ranks import parse_hello, parse_step, parse_transport
from gpumix.wire import auth, protocol
from gpumix.wire.protocol import ProtocolError

log = logging.getLogger(__name__)

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


class HubAlreadyRunning(RuntimeError):
    """Another hub answers on this socket: attach to it instead."""


def hub_answers(path: str, timeout_s: float = 0.5) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


async def read_message(reader: asyncio.StreamReader, allowed: set[str]) -> dict[str, Any]:
    header = await reader.readexactly(protocol.HEADER.size)
    length = protocol.frame_length(header, protocol.MAX_AGENT_FRAME_BYTES)
    return protocol.decode(await reader.readexactly(length), allowed)


class Silent(ProtocolError):
    """A connection sent nothing within its deadline or idle timeout."""


async def read_within(reader: asyncio.StreamReader, allowed: set[str], timeout_s: float, why: str) -> dict[str, Any]:
    """The next message, or Silent(why) after timeout_s."""
    try:
        if hasattr(asyncio, "timeout"):  # 3.11: no task per message (wait_for makes one)
            async with asyncio.timeout(timeout_s):
                return await read_message(reader, allowed)
        return await asyncio.wait_for(read_message(reader, allowed), timeout_s)
    except asyncio.TimeoutError:
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


class HubServer:
    def __init__(self, hub: Hub, socket_path: str | Path, tcp: tuple[str, int] | None = None,
                 token: str | None = None, tls: ssl.SSLContext | None = None,
                 access: auth.UnixAccess | None = None,
                 peer_credentials: Callable[[Any], tuple[int, int] | None] = auth.peer_credentials,
                 hello_timeout_s: float = HELLO_TIMEOUT_S, agent_idle_timeout_s: float = AGENT_IDLE_TIMEOUT_S,
                 client_idle_timeout_s: float = CLIENT_IDLE_TIMEOUT_S,
                 max_unauthenticated: int = MAX_UNAUTHENTICATED_TCP) -> None:
        if tcp is not None and not token:
            raise ValueError("a hub on TCP needs a token")
        self.hub = hub
        self.socket_path = str(socket_path)
        self.tcp = tcp  # (host, port) to listen on as well, or None: TCP is off unless asked
        self.tcp_port: int | None = None  # the port bound (port 0 picks one)
        self._token = token
        self._tls = tls  # TCP inside TLS when given
        self.access = access  # who besides the owner may use the Unix socket
        self._peer_credentials = peer_credentials  # injectable: tests cannot switch users
        self.hello_timeout_s = hello_timeout_s
        self.agent_idle_timeout_s = agent_idle_timeout_s
        self.client_idle_timeout_s = client_idle_timeout_s
        self.max_unauthenticated = max_unauthenticated
        self.tcp_limit = 0  # set at start from the descriptor limit
        self.tcp_open = 0  # TCP connections now open
        self.tcp_waiting = 0  # of which still before their hello and token
        self._tcp_server: TcpListener | None = None
        self.refused_reasons: list[str] = []  # controls refused (bad mac, replay, read-only), bounded
        self.closed_reasons: list[str] = []  # last reasons connections were closed for (bounded)
        self.connections = 0
        self.log_limiter = RateLimitedLog(log)  # the hub's warnings, rate-limited
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    @property
    def tcp_url(self) -> str | None:
        """The TCP address clients use: tls://HOST:PORT for a TLS hub, else tcp://HOST:PORT."""
        if self.tcp is None or self.tcp_port is None:
            return None
        host = f"[{self.tcp[0]}]" if ":" in self.tcp[0] else self.tcp[0]
        return f"{'tls' if self._tls is not None else 'tcp'}://{host}:{self.tcp_port}"

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Listen on the Unix socket (owner-only), or raise HubAlreadyRunning / OSError."""
        if self.access is not None and not hasattr(socket, "SO_PEERCRED"):
            raise OSError("--allow-uid/--allow-group need SO_PEERCRED (Linux) to tell peers apart")
        if os.path.exists(self.socket_path):
            if hub_answers(self.socket_path):
                raise HubAlreadyRunning(f"a hub already listens on {self.socket_path}")
            os.unlink(self.socket_path)  # left by a hub that died
        if self.access is not None:
            check_reachable(self.socket_path, self.access)
        self.tcp_limit = tcp_connection_limit(raise_fd_limit())
        self._thread = threading.Thread(target=self._run, name="gpumix-hub-server", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._start_error is not None:
            raise self._start_error

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        try:
            self._loop.run_until_complete(self._listen())
        except BaseException as error:  # reported to start()
            self._start_error = error
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own complaints (an accept out of descriptors, a transport error): one rate-limited line."""
        error = context.get("exception")
        if isinstance(error, asyncio.CancelledError):
            return  # connections cancelled at shutdown
        self.log_limiter.warning(f"hub: {context.get('message')}" + (f": {error!r}" if error is not None else ""))

    async def _listen(self) -> None:
        old_umask = os.umask(0o177)  # the socket is born owner-only: no window for others
        try:
            self._server = await asyncio.start_unix_server(self._handle_unix, path=self.socket_path)
        finally:
            os.umask(old_umask)
        if self.access is not None and self.access.socket_gid is not None:
            os.chown(self.socket_path, -1, self.access.socket_gid)
        os.chmod(self.socket_path, self.access.socket_mode if self.access is not None else 0o600)
        if self.tcp is not None:
            listener = open_tcp_listener(*self.tcp)
            self._tcp_server = TcpListener([listener])
            self._tcp_server.task = asyncio.get_running_loop().create_task(self._accept_tcp(listener))
            self.tcp_port = listener.getsockname()[1]

    def stop(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            if self._tcp_server is not None:
                self._tcp_server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self.log_limiter.flush()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    # -- connections --------------------------------------------------------------------

    def _closed(self, reason: str) -> None:
        self.log_limiter.warning(f"hub: closed a connection: {reason}")
        self.closed_reasons = [*self.closed_reasons[-99:], reason]

    async def _accept_tcp(self, listener: socket.socket) -> None:
        """Accept TCP connections within the caps; over a cap a connection is closed at once."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(listener)
            except OSError as error:  # out of descriptors (EMFILE): TCP waits, local clients keep theirs
                self.log_limiter.warning(f"hub: cannot accept a TCP connection: {error.strerror or error}")
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if self.tcp_waiting >= self.max_unauthenticated or self.tcp_open >= self.tcp_limit:
                busy = "too many connections waiting for their hello" if self.tcp_waiting >= \
                    self.max_unauthenticated else "too many TCP connections"
                if self._tls is None:  # a TLS client could not read a plain frame anyway
                    with contextlib.suppress(OSError):
                        conn.send(protocol.encode({"type": "error", "message": f"busy: {busy}"}))
                conn.close()
                self._closed(f"{auth.tcp_peer_label(address)}: {busy}")
                continue
            self.tcp_open += 1
            self.tcp_waiting += 1
            loop.create_task(self._serve_tcp(conn, address))

    async def _serve_tcp(self, conn: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        peer = Peer(over_tcp=True, tcp_label=auth.tcp_peer_label(address), hello_by=loop.time() + self.hello_timeout_s)
        try:
            reader = asyncio.StreamReader(loop=loop)
            stream = asyncio.StreamReaderProtocol(reader, loop=loop)
            try:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: stream, conn, ssl=self._tls,
                    ssl_handshake_timeout=self.hello_timeout_s if self._tls is not None else None)
            except (OSError, asyncio.TimeoutError) as error:  # ssl.SSLError is an OSError
                conn.close()
                self._closed(f"{peer.label()}: TLS handshake failed: {error}")
                return
            writer = asyncio.StreamWriter(transport, stream, reader, loop)
            await self._handle(reader, writer, peer)
        finally:
            self.tcp_open -= 1
            if peer.waiting_for_hello:
                self.tcp_waiting -= 1

    async def _handle_unix(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        credentials = self._peer_credentials(writer.get_extra_info("socket"))
        uid, gid = credentials if credentials is not None else (None, None)
        await self._handle(reader, writer, Peer(over_tcp=False, uid=uid, gid=gid))

    def _trusted(self, peer: Peer) -> None:
        """The peer passed its hello (and token): it no longer counts as waiting."""
        if peer.over_tcp and peer.waiting_for_hello:
            self.tcp_waiting -= 1
        peer.waiting_for_hello = False

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer) -> None:
        self.connections += 1
        key: RankKey | None = None
        pid: int | None = None
        try:
            if not peer.over_tcp:  # defense in depth behind the socket's mode: the owner and the allowed
                refusal = await self._unix_refusal(peer)
                if refusal is not None:
                    raise ProtocolError(refusal)
            loop = asyncio.get_running_loop()
            hello_by = peer.hello_by if peer.hello_by is not None else loop.time() + self.hello_timeout_s
            hello = await read_within(reader, protocol.AGENT_TYPES | protocol.CLIENT_TYPES,
                                      max(0.0, hello_by - loop.time()), f"no hello within {self.hello_timeout_s:g} s")
            if hello["type"] != "hello" or hello.get("role") not in protocol.ROLES:
                raise ProtocolError("the first message must be a hello with a role")
            if peer.over_tcp:
                if hello.get("token") is None:
                    raise ProtocolError("no token in the hello (TCP needs the hub's token)")
                if not auth.tokens_match(hello.get("token"), self._token or ""):
                    raise ProtocolError("wrong token")
            if hello["role"] == "agent":
                info = parse_hello(hello)
                info["peer_uid"] = None if peer.over_tcp else peer.uid  # the kernel's word, not the agent's
                pid = info["pid"]
                try:
                    key = self.hub.agent_hello(info)
                except OverflowError as error:
                    raise ProtocolError(str(error)) from None
                self._trusted(peer)
                await self._serve_agent(reader, key)
            else:
                verifier = await self._welcome(hello, writer, peer.over_tcp)
                self._trusted(peer)
                await self._serve_client(reader, writer, verifier, readonly=hello.get("readonly") is True,
                                         peer=peer)
        except ProtocolError as error:
            self._closed(f"{peer.tcp_label}: {error}" if peer.over_tcp else str(error))
            if peer.waiting_for_hello or not isinstance(error, Silent):  # an idle client just reconnects
                await self._tell(reader, writer, str(error))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer went away: normal
        except asyncio.CancelledError:
            pass  # the server is shutting down: end this connection quietly
        except Exception as error:  # a bug here must cost one connection, not the hub, and no traceback flood
            self._closed(f"{peer.tcp_label}: {one_line(error)}" if peer.over_tcp else one_line(error))
            await self._tell(reader, writer, "internal error")
        finally:
            if key is not None:
                self.hub.agent_gone(key, pid)
            writer.close()

    async def _unix_refusal(self, peer: Peer) -> str | None:
        if self.access is None:
            return auth.peer_refusal(peer.uid)
        # the group lookup may ask a directory service: off the loop
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: auth.peer_refusal(peer.uid, gid=peer.gid, access=self.access))

    @staticmethod
    async def _tell(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str) -> None:
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

    async def _serve_agent(self, reader: asyncio.StreamReader, key: RankKey) -> None:
        idle = f"silent for {self.agent_idle_timeout_s:g} s (the agent reconnects at its next step)"
        while True:
            message = await read_within(reader, protocol.AGENT_TYPES, self.agent_idle_timeout_s, idle)
            kind = message["type"]
            if kind == "step":
                self.hub.agent_step(key, parse_step(message))
            elif kind == "transport":
                self.hub.agent_transport(key, parse_transport(message))
            elif kind == "bye":
                return
            else:
                raise ProtocolError(f"unexpected {kind!r} from an agent")

    async def _welcome(self, hello: dict[str, Any], writer: asyncio.StreamWriter,
                       over_tcp: bool) -> auth.ControlVerifier | None:
        """A client that sent a nonce gets the hub's in a `welcome`; over TCP the nonce is required."""
        nonce = hello.get("nonce")
        if nonce is None and not over_tcp:
            return None  # a plain local client: no welcome, as before
        if not isinstance(nonce, str) or not 16 <= len(nonce) <= 128:
            raise ProtocolError("a TCP client's hello needs a nonce of 16 to 128 characters")
        server_nonce = auth.new_nonce()
        writer.write(protocol.encode({"type": "welcome", "nonce": server_nonce}))
        await writer.drain()
        return auth.ControlVerifier(self._token, nonce, server_nonce) if over_tcp and self._token else None

    def _refuse(self, request: dict[str, Any], reason: str) -> dict[str, Any]:
        self.log_limiter.warning(f"hub: refused a {request.get('type')} control: {reason}")
        self.refused_reasons = [*self.refused_reasons[-99:], reason]
        kind = {"power": "power_result", "replan": "replan_result", "supervisor": "supervisor_work"}[request["type"]]
        return {"type": kind, "ok": False, "message": f"refused: {reason}", "changes": [], "plan": None}

    def _control(self, request: dict[str, Any], peer: Peer | None) -> dict[str, Any]:
        """A power control, named in the audit by who the kernel or the token vouches for (off the loop:
        the user database may be a directory service)."""
        return self.hub.control(request, peer=peer.label() if peer is not None else None)

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            verifier: auth.ControlVerifier | None = None, readonly: bool = False,
                            peer: Peer | None = None) -> None:
        idle = f"silent for {self.client_idle_timeout_s:g} s (a client reconnects at its next request)"
        while True:
            request = await read_within(reader, protocol.CLIENT_TYPES, self.client_idle_timeout_s, idle)
            refusal = None
            if request["type"] in auth.CONTROL_TYPES:
                if readonly:
                    refusal = "this connection is read-only"
                elif verifier is not None:
                    refusal = verifier.refusal(request)
            if refusal is not None:
                reply = self._refuse(request, refusal)
            elif request["type"] == "snapshot":
                reply = {"type": "snapshot", "snapshot": self.hub.snapshot()}
            elif request["type"] == "series":
                index, name = protocol.integer(request, "index", True), protocol.text(request, "name", 64)
                if name not in HISTORY_FIELDS:
                    raise ProtocolError(f"no history named {name!r}")
                reply = {"type": "series", "values": self.hub.series(index, name or "")}
            elif request["type"] == "replan":
                job, plan = protocol.text(request, "job", 128), request.get("plan")
                if job is None or not isinstance(plan, dict):
                    raise ProtocolError("a replan names a job and a plan")
                reply = self.hub.request_restart(job, plan)
            elif request["type"] == "supervisor":
                job, status = protocol.text(request, "job", 128), request.get("status") or {}
                if job is None or not isinstance(status, dict) or len(json.dumps(status)) > 4096:
                    raise ProtocolError("a supervisor names its job and a small status")
                reply = self.hub.supervisor_poll(job, status)
            elif request["type"] == "power":
                # NVML's setter takes milliseconds; off the loop all the same, so agents keep flowing.
                # The audit names the peer the kernel (uid) or the token vouches for, never a claimed user.
                reply = await asyncio.get_running_loop().run_in_executor(None, self._control, request, peer)
            else:
                raise ProtocolError("hello sent twice")
            writer.write(protocol.encode(reply))
            await writer.drain()
