"""A blocking client of a running hub: the same snapshot()/series() as an in-process Hub.

The address is a Unix socket path or `tcp://HOST:PORT`; over TCP the client
presents the token (the token file, or $GPUMIX_TOKEN) and signs its controls.
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Any

from gpumix import auth, protocol

REPLY_TYPES = {"snapshot", "series", "power_result", "replan_result", "supervisor_work"}


class HubClient:
    def __init__(self, socket_path: str, timeout_s: float = 5.0, readonly: bool = False,
                 token: str | None = None, token_file: str | None = None) -> None:
        self.socket_path = socket_path  # a Unix socket path or tcp://HOST:PORT
        self.timeout_s = timeout_s
        self.readonly = readonly  # said in the hello: the hub refuses every control on this connection
        self.tcp = auth.is_tcp(socket_path)
        self._token = token
        self._token_file = token_file
        self._signer: auth.ControlSigner | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one request at a time on the connection

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
                welcome = self._receive(sock, {"welcome"})
                server_nonce = protocol.text(welcome, "nonce", 128)
                if not server_nonce:
                    raise protocol.ProtocolError("the hub's welcome carries no nonce")
                self._signer = auth.ControlSigner(self._token or "", nonce, server_nonce)
        except BaseException:
            sock.close()
            raise
        return sock

    def _receive(self, sock: socket.socket, allowed: set[str] = REPLY_TYPES) -> dict[str, Any]:
        header = self._read_exactly(sock, protocol.HEADER.size)
        length = protocol.frame_length(header, protocol.MAX_SNAPSHOT_FRAME_BYTES)
        return protocol.decode(self._read_exactly(sock, length), allowed)

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
            for attempt in (1, 2):  # one reconnect: the hub may have restarted
                try:
                    if self._sock is None:
                        self._sock = self._connect()
                    if self._signer is not None and message.get("type") in auth.CONTROL_TYPES:
                        message = self._signer.sign(message)
                    self._sock.sendall(protocol.encode(message))
                    return self._receive(self._sock)
                except (OSError, ConnectionError):
                    self.close()
                    if attempt == 2 or isinstance(sys.exc_info()[1], auth.TokenError):
                        raise
        raise AssertionError("unreachable")

    def snapshot(self) -> dict[str, Any] | None:
        try:
            return self.request({"type": "snapshot"})["snapshot"]
        except (OSError, ConnectionError, protocol.ProtocolError):
            return None  # the hub is gone for now: the TUI keeps its last picture

    def series(self, index: int, name: str) -> list[float | None]:
        try:
            return self.request({"type": "series", "index": index, "name": name})["values"]
        except (OSError, ConnectionError, protocol.ProtocolError):
            return []

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """A control (power, replan): the reply, or ok=False when the hub does not answer."""
        try:
            return self.request(request)
        except (OSError, ConnectionError, protocol.ProtocolError) as error:
            return {"type": "result", "ok": False, "message": f"the hub did not answer: {error}", "changes": []}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
