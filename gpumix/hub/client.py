"""A blocking client of a running hub: the same snapshot()/series() as an in-process Hub."""

from __future__ import annotations

import socket
import threading
from typing import Any

from gpumix import protocol


class HubClient:
    def __init__(self, socket_path: str, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one request at a time on the connection

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout_s)
        sock.connect(self.socket_path)
        sock.sendall(protocol.encode({"type": "hello", "role": "client"}))
        return sock

    def _receive(self, sock: socket.socket) -> dict[str, Any]:
        header = self._read_exactly(sock, protocol.HEADER.size)
        length = protocol.frame_length(header, protocol.MAX_SNAPSHOT_FRAME_BYTES)
        return protocol.decode(self._read_exactly(sock, length), {"snapshot", "series", "power_result", "replan_result", "supervisor_work"})

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
                    self._sock.sendall(protocol.encode(message))
                    return self._receive(self._sock)
                except (OSError, ConnectionError):
                    self.close()
                    if attempt == 2:
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
