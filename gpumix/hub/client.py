"""A blocking client of a running hub: the same snapshot()/series() as an in-process Hub.

The address is a Unix socket path, `tcp://HOST:PORT` or `tls://HOST:PORT`; over
TCP the client presents the token (the token file, or $GPUMIX_TOKEN) and signs
its controls. When the hub cannot be read, `last_error` says why in one line:
refused (and the hub's reason, e.g. a wrong token), an untrusted TLS
certificate, plain tcp:// against a TLS hub, or no hub at all.
"""

from __future__ import annotations

import errno
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from gpumix.wire import auth, protocol

if TYPE_CHECKING:  # the TypedDicts' classes cost a one-shot ~8 ms to make (issue 13)
    from gpumix.wire.snapshot_types import Snapshot

REPLY_TYPES = {"snapshot", "series", "power_result", "replan_result", "supervisor_work", "error"}
TLS_RECORD_STARTS = (b"\x15\x03", b"\x16\x03")  # a TLS alert or handshake record where a frame was due


class HubRefused(ConnectionError):
    """The hub answered with an `error` frame (a wrong token, a refused uid) and closed."""


class HubSpeaksTls(ConnectionError):
    """A plain tcp:// client reached a TLS listener."""


def printable(text: str, limit: int = 200) -> str:
    """Text from the hub as one plain line: control characters made visible, bounded."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text[:limit])


def loaded_ssl() -> Any:
    """The ssl module if this process loaded it, else None. ssl is imported only to open a tls:// hub
    (auth.open_socket): without it no error can be a TLS one, and a Unix-socket client is ~5 MB lighter."""
    return sys.modules.get("ssl")


def is_tls_error(error: BaseException) -> bool:
    ssl = loaded_ssl()
    return ssl is not None and isinstance(error, ssl.SSLError)


def describe_failure(address: str, error: BaseException) -> str:
    """Why the hub at `address` could not be read, in one line that says what to do."""
    if isinstance(error, HubRefused):
        return f"{address}: the hub refused the connection: {error}"
    if isinstance(error, HubSpeaksTls):
        return f"{address}: the hub speaks TLS: use {address.replace(auth.TCP_SCHEME, auth.TLS_SCHEME, 1)}"
    if isinstance(error, auth.TokenError):
        return f"{address}: cannot use the token: {error}"
    ssl = loaded_ssl()
    if ssl is not None and isinstance(error, ssl.SSLCertVerificationError):
        return (f"{address}: the hub's TLS certificate is not trusted ({error.verify_message}):"
                f" set {auth.TLS_CA_ENV} to its CA file (or its certificate)")
    if is_tls_error(error):
        return (f"{address}: the TLS handshake failed ({getattr(error, 'reason', None) or error}): if the hub does not speak TLS,"
                f" use {address.replace(auth.TLS_SCHEME, auth.TCP_SCHEME, 1)}")
    if isinstance(error, PermissionError) and not auth.is_tcp(address):
        return (f"{address}: permission denied: the socket belongs to another user"
                " (a root hub lets users in with --allow-group; docs/power.md)")
    if isinstance(error, protocol.ProtocolError):
        return f"{address}: not a gpumix hub, or another version: {error}"
    if isinstance(error, TimeoutError | socket.timeout):
        return f"no hub answered at {address} (timed out)"
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
    return f"no hub answered at {address} ({reason})"


class HubClient:
    def __init__(self, socket_path: str, timeout_s: float = 5.0, readonly: bool = False,
                 token: str | None = None, token_file: str | None = None) -> None:
        self.socket_path = socket_path  # a Unix socket path, tcp://HOST:PORT or tls://HOST:PORT
        self.timeout_s = timeout_s
        self.readonly = readonly  # said in the hello: the hub refuses every control on this connection
        self.viewing = False  # a dashboard's client: its snapshots ask for fresh PCIe rates each tick ("view")
        self.fresh = False  # a one-shot's client: its snapshot has busy GPUs' PCIe read now, not carried ("fresh")
        self.tcp = auth.is_tcp(socket_path)
        self._token = token
        self._token_file = token_file
        self._signer: auth.ControlSigner | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one request at a time on the connection
        self.last_error: str | None = None  # why the last request failed, one line; None after a success

    def _connect(self) -> socket.socket:
        nonce = None
        if self.tcp:
            if self._token is None:
                self._token = auth.read_token(self._token_file)  # TokenError is an OSError
            nonce = auth.new_nonce()
        sock = auth.open_socket(self.socket_path, self.timeout_s)
        try:
            sock.sendall(protocol.encode(auth.client_hello(token=self._token if self.tcp else None,
                                                           client_nonce=nonce, readonly=self.readonly)))
            self._signer = None
            if nonce is not None:
                welcome = self._receive(sock, {"welcome", "error"}, first=True)
                server_nonce = protocol.text(welcome, "nonce", 128)
                if not server_nonce:
                    raise protocol.ProtocolError("the hub's welcome carries no nonce")
                self._signer = auth.ControlSigner(self._token or "", nonce, server_nonce)
        except BaseException:
            sock.close()
            raise
        return sock

    def _receive(self, sock: socket.socket, allowed: set[str] = REPLY_TYPES, first: bool = False) -> dict[str, Any]:
        """One frame; an `error` frame raises HubRefused. `first`: the hub's first word to a plain
        tcp:// hello, where TLS bytes or a silent close mean a TLS listener."""
        plain_tcp = first and self.tcp and not auth.is_tls(self.socket_path)
        try:
            header = self._read_exactly(sock, protocol.HEADER.size)
        except ConnectionError as error:
            if plain_tcp:  # a gpumix hub always answers a hello; a TLS listener drops plain bytes
                raise HubSpeaksTls("closed at the first plain frame") from error
            raise
        if plain_tcp and header.startswith(TLS_RECORD_STARTS):
            raise HubSpeaksTls("answered with a TLS record")
        length = protocol.frame_length(header, protocol.MAX_SNAPSHOT_FRAME_BYTES)
        message = protocol.decode(self._read_exactly(sock, length), allowed)
        if message["type"] == "error":
            raise HubRefused(printable(str(message.get("message") or "no reason given")))
        return message

    @staticmethod
    def _read_exactly(sock: socket.socket, count: int) -> bytes:
        chunks, left = [], count
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("the hub closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            for attempt in (1, 2):  # one reconnect: the hub may have restarted, or closed an idle connection
                connecting = self._sock is None
                try:
                    if self._sock is None:
                        self._sock = self._connect()
                    if self._signer is not None and message.get("type") in auth.CONTROL_TYPES:
                        message = self._signer.sign(message)
                    self._sock.sendall(protocol.encode(message))
                    reply = self._receive(self._sock)
                    self.last_error = None
                    return reply
                except (OSError, ConnectionError, protocol.ProtocolError) as error:
                    self.close()
                    self.last_error = describe_failure(self.socket_path, error)
                    # said for good: a refusal, the wrong transport, a bad token or certificate, nonsense
                    final = isinstance(error, HubRefused | HubSpeaksTls | auth.TokenError | protocol.ProtocolError) \
                        or (connecting and is_tls_error(error))
                    if attempt == 2 or final or _refused_at_once(error):
                        raise
        raise AssertionError("unreachable")

    def snapshot(self) -> Snapshot | None:
        try:
            ask = {"type": "snapshot", **({"view": True} if self.viewing else {}), **({"fresh": True} if self.fresh else {})}
            return self.request(ask)["snapshot"]
        except (OSError, ConnectionError, protocol.ProtocolError):
            return None  # the hub is gone for now (last_error says why): the TUI keeps its last picture

    def series(self, index: int, name: str) -> list[float | None]:
        try:
            return self.request({"type": "series", "index": index, "name": name})["values"]
        except (OSError, ConnectionError, protocol.ProtocolError):
            return []

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """A control (power, replan): the reply, or ok=False saying why when the hub does not answer."""
        try:
            return self.request(request)
        except (OSError, ConnectionError, protocol.ProtocolError) as error:
            why = self.last_error or describe_failure(self.socket_path, error)
            return {"type": "result", "ok": False, "message": why, "changes": []}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _refused_at_once(error: BaseException) -> bool:
    """Nothing listens there (no such socket, connection refused): a second try would say the same."""
    return isinstance(error, OSError) and error.errno in (errno.ENOENT, errno.ECONNREFUSED)
