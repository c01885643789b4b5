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
at once. Accepted TCP connections carry keepalive probes (gpumix.hub.keepalive),
so a peer whose machine vanished is closed in about a minute, not at the idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an annotation only: ssl maps OpenSSL (~5 MB) into a dashboard with its hub in-process
    import ssl

from gpumix.hub.agent_stream import ReadRounds, agent_read_pause_s, serve_agent
from gpumix.hub.connections import (  # noqa: F401  (re-exported: tests and callers import them from here)
    ACCEPT_RETRY_S,
    AGENT_IDLE_TIMEOUT_S,
    CLIENT_IDLE_TIMEOUT_S,
    HELLO_TIMEOUT_S,
    LINGER_S,
    LOCAL_FD_RESERVE,
    LOG_INTERVAL_S,
    LOG_LINES_PER_INTERVAL,
    MAX_ERROR_TEXT,
    MAX_UNAUTHENTICATED_TCP,
    HubAlreadyRunning,
    Peer,
    RateLimitedLog,
    Silent,
    TcpListener,
    check_reachable,
    hub_answers,
    one_line,
    open_tcp_listener,
    raise_fd_limit,
    read_message,
    read_within,
    tcp_connection_limit,
    tell,
    welcome,
)
from gpumix.hub.core import Hub, RankKey
from gpumix.hub.keepalive import enable_keepalive
from gpumix.hub.ranks import parse_hello
from gpumix.hub.requests import answer
from gpumix.wire import auth, protocol
from gpumix.wire.protocol import ProtocolError

log = logging.getLogger(__name__)

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
        self.agent_read_pause_s = agent_read_pause_s()  # 0: read each frame as it comes
        self.read_rounds = ReadRounds()  # with a pause, every agent's reads in the same rounds
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
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:  # each connection's clean-up (closing its writer) runs on a live loop, not at collection
                await asyncio.wait(tasks, timeout=2.0)  # within stop()'s 5 s

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
            enable_keepalive(conn)  # a vanished peer's connection (and rank) goes in about a minute
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
                await self._serve_agent(reader, key, writer.transport)
            else:
                verifier = await welcome(hello, writer, peer.over_tcp, self._token)
                self._trusted(peer)
                await self._serve_client(reader, writer, verifier, readonly=hello.get("readonly") is True,
                                         peer=peer)
        except ProtocolError as error:
            self._closed(f"{peer.tcp_label}: {error}" if peer.over_tcp else str(error))
            if peer.waiting_for_hello or not isinstance(error, Silent):  # an idle client just reconnects
                await tell(reader, writer, str(error))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer went away: normal
        except asyncio.CancelledError:
            pass  # the server is shutting down: end this connection quietly
        except Exception as error:  # a bug here must cost one connection, not the hub, and no traceback flood
            self._closed(f"{peer.tcp_label}: {one_line(error)}" if peer.over_tcp else one_line(error))
            await tell(reader, writer, "internal error")
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

    async def _serve_agent(self, reader: asyncio.StreamReader, key: RankKey,
                           transport: asyncio.BaseTransport) -> None:
        await serve_agent(reader, self.hub, key, transport, self.agent_idle_timeout_s,
                          lambda: self.agent_read_pause_s, self.read_rounds)  # read at each read: tests change it live

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
            else:
                reply = await answer(self.hub, request, self._control, peer)
            writer.write(protocol.encode(reply))
            await writer.drain()
