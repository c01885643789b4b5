"""The hub's socket server: agents stream steps in, clients ask for snapshots.

An asyncio loop on its own thread. Each connection starts with a `hello`
naming its role. A malformed, oversized or unknown message closes that one
connection with a logged reason; the hub and its other clients go on.

The Unix socket is owner-only (and peers of another uid are refused). TCP,
when asked for, needs the token in every hello and signed controls from
clients (gpumix.auth); a read-only client can never send a control.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

from gpumix import auth, protocol
from gpumix.history import HISTORY_FIELDS
from gpumix.hub.core import Hub, RankKey
from gpumix.hub.ranks import parse_hello, parse_step, parse_transport
from gpumix.protocol import ProtocolError

log = logging.getLogger(__name__)


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


class HubServer:
    def __init__(self, hub: Hub, socket_path: str | Path, tcp: tuple[str, int] | None = None,
                 token: str | None = None, tls: ssl.SSLContext | None = None) -> None:
        if tcp is not None and not token:
            raise ValueError("a hub on TCP needs a token")
        self.hub = hub
        self.socket_path = str(socket_path)
        self.tcp = tcp  # (host, port) to listen on as well, or None: TCP is off unless asked
        self.tcp_port: int | None = None  # the port bound (port 0 picks one)
        self._token = token
        self._tls = tls  # TCP inside TLS when given
        self._tcp_server: asyncio.base_events.Server | None = None
        self.refused_reasons: list[str] = []  # controls refused (bad mac, replay, read-only), bounded
        self.closed_reasons: list[str] = []  # last reasons connections were closed for (bounded)
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Listen on the Unix socket (owner-only), or raise HubAlreadyRunning / OSError."""
        if os.path.exists(self.socket_path):
            if hub_answers(self.socket_path):
                raise HubAlreadyRunning(f"a hub already listens on {self.socket_path}")
            os.unlink(self.socket_path)  # left by a hub that died
        self._thread = threading.Thread(target=self._run, name="gpumix-hub-server", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._start_error is not None:
            raise self._start_error

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._listen())
        except BaseException as error:  # reported to start()
            self._start_error = error
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.close()

    async def _listen(self) -> None:
        old_umask = os.umask(0o177)  # the socket is born owner-only: no window for others
        try:
            self._server = await asyncio.start_unix_server(self._handle, path=self.socket_path)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        if self.tcp is not None:
            host, port = self.tcp
            self._tcp_server = await asyncio.start_server(self._handle_tcp, host=host, port=port, ssl=self._tls)
            self.tcp_port = self._tcp_server.sockets[0].getsockname()[1]

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
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    # -- connections --------------------------------------------------------------------

    def _closed(self, reason: str) -> None:
        log.warning("hub: closed a connection: %s", reason)
        self.closed_reasons = [*self.closed_reasons[-99:], reason]

    async def _handle_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._handle(reader, writer, over_tcp=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      over_tcp: bool = False) -> None:
        self.connections += 1
        key: RankKey | None = None
        pid: int | None = None
        try:
            if not over_tcp:  # defense in depth behind the 0600 socket: same user only
                refusal = auth.peer_refusal(auth.peer_uid(writer.get_extra_info("socket")))
                if refusal is not None:
                    raise ProtocolError(refusal)
            hello = await read_message(reader, protocol.AGENT_TYPES | protocol.CLIENT_TYPES)
            if hello["type"] != "hello" or hello.get("role") not in protocol.ROLES:
                raise ProtocolError("the first message must be a hello with a role")
            if over_tcp:
                if hello.get("token") is None:
                    raise ProtocolError("no token in the hello (TCP needs the hub's token)")
                if not auth.tokens_match(hello.get("token"), self._token or ""):
                    raise ProtocolError("wrong token")
            if hello["role"] == "agent":
                info = parse_hello(hello)
                pid = info["pid"]
                try:
                    key = self.hub.agent_hello(info)
                except OverflowError as error:
                    raise ProtocolError(str(error)) from None
                await self._serve_agent(reader, key)
            else:
                await self._serve_client(reader, writer, await self._welcome(hello, writer, over_tcp),
                                         readonly=hello.get("readonly") is True)
        except ProtocolError as error:
            self._closed(str(error))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer went away: normal
        except asyncio.CancelledError:
            pass  # the server is shutting down: end this connection quietly
        except Exception as error:  # a bug here must cost one connection, not the hub
            log.exception("hub: connection failed")
            self._closed(f"internal error: {error!r}")
        finally:
            if key is not None:
                self.hub.agent_gone(key, pid)
            writer.close()

    async def _serve_agent(self, reader: asyncio.StreamReader, key: RankKey) -> None:
        while True:
            message = await read_message(reader, protocol.AGENT_TYPES)
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
        log.warning("hub: refused a %s control: %s", request.get("type"), reason)
        self.refused_reasons = [*self.refused_reasons[-99:], reason]
        kind = {"power": "power_result", "replan": "replan_result", "supervisor": "supervisor_work"}[request["type"]]
        return {"type": kind, "ok": False, "message": f"refused: {reason}", "changes": [], "plan": None}

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            verifier: auth.ControlVerifier | None = None, readonly: bool = False) -> None:
        while True:
            request = await read_message(reader, protocol.CLIENT_TYPES)
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
                # NVML's setter takes milliseconds; off the loop all the same, so agents keep flowing
                reply = await asyncio.get_running_loop().run_in_executor(None, self.hub.control, request)
            else:
                raise ProtocolError("hello sent twice")
            writer.write(protocol.encode(reply))
            await writer.drain()
